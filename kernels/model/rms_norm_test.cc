// The RMSNorm CPU twin against the formula, written out by hand.
#include "kernels/model/rms_norm.h"

#include <cmath>
#include <vector>

#include "gtest/gtest.h"

namespace verdict {
namespace {

TEST(RmsNormCpuTest, MatchesFormulaOnSmallRow) {
  const std::vector<float> x = {1.0f, -2.0f, 3.0f, -4.0f};
  const std::vector<float> w = {0.5f, 1.0f, 2.0f, -1.0f};
  const float eps = 1e-5f;
  std::vector<float> out(4);
  RmsNormCpu(x.data(), w.data(), out.data(), 1, 4, eps);
  const float inv_rms = 1.0f / std::sqrt((1.0f + 4.0f + 9.0f + 16.0f) / 4.0f + eps);
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(out[i], x[i] * inv_rms * w[i], 1e-6f) << i;
}

TEST(RmsNormCpuTest, RowsAreIndependentAndInPlaceWorks) {
  std::vector<float> x = {3.0f, 4.0f, 0.5f, 0.5f};
  const std::vector<float> w = {1.0f, 1.0f};
  RmsNormCpu(x.data(), w.data(), x.data(), 2, 2, 0.0f);
  // Row 0: rms = sqrt(12.5); row 1: rms = 0.5.
  EXPECT_NEAR(x[0], 3.0f / std::sqrt(12.5f), 1e-6f);
  EXPECT_NEAR(x[1], 4.0f / std::sqrt(12.5f), 1e-6f);
  EXPECT_NEAR(x[2], 1.0f, 1e-6f);
  EXPECT_NEAR(x[3], 1.0f, 1e-6f);
}

TEST(RmsNormCpuTest, AddRmsNormUpdatesResidualThenNormalisesIt) {
  const std::vector<float> x = {1.0f, 2.0f, -1.0f, 0.25f};
  std::vector<float> residual = {0.5f, -0.5f, 2.0f, 1.0f};
  const std::vector<float> w = {1.5f, 0.5f};
  std::vector<float> out(4);
  AddRmsNormCpu(x.data(), residual.data(), w.data(), out.data(), 2, 2, 1e-6f);
  const std::vector<float> summed = {1.5f, 1.5f, 1.0f, 1.25f};
  for (int i = 0; i < 4; ++i) EXPECT_EQ(residual[i], summed[i]) << i;
  std::vector<float> expected(4);
  RmsNormCpu(summed.data(), w.data(), expected.data(), 2, 2, 1e-6f);
  for (int i = 0; i < 4; ++i) EXPECT_FLOAT_EQ(out[i], expected[i]) << i;
}

TEST(RmsNormCpuTest, HeadRmsNormTouchesOnlyItsHeads) {
  // Two tokens with a stride of 7: heads 2 x head_dim 3 occupy 6 values, the
  // seventh (a neighbouring tensor in a fused buffer) must stay as it was.
  std::vector<float> x(14);
  for (int i = 0; i < 14; ++i) x[i] = 0.25f * (i + 1) * ((i % 3) ? 1.0f : -1.0f);
  const std::vector<float> original = x;
  const std::vector<float> w = {1.0f, 2.0f, 0.5f};
  HeadRmsNormCpu(x.data(), 2, 2, 3, 7, w.data(), 1e-6f);
  for (int t = 0; t < 2; ++t) {
    for (int h = 0; h < 2; ++h) {
      std::vector<float> expected(3);
      RmsNormCpu(original.data() + t * 7 + h * 3, w.data(), expected.data(), 1, 3, 1e-6f);
      for (int i = 0; i < 3; ++i) EXPECT_FLOAT_EQ(x[t * 7 + h * 3 + i], expected[i]);
    }
    EXPECT_EQ(x[t * 7 + 6], original[t * 7 + 6]);
  }
}

}  // namespace
}  // namespace verdict
