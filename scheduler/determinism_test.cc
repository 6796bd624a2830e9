#include "scheduler/determinism.h"

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>

#include "gtest/gtest.h"

namespace verdict {
namespace {

TEST(DeterministicExpTest, MatchesLibmClosely) {
  for (double z = -50.0; z <= 50.0; z += 0.0137) {
    const double want = std::exp(z);
    EXPECT_NEAR(DeterministicExp(z), want, 2e-15 * want) << "z = " << z;
  }
  EXPECT_EQ(DeterministicExp(0.0), 1.0);
}

TEST(DeterministicExpTest, ClampsAndPassesNan) {
  EXPECT_TRUE(std::isfinite(DeterministicExp(1e6)));
  EXPECT_EQ(DeterministicExp(1e6), DeterministicExp(700.0));
  EXPECT_GT(DeterministicExp(-1e6), 0.0);
  EXPECT_TRUE(std::isnan(DeterministicExp(std::numeric_limits<double>::quiet_NaN())));
}

TEST(DeterministicLogTest, MatchesLibmClosely) {
  for (double x = 1e-9; x < 1e9; x *= 1.0173) {
    const double want = std::log(x);
    EXPECT_NEAR(DeterministicLog(x), want, 2e-15 * std::max(1.0, std::fabs(want))) << "x = " << x;
  }
  for (double x = 0.5; x < 2.0; x += 0.00071) {
    EXPECT_NEAR(DeterministicLog(x), std::log(x), 1e-15) << "x = " << x;
  }
  EXPECT_EQ(DeterministicLog(1.0), 0.0);
  EXPECT_EQ(DeterministicLog(0.0), -HUGE_VAL);
}

TEST(DeterministicLogitTest, ClampsToAFiniteRange) {
  const double floor = 1e-6;
  const double top = std::log((1 - floor) / floor);
  EXPECT_NEAR(DeterministicLogit(0.5, floor), 0.0, 1e-16);
  EXPECT_NEAR(DeterministicLogit(0.9, floor), std::log(9.0), 1e-14);
  EXPECT_NEAR(DeterministicLogit(1.0, floor), top, 1e-9);
  EXPECT_NEAR(DeterministicLogit(0.0, floor), -top, 1e-9);
  EXPECT_NEAR(DeterministicLogit(std::numeric_limits<double>::quiet_NaN(), floor), -top, 1e-9);
  EXPECT_NEAR(DeterministicLogit(-3.0, floor), -top, 1e-9);
}

TEST(DeterministicSigmoidTest, InvertsLogit) {
  for (double q = 0.01; q < 1.0; q += 0.01) {
    EXPECT_NEAR(DeterministicSigmoid(DeterministicLogit(q, 1e-6)), q, 1e-14);
  }
  EXPECT_EQ(DeterministicSigmoid(0.0), 0.5);
}

// The exact bits, pinned: a build that contracts to fused multiply-adds, or
// a change to the polynomials, changes them, and ranks built differently
// would then disagree.
TEST(DeterminismTest, PinnedBits) {
  struct Case {
    double (*f)(double);
    double x;
    uint64_t bits;
  };
  const Case cases[] = {
      {DeterministicExp, -20.5, 0x3e157a3afeed00acull},
      {DeterministicExp, -1.0, 0x3fd78b56362cef38ull},
      {DeterministicExp, 0.3, 0x3ff599058c8c1a96ull},
      {DeterministicExp, 1.0, 0x4005bf0a8b14576aull},
      {DeterministicExp, 7.25, 0x4096006b5d53e8d9ull},
      {DeterministicExp, 600.0, 0x76088a122d234b39ull},
      {DeterministicLog, 1e-300, 0xc085963447f87fb5ull},
      {DeterministicLog, 0.001, 0xc01ba18a998fffa0ull},
      {DeterministicLog, 0.5, 0xbfe62e42fefa39efull},
      {DeterministicLog, 0.9, 0xbfbaf8e8210a415bull},
      {DeterministicLog, 3.0, 0x3ff193ea7aad030bull},
      {DeterministicLog, 1e12, 0x403ba18a998fffa0ull},
      {DeterministicSigmoid, 1.7, 0x3feb0e9edc4324d8ull},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(std::bit_cast<uint64_t>(c.f(c.x)), c.bits) << c.x;
  }
  EXPECT_EQ(std::bit_cast<uint64_t>(DeterministicLogit(static_cast<double>(0.9f), 1e-6)),
            0x400193ea571eca66ull);
}

TEST(Fnv1a64Test, KnownAnswers) {
  EXPECT_EQ(Fnv1a64().digest(), 0xcbf29ce484222325ull);  // empty input
  Fnv1a64 h;
  h.AddU64(0x0123456789abcdefull);  // bytes ef cd ab 89 67 45 23 01
  EXPECT_EQ(h.digest(), 0x37eb3f3347761c55ull);
}

TEST(Fnv1a64Test, SeesTheSignOfZero) {
  Fnv1a64 a, b;
  a.AddDouble(0.0);
  b.AddDouble(-0.0);
  EXPECT_NE(a.digest(), b.digest());
}

}  // namespace
}  // namespace verdict
