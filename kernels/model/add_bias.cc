#include "kernels/model/add_bias.h"

namespace verdict {

void AddBiasCpu(float* c, const float* bias, int rows, int cols) {
  for (int r = 0; r < rows; ++r) {
    float* row = c + static_cast<int64_t>(r) * cols;
    for (int j = 0; j < cols; ++j) row[j] += bias[j];
  }
}

}  // namespace verdict
