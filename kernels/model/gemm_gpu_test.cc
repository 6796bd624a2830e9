// Parity of the cuBLASLt Gemm (and AddBias) with the CPU twin on random
// bf16 inputs: bf16 and float32 outputs, with and without bias, decode and
// prefill shapes of an 8B model, odd sizes, and less-aligned pointers.
#include <cmath>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "kernels/bf16.h"
#include "kernels/model/add_bias.h"
#include "kernels/model/gemm.h"
#include "kernels/model/internal/device_buffer.h"
#include "kernels/model/internal/test_util.h"

namespace verdict {
namespace {

using test_util::DeviceBuffer;

struct Case {
  int m, n, k;
  bool bias;
  int a_offset;  // elements: shifts A off the 256-byte alignment cudaMalloc gives
};

// err <= rel * |ref| + sum_eps * sum_i |a_i w_i|: the second term bounds the
// float32 accumulation-order difference, which scales with the magnitudes
// summed, not with the (possibly cancelled) result.
void ExpectGemmNear(const std::vector<float>& ref, const std::vector<float>& abs_dot,
                    const std::vector<float>& got, float rel, float sum_eps,
                    const std::string& what) {
  ASSERT_EQ(ref.size(), got.size());
  int failures = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const float tol = rel * std::fabs(ref[i]) + sum_eps * abs_dot[i];
    if (!(std::fabs(got[i] - ref[i]) <= tol)) {
      ADD_FAILURE() << what << ": element " << i << " expected " << ref[i] << " got " << got[i]
                    << " tol " << tol;
      if (++failures >= 8) return;
    }
  }
}

class GemmParityTest : public ::testing::TestWithParam<int> {};

// Param: GemmOptions::autotune_candidates (0 = heuristic's choice).
TEST_P(GemmParityTest, MatchesCpuTwin) {
  GemmOptions options;
  options.autotune_candidates = GetParam();
  absl::StatusOr<std::unique_ptr<Gemm>> gemm = Gemm::Create(options);
  ASSERT_TRUE(gemm.ok()) << gemm.status();
  const Case cases[] = {
      {1, 4096, 4096, false, 0},   // o_proj at batch 1, one token
      {6, 6144, 4096, true, 0},    // fused qkv of 6 verify tokens, Qwen2-style bias
      {48, 3584, 4096, false, 0},  // a TP=8 gate_up shard
      {384, 1024, 4096, true, 0},  // batch 64 x 6 tokens
      {37, 1000, 520, true, 0},    // odd sizes
      {5, 256, 512, false, 4},     // A 8-byte aligned only
  };
  for (const Case& c : cases) {
    const std::string what =
        absl::StrCat("m=", c.m, " n=", c.n, " k=", c.k, " bias=", c.bias, " a_offset=", c.a_offset);
    const size_t a_n = static_cast<size_t>(c.m) * c.k, w_n = static_cast<size_t>(c.n) * c.k;
    const size_t c_n = static_cast<size_t>(c.m) * c.n;
    const std::vector<float> a = test_util::RandomBf16Floats(a_n, 1.0f, 51 + c.m);
    const std::vector<float> w = test_util::RandomBf16Floats(w_n, 0.05f, 52 + c.n);
    const std::vector<float> bias = test_util::RandomBf16Floats(c.n, 0.5f, 53 + c.k);
    std::vector<float> ref(c_n), abs_dot(c_n);
    GemmCpu(a.data(), w.data(), c.bias ? bias.data() : nullptr, ref.data(), c.m, c.n, c.k);
    std::vector<float> abs_a(a_n), abs_w(w_n);
    for (size_t i = 0; i < a_n; ++i) abs_a[i] = std::fabs(a[i]);
    for (size_t i = 0; i < w_n; ++i) abs_w[i] = std::fabs(w[i]);
    GemmCpu(abs_a.data(), abs_w.data(), nullptr, abs_dot.data(), c.m, c.n, c.k);

    std::vector<uint16_t> a_bits(a_n + c.a_offset, 0x3f80);
    const std::vector<uint16_t> a_only = FloatToBf16Vector(a);
    std::copy(a_only.begin(), a_only.end(), a_bits.begin() + c.a_offset);
    DeviceBuffer<uint16_t> d_a(a_bits);
    DeviceBuffer<uint16_t> d_w(FloatToBf16Vector(w));
    DeviceBuffer<uint16_t> d_bias(FloatToBf16Vector(bias));
    DeviceBuffer<uint16_t> d_c16(c_n);
    DeviceBuffer<float> d_c32(c_n);
    d_c16.Poison();
    d_c32.Poison();
    const uint16_t* bias_ptr = c.bias ? d_bias.get() : nullptr;
    absl::Status s = (*gemm)->Run(d_a.get() + c.a_offset, d_w.get(), bias_ptr, d_c16.get(), c.m,
                                  c.n, c.k, nullptr);
    ASSERT_TRUE(s.ok()) << what << ": " << s;
    s = (*gemm)->Run(d_a.get() + c.a_offset, d_w.get(), bias_ptr, d_c32.get(), c.m, c.n, c.k,
                     nullptr);
    ASSERT_TRUE(s.ok()) << what << ": " << s;
    // bf16 output: one rounding (2^-9 relative) dominates.
    ExpectGemmNear(ref, abs_dot, Bf16ToFloatVector(d_c16.Download()), 5e-3f, 2e-5f, what + " bf16");
    ExpectGemmNear(ref, abs_dot, d_c32.Download(), 1e-5f, 2e-5f, what + " f32");
  }
  // Two output types per case, each its own plan.
  EXPECT_EQ((*gemm)->cached_plans(), 2 * (sizeof(cases) / sizeof(cases[0])));
}

INSTANTIATE_TEST_SUITE_P(HeuristicAndAutotuned, GemmParityTest, ::testing::Values(0, 8));

TEST(GemmGpuTest, RepeatedShapeReusesItsPlan) {
  absl::StatusOr<std::unique_ptr<Gemm>> gemm = Gemm::Create();
  ASSERT_TRUE(gemm.ok()) << gemm.status();
  const int m = 3, n = 64, k = 128;
  DeviceBuffer<uint16_t> d_a(FloatToBf16Vector(test_util::RandomBf16Floats(m * k, 1.0f, 1)));
  DeviceBuffer<uint16_t> d_w(FloatToBf16Vector(test_util::RandomBf16Floats(n * k, 1.0f, 2)));
  DeviceBuffer<uint16_t> d_c(m * n);
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE((*gemm)->Run(d_a.get(), d_w.get(), nullptr, d_c.get(), m, n, k, nullptr).ok());
  }
  EXPECT_EQ((*gemm)->cached_plans(), 1u);
}

TEST(AddBiasGpuTest, MatchesCpuTwin) {
  const int rows = 7, cols = 1000;
  const std::vector<float> c = test_util::RandomBf16Floats(rows * cols, 2.0f, 61);
  const std::vector<float> bias = test_util::RandomBf16Floats(cols, 1.0f, 62);
  std::vector<float> expected = c;
  AddBiasCpu(expected.data(), bias.data(), rows, cols);
  DeviceBuffer<float> d_c32(c);
  DeviceBuffer<uint16_t> d_c16(FloatToBf16Vector(c));
  DeviceBuffer<uint16_t> d_bias(FloatToBf16Vector(bias));
  ASSERT_TRUE(InvokeAddBias(d_c32.get(), d_bias.get(), rows, cols, nullptr).ok());
  ASSERT_TRUE(InvokeAddBias(d_c16.get(), d_bias.get(), rows, cols, nullptr).ok());
  test_util::ExpectAllNear(expected, d_c32.Download(), 0.0f, 0.0f, "add_bias f32");
  test_util::ExpectAllNearBf16(expected, d_c16.Download(), 4e-3f, 0.0f, "add_bias bf16");
}

}  // namespace
}  // namespace verdict
