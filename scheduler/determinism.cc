#include "scheduler/determinism.h"

#include <bit>
#include <cmath>
#include <cstdint>

// Built with -ffp-contract=off (see BUILD): a fused multiply-add would round
// once where these expressions round twice, and whether the compiler fuses
// depends on the target, so the polynomials below must not be contracted.

namespace verdict {

double DeterministicExp(double z) {
  if (z != z) return z;
  if (z > 700.0) z = 700.0;
  if (z < -700.0) z = -700.0;
  constexpr double kInvLn2 = 1.4426950408889634;
  // fdlibm's split of ln 2: the high part has 21 trailing zero bits, so
  // n * kLn2Hi is exact for every n used here.
  constexpr double kLn2Hi = 6.93147180369123816490e-01;
  constexpr double kLn2Lo = 1.90821492927058770002e-10;
  // n = floor(z / ln 2 + 0.5), through an integer conversion (exact here,
  // |t| < 1100) rather than a libm call.
  const double t = z * kInvLn2 + 0.5;
  int64_t ni = static_cast<int64_t>(t);  // truncates toward zero
  if (static_cast<double>(ni) > t) --ni;
  const double n = static_cast<double>(ni);
  const double r = (z - n * kLn2Hi) - n * kLn2Lo;  // |r| <= 0.35
  // Taylor series to r^13: the first omitted term is below 4e-18.
  double p = 1.0 / 6227020800.0;
  p = p * r + 1.0 / 479001600.0;
  p = p * r + 1.0 / 39916800.0;
  p = p * r + 1.0 / 3628800.0;
  p = p * r + 1.0 / 362880.0;
  p = p * r + 1.0 / 40320.0;
  p = p * r + 1.0 / 5040.0;
  p = p * r + 1.0 / 720.0;
  p = p * r + 1.0 / 120.0;
  p = p * r + 1.0 / 24.0;
  p = p * r + 1.0 / 6.0;
  p = p * r + 0.5;
  p = p * r + 1.0;
  p = p * r + 1.0;
  // p * 2^n, exactly: p is in [0.7, 1.42] and |n| <= 1010, so 2^n and the
  // product are normal doubles.
  const double scale = std::bit_cast<double>(static_cast<uint64_t>(ni + 1023) << 52);
  return p * scale;
}

double DeterministicLog(double x) {
  if (x != x) return x;
  if (x <= 0.0) return -HUGE_VAL;
  if (x == HUGE_VAL) return x;
  int e = 0;
  double m;
  const uint64_t bits = std::bit_cast<uint64_t>(x);
  const int biased = static_cast<int>(bits >> 52);  // sign is 0 here
  if (biased == 0) {
    m = std::frexp(x, &e);  // subnormal x
  } else {
    // Exact: x = m * 2^e with m in [0.5, 1), from the bits.
    e = biased - 1022;
    m = std::bit_cast<double>((bits & 0x000fffffffffffffull) | (uint64_t{1022} << 52));
  }
  if (m < 0.70710678118654752440) {
    m *= 2.0;
    e -= 1;
  }
  // log m = 2 atanh(s), s = (m - 1) / (m + 1), |s| <= 0.1716; the series to
  // s^21 leaves an error below 1e-19.
  const double s = (m - 1.0) / (m + 1.0);
  const double s2 = s * s;
  double p = 1.0 / 21.0;
  p = p * s2 + 1.0 / 19.0;
  p = p * s2 + 1.0 / 17.0;
  p = p * s2 + 1.0 / 15.0;
  p = p * s2 + 1.0 / 13.0;
  p = p * s2 + 1.0 / 11.0;
  p = p * s2 + 1.0 / 9.0;
  p = p * s2 + 1.0 / 7.0;
  p = p * s2 + 1.0 / 5.0;
  p = p * s2 + 1.0 / 3.0;
  p = p * s2 + 1.0;
  constexpr double kLn2Hi = 6.93147180369123816490e-01;
  constexpr double kLn2Lo = 1.90821492927058770002e-10;
  const double de = static_cast<double>(e);
  return de * kLn2Hi + (de * kLn2Lo + 2.0 * s * p);
}

double DeterministicSigmoid(double z) { return 1.0 / (1.0 + DeterministicExp(-z)); }

double DeterministicLogit(double q, double q_floor) {
  if (!(q > q_floor)) q = q_floor;
  if (q > 1.0 - q_floor) q = 1.0 - q_floor;
  return DeterministicLog(q / (1.0 - q));
}

}  // namespace verdict
