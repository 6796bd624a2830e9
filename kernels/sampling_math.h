// Float arithmetic that gives the same bits on the host and on the device.
//
// The CPU twin of a sampling kernel must make the same decisions as the
// kernel, and the same request must get the same tokens on every TP rank and
// both backends (seed 000; architecture invariant 7). Library expf/logf differ
// between glibc and CUDA by an ulp or two, and nvcc contracts a * b + c into
// an FMA where gcc does not. So every operation a sampling decision depends on
// is spelled out here with explicit rounding (one IEEE operation each, FMA
// only where written), and exp/log are small polynomials built from those
// operations. Sums that decide anything are taken in 2^-40 fixed point, so
// that they do not depend on the order of the additions either.
//
// Host code that includes this header must not contract floating point
// (kernels/BUILD compiles it with -ffp-contract=off).
#ifndef VERDICT_KERNELS_SAMPLING_MATH_H_
#define VERDICT_KERNELS_SAMPLING_MATH_H_

#include <cstdint>
#include <cstring>

#if !defined(__CUDA_ARCH__)
#include <cmath>
#endif

#include "kernels/philox.h"

namespace verdict {
namespace sampling_math {

VERDICT_HD float FMul(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}

VERDICT_HD float FAdd(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}

VERDICT_HD float FSub(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fsub_rn(a, b);
#else
  return a - b;
#endif
}

VERDICT_HD float FDiv(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fdiv_rn(a, b);
#else
  return a / b;
#endif
}

// a * b + c with a single rounding.
VERDICT_HD float Fma(float a, float b, float c) {
#if defined(__CUDA_ARCH__)
  return __fmaf_rn(a, b, c);
#else
  return std::fma(a, b, c);
#endif
}

VERDICT_HD double DMul(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __dmul_rn(a, b);
#else
  return a * b;
#endif
}

// Round to the nearest integer, ties to even (the default rounding mode).
VERDICT_HD float RoundToInt(float x) {
#if defined(__CUDA_ARCH__)
  return rintf(x);
#else
  return std::nearbyint(x);
#endif
}

VERDICT_HD uint32_t FloatBits(float x) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(x);
#else
  uint32_t bits;
  std::memcpy(&bits, &x, sizeof(bits));
  return bits;
#endif
}

VERDICT_HD float BitsToFloat(uint32_t bits) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(bits);
#else
  float x;
  std::memcpy(&x, &bits, sizeof(x));
  return x;
#endif
}

VERDICT_HD bool IsFinite(float x) {
  return (FloatBits(x) & 0x7F800000u) != 0x7F800000u;
}

constexpr float kNegInf = -__builtin_huge_valf();

// x + kRoundMagic rounds x to an integer (ties to even) for |x| < 2^22, and
// leaves that integer n in the low bits: FloatBits(x + kRoundMagic) =
// 0x4B400000 + n. Two additions instead of a conversion instruction, which
// the GPU issues at an eighth of the rate of an addition.
constexpr float kRoundMagic = 12582912.0f;  // 1.5 * 2^23

// The polynomial part of ExpNonPositive: exp(x) = p * 2^n for x in [-87, 0].
// shifted = x log2(e) + kRoundMagic holds n (see kRoundMagic).
struct ExpParts {
  float p;
  float shifted;
};

VERDICT_HD ExpParts ExpSplit(float x) {
  const float shifted = FAdd(FMul(x, 1.44269502f), kRoundMagic);  // log2(e)
  const float n = FSub(shifted, kRoundMagic);
  // Cody-Waite: ln 2 split so that n * kLn2Hi is exact.
  float r = Fma(n, -0.693145751953125f, x);
  r = Fma(n, -1.42860677e-06f, r);
  // Taylor polynomial to degree 7 on |r| <= 0.35: truncation below 1e-8.
  float p = 1.98412701e-04f;       // 1/5040
  p = Fma(p, r, 1.38888892e-03f);  // 1/720
  p = Fma(p, r, 8.33333377e-03f);  // 1/120
  p = Fma(p, r, 4.16666679e-02f);  // 1/24
  p = Fma(p, r, 1.66666672e-01f);  // 1/6
  p = Fma(p, r, 0.5f);
  p = Fma(p, r, 1.0f);
  p = Fma(p, r, 1.0f);
  return ExpParts{p, shifted};
}

