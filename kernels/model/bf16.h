// bfloat16 on the host, held as its raw bits (uint16_t), so that headers of
// the model ops and their CPU twins need no CUDA header. Rounding is
// round-to-nearest-even and every NaN becomes 0x7FFF, as CUDA's
// __float2bfloat16 does, so host-rounded values equal device-rounded ones.
#ifndef VERDICT_KERNELS_MODEL_BF16_H_
#define VERDICT_KERNELS_MODEL_BF16_H_

#include <bit>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace verdict {

inline float Bf16BitsToFloat(uint16_t bits) {
  return std::bit_cast<float>(static_cast<uint32_t>(bits) << 16);
}

inline uint16_t FloatToBf16Bits(float value) {
  const uint32_t bits = std::bit_cast<uint32_t>(value);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return 0x7fff;
  const uint32_t rounded = bits + 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>(rounded >> 16);
}

// Rounds a float to the nearest bf16 value and back: what a float becomes
// after a trip through a bf16 device buffer.
inline float RoundToBf16(float value) { return Bf16BitsToFloat(FloatToBf16Bits(value)); }

inline std::vector<float> Bf16ToFloatVector(const std::vector<uint16_t>& bits) {
  std::vector<float> out(bits.size());
  for (size_t i = 0; i < bits.size(); ++i) out[i] = Bf16BitsToFloat(bits[i]);
  return out;
}

inline std::vector<uint16_t> FloatToBf16Vector(const std::vector<float>& values) {
  std::vector<uint16_t> out(values.size());
  for (size_t i = 0; i < values.size(); ++i) out[i] = FloatToBf16Bits(values[i]);
  return out;
}

}  // namespace verdict

#endif  // VERDICT_KERNELS_MODEL_BF16_H_
