// Philox4x32-10: the counter-based random number generator of the sampler.
//
// Every random number the sampler draws is a pure function of
// (request seed, position, row, stream). Every TP rank and both backends
// therefore draw identical numbers without communicating (seed 000; Salmon
// et al., "Parallel random numbers: as easy as 1, 2, 3", SC 2011).
// The header compiles as host C++ and as CUDA device code.
#ifndef VERDICT_KERNELS_PHILOX_H_
#define VERDICT_KERNELS_PHILOX_H_

#include <cstdint>

#if defined(__CUDACC__)
#define VERDICT_HD __host__ __device__ __forceinline__
#else
#define VERDICT_HD inline
#endif

namespace verdict {

struct PhiloxBlock {
  uint32_t v[4];
};

// Purposes of a draw, kept apart so that e.g. the accept test and the
// residual sample of the same row never reuse a number.
enum class RandomStream : uint32_t {
  kAccept = 0,    // U in the min(1, q/p) test
  kResidual = 1,  // sample from max(q - alpha p, 0)
  kBonus = 2,     // fresh sample on the last row
  kSimulatedAcceptance = 3,  // U in the simulated accept test (U < rate)
  kDraft = 4,     // the draft model's proposal
};

namespace philox_internal {

constexpr uint32_t kMul0 = 0xD2511F53u;
constexpr uint32_t kMul1 = 0xCD9E8D57u;
constexpr uint32_t kWeyl0 = 0x9E3779B9u;
constexpr uint32_t kWeyl1 = 0xBB67AE85u;

VERDICT_HD void MulHiLo(uint32_t a, uint32_t b, uint32_t* hi, uint32_t* lo) {
  const uint64_t product = static_cast<uint64_t>(a) * static_cast<uint64_t>(b);
  *hi = static_cast<uint32_t>(product >> 32);
  *lo = static_cast<uint32_t>(product);
}

}  // namespace philox_internal

// Ten rounds of Philox4x32 on `counter` under `key` (Random123's reference).
VERDICT_HD PhiloxBlock Philox4x32(PhiloxBlock counter, uint32_t key0,
                                  uint32_t key1) {
  using namespace philox_internal;
  for (int round = 0; round < 10; ++round) {
    uint32_t hi0, lo0, hi1, lo1;
    MulHiLo(kMul0, counter.v[0], &hi0, &lo0);
    MulHiLo(kMul1, counter.v[2], &hi1, &lo1);
    counter = PhiloxBlock{{hi1 ^ counter.v[1] ^ key0, lo1,
                           hi0 ^ counter.v[3] ^ key1, lo0}};
    key0 += kWeyl0;
    key1 += kWeyl1;
  }
  return counter;
}

// Four uniform draws for (seed, position, row, stream); `block` selects
// further groups of four when a caller needs more numbers.
VERDICT_HD PhiloxBlock PhiloxDraw(uint64_t seed, int64_t position, uint32_t row,
                                  RandomStream stream, uint32_t block = 0) {
  const uint64_t pos = static_cast<uint64_t>(position);
  PhiloxBlock counter{{static_cast<uint32_t>(pos), static_cast<uint32_t>(pos >> 32),
                       row, (static_cast<uint32_t>(stream) << 24) ^ block}};
  return Philox4x32(counter, static_cast<uint32_t>(seed),
                    static_cast<uint32_t>(seed >> 32));
}

// Maps 32 random bits to a float in the open interval (0, 1): the top 23
// bits select the centre of one of 2^23 equal cells (every centre is exact
// in float), so 0 and 1 never occur: log(U) stays finite and U < 1 always
// leaves room for a reject.
VERDICT_HD float UniformOpen01(uint32_t bits) {
  return (static_cast<float>(bits >> 9) + 0.5f) * (1.0f / 8388608.0f);
}

}  // namespace verdict

#endif  // VERDICT_KERNELS_PHILOX_H_
