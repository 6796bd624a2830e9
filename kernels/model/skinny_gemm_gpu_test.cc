// Parity of the skinny GEMM with the CPU twin (GemmCpu) on random bf16
// inputs: every supported m, bf16 and float32 outputs, with and without
// bias, the decode shapes of a 1B draft and an LM-head-like width; a row's
// result independent of m; Gemm's dispatch to it; refused shapes. The same
// for the fused gate_up + SiLU-and-mul, which must also equal the unfused
// pair (skinny GEMM, then InvokeSiluAndMul) bit for bit.
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "kernels/bf16.h"
#include "kernels/model/gemm.h"
#include "kernels/model/internal/device_buffer.h"
#include "kernels/model/internal/test_util.h"
#include "kernels/model/silu_and_mul.h"
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

// ---- Fused gate_up + SiLU-and-mul ----

// Weights scaled so that the gate sums spread over about [-6, 6] whatever k
// is: the SiLU's curved part and its flat negative tail both get exercised.
std::vector<float> RandomGateUpWeight(int inter, int k, uint64_t seed) {
  return test_util::RandomBf16Floats(static_cast<size_t>(2) * inter * k,
                                     6.0f / std::sqrt(static_cast<float>(k)), seed);
}

// The first few elements whose bits differ.
void ExpectSameBits(const std::vector<uint16_t>& expected, const std::vector<uint16_t>& got,
                    const std::string& what) {
  ASSERT_EQ(expected.size(), got.size()) << what;
  int failures = 0;
  for (size_t i = 0; i < expected.size() && failures < 8; ++i) {
    if (expected[i] != got[i]) {
      ADD_FAILURE() << what << ": element " << i << " expected bits " << expected[i] << " ("
                    << Bf16ToFloat(expected[i]) << ") got " << got[i] << " (" << Bf16ToFloat(got[i])
                    << ")";
      ++failures;
    }
  }
}

// Against the CPU twin, GemmCpu then SiluAndMulCpu in float. The device
// rounds gate and up to bf16 before the activation, and act after it. Each
// of g and u is off by at most half a bf16 ulp (2^-8 relative) plus
// ExpectNear's summation-order term; |silu'| < 1.1 carries g's error
// through the SiLU, and the product adds |silu(g)| times u's error; act's
// own rounding adds 2^-8 of it. Half again as much is allowed.
void ExpectGateUpSiluNear(const std::vector<float>& a, const std::vector<float>& w,
                          const std::vector<uint16_t>& got_bits, int m, int inter, int k,
                          const std::string& what) {
  const int n = 2 * inter;
  std::vector<float> gate_up(static_cast<size_t>(m) * n), abs_dot(gate_up.size());
  std::vector<float> ref(static_cast<size_t>(m) * inter);
  GemmCpu(a.data(), w.data(), nullptr, gate_up.data(), m, n, k);
  SiluAndMulCpu(gate_up.data(), ref.data(), m, inter);
  std::vector<float> abs_a(a.size()), abs_w(w.size());
  for (size_t i = 0; i < abs_a.size(); ++i) abs_a[i] = std::fabs(a[i]);
  for (size_t i = 0; i < abs_w.size(); ++i) abs_w[i] = std::fabs(w[i]);
  GemmCpu(abs_a.data(), abs_w.data(), nullptr, abs_dot.data(), m, n, k);
  const std::vector<float> got = Bf16ToFloatVector(got_bits);
  ASSERT_EQ(got.size(), ref.size()) << what;
  int failures = 0;
  for (int t = 0; t < m && failures < 8; ++t) {
    for (int i = 0; i < inter && failures < 8; ++i) {
      const size_t gi = static_cast<size_t>(t) * n + i, ui = gi + inter;
      const float g = gate_up[gi], u = gate_up[ui];
      const float dg = std::ldexp(std::fabs(g), -8) + 2e-5f * abs_dot[gi];
      const float du = std::ldexp(std::fabs(u), -8) + 2e-5f * abs_dot[ui];
      const float silu = g / (1.0f + std::exp(-g));
      const size_t oi = static_cast<size_t>(t) * inter + i;
      const float tol = 1.5f * (1.1f * dg * (std::fabs(u) + du) + std::fabs(silu) * du +
                                std::ldexp(std::fabs(ref[oi]), -8));
      if (!(std::fabs(got[oi] - ref[oi]) <= tol)) {  // also catches NaN (poison)
        ADD_FAILURE() << what << ": row " << t << " column " << i << " expected " << ref[oi]
                      << " got " << got[oi] << " (tolerance " << tol << ")";
        ++failures;
      }
    }
  }
}

