#include <cstdint>
#include <vector>

#include "comm/one_shot_all_reduce.h"
#include "kernels/bf16.h"

namespace verdict {

void OneShotAllReduceCpu(const std::vector<const void*>& inputs, int64_t count, DataType type,
                         void* out) {
  // Sums into a scratch first: `out` may alias an input. Rank 0's values,
  // then each further rank's added in order.
  std::vector<float> sums(static_cast<size_t>(count), 0.0f);
  for (size_t r = 0; r < inputs.size(); ++r) {
    for (int64_t i = 0; i < count; ++i) {
      const float x = type == DataType::kBFloat16
                          ? Bf16ToFloat(static_cast<const uint16_t*>(inputs[r])[i])
                          : static_cast<const float*>(inputs[r])[i];
      sums[i] = r == 0 ? x : sums[i] + x;
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
