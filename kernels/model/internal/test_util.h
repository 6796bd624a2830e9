// Helpers for the model ops' tests: seeded random inputs that are never
// zero, device buffers poisoned before a launch, and element-wise checks
// that also prove every output element was written.
#ifndef VERDICT_KERNELS_MODEL_INTERNAL_TEST_UTIL_H_
#define VERDICT_KERNELS_MODEL_INTERNAL_TEST_UTIL_H_

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/bf16.h"

namespace verdict {
namespace test_util {

// Uniform on [-scale, scale] with |value| >= scale / 64: never zero, so a
// kernel that skips an element or reads zeros cannot pass by accident.
inline std::vector<float> RandomFloats(size_t n, float scale, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> dist(1.0f / 64.0f, 1.0f);
  std::bernoulli_distribution sign(0.5);
  std::vector<float> v(n);
  for (auto& x : v) x = (sign(rng) ? -1.0f : 1.0f) * dist(rng) * scale;
  return v;
}

// Random values that are exactly representable in bf16, so the CPU twin (in
// float) and the device (in bf16) start from the same numbers.
inline std::vector<float> RandomBf16Floats(size_t n, float scale, uint64_t seed) {
  std::vector<float> v = RandomFloats(n, scale, seed);
  for (auto& x : v) x = RoundToBf16(x);
  return v;
}

// |actual - expected| <= abs_tol + rel_tol * |expected| for every element;
// a NaN (the poison pattern of an unwritten element) always fails. Stops at
// the first few failures with the index.
inline void ExpectAllNear(const std::vector<float>& expected, const std::vector<float>& actual,
                          float rel_tol, float abs_tol, const std::string& what) {
  ASSERT_EQ(expected.size(), actual.size()) << what;
  int failures = 0;
  for (size_t i = 0; i < expected.size(); ++i) {
    const float e = expected[i], a = actual[i];
    const float err = std::fabs(a - e);
    if (!(err <= abs_tol + rel_tol * std::fabs(e))) {  // also catches NaN
      ADD_FAILURE() << what << ": element " << i << " expected " << e << " got " << a;
      if (++failures >= 8) return;
    }
  }
}

// Same check for a bf16 device result.
inline void ExpectAllNearBf16(const std::vector<float>& expected,
                              const std::vector<uint16_t>& actual_bits, float rel_tol,
                              float abs_tol, const std::string& what) {
  ExpectAllNear(expected, Bf16ToFloatVector(actual_bits), rel_tol, abs_tol, what);
}

}  // namespace test_util
}  // namespace verdict

#endif  // VERDICT_KERNELS_MODEL_INTERNAL_TEST_UTIL_H_