TEST(SkinnyGemmGpuTest, GateUpSiluMatchesTheUnfusedPairAndTheCpuTwin) {
  // 8192 x 2048 is the 1B draft's MLP; the small ones leave most lanes of a
  // warp without a chunk (k = 8, 64) and most warps without a column.
  for (const int inter : {8, 64, 8192}) {
    for (const int k : {8, 64, 2048}) {
      const std::vector<float> w = RandomGateUpWeight(inter, k, 300 + inter + k);
      DeviceBuffer<uint16_t> d_w(FloatToBf16Vector(w));
      for (int m = 1; m <= kSkinnyGemmMaxRows; ++m) {
        const std::string what = absl::StrCat("m=", m, " inter=", inter, " k=", k);
        const std::vector<float> a =
            test_util::RandomBf16Floats(static_cast<size_t>(m) * k, 1.0f, 400 + 10 * m + k);
        DeviceBuffer<uint16_t> d_a(FloatToBf16Vector(a));
        DeviceBuffer<uint16_t> d_gate_up(static_cast<size_t>(m) * 2 * inter);
        DeviceBuffer<uint16_t> d_unfused(static_cast<size_t>(m) * inter);
        DeviceBuffer<uint16_t> d_fused(static_cast<size_t>(m) * inter);
        d_gate_up.Poison();
        d_unfused.Poison();
        d_fused.Poison();
        ASSERT_TRUE(SkinnyGemmFits(m, k, d_a.get(), d_w.get())) << what;
        ASSERT_TRUE(InvokeSkinnyGemm(d_a.get(), d_w.get(), nullptr, d_gate_up.get(), m, 2 * inter,
                                     k, nullptr)
                        .ok())
            << what;
        ASSERT_TRUE(InvokeSiluAndMul(d_gate_up.get(), d_unfused.get(), m, inter, nullptr).ok())
            << what;
        ASSERT_TRUE(
            InvokeSkinnyGateUpSilu(d_a.get(), d_w.get(), d_fused.get(), m, inter, k, nullptr).ok())
            << what;
        const std::vector<uint16_t> fused = d_fused.Download();
        ExpectSameBits(d_unfused.Download(), fused, what + " fused vs unfused");
        ExpectGateUpSiluNear(a, w, fused, m, inter, k, what + " vs CPU twin");
      }
    }
  }
}

