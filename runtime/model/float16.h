// Conversions between float32 and IEEE binary16, one of the 16-bit float
// formats checkpoints use (bfloat16, the other, is kernels/bf16.h). Rounding
// to 16 bits is round-to-nearest-even, the rule PyTorch and CUDA's
// __float2half use, so weights written here read back the same on every
// backend.
#ifndef VERDICT_RUNTIME_MODEL_FLOAT16_H_
#define VERDICT_RUNTIME_MODEL_FLOAT16_H_

#include <cstdint>
#include <cstring>

namespace verdict {

inline uint32_t FloatBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  return u;
}

inline float BitsToFloat(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}

inline float Float16ToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exponent = (h >> 10) & 0x1fu;
  uint32_t mantissa = h & 0x3ffu;
  if (exponent == 0x1f) return BitsToFloat(sign | 0x7f800000u | (mantissa << 13));
  if (exponent == 0) {
    if (mantissa == 0) return BitsToFloat(sign);
    // Subnormal: value = mantissa * 2^-24, exact in float32.
    float value = static_cast<float>(mantissa) * (1.0f / 16777216.0f);
    return sign ? -value : value;
  }
  return BitsToFloat(sign | ((exponent + 112u) << 23) | (mantissa << 13));
}

inline uint16_t FloatToFloat16(float f) {
  const uint32_t u = FloatBits(f);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  const uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u) return sign | 0x7e00u;           // NaN
  if (abs >= 0x477ff000u) return sign | 0x7c00u;          // rounds to infinity (>= 65520)
  if (abs < 0x38800000u) {                                // below the smallest normal 2^-14
    // Subnormal half: round abs / 2^-24 to the nearest integer, ties to even.
    const float scaled = BitsToFloat(abs) * 16777216.0f;  // exact: a power of two
    const uint32_t floor_value = static_cast<uint32_t>(scaled);
    const float rest = scaled - static_cast<float>(floor_value);
    uint32_t m = floor_value;
    if (rest > 0.5f || (rest == 0.5f && (floor_value & 1u))) ++m;
    return sign | static_cast<uint16_t>(m);  // m == 0x400 becomes the smallest normal
  }
  // Normal: rebias the exponent, round the mantissa to 10 bits (ties to even);
  // a carry into the exponent is the correct result.
  uint32_t rounded = abs + 0xfffu + ((abs >> 13) & 1u);
  return sign | static_cast<uint16_t>((rounded - (112u << 23)) >> 13);
}

}  // namespace verdict

#endif  // VERDICT_RUNTIME_MODEL_FLOAT16_H_
