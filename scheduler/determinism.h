// Arithmetic that gives the same bits on every rank: exp, log, logit and
// sigmoid written with +, -, *, / and exact scaling only, and a 64-bit FNV-1a
// hasher for consistency checks. Every TP rank must compute the same
// estimator state and the same verify plan (seeds/002_d567d7ab3f14fa00.txt,
// "TP": "every rank computes the same confidence from the same draft");
// libm's exp and log may
// be picked per CPU at load time (glibc ifunc variants with and without FMA),
// so ranks on different hosts could disagree in the last bit. IEEE basic
// operations are correctly rounded everywhere, so these cannot.
#ifndef VERDICT_SCHEDULER_DETERMINISM_H_
#define VERDICT_SCHEDULER_DETERMINISM_H_

#include <bit>
#include <cstdint>

namespace verdict {

// e^z. Inputs are clamped to [-700, 700] (the result stays finite and
// normal); NaN passes through. Relative error below 1e-15.
double DeterministicExp(double z);

// Natural log of a positive finite x (x <= 0 gives -inf, NaN passes
// through). Absolute error below 1e-15 for x near 1, relative elsewhere.
double DeterministicLog(double x);

// 1 / (1 + e^-z).
double DeterministicSigmoid(double z);

// log(q / (1 - q)) with q clamped to [q_floor, 1 - q_floor], so the result is
// finite for any input; NaN counts as q_floor.
double DeterministicLogit(double q, double q_floor);

// 64-bit FNV-1a over explicit little-endian bytes, so a hash means the same
// thing on every host. Used to compare estimator states and plans across
// ranks, not for tables.
class Fnv1a64 {
 public:
  void AddU64(uint64_t v) {
    for (int i = 0; i < 8; ++i) {
      state_ ^= (v >> (8 * i)) & 0xffu;
      state_ *= 1099511628211ull;
    }
  }
  void AddI64(int64_t v) { AddU64(static_cast<uint64_t>(v)); }
  // Hashes the bit pattern: -0.0 and 0.0 differ, as they may in later steps.
  void AddDouble(double v) { AddU64(std::bit_cast<uint64_t>(v)); }
  uint64_t digest() const { return state_; }

 private:
  uint64_t state_ = 14695981039346656037ull;
};

}  // namespace verdict

#endif  // VERDICT_SCHEDULER_DETERMINISM_H_
