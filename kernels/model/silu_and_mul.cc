#include "kernels/model/silu_and_mul.h"

#include <cmath>

namespace verdict {

void SiluAndMulCpu(const float* gate_up, float* out, int tokens, int inter) {
  for (int t = 0; t < tokens; ++t) {
    const float* gate = gate_up + static_cast<int64_t>(t) * 2 * inter;
    const float* up = gate + inter;
    float* row = out + static_cast<int64_t>(t) * inter;
    for (int i = 0; i < inter; ++i) {
      const float g = gate[i];
      row[i] = g / (1.0f + std::exp(-g)) * up[i];
    }
  }
}

}  // namespace verdict
