// SharedAddU64 against the exact sum modulo 2^64, with every thread of a CTA
// adding to a few counters at once and values chosen to wrap the low word.
#include <cstdint>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/shared_sum_test_kernel.h"

namespace verdict {
namespace {

// The kinds of value that exercise the carry: the low word's extremes, the
// high word's extremes, and whole random 64-bit values.
uint64_t DrawValue(std::mt19937_64& rng) {
  const uint64_t r = rng();
  switch (rng() % 6) {
    case 0: return 0xFFFFFFFFull;                          // a full low word
    case 1: return (r & 0xFFFFFFFF00000000ull) | 0xFFFFFFFFull;
    case 2: return r & 0xFFFFFFFFull;                      // low word only
    case 3: return r & 0xFFFFFFFF00000000ull;              // high word only
    case 4: return 0;
    default: return r;
  }
}

void ExpectExactSums(int threads, int per_thread, int counters, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<uint64_t> values(static_cast<size_t>(threads) * per_thread);
  for (uint64_t& v : values) v = DrawValue(rng);
  std::vector<uint64_t> expected(counters, 0);
  for (int t = 0; t < threads; ++t) {
    for (int i = 0; i < per_thread; ++i) {
      expected[(t + i) % counters] += values[static_cast<size_t>(t) * per_thread + i];
    }
  }
  std::vector<uint64_t> sums(counters, 0);
  ASSERT_EQ(RunSharedSumKernel(values.data(), threads, per_thread, counters, sums.data()), "");
  for (int c = 0; c < counters; ++c) {
    EXPECT_EQ(sums[c], expected[c]) << "counter " << c << " of " << counters << ", seed " << seed;
  }
}

TEST(SharedAddU64, AllThreadsOnOneCounter) {
  for (uint64_t seed = 1; seed <= 20; ++seed) ExpectExactSums(256, 16, 1, seed);
}

TEST(SharedAddU64, ThreadsSpreadOverCounters) {
  for (uint64_t seed = 1; seed <= 20; ++seed) {
    ExpectExactSums(256, 16, 8, seed);
    ExpectExactSums(1024, 4, 64, seed + 100);
  }
}

// Sums that stay below 2^32 never touch the high word; the low word's sum
// must still come out exact when no add carries.
TEST(SharedAddU64, SmallValuesStayInTheLowWord) {
  std::vector<uint64_t> values(256, 3);
  uint64_t sum = 0;
  ASSERT_EQ(RunSharedSumKernel(values.data(), 256, 1, 1, &sum), "");
  EXPECT_EQ(sum, 768u);
}

}  // namespace
}  // namespace verdict
