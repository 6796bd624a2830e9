#include "scheduler/determinism.h"

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
