// The claims kernels/top_p_bins.h makes about its bins, checked against the
// fixed-point exponential every mass is summed in.
#include "kernels/top_p_bins.h"

#include <cmath>
#include <cstdint>
#include <random>

#include "gtest/gtest.h"
#include "kernels/sampling_math.h"

namespace verdict {
namespace {

using sampling_math::FixedExpNonPositive;
using sampling_math::FSub;
using top_p_bins::EdgeExp;
using top_p_bins::FirstLevelBin;
using top_p_bins::kFineBins;
using top_p_bins::kFirstLevelScale;
using top_p_bins::MayWeigh;
using top_p_bins::ScaledDistance;
using top_p_bins::WeightAbove;
using top_p_bins::WeightBelow;

// Row maxima and values as the samplers see them: logits over temperatures
// from 0.05 to 2, ids from the maximum to far below it.
struct Pair {
  float row_max;
  float z;
};
Pair RandomPair(std::mt19937_64& gen) {
  std::uniform_real_distribution<float> max_dist(-50.0f, 200.0f);
  std::exponential_distribution<float> below(0.05f);
  const float row_max = max_dist(gen);
  const float z = gen() % 8 == 0 ? row_max : FSub(row_max, below(gen));
  return {row_max, z};
}

TEST(TopPBinsTest, ALargerValueNeverFallsInALaterBin) {
  std::mt19937_64 gen(1);
  for (int i = 0; i < 200000; ++i) {
    const Pair a = RandomPair(gen);
    const float other = FSub(a.row_max, static_cast<float>(gen() % 4096) / 64.0f);
    const float hi = std::max(a.z, other), lo = std::min(a.z, other);
    ASSERT_LE(FirstLevelBin(hi, a.row_max), FirstLevelBin(lo, a.row_max))
        << "max " << a.row_max << " values " << hi << " and " << lo;
  }
  // The maximum is in bin 0; everything 2047/64 below it or more in the last.
  EXPECT_EQ(FirstLevelBin(3.0f, 3.0f), 0u);
  EXPECT_EQ(FirstLevelBin(3.0f - 2047.0f / 64.0f, 3.0f), static_cast<uint32_t>(kFineBins - 1));
  EXPECT_EQ(FirstLevelBin(-1e30f, 3.0f), static_cast<uint32_t>(kFineBins - 1));
}

TEST(TopPBinsTest, EveryWeightLiesWithinItsBinsBounds) {
  std::mt19937_64 gen(2);
  for (const float scale : {kFirstLevelScale, kFirstLevelScale * 16, kFirstLevelScale * 1024}) {
    for (int i = 0; i < 200000; ++i) {
      const Pair a = RandomPair(gen);
      const float x = ScaledDistance(a.z, a.row_max, scale);
      if (!(x < 1e6f)) continue;
      const int n = static_cast<int>(x);
      const double w = static_cast<double>(FixedExpNonPositive(FSub(a.z, a.row_max)));
      ASSERT_LE(WeightBelow(EdgeExp(n + 1, scale)), w)
          << "scale " << scale << " max " << a.row_max << " z " << a.z << " bin " << n;
      ASSERT_GE(WeightAbove(EdgeExp(n, scale)), w)
          << "scale " << scale << " max " << a.row_max << " z " << a.z << " bin " << n;
    }
  }
}

TEST(TopPBinsTest, BinsThatMayNotWeighHoldOnlyZeroWeights) {
  int first_silent = -1;
  for (int n = 0; n < kFineBins; ++n) {
    if (!MayWeigh(n, kFirstLevelScale)) {
      first_silent = n;
      break;
    }
  }
  // 64 ln(2^41) = 1818.8: bin 1819 is the first whose weights all round to 0.
  ASSERT_EQ(first_silent, 1819);
  ASSERT_LT(first_silent, kFineBins - 1);
  for (int n = first_silent; n < kFineBins; ++n) EXPECT_FALSE(MayWeigh(n, kFirstLevelScale));
  // Every float distance from that bin's lower edge on weighs 0, and the
  // bin before it holds a positive weight.
  const float row_max = 10.0f;
  for (float d = static_cast<float>(first_silent) / kFirstLevelScale; d < 40.0f;
       d = std::nextafter(d, 100.0f)) {
    const float z = FSub(row_max, d);
    if (FirstLevelBin(z, row_max) < static_cast<uint32_t>(first_silent)) continue;
    ASSERT_EQ(FixedExpNonPositive(FSub(z, row_max)), 0u) << "distance " << d;
  }
  const float near = FSub(row_max, static_cast<float>(first_silent - 2) / kFirstLevelScale);
  EXPECT_GT(FixedExpNonPositive(FSub(near, row_max)), 0u);
}

}  // namespace
}  // namespace verdict