// Gemm::RunGateUpSilu takes the fused kernel exactly where Run would take
// the skinny one (its gate_up scratch then untouched), and otherwise gives
// Run + InvokeSiluAndMul's bits, leaving Run's gate_up in the scratch.
TEST(SkinnyGemmGpuTest, GemmRunGateUpSiluFusesWhereRunIsSkinny) {
  const int m = 3, inter = 512, k = 2048;
  const std::vector<float> w = RandomGateUpWeight(inter, k, 501);
  DeviceBuffer<uint16_t> d_w(FloatToBf16Vector(w));
  DeviceBuffer<uint16_t> d_a(
      FloatToBf16Vector(test_util::RandomBf16Floats(static_cast<size_t>(m) * k, 1.0f, 502)));
  DeviceBuffer<uint16_t> scratch(static_cast<size_t>(m) * 2 * inter);
  DeviceBuffer<uint16_t> gate_up(scratch.size());
  DeviceBuffer<uint16_t> act(static_cast<size_t>(m) * inter), expected(act.size());

  GemmOptions skinny_options;
  skinny_options.skinny_small_m = true;
  absl::StatusOr<std::unique_ptr<Gemm>> skinny = Gemm::Create(skinny_options);
  ASSERT_TRUE(skinny.ok()) << skinny.status();
  scratch.Poison();
  act.Poison();
  ASSERT_TRUE(
      (*skinny)
          ->RunGateUpSilu(d_a.get(), d_w.get(), scratch.get(), act.get(), m, inter, k, nullptr)
          .ok());
  ASSERT_TRUE(
      InvokeSkinnyGateUpSilu(d_a.get(), d_w.get(), expected.get(), m, inter, k, nullptr).ok());
  ExpectSameBits(expected.Download(), act.Download(), "skinny on");
  EXPECT_EQ(scratch.Download(), std::vector<uint16_t>(scratch.size(), 0xFFFF));
  EXPECT_EQ((*skinny)->cached_plans(), 0u);  // cuBLASLt was not asked

  absl::StatusOr<std::unique_ptr<Gemm>> plain = Gemm::Create();
  ASSERT_TRUE(plain.ok()) << plain.status();
  act.Poison();
  ASSERT_TRUE(
      (*plain)
          ->RunGateUpSilu(d_a.get(), d_w.get(), scratch.get(), act.get(), m, inter, k, nullptr)
          .ok());
  ASSERT_TRUE(
      (*plain)->Run(d_a.get(), d_w.get(), nullptr, gate_up.get(), m, 2 * inter, k, nullptr).ok());
  ASSERT_TRUE(InvokeSiluAndMul(gate_up.get(), expected.get(), m, inter, nullptr).ok());
  ExpectSameBits(expected.Download(), act.Download(), "skinny off");
  ExpectSameBits(gate_up.Download(), scratch.Download(), "skinny off, gate_up");

  // Long weight rows (k > 4096) stay on cuBLASLt with the skinny GEMM on, as
  // Run's do.
  const int long_k = 8192, long_inter = 64;
  DeviceBuffer<uint16_t> long_w(FloatToBf16Vector(RandomGateUpWeight(long_inter, long_k, 503)));
  DeviceBuffer<uint16_t> long_a(FloatToBf16Vector(test_util::RandomBf16Floats(long_k, 1.0f, 504)));
  DeviceBuffer<uint16_t> long_scratch(2 * long_inter), long_gate_up(2 * long_inter);
  DeviceBuffer<uint16_t> long_act(long_inter), long_expected(long_inter);
  long_act.Poison();
  ASSERT_TRUE((*skinny)
                  ->RunGateUpSilu(long_a.get(), long_w.get(), long_scratch.get(), long_act.get(), 1,
                                  long_inter, long_k, nullptr)
                  .ok());
  EXPECT_EQ((*skinny)->cached_plans(), 1u);
  ASSERT_TRUE((*skinny)
                  ->Run(long_a.get(), long_w.get(), nullptr, long_gate_up.get(), 1, 2 * long_inter,
                        long_k, nullptr)
                  .ok());
  ASSERT_TRUE(
      InvokeSiluAndMul(long_gate_up.get(), long_expected.get(), 1, long_inter, nullptr).ok());
  ExpectSameBits(long_expected.Download(), long_act.Download(), "skinny on, k > 4096");
}

TEST(SkinnyGemmGpuTest, GateUpSiluRefusesWhatItDoesNotTake) {
  DeviceBuffer<uint16_t> a(8 * 64), w(2 * 64 * 64), act(8 * 64);
  EXPECT_TRUE(SkinnyGemmFits(kSkinnyGemmMaxRows, 64, a.get(), w.get()));
  EXPECT_FALSE(SkinnyGemmFits(0, 64, a.get(), w.get()));
  EXPECT_FALSE(SkinnyGemmFits(kSkinnyGemmMaxRows + 1, 64, a.get(), w.get()));
  EXPECT_FALSE(SkinnyGemmFits(1, 60, a.get(), w.get()));  // k not a multiple of 8
  EXPECT_FALSE(SkinnyGemmFits(1, 64, a.get() + 1, w.get()));
  EXPECT_FALSE(SkinnyGemmFits(1, 64, a.get(), w.get() + 1));
  EXPECT_FALSE(InvokeSkinnyGateUpSilu(a.get(), w.get(), act.get(), 0, 64, 64, nullptr).ok());
  EXPECT_FALSE(InvokeSkinnyGateUpSilu(a.get(), w.get(), act.get(), 5, 64, 64, nullptr).ok());
  EXPECT_FALSE(InvokeSkinnyGateUpSilu(a.get(), w.get(), act.get(), 1, 64, 60, nullptr).ok());
  EXPECT_FALSE(InvokeSkinnyGateUpSilu(a.get(), w.get(), act.get(), 1, 0, 64, nullptr).ok());
  EXPECT_FALSE(InvokeSkinnyGateUpSilu(a.get() + 1, w.get(), act.get(), 1, 64, 64, nullptr).ok());
}

}  // namespace
}  // namespace verdict
