#include "kernels/model/rms_norm.h"

#include <cmath>

namespace verdict {
namespace {

// Normalises width values from `in` into `out` (in may equal out). The sum of
// squares is taken in double so the twin is a tighter reference than the
// float32 device sum it is compared with.
void NormalizeRow(const float* in, const float* weight, float* out, int width, float eps) {
  double sum_sq = 0.0;
  for (int i = 0; i < width; ++i) sum_sq += static_cast<double>(in[i]) * in[i];
  const float inv_rms =
      static_cast<float>(1.0 / std::sqrt(sum_sq / width + static_cast<double>(eps)));
  for (int i = 0; i < width; ++i) out[i] = in[i] * inv_rms * weight[i];
}

}  // namespace

void RmsNormCpu(const float* x, const float* weight, float* out, int rows, int width, float eps) {
  for (int r = 0; r < rows; ++r) {
    const int64_t offset = static_cast<int64_t>(r) * width;
    NormalizeRow(x + offset, weight, out + offset, width, eps);
  }
}

void AddRmsNormCpu(const float* x, float* residual, const float* weight, float* out, int rows,
                   int width, float eps) {
  for (int r = 0; r < rows; ++r) {
    const int64_t offset = static_cast<int64_t>(r) * width;
    for (int i = 0; i < width; ++i) residual[offset + i] += x[offset + i];
    NormalizeRow(residual + offset, weight, out + offset, width, eps);
  }
}

void HeadRmsNormCpu(float* x, int tokens, int heads, int head_dim, int64_t token_stride,
                    const float* weight, float eps) {
  for (int t = 0; t < tokens; ++t) {
    for (int h = 0; h < heads; ++h) {
      float* head = x + t * token_stride + static_cast<int64_t>(h) * head_dim;
      NormalizeRow(head, weight, head, head_dim, eps);
    }
  }
}

}  // namespace verdict
