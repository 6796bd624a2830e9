// The config.json fields reach the RoPE formulas of kernels/model/rope.h
// (tested there) unchanged.
#include "runtime/model/rope.h"

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

TEST(RopeFrequencyConfigOfTest, ReadsEveryLlama3Field) {
  ModelConfig c = Llama31();
  c.rope_scaling.low_freq_factor = 2.0;  // distinct from the struct's defaults
  c.rope_scaling.high_freq_factor = 16.0;
  c.rope_scaling.original_max_position_embeddings = 4096;
  const RopeFrequencyConfig r = RopeFrequencyConfigOf(c);
  EXPECT_EQ(r.head_dim, 128);
  EXPECT_EQ(r.theta, 500000.0);
  EXPECT_EQ(r.scaling, RopeFrequencyConfig::Scaling::kLlama3);
  EXPECT_EQ(r.factor, 8.0);
  EXPECT_EQ(r.low_freq_factor, 2.0);
  EXPECT_EQ(r.high_freq_factor, 16.0);
  EXPECT_EQ(r.original_max_position_embeddings, 4096.0);
}

TEST(RopeFrequencyConfigOfTest, MapsEveryScalingType) {
  ModelConfig c = Llama31();
  c.rope_scaling.type = RopeScaling::Type::kNone;
  EXPECT_EQ(RopeFrequencyConfigOf(c).scaling, RopeFrequencyConfig::Scaling::kNone);
  c.rope_scaling.type = RopeScaling::Type::kLinear;
  EXPECT_EQ(RopeFrequencyConfigOf(c).scaling, RopeFrequencyConfig::Scaling::kLinear);
}

TEST(RopeInvFrequenciesTest, ScalesAsTheConfigSays) {
  ModelConfig c = Llama31();
  const std::vector<float> scaled = RopeInvFrequencies(c);
  EXPECT_EQ(scaled, ComputeRopeInvFreq(RopeFrequencyConfigOf(c)));
  c.rope_scaling.type = RopeScaling::Type::kNone;
  const std::vector<float> plain = RopeInvFrequencies(c);
  ASSERT_EQ(scaled.size(), 64u);
  ASSERT_EQ(plain.size(), 64u);
  EXPECT_EQ(scaled[0], plain[0]);              // high frequency: kept
  EXPECT_FLOAT_EQ(scaled[63], plain[63] / 8);  // low frequency: divided by the factor
}

}  // namespace
}  // namespace verdict
