// The GEMM CPU twin on a product worked out by hand, with bias, and the
// threaded path against the single-threaded one.
#include "kernels/model/gemm.h"

#include <vector>

#include "gtest/gtest.h"
#include "kernels/model/add_bias.h"

namespace verdict {
namespace {

TEST(GemmCpuTest, RowMajorActivationsTimesTransposedWeights) {
  // A [2, 3], W [4, 3] (out_features x in_features).
  const std::vector<float> a = {1, 2, 3, -1, 0.5f, 2};
  const std::vector<float> w = {1, 0, 0, 0, 1, 0, 0, 0, 1, 1, 1, 1};
  const std::vector<float> bias = {10, 20, 30, 40};
  std::vector<float> c(8);
  GemmCpu(a.data(), w.data(), nullptr, c.data(), 2, 4, 3);
  EXPECT_EQ(c, (std::vector<float>{1, 2, 3, 6, -1, 0.5f, 2, 1.5f}));
  GemmCpu(a.data(), w.data(), bias.data(), c.data(), 2, 4, 3);
  EXPECT_EQ(c, (std::vector<float>{11, 22, 33, 46, 9, 20.5f, 32, 41.5f}));
}

TEST(GemmCpuTest, ThreadsGiveTheSameBits) {
  // 16.5 million multiply-adds: enough work for GemmCpu to use all 7 threads
  // (it takes one per 2^21).
  const int m = 16, n = 1000, k = 1031;
  std::vector<float> a(m * k), w(static_cast<size_t>(n) * k), bias(n);
  for (size_t i = 0; i < a.size(); ++i) a[i] = 0.001f * static_cast<float>((i * 37) % 101) - 0.05f;
  for (size_t i = 0; i < w.size(); ++i) w[i] = 0.002f * static_cast<float>((i * 53) % 97) - 0.09f;
  for (int i = 0; i < n; ++i) bias[i] = 0.01f * i;
  std::vector<float> one(m * n), many(m * n);
  GemmCpu(a.data(), w.data(), bias.data(), one.data(), m, n, k, 1);
  GemmCpu(a.data(), w.data(), bias.data(), many.data(), m, n, k, 7);
  EXPECT_EQ(one, many);
  // And against a plain double-precision loop.
  for (int r = 0; r < m; ++r) {
    for (int j = 0; j < n; ++j) {
      double ref = bias[j];
      for (int i = 0; i < k; ++i) ref += static_cast<double>(a[r * k + i]) * w[j * k + i];
      EXPECT_NEAR(one[r * n + j], ref, 1e-4) << r << "," << j;
    }
  }
}

#if defined(__SANITIZE_ADDRESS__)
#define VERDICT_TEST_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define VERDICT_TEST_ASAN 1
#endif
#endif
#ifdef VERDICT_TEST_ASAN
// The dot product's loop is not instrumented (gemm.cc says why); its rows
// are checked whole instead. A weight matrix or activations one float short
// must still be reported, under --config=asan (only there does it compile).
TEST(GemmCpuDeathTest, RowsPastTheirBufferAreReportedUnderAsan) {
  const int m = 3, n = 70, k = 33;
  std::vector<float> a(m * k, 1.0f), w(static_cast<size_t>(n) * k, 1.0f), c(m * n);
  std::vector<float> short_w(w.begin(), w.end() - 1), short_a(a.begin(), a.end() - 1);
  EXPECT_DEATH(GemmCpu(a.data(), short_w.data(), nullptr, c.data(), m, n, k, 1),
               "heap-buffer-overflow");
  EXPECT_DEATH(GemmCpu(short_a.data(), w.data(), nullptr, c.data(), m, n, k, 1),
               "heap-buffer-overflow");
}
#endif

TEST(AddBiasCpuTest, AddsPerColumn) {
  std::vector<float> c = {1, 2, 3, 4, 5, 6};
  const std::vector<float> bias = {0.5f, -1, 2};
  AddBiasCpu(c.data(), bias.data(), 2, 3);
  EXPECT_EQ(c, (std::vector<float>{1.5f, 1, 5, 4.5f, 4, 8}));
}

}  // namespace
}  // namespace verdict
