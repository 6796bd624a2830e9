#include "runtime/model/parallel_for.h"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <vector>

#include "gtest/gtest.h"

namespace verdict {
namespace {

// How many times each index of [0, n) was visited.
std::vector<int> Visits(int64_t n, int threads) {
  std::vector<std::atomic<int>> counts(n);
  std::atomic<int> calls{0};
  ParallelFor(n, threads, [&](int64_t begin, int64_t end) {
    ++calls;
    EXPECT_LT(begin, end);
    for (int64_t i = begin; i < end; ++i) ++counts[i];
  });
  EXPECT_LE(calls.load(), std::max(threads, 1));
  std::vector<int> out;
  for (const std::atomic<int>& c : counts) out.push_back(c.load());
  return out;
}

TEST(ParallelForTest, VisitsEveryIndexOnce) {
  for (int threads : {0, 1, 2, 3, 8}) {
    for (int64_t n : {1, 2, 7, 100}) {
      EXPECT_EQ(Visits(n, threads), std::vector<int>(n, 1)) << n << " over " << threads;
    }
  }
}

TEST(ParallelForTest, EmptyRangeCallsNothing) {
  bool called = false;
  ParallelFor(0, 4, [&](int64_t, int64_t) { called = true; });
  EXPECT_FALSE(called);
}

}  // namespace
}  // namespace verdict