// 2^(n + bias) as a float, from ExpParts::shifted (n + bias in [-126, 127]):
// the bits of 0x4B400000 above the ninth shift out of the word.
VERDICT_HD float PowerOfTwo(float shifted, uint32_t bias) {
  return BitsToFloat((FloatBits(shifted) + 127u + bias) << 23);
}

// exp(x) for x <= 0 (a logit minus the row maximum), within about 2 ulp.
// Below -87 (results under 2^-125, far below anything a sample can see) the
// result is 0, which also covers -inf (a masked vocabulary id) and NaN.
// Branch-free: out-of-range inputs are computed as 0 and then discarded.
VERDICT_HD float ExpNonPositive(float x) {
  const bool in_range = x >= -87.0f;
  const ExpParts e = ExpSplit(in_range ? x : 0.0f);  // n in [-126, 0]
  const float result = FMul(e.p, PowerOfTwo(e.shifted, 0));
  return in_range ? result : 0.0f;
}

// Natural log of a positive finite float, within about 2 ulp, with full
// relative accuracy near 1 (so -log(u) keeps its precision for u close to 1,
// where an exponential race is decided).
VERDICT_HD float LogPositive(float x) {
  float bias = 0.0f;
  if (x < 1.17549435e-38f) {  // subnormal: scale into the normal range
    x = FMul(x, 16777216.0f);  // 2^24
    bias = -24.0f;
  }
  const uint32_t bits = FloatBits(x);
  int e = static_cast<int>(bits >> 23) - 127;
  float m = BitsToFloat((bits & 0x007FFFFFu) | 0x3F800000u);  // [1, 2)
  if (m > 1.41421354f) {
    m = FMul(m, 0.5f);
    e += 1;
  }
  // m in [0.707, 1.414]: log(m) = 2 atanh(s), s = (m - 1) / (m + 1).
  const float f = FSub(m, 1.0f);  // exact (Sterbenz)
  const float s = FDiv(f, FAdd(2.0f, f));
  const float s2 = FMul(s, s);
  float t = 1.11111112e-01f;        // 1/9
  t = Fma(t, s2, 1.42857149e-01f);  // 1/7
  t = Fma(t, s2, 2.00000003e-01f);  // 1/5
  t = Fma(t, s2, 3.33333343e-01f);  // 1/3
  const float two_s = FMul(2.0f, s);
  const float log_m = Fma(FMul(two_s, s2), t, two_s);
  const float ef = FAdd(static_cast<float>(e), bias);
  return Fma(ef, 0.693145751953125f, Fma(ef, 1.42860677e-06f, log_m));
}

// Sums that decide a sample are taken over weights in [0, 1] rounded to
// multiples of 2^-40: integer addition is exact and associative, so a sum is
// the same for any split of the row across threads, CTAs or backends.
constexpr float kFixedOne = 1099511627776.0f;     // 2^40
constexpr float kFixedUnit = 9.09494702e-13f;     // 2^-40

// A weight already multiplied by 2^40, rounded to the nearest integer.
VERDICT_HD uint64_t ToFixedScaled(float scaled) {
  return static_cast<uint64_t>(RoundToInt(scaled));
}

VERDICT_HD uint64_t ToFixed(float weight) {
  return ToFixedScaled(FMul(weight, kFixedOne));
}

// max(x, lo), and lo for any NaN x (quiet or signalling; std::fmax may
// return a signalling NaN).
VERDICT_HD float AtLeast(float x, float lo) { return x >= lo ? x : lo; }

// ToFixed(ExpNonPositive(x)), bit for bit, in fewer instructions: the 2^40
// is folded into the power of two, and inputs below -87 (or NaN) are
// raised to -87, whose weight (2^-85.5) rounds to 0 like theirs. The
// intermediate p * 2^n, subnormal for some inputs near -87, is never formed.
VERDICT_HD uint64_t FixedExpNonPositive(float x) {
  const ExpParts e = ExpSplit(AtLeast(x, -87.0f));
  return ToFixedScaled(FMul(e.p, PowerOfTwo(e.shifted, 40)));
}

VERDICT_HD float FixedToFloat(uint64_t fixed) {
#if defined(__CUDA_ARCH__)
  const float f = __ull2float_rn(fixed);
#else
  const float f = static_cast<float>(fixed);
#endif
  return FMul(f, kFixedUnit);
}

