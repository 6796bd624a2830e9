// RoPE frequencies against HF's formulas (reference values computed from
// _compute_default_rope_parameters / _compute_llama3_parameters in double),
// and the CPU rotation against its defining properties.
#include "kernels/model/rope.h"

#include <cmath>
#include <vector>

#include "gtest/gtest.h"

namespace verdict {
namespace {

// Llama 3.1 8B: head_dim 128, theta 500000, factor 8, low 1, high 4,
// original_max_position_embeddings 8192.
RopeFrequencyConfig Llama31Config() {
  RopeFrequencyConfig config;
  config.head_dim = 128;
  config.theta = 500000.0;
  config.scaling = RopeFrequencyConfig::Scaling::kLlama3;
  config.factor = 8.0;
  config.low_freq_factor = 1.0;
  config.high_freq_factor = 4.0;
  config.original_max_position_embeddings = 8192.0;
  return config;
}

TEST(RopeInvFreqTest, DefaultIsThetaPowerLaw) {
  RopeFrequencyConfig config;
  config.head_dim = 64;
  config.theta = 10000.0;
  const std::vector<float> inv_freq = ComputeRopeInvFreq(config);
  ASSERT_EQ(inv_freq.size(), 32u);
  for (int i = 0; i < 32; ++i) {
    const double expected = std::pow(10000.0, -2.0 * i / 64.0);
    EXPECT_NEAR(inv_freq[i], expected, 1e-7 * expected) << i;
  }
  EXPECT_EQ(inv_freq[0], 1.0f);
}

TEST(RopeInvFreqTest, LinearScalingDividesEveryFrequency) {
  RopeFrequencyConfig config;
  config.head_dim = 128;
  config.theta = 10000.0;
  const std::vector<float> plain = ComputeRopeInvFreq(config);
  config.scaling = RopeFrequencyConfig::Scaling::kLinear;
  config.factor = 4.0;
  const std::vector<float> scaled = ComputeRopeInvFreq(config);
  for (int i = 0; i < 64; ++i) EXPECT_FLOAT_EQ(scaled[i], plain[i] / 4.0f) << i;
}

TEST(RopeInvFreqTest, Llama3MatchesHuggingFaceReference) {
  RopeFrequencyConfig config = Llama31Config();
  const std::vector<float> inv_freq = ComputeRopeInvFreq(config);
  ASSERT_EQ(inv_freq.size(), 64u);
  struct Reference {
    int index;
    double value;  // band: wavelength 2*pi/inv_freq vs 2048 and 8192
  };
  const Reference refs[] = {
      {0, 1.0},                      // high frequency: unchanged
      {20, 0.016560440080994446},    // high
      {28, 0.0032114459947525913},   // high (wavelength 1956 < 2048)
      {29, 0.002166570763503359},    // medium: interpolated
      {30, 0.0013718935677611381},   // medium
      {34, 0.00017850781276799638},  // medium (wavelength 6695)
      {35, 9.556212353964683e-05},   // low (wavelength 8219 > 8192): divided by 8
      {40, 3.428102195952591e-05},   // low
      {63, 3.068925988914511e-07},   // low
  };
  for (const Reference& r : refs) {
    EXPECT_NEAR(inv_freq[r.index], r.value, 1e-6 * r.value) << "index " << r.index;
  }
  // Every frequency is the unscaled one divided by a factor in [1, 8].
  config.scaling = RopeFrequencyConfig::Scaling::kNone;
  const std::vector<float> plain = ComputeRopeInvFreq(config);
  for (int i = 0; i < 64; ++i) {
    EXPECT_LE(inv_freq[i], plain[i] * 1.000001f) << i;
    EXPECT_GE(inv_freq[i], plain[i] / 8.0f * 0.999999f) << i;
  }
}

TEST(RopeInvFreqTest, Llama3BandsFollowTheirFormulaAtEveryIndex) {
  // Wavelength 2 pi / f: below 8192 / 4 = 2048 tokens the frequency is
  // kept, above 8192 / 1 it is divided by the factor, and in between
  // blended linearly in 8192 / wavelength.
  const RopeFrequencyConfig config = Llama31Config();
  const std::vector<float> scaled = ComputeRopeInvFreq(config);
  constexpr double kPi = 3.14159265358979323846;
  int kept = 0, divided = 0, blended = 0;
  for (int i = 0; i < 64; ++i) {
    const double base = std::pow(500000.0, -2.0 * i / 128);
    const double wavelen = 2 * kPi / base;
    double expected;
    if (wavelen < 2048) {
      expected = base;
      ++kept;
    } else if (wavelen > 8192) {
      expected = base / 8;
      ++divided;
    } else {
      const double smooth = (8192 / wavelen - 1.0) / (4.0 - 1.0);
      expected = (1 - smooth) * base / 8 + smooth * base;
      ++blended;
      EXPECT_GT(scaled[i], base / 8);
      EXPECT_LT(scaled[i], base);
    }
    EXPECT_NEAR(scaled[i], expected, 1e-6 * expected) << i;
  }
  // Llama 3.1 8B: the bands all occur.
  EXPECT_GT(kept, 0);
  EXPECT_GT(divided, 0);
  EXPECT_GT(blended, 0);
  EXPECT_FLOAT_EQ(scaled[63], static_cast<float>(std::pow(500000.0, -126.0 / 128) / 8));
}

TEST(RopeCpuTest, RotatesPairsHalfApart) {
  // head_dim 4: pairs (0, 2) and (1, 3) with frequencies 1 and 0.5.
  const std::vector<float> inv_freq = {1.0f, 0.5f};
  std::vector<float> q = {1.0f, 2.0f, 3.0f, 4.0f};
  std::vector<float> k = {-1.0f, 0.5f, 2.0f, 1.5f};
  const int32_t position = 3;
  RopeShape shape{1, 1, 1, 4, 4, 4};
  RopeCpu(q.data(), k.data(), &position, inv_freq.data(), shape);
  auto rotate = [](double a, double b, double angle, double* out_a, double* out_b) {
    *out_a = a * std::cos(angle) - b * std::sin(angle);
    *out_b = b * std::cos(angle) + a * std::sin(angle);
  };
  double e0, e2, e1, e3;
  rotate(1.0, 3.0, 3.0, &e0, &e2);
  rotate(2.0, 4.0, 1.5, &e1, &e3);
  EXPECT_NEAR(q[0], e0, 1e-6);
  EXPECT_NEAR(q[1], e1, 1e-6);
  EXPECT_NEAR(q[2], e2, 1e-6);
  EXPECT_NEAR(q[3], e3, 1e-6);
  rotate(-1.0, 2.0, 3.0, &e0, &e2);
  EXPECT_NEAR(k[0], e0, 1e-6);
  EXPECT_NEAR(k[2], e2, 1e-6);
}

TEST(RopeCpuTest, PositionZeroIsIdentityAndStridesAreRespected) {
  RopeFrequencyConfig config;
  config.head_dim = 8;
  const std::vector<float> inv_freq = ComputeRopeInvFreq(config);
  // Two q heads and one k head per token in a fused row of 4 heads (the
  // fourth stands for v and must stay untouched).
  std::vector<float> qkv(2 * 32);
  for (size_t i = 0; i < qkv.size(); ++i) qkv[i] = 0.1f * (i + 1);
  const std::vector<float> original = qkv;
  const std::vector<int32_t> positions = {0, 5};
  RopeShape shape{2, 2, 1, 8, 32, 32};
  RopeCpu(qkv.data(), qkv.data() + 16, positions.data(), inv_freq.data(), shape);
  for (int i = 0; i < 32; ++i) EXPECT_EQ(qkv[i], original[i]) << i;             // position 0
  for (int i = 24; i < 32; ++i) EXPECT_EQ(qkv[32 + i], original[32 + i]) << i;  // v
  EXPECT_NE(qkv[32], original[32]);
}

TEST(RopeCpuTest, ScoresDependOnlyOnRelativePosition) {
  RopeFrequencyConfig config;
  config.head_dim = 16;
  config.theta = 10000.0;
  const std::vector<float> inv_freq = ComputeRopeInvFreq(config);
  std::vector<float> q0(16), k0(16);
  for (int i = 0; i < 16; ++i) {
    q0[i] = std::sin(0.7f * i + 0.3f);
    k0[i] = std::cos(1.3f * i - 0.2f);
  }
  auto score = [&](int32_t pq, int32_t pk) {
    std::vector<float> q = q0, k = k0, unused_k = k0, unused_q = q0;
    RopeShape shape{1, 1, 1, 16, 16, 16};
    RopeCpu(q.data(), unused_k.data(), &pq, inv_freq.data(), shape);
    RopeCpu(unused_q.data(), k.data(), &pk, inv_freq.data(), shape);
    double dot = 0.0;
    for (int i = 0; i < 16; ++i) dot += static_cast<double>(q[i]) * k[i];
    return dot;
  };
  EXPECT_NEAR(score(7, 3), score(104, 100), 1e-4);
  EXPECT_NEAR(score(20, 20), score(0, 0), 1e-4);
  // A rotation keeps each pair's length.
  std::vector<float> q = q0, k = k0;
  const int32_t pos = 12345;
  RopeShape shape{1, 1, 1, 16, 16, 16};
  RopeCpu(q.data(), k.data(), &pos, inv_freq.data(), shape);
  for (int i = 0; i < 8; ++i) {
    EXPECT_NEAR(q[i] * q[i] + q[i + 8] * q[i + 8], q0[i] * q0[i] + q0[i + 8] * q0[i + 8], 1e-5);
  }
}

}  // namespace
}  // namespace verdict
