// The CPU twin of Gemm. Rows of W are split across threads; each output is
// a dot product of two contiguous rows, summed in a fixed order whatever the
// thread count (the device sums in a different order; both are float32
// accumulations).
#include "kernels/model/gemm.h"

#include <algorithm>
#include <thread>
#include <vector>

#if defined(__SANITIZE_ADDRESS__)
#define VERDICT_GEMM_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define VERDICT_GEMM_ASAN 1
#endif
#endif
#ifdef VERDICT_GEMM_ASAN
#include <sanitizer/asan_interface.h>
#endif

namespace verdict {
namespace {

// Under AddressSanitizer and UBSan every load and index of the dot product
// below is checked on its own, which keeps the loop scalar: a case of
// engine_draft_plan_test spent 89% of its time in it and ran about 20 times
// slower than in the plain build (docs/RELIABILITY.md). So the loop itself
// is not instrumented, and each row it reads is checked whole before (an
// activation row once per block of columns): an access out of bounds is
// still reported, at the row's first bad byte.
void CheckRowReadable(const float* row, int k) {
#ifdef VERDICT_GEMM_ASAN
  if (k <= 0) return;
  const void* bad = __asan_region_is_poisoned(const_cast<float*>(row), sizeof(float) * k);
  // An instrumented read of that byte makes ASan report it, with its stack
  // and the allocation it belongs to (or lies outside of).
  if (bad != nullptr) (void)*static_cast<const volatile char*>(bad);
#else
  (void)row;
  (void)k;
#endif
}

// Eight partial sums let the compiler vectorise without -ffast-math while
// keeping one fixed summation order.
__attribute__((no_sanitize("address"))) __attribute__((no_sanitize("undefined")))
float Dot(const float* x, const float* y, int k) {
  float acc[8] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
  int i = 0;
  for (; i + 8 <= k; i += 8) {
    for (int lane = 0; lane < 8; ++lane) acc[lane] += x[i + lane] * y[i + lane];
  }
  float tail = 0.0f;
  for (; i < k; ++i) tail += x[i] * y[i];
  return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7])) + tail;
}

void GemmColumns(const float* a, const float* w, const float* bias, float* c, int m, int n, int k,
                 int col_begin, int col_end) {
  // Blocks of W rows stay in cache while every row of A passes over them.
  constexpr int kColBlock = 64;
  for (int j0 = col_begin; j0 < col_end; j0 += kColBlock) {
    const int j1 = std::min(col_end, j0 + kColBlock);
    for (int r = 0; r < m; ++r) {
      const float* a_row = a + static_cast<int64_t>(r) * k;
      float* c_row = c + static_cast<int64_t>(r) * n;
      CheckRowReadable(a_row, k);
      for (int j = j0; j < j1; ++j) {
        if (r == 0) CheckRowReadable(w + static_cast<int64_t>(j) * k, k);
        const float v = Dot(a_row, w + static_cast<int64_t>(j) * k, k);
        c_row[j] = bias != nullptr ? v + bias[j] : v;
      }
    }
  }
}

}  // namespace

void GemmCpu(const float* a, const float* w, const float* bias, float* c, int m, int n, int k,
             int num_threads) {
  if (m <= 0 || n <= 0) return;
  if (num_threads <= 0)
    num_threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  // Threads only pay off for products of a few million multiply-adds.
  const int64_t work = static_cast<int64_t>(m) * n * k;
  num_threads = static_cast<int>(std::min<int64_t>(num_threads, std::max<int64_t>(1, work >> 21)));
  num_threads = std::min(num_threads, n);
  if (num_threads <= 1) {
    GemmColumns(a, w, bias, c, m, n, k, 0, n);
    return;
  }
  std::vector<std::thread> threads;
  threads.reserve(num_threads);
  for (int t = 0; t < num_threads; ++t) {
    const int begin = static_cast<int>(static_cast<int64_t>(n) * t / num_threads);
    const int end = static_cast<int>(static_cast<int64_t>(n) * (t + 1) / num_threads);
    threads.emplace_back(GemmColumns, a, w, bias, c, m, n, k, begin, end);
  }
  for (auto& t : threads) t.join();
}

}  // namespace verdict
