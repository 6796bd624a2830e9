// bfloat16 held as its raw bits (uint16_t), so host code needs no CUDA
// header: conversion to and from float and an element-wise sum. Float to
// bf16 rounds to nearest, ties to even, and turns every NaN into 0x7FFF,
// exactly as CUDA's __float2bfloat16 does, so host and device agree bit for
// bit.
#ifndef VERDICT_COMM_BF16_H_
#define VERDICT_COMM_BF16_H_

#include <bit>
#include <cstddef>
#include <cstdint>

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

// inout[i] = bf16(float(in[i]) + float(inout[i])): summed in float, rounded
// to nearest even once per element.
inline void AccumulateBf16(const uint16_t* in, uint16_t* inout, size_t count) {
  for (size_t i = 0; i < count; ++i) {
    inout[i] = FloatToBf16(Bf16ToFloat(in[i]) + Bf16ToFloat(inout[i]));
  }
}

}  // namespace verdict

#endif  // VERDICT_COMM_BF16_H_
