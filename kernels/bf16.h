// bfloat16 on the host, held as its raw bits (uint16_t), so that host code
// (checkpoint conversion, the CPU twins' tests, the bf16 MPI reduction, bf16
// logits for the sampler) needs no CUDA header. Float to bf16 rounds to
// nearest, ties to even, and turns every NaN into 0x7FFF, exactly as CUDA's
// __float2bfloat16 does, so host-rounded values equal device-rounded ones
// bit for bit.
#ifndef VERDICT_KERNELS_BF16_H_
#define VERDICT_KERNELS_BF16_H_

#include <bit>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace verdict {

inline float Bf16ToFloat(uint16_t bits) {
  return std::bit_cast<float>(static_cast<uint32_t>(bits) << 16);
}

inline uint16_t FloatToBf16(float value) {
  const uint32_t bits = std::bit_cast<uint32_t>(value);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return 0x7fff;
  // Adding 0x7fff plus the lowest kept bit carries into the kept half exactly
  // when the dropped half is above the midpoint, or at it with an odd result.
  const uint32_t rounded = bits + 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>(rounded >> 16);
}

// What a float becomes after a trip through a bf16 device buffer.
inline float RoundToBf16(float value) { return Bf16ToFloat(FloatToBf16(value)); }

inline std::vector<float> Bf16ToFloatVector(const std::vector<uint16_t>& bits) {
  std::vector<float> out(bits.size());
  for (size_t i = 0; i < bits.size(); ++i) out[i] = Bf16ToFloat(bits[i]);
  return out;
}

inline std::vector<uint16_t> FloatToBf16Vector(const std::vector<float>& values) {
  std::vector<uint16_t> out(values.size());
  for (size_t i = 0; i < values.size(); ++i) out[i] = FloatToBf16(values[i]);
  return out;
}

// inout[i] = bf16(float(in[i]) + float(inout[i])): summed in float, rounded
// to nearest even once per element.
inline void AccumulateBf16(const uint16_t* in, uint16_t* inout, size_t count) {
  for (size_t i = 0; i < count; ++i) {
    inout[i] = FloatToBf16(Bf16ToFloat(in[i]) + Bf16ToFloat(inout[i]));
  }
}

}  // namespace verdict

#endif  // VERDICT_KERNELS_BF16_H_