VERDICT_HD double FixedToDouble(uint64_t fixed) {
#if defined(__CUDA_ARCH__)
  return __ull2double_rn(fixed);
#else
  return static_cast<double>(fixed);
#endif
}

// A non-negative double below 2^64, rounded to the nearest integer (ties to
// even).
VERDICT_HD uint64_t DoubleToFixed(double x) {
#if defined(__CUDA_ARCH__)
  return __double2ull_rn(x);
#else
  return static_cast<uint64_t>(std::nearbyint(x));
#endif
}

// Maps a float to an unsigned key with the same order (for -0 < +0 callers
// first normalise -0 to +0, see ScaleLogit). Radix selection works on these.
VERDICT_HD uint32_t OrderKey(float x) {
  const uint32_t b = FloatBits(x);
  return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}

VERDICT_HD float FromOrderKey(uint32_t key) {
  return BitsToFloat((key & 0x80000000u) ? (key & 0x7FFFFFFFu) : ~key);
}

// A logit at temperature T as the sampler sees it: logit * (1 / T), plus 0
// so that -0 becomes +0 (the order key then agrees with float comparison).
// Greedy rows pass inv_temperature = 1.
VERDICT_HD float ScaleLogit(float logit, float inv_temperature) {
  return FAdd(FMul(logit, inv_temperature), 0.0f);
}

VERDICT_HD float InverseTemperature(float temperature) {
  return temperature > 0.0f ? FDiv(1.0f, temperature) : 1.0f;
}

// The min-p threshold of a row: keep the ids with z >= max z + log(min_p),
// i.e. p >= min_p * p_max up to the rounding of the log (the ids at the
// maximum are always kept). min_p = 0 is off (-inf: every id passes).
VERDICT_HD float MinPThreshold(float row_max, float min_p) {
  if (!(min_p > 0.0f)) return kNegInf;
  const float t = FAdd(row_max, LogPositive(min_p));
  return t < row_max ? t : row_max;
}

// bfloat16 bits to float (exact).
VERDICT_HD float BFloat16ToFloat(uint16_t bits) {
  return BitsToFloat(static_cast<uint32_t>(bits) << 16);
}

// The draft is accepted with probability min(1, q/p) (seed 000, rule 1):
// accept iff u * p < q for u uniform in (0, 1). A draft the target gives
// probability 0 is never accepted; p = 0 < q always accepts.
VERDICT_HD bool AcceptDraft(float u, float p_draft, float q_draft) {
  return FMul(u, p_draft) < q_draft;
}

// Residual weight of one vocabulary id, scaled by the target normaliser S:
// S * max(q - alpha p, 0) = max(e - (alpha S) p, 0) with e = S q.
VERDICT_HD float ResidualWeight(float e, float alpha_s, float p) {
  const float w = Fma(-alpha_s, p, e);
  return w > 0.0f ? w : 0.0f;
}

// The exponential race: each id draws E ~ Exp(1) and the largest w / E wins,
// which picks id i with probability w_i / sum w. Order independent, so
// threads, CTAs and the CPU can each scan any part of the row.
VERDICT_HD float RaceExponential(uint32_t random_bits) {
  return -LogPositive(UniformOpen01(random_bits));
}

VERDICT_HD float RaceKey(float weight, float exponential) {
  return FDiv(weight, exponential);
}

// True if the race key of weight w and uniform u, RaceKey(w,
// RaceExponential(bits of u)), is certainly below best_key, without the log:
// -log u >= 1 - u (1 - u is exact for UniformOpen01's values), and the 1e-4
// margin covers the rounding of LogPositive and of the division (under 1e-6).
// Skipping such ids never changes a race's winner; it spares most of them
// the log and the division once a good key has been seen.
VERDICT_HD bool RaceCannotBeat(float w, float u, float best_key) {
  return FMul(w, 1.0001f) < FMul(best_key, FSub(1.0f, u));
}

// True if (key, id) beats (best_key, best_id): larger key, ties to the lower
// id; keys of 0 (zero weight) never win.
VERDICT_HD bool RaceBeats(float key, int32_t id, float best_key, int32_t best_id) {
  return key > best_key || (key == best_key && key > 0.0f && id < best_id);
}

}  // namespace sampling_math
}  // namespace verdict

#endif  // VERDICT_KERNELS_SAMPLING_MATH_H_
