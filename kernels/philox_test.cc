#include "kernels/philox.h"

#include <cmath>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/philox_fill.h"

namespace verdict {
namespace {

// Known-answer vectors of Philox4x32-10 from Random123 (kat_vectors).
TEST(PhiloxTest, MatchesRandom123KnownAnswers) {
  struct Case {
    PhiloxBlock counter;
    uint32_t key0, key1;
    PhiloxBlock expected;
  };
  const Case cases[] = {
      {{{0, 0, 0, 0}}, 0, 0, {{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}}},
      {{{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}},
       0xffffffff,
       0xffffffff,
       {{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}}},
      {{{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}},
       0xa4093822,
       0x299f31d0,
       {{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}}},
  };
  for (const Case& c : cases) {
    const PhiloxBlock out = Philox4x32(c.counter, c.key0, c.key1);
    for (int i = 0; i < 4; ++i) EXPECT_EQ(out.v[i], c.expected.v[i]) << "word " << i;
  }
}

TEST(PhiloxTest, UniformStaysInsideOpenInterval) {
  EXPECT_GT(UniformOpen01(0u), 0.0f);
  EXPECT_LT(UniformOpen01(0xffffffffu), 1.0f);
}

TEST(PhiloxTest, StreamsRowsAndPositionsGiveDifferentDraws) {
  const PhiloxBlock base = PhiloxDraw(7, 100, 3, RandomStream::kAccept);
  EXPECT_NE(base.v[0], PhiloxDraw(7, 100, 3, RandomStream::kResidual).v[0]);
  EXPECT_NE(base.v[0], PhiloxDraw(7, 100, 4, RandomStream::kAccept).v[0]);
  EXPECT_NE(base.v[0], PhiloxDraw(7, 101, 3, RandomStream::kAccept).v[0]);
  EXPECT_NE(base.v[0], PhiloxDraw(8, 100, 3, RandomStream::kAccept).v[0]);
  EXPECT_EQ(base.v[0], PhiloxDraw(7, 100, 3, RandomStream::kAccept).v[0]);
}

// Moments of 2^16 uniforms: mean 1/2 and variance 1/12 within 5 standard errors.
TEST(PhiloxTest, UniformMomentsMatchWithinSamplingError) {
  PhiloxFillArgs args;
  args.seed = 1234;
  args.position = 77;
  args.rows = 256;
  args.draws_per_row = 256;
  std::vector<float> u(args.rows * args.draws_per_row);
  PhiloxFillCpu(args, u.data());
  double sum = 0, sum_sq = 0;
  for (float x : u) {
    ASSERT_GT(x, 0.0f);
    ASSERT_LT(x, 1.0f);
    sum += x;
    sum_sq += static_cast<double>(x) * x;
  }
  const double n = static_cast<double>(u.size());
  const double mean = sum / n;
  const double var = sum_sq / n - mean * mean;
  EXPECT_NEAR(mean, 0.5, 5.0 * std::sqrt(1.0 / 12.0 / n));
  // The sample variance of U(0,1) has standard deviation sqrt(1/180 / n).
  EXPECT_NEAR(var, 1.0 / 12.0, 5.0 * std::sqrt(1.0 / 180.0 / n));
}

}  // namespace
}  // namespace verdict
