#include "runtime/server/connection_caps.h"

#include "gtest/gtest.h"

namespace verdict {
namespace {

using Verdict = ConnectionCaps::Verdict;

TEST(ConnectionCapsTest, PerAddressCapRefusesTheNextAndAdmitsAfterARelease) {
  ConnectionCaps caps(/*max_total=*/0, /*max_per_address=*/2);
  EXPECT_EQ(caps.TryAdmit("10.0.0.1"), Verdict::kAdmitted);
  EXPECT_EQ(caps.TryAdmit("10.0.0.1"), Verdict::kAdmitted);
  EXPECT_EQ(caps.TryAdmit("10.0.0.1"), Verdict::kAddressFull);
  // Another address has its own count.
  EXPECT_EQ(caps.TryAdmit("10.0.0.2"), Verdict::kAdmitted);
  EXPECT_EQ(caps.from("10.0.0.1"), 2);
  caps.Release("10.0.0.1");
  EXPECT_EQ(caps.TryAdmit("10.0.0.1"), Verdict::kAdmitted);
  EXPECT_EQ(caps.total(), 3);
}

TEST(ConnectionCapsTest, TotalCapRefusesEveryAddress) {
  ConnectionCaps caps(/*max_total=*/2, /*max_per_address=*/5);
  EXPECT_EQ(caps.TryAdmit("a"), Verdict::kAdmitted);
  EXPECT_EQ(caps.TryAdmit("b"), Verdict::kAdmitted);
  EXPECT_EQ(caps.TryAdmit("c"), Verdict::kTotalFull);
  EXPECT_EQ(caps.TryAdmit("a"), Verdict::kTotalFull);
  caps.Release("b");
  EXPECT_EQ(caps.TryAdmit("c"), Verdict::kAdmitted);
}

TEST(ConnectionCapsTest, ReleasedAddressesAreForgotten) {
  ConnectionCaps caps(0, 0);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(caps.TryAdmit("x"), Verdict::kAdmitted);
  for (int i = 0; i < 100; ++i) caps.Release("x");
  EXPECT_EQ(caps.from("x"), 0);
  EXPECT_EQ(caps.total(), 0);
  caps.Release("never-admitted");  // ignored
  EXPECT_EQ(caps.total(), 0);
}

}  // namespace
}  // namespace verdict
