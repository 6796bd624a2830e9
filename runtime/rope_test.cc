#include "runtime/rope.h"

#include <cmath>
#include <vector>

#include "gtest/gtest.h"

namespace verdict {
namespace {

ModelConfig Llama31() {
  ModelConfig c;
  c.head_dim = 128;
  c.rope_theta = 500000.0;
  c.rope_scaling.type = RopeScaling::Type::kLlama3;
  c.rope_scaling.factor = 8.0;
  c.rope_scaling.low_freq_factor = 1.0;
  c.rope_scaling.high_freq_factor = 4.0;
  c.rope_scaling.original_max_position_embeddings = 8192;
  return c;
}

TEST(RopeTest, UnscaledFrequencies) {
  ModelConfig c = Llama31();
  c.rope_scaling.type = RopeScaling::Type::kNone;
  std::vector<float> f = RopeInvFrequencies(c);
  ASSERT_EQ(f.size(), 64u);
  for (int i = 0; i < 64; ++i) {
    EXPECT_FLOAT_EQ(f[i], static_cast<float>(std::pow(500000.0, -2.0 * i / 128)));
  }
}

TEST(RopeTest, Llama3ScalingBands) {
  // Wavelength 2 pi / f: below 8192 / 4 = 2048 tokens the frequency is
  // kept, above 8192 / 1 it is divided by the factor, and in between
  // blended linearly in 8192 / wavelength.
  const ModelConfig c = Llama31();
  std::vector<float> scaled = RopeInvFrequencies(c);
  int kept = 0, divided = 0, blended = 0;
  for (int i = 0; i < 64; ++i) {
    const double base = std::pow(500000.0, -2.0 * i / 128);
    const double wavelen = 2 * M_PI / base;
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
  EXPECT_FLOAT_EQ(scaled[0], 1.0f);
  EXPECT_FLOAT_EQ(scaled[63], static_cast<float>(std::pow(500000.0, -126.0 / 128) / 8));
}

TEST(RopeTest, LinearScaling) {
  ModelConfig c = Llama31();
  c.rope_scaling.type = RopeScaling::Type::kLinear;
  c.rope_scaling.factor = 4.0;
  std::vector<float> f = RopeInvFrequencies(c);
  for (int i = 0; i < 64; ++i) {
    EXPECT_FLOAT_EQ(f[i], static_cast<float>(std::pow(500000.0, -2.0 * i / 128) / 4));
  }
}

TEST(RopeTest, RotatesHalvesAndPreservesNorm) {
  ModelConfig c;
  c.head_dim = 8;
  c.rope_theta = 10000.0;
  std::vector<float> f = RopeInvFrequencies(c);
  std::vector<float> head = {1, 2, 3, 4, 5, 6, 7, 8};
  std::vector<float> rotated = head;
  ApplyRope(f, 0, rotated.data());
  EXPECT_EQ(rotated, head);  // position 0 is the identity
  ApplyRope(f, 37, rotated.data());
  double n0 = 0, n1 = 0;
  for (int i = 0; i < 8; ++i) {
    n0 += head[i] * head[i];
    n1 += rotated[i] * rotated[i];
  }
  EXPECT_NEAR(n0, n1, 1e-4);
  // Pair (0, 4) rotates by 37 * f[0] = 37 radians.
  EXPECT_NEAR(rotated[0], std::cos(37.0) * 1 - std::sin(37.0) * 5, 1e-5);
  EXPECT_NEAR(rotated[4], std::cos(37.0) * 5 + std::sin(37.0) * 1, 1e-5);
}

}  // namespace
}  // namespace verdict
