#include "kernels/sampling_math.h"

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace verdict {
namespace sampling_math {
namespace {

double UlpDistance(float got, double want) {
  const float want_f = static_cast<float>(want);
  const float ulp = std::nextafter(std::fabs(want_f), std::numeric_limits<float>::infinity()) -
                    std::fabs(want_f);
  return std::fabs(static_cast<double>(got) - want) / ulp;
}

TEST(SamplingMathTest, ExpIsAccurateOnTheSamplersRange) {
  std::mt19937 gen(7);
  std::uniform_real_distribution<float> dist(-87.0f, 0.0f);
  double worst = 0.0;
  for (int i = 0; i < 200000; ++i) {
    const float x = i < 1000 ? -static_cast<float>(i) * 1e-3f : dist(gen);
    const double want = std::exp(static_cast<double>(x));
    if (want < 1.2e-38) continue;  // below the normal range
    worst = std::max(worst, UlpDistance(ExpNonPositive(x), want));
  }
  EXPECT_LT(worst, 3.0);
  EXPECT_EQ(ExpNonPositive(0.0f), 1.0f);
  EXPECT_EQ(ExpNonPositive(-88.0f), 0.0f);
  EXPECT_EQ(ExpNonPositive(kNegInf), 0.0f);
}

// ExpNonPositive as first written: rounding and the integer exponent by
// conversion instructions. The branch-free version must give the same bits.
float ExpByConversion(float x) {
  if (!(x >= -87.0f)) return 0.0f;
  const float n = RoundToInt(FMul(x, 1.44269502f));
  float r = Fma(n, -0.693145751953125f, x);
  r = Fma(n, -1.42860677e-06f, r);
  float p = 1.98412701e-04f;
  p = Fma(p, r, 1.38888892e-03f);
  p = Fma(p, r, 8.33333377e-03f);
  p = Fma(p, r, 4.16666679e-02f);
  p = Fma(p, r, 1.66666672e-01f);
  p = Fma(p, r, 0.5f);
  p = Fma(p, r, 1.0f);
  p = Fma(p, r, 1.0f);
  const int e = static_cast<int>(n);
  return FMul(p, BitsToFloat(static_cast<uint32_t>(e + 127) << 23));
}

// Every 257th float from -0 down to beyond -87, and the edges (the whole
// range, 1.1e9 floats, was compared once when the code changed).
TEST(SamplingMathTest, ExpAndFixedExpMatchTheReferenceBitForBit) {
  std::vector<float> xs = {0.0f, -0.0f, -87.0f, std::nextafter(-87.0f, 0.0f),
                           std::nextafter(-87.0f, -100.0f), -1e-45f, -1e30f, -3e38f, kNegInf,
                           std::numeric_limits<float>::quiet_NaN(),
                           std::numeric_limits<float>::signaling_NaN(),
                           -std::numeric_limits<float>::signaling_NaN()};
  const uint32_t last = FloatBits(-88.0f);
  for (uint32_t bits = 0x80000000u; bits <= last; bits += 257) xs.push_back(BitsToFloat(bits));
  int64_t checked = 0;
  for (const float x : xs) {
    const float want = ExpByConversion(x);
    const float got = ExpNonPositive(x);
    ASSERT_EQ(FloatBits(got), FloatBits(want)) << "x = " << x;
    ASSERT_EQ(FixedExpNonPositive(x), ToFixed(want)) << "x = " << x;
    ++checked;
  }
  EXPECT_GT(checked, 4000000);
}

TEST(SamplingMathTest, LogIsAccurateIncludingNearOne) {
  std::mt19937 gen(11);
  double worst = 0.0;
  for (int i = 0; i < 200000; ++i) {
    // Every uniform the race can see, and a spread of larger values.
    const float x = i % 2 == 0 ? UniformOpen01(static_cast<uint32_t>(gen()))
                               : std::ldexp(1.0f + static_cast<float>(gen() % 1000) / 1000.0f,
                                            static_cast<int>(gen() % 120) - 60);
    const double want = std::log(static_cast<double>(x));
    if (want == 0.0) continue;
    worst = std::max(worst, UlpDistance(LogPositive(x), want));
  }
  EXPECT_LT(worst, 3.0);
  // The largest uniform: -log(u) ~ 6e-8 must keep its relative precision.
  const float u_max = UniformOpen01(0xFFFFFFFFu);
  EXPECT_NEAR(-LogPositive(u_max) / -std::log(static_cast<double>(u_max)), 1.0, 1e-6);
  EXPECT_NEAR(LogPositive(1e-40f), std::log(1e-40), 1e-4);  // subnormal input
}

TEST(SamplingMathTest, FixedPointRoundTrips) {
  EXPECT_EQ(ToFixed(1.0f), uint64_t{1} << 40);
  EXPECT_EQ(ToFixed(0.0f), 0u);
  EXPECT_EQ(ToFixed(0.5f), uint64_t{1} << 39);
  EXPECT_EQ(FixedToFloat(uint64_t{3} << 40), 3.0f);
}

TEST(SamplingMathTest, OrderKeyPreservesFloatOrder) {
  const float values[] = {kNegInf, -1e30f, -2.0f, -1e-30f, 0.0f, 1e-30f, 1.0f, 3e38f};
  for (size_t i = 0; i + 1 < std::size(values); ++i) {
    EXPECT_LT(OrderKey(values[i]), OrderKey(values[i + 1]));
    EXPECT_EQ(FromOrderKey(OrderKey(values[i])), values[i]);
  }
  // -0 is normalised to +0 before keys are taken.
  EXPECT_EQ(OrderKey(ScaleLogit(-0.0f, 1.0f)), OrderKey(0.0f));
}

TEST(SamplingMathTest, AcceptRuleOfTheSeedsWorkedExample) {
  // seed 000: p(A) = 0.6, q(A) = 0.4, U = 0.8: 0.667 > 0.8 is false, reject.
  EXPECT_FALSE(AcceptDraft(0.8f, 0.6f, 0.4f));
  EXPECT_TRUE(AcceptDraft(0.6f, 0.6f, 0.4f));
  // q >= p always accepts; q = 0 never does; p = 0 < q always does.
  EXPECT_TRUE(AcceptDraft(UniformOpen01(0xFFFFFFFFu), 0.3f, 0.4f));
  EXPECT_FALSE(AcceptDraft(UniformOpen01(0), 0.3f, 0.0f));
  EXPECT_TRUE(AcceptDraft(0.5f, 0.0f, 1e-30f));
}

TEST(SamplingMathTest, ResidualWeightKeepsAFloorWhenQEqualsP) {
  const float alpha = static_cast<float>(std::exp(-5e-5));
  // q == p: the residual keeps (1 - alpha) of the weight.
  const float w = ResidualWeight(0.25f, alpha * 1.0f, 0.25f);
  EXPECT_GT(w, 0.0f);
  EXPECT_NEAR(w / 0.25f, 1.0 - alpha, 1e-6);
  EXPECT_EQ(ResidualWeight(0.1f, 1.0f, 0.6f), 0.0f);
}

TEST(SamplingMathTest, RaceCannotBeatIsASafeBound) {
  // Whenever the filter says "cannot beat", the exact key is below the best.
  std::mt19937 gen(3);
  std::uniform_real_distribution<float> log_w(-30.0f, 0.0f);
  int skipped = 0;
  for (int i = 0; i < 2000000; ++i) {
    const uint32_t bits = static_cast<uint32_t>(gen());
    const float u = UniformOpen01(bits);
    const float w = std::exp(log_w(gen));
    const float key = RaceKey(w, RaceExponential(bits));
    // Bests around the key, including within a few ulps of it.
    const float best = i % 2 == 0 ? key * (1.0f + static_cast<float>(gen() % 2000) * 1e-7f)
                                  : key * std::exp(static_cast<float>(gen() % 1000) / 100.0f);
    if (RaceCannotBeat(w, u, best)) {
      ++skipped;
      ASSERT_LT(key, best) << "w " << w << " u " << u;
    }
  }
  EXPECT_GT(skipped, 100000);  // the filter does fire
}

TEST(SamplingMathTest, RaceBeatsOrdersByKeyThenLowestId) {
  EXPECT_TRUE(RaceBeats(2.0f, 5, 1.0f, 1));
  EXPECT_TRUE(RaceBeats(1.0f, 1, 1.0f, 5));
  EXPECT_FALSE(RaceBeats(1.0f, 5, 1.0f, 1));
  EXPECT_FALSE(RaceBeats(0.0f, 0, 0.0f, 0x7FFFFFFF));  // zero weight never wins
}

}  // namespace
}  // namespace sampling_math
}  // namespace verdict
