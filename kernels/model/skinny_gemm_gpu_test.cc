// Parity of the skinny GEMM with the CPU twin (GemmCpu) on random bf16
// inputs: every supported m, bf16 and float32 outputs, with and without
// bias, the decode shapes of a 1B draft and an LM-head-like width; a row's
// result independent of m; Gemm's dispatch to it; refused shapes.
#include <cmath>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "kernels/bf16.h"
#include "kernels/model/gemm.h"
#include "kernels/model/internal/device_buffer.h"
#include "kernels/model/internal/test_util.h"
#include "kernels/model/skinny_gemm.h"

namespace verdict {
namespace {

using test_util::DeviceBuffer;

struct Operands {
  std::vector<float> a, w, bias;
};

Operands RandomOperands(int m, int n, int k, uint64_t seed) {
  return {test_util::RandomBf16Floats(static_cast<size_t>(m) * k, 1.0f, seed),
          test_util::RandomBf16Floats(static_cast<size_t>(n) * k, 0.05f, seed + 1),
          test_util::RandomBf16Floats(n, 0.5f, seed + 2)};
}

// |got - ref| <= rel |ref| + sum_eps sum_i |a_i w_i| (the second term bounds
// the float32 summation-order difference).
void ExpectNear(const Operands& o, const std::vector<float>& got, bool bias, int m, int n, int k,
                float rel, const std::string& what) {
  std::vector<float> ref(static_cast<size_t>(m) * n), abs_dot(ref.size());
  GemmCpu(o.a.data(), o.w.data(), bias ? o.bias.data() : nullptr, ref.data(), m, n, k);
  std::vector<float> abs_a(o.a.size()), abs_w(o.w.size());
  for (size_t i = 0; i < abs_a.size(); ++i) abs_a[i] = std::fabs(o.a[i]);
  for (size_t i = 0; i < abs_w.size(); ++i) abs_w[i] = std::fabs(o.w[i]);
  GemmCpu(abs_a.data(), abs_w.data(), nullptr, abs_dot.data(), m, n, k);
  int failures = 0;
  for (size_t i = 0; i < ref.size() && failures < 8; ++i) {
    const float tol = rel * std::fabs(ref[i]) + 2e-5f * abs_dot[i];
    if (!(std::fabs(got[i] - ref[i]) <= tol)) {
      ADD_FAILURE() << what << ": element " << i << " expected " << ref[i] << " got " << got[i];
      ++failures;
    }
  }
}

TEST(SkinnyGemmGpuTest, MatchesCpuTwin) {
  struct Case {
    int n, k;
    bool bias;
  };
  const Case cases[] = {
      {2048, 2048, false},  // 1B o_proj
      {3072, 2048, true},   // 1B qkv, Qwen2-style bias
      {2048, 8192, false},  // 1B down_proj
      {1000, 520, true},    // odd n, k a multiple of 8 only
      {32000, 1024, false}, // an LM head's width
  };
  for (int m = 1; m <= kSkinnyGemmMaxRows; ++m) {
    for (const Case& c : cases) {
      const std::string what = absl::StrCat("m=", m, " n=", c.n, " k=", c.k, " bias=", c.bias);
      const Operands o = RandomOperands(m, c.n, c.k, 70 + m + c.n);
      DeviceBuffer<uint16_t> d_a(FloatToBf16Vector(o.a));
      DeviceBuffer<uint16_t> d_w(FloatToBf16Vector(o.w));
      DeviceBuffer<uint16_t> d_bias(FloatToBf16Vector(o.bias));
      DeviceBuffer<uint16_t> d_c16(static_cast<size_t>(m) * c.n);
      DeviceBuffer<float> d_c32(static_cast<size_t>(m) * c.n);
      d_c16.Poison();
      d_c32.Poison();
      const uint16_t* bias = c.bias ? d_bias.get() : nullptr;
      ASSERT_TRUE(SkinnyGemmFits(m, c.k, d_a.get(), d_w.get())) << what;
      ASSERT_TRUE(InvokeSkinnyGemm(d_a.get(), d_w.get(), bias, d_c16.get(), m, c.n, c.k, nullptr)
                      .ok())
          << what;
      ASSERT_TRUE(InvokeSkinnyGemm(d_a.get(), d_w.get(), bias, d_c32.get(), m, c.n, c.k, nullptr)
                      .ok())
          << what;
      ExpectNear(o, Bf16ToFloatVector(d_c16.Download()), c.bias, m, c.n, c.k, 5e-3f, what + " bf16");
      ExpectNear(o, d_c32.Download(), c.bias, m, c.n, c.k, 1e-5f, what + " f32");
    }
  }
}

// Row 0 alone and row 0 of four rows: the same bits (the summation order
// depends on neither m nor the other rows). Gemm with skinny_small_m gives
// the kernel's bits where k <= 4096, and asks cuBLASLt beyond.
TEST(SkinnyGemmGpuTest, ARowIsTheSameInAnyBatchAndGemmDispatchesToIt) {
  const int n = 3072, k = 2048;
  const Operands o = RandomOperands(4, n, k, 81);
  DeviceBuffer<uint16_t> d_a(FloatToBf16Vector(o.a));
  DeviceBuffer<uint16_t> d_w(FloatToBf16Vector(o.w));
  DeviceBuffer<float> one(n), four(4 * n), via_gemm(4 * n);
  ASSERT_TRUE(InvokeSkinnyGemm(d_a.get(), d_w.get(), nullptr, one.get(), 1, n, k, nullptr).ok());
  ASSERT_TRUE(InvokeSkinnyGemm(d_a.get(), d_w.get(), nullptr, four.get(), 4, n, k, nullptr).ok());
  const std::vector<float> row = one.Download();
  const std::vector<float> rows = four.Download();
  EXPECT_EQ(row, std::vector<float>(rows.begin(), rows.begin() + n));

  GemmOptions options;
  options.skinny_small_m = true;
  absl::StatusOr<std::unique_ptr<Gemm>> gemm = Gemm::Create(options);
  ASSERT_TRUE(gemm.ok()) << gemm.status();
  ASSERT_TRUE((*gemm)->Run(d_a.get(), d_w.get(), nullptr, via_gemm.get(), 4, n, k, nullptr).ok());
  EXPECT_EQ(via_gemm.Download(), rows);
  EXPECT_EQ((*gemm)->cached_plans(), 0u);  // cuBLASLt was not asked
  // Long weight rows (k > 4096) stay on cuBLASLt, which reads them faster.
  const int long_k = 8192;
  DeviceBuffer<uint16_t> long_a(FloatToBf16Vector(test_util::RandomBf16Floats(long_k, 1.0f, 82)));
  DeviceBuffer<uint16_t> long_w(
      FloatToBf16Vector(test_util::RandomBf16Floats(static_cast<size_t>(64) * long_k, 0.05f, 83)));
  DeviceBuffer<float> long_c(64);
  ASSERT_TRUE(
      (*gemm)->Run(long_a.get(), long_w.get(), nullptr, long_c.get(), 1, 64, long_k, nullptr).ok());
  EXPECT_EQ((*gemm)->cached_plans(), 1u);
}

TEST(SkinnyGemmGpuTest, RefusesWhatItDoesNotTake) {
  DeviceBuffer<uint16_t> a(64 * 64), w(64 * 64), c(64 * 64);
  EXPECT_FALSE(SkinnyGemmFits(kSkinnyGemmMaxRows + 1, 64, a.get(), w.get()));
  EXPECT_FALSE(SkinnyGemmFits(1, 60, a.get(), w.get()));  // k not a multiple of 8
  EXPECT_FALSE(SkinnyGemmFits(1, 64, a.get() + 1, w.get()));
  EXPECT_FALSE(InvokeSkinnyGemm(a.get(), w.get(), nullptr, c.get(), 5, 64, 64, nullptr).ok());
  EXPECT_FALSE(InvokeSkinnyGemm(a.get(), w.get(), nullptr, c.get(), 1, 64, 60, nullptr).ok());
}

}  // namespace
}  // namespace verdict
