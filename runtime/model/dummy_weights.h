// Values of `--load-format dummy` weights: element i of tensor `name` is a
// pure function of (seed, name, i), so each rank generates only its shard
// and the full tensor is the same at any tensor-parallel degree. Uniform
// draws (not Gaussian) keep every value exact in float arithmetic: a CUDA
// generator reproduces them bit for bit without matching libm.
// The header compiles as host C++ and as CUDA device code.
#ifndef VERDICT_RUNTIME_MODEL_DUMMY_WEIGHTS_H_
#define VERDICT_RUNTIME_MODEL_DUMMY_WEIGHTS_H_

#include <cstdint>
#include <string_view>

#include "kernels/philox.h"

namespace verdict {

enum class DummyInit : uint32_t {
  kUniform = 0,      // mean 0, standard deviation `stddev`
  kOnePlusNoise = 1  // 1 + the same noise: RMSNorm weights near their trained scale
};

// FNV-1a: names the tensor inside the random stream.
inline uint64_t DummyTensorKey(std::string_view name) {
  uint64_t h = 1469598103934665603ull;
  for (char c : name) {
    h ^= static_cast<uint8_t>(c);
    h *= 1099511628211ull;
  }
  return h;
}

VERDICT_HD float DummyWeightValue(uint64_t seed, uint64_t tensor_key, uint64_t index,
                                  DummyInit init, float stddev) {
  PhiloxBlock counter{{static_cast<uint32_t>(index), static_cast<uint32_t>(index >> 32),
                       static_cast<uint32_t>(tensor_key),
                       static_cast<uint32_t>(tensor_key >> 32)}};
  const PhiloxBlock bits =
      Philox4x32(counter, static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32));
  // Uniform on (-a, a) has standard deviation a / sqrt(3).
  const float half_width = stddev * 1.7320508f;
  const float noise = (2.0f * UniformOpen01(bits.v[0]) - 1.0f) * half_width;
  return init == DummyInit::kOnePlusNoise ? 1.0f + noise : noise;
}

}  // namespace verdict

#endif  // VERDICT_RUNTIME_MODEL_DUMMY_WEIGHTS_H_
