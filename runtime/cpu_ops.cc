#include "runtime/cpu_ops.h"

#include <algorithm>
#include <cmath>
#include <thread>
#include <vector>

namespace verdict {

void ParallelFor(int64_t n, int threads, const std::function<void(int64_t, int64_t)>& fn) {
  threads = static_cast<int>(std::min<int64_t>(std::max(threads, 1), n));
  if (threads <= 1) {
    if (n > 0) fn(0, n);
    return;
  }
  std::vector<std::thread> pool;
  pool.reserve(threads - 1);
  for (int t = 1; t < threads; ++t) {
    pool.emplace_back(fn, n * t / threads, n * (t + 1) / threads);
  }
  fn(0, n / threads);
  for (std::thread& th : pool) th.join();
}

namespace {

// Eight partial sums let the compiler vectorise without -ffast-math while
// keeping one fixed summation order.
float Dot(const float* a, const float* b, int64_t n) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int k = 0; k < 8; ++k) acc[k] += a[i + k] * b[i + k];
  }
  float tail = 0;
  for (; i < n; ++i) tail += a[i] * b[i];
  return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7])) +
         tail;
}

}  // namespace

void LinearCpu(const float* x, int64_t rows, int64_t in, const float* w, int64_t out,
               const float* bias, float* y, int threads) {
  // Small products are not worth a thread start.
  if (rows * in * out < (int64_t{1} << 18)) threads = 1;
  ParallelFor(out, threads, [&](int64_t begin, int64_t end) {
    for (int64_t o = begin; o < end; ++o) {
      const float* wo = w + o * in;
      const float b = bias != nullptr ? bias[o] : 0.0f;
      for (int64_t r = 0; r < rows; ++r) y[r * out + o] = Dot(x + r * in, wo, in) + b;
    }
  });
}

void RmsNormCpu(const float* x, const float* weight, int64_t rows, int64_t dim, float eps,
                float* y) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * dim;
    float* yr = y + r * dim;
    const float mean_square = Dot(xr, xr, dim) / static_cast<float>(dim);
    const float scale = 1.0f / std::sqrt(mean_square + eps);
    for (int64_t i = 0; i < dim; ++i) yr[i] = xr[i] * scale * weight[i];
  }
}

void SiluMulCpu(const float* gate, const float* up, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) {
    const float g = gate[i];
    out[i] = g / (1.0f + std::exp(-g)) * up[i];
  }
}

}  // namespace verdict
