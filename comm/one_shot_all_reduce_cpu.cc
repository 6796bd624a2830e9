#include <cstdint>
#include <vector>

#include "comm/one_shot_all_reduce.h"
#include "kernels/bf16.h"

namespace verdict {

void OneShotAllReduceCpu(const std::vector<const void*>& inputs, int64_t count, DataType type,
                         void* out) {
  // Sums into a scratch first: `out` may alias an input.
  std::vector<float> sums(static_cast<size_t>(count), 0.0f);
  for (const void* input : inputs) {
    for (int64_t i = 0; i < count; ++i) {
      sums[i] += type == DataType::kBFloat16 ? Bf16ToFloat(static_cast<const uint16_t*>(input)[i])
                                             : static_cast<const float*>(input)[i];
    }
  }
  for (int64_t i = 0; i < count; ++i) {
    if (type == DataType::kBFloat16) {
      static_cast<uint16_t*>(out)[i] = FloatToBf16(sums[i]);
    } else {
      static_cast<float*>(out)[i] = sums[i];
    }
  }
}

}  // namespace verdict
