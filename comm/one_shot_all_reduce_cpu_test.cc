// The one-shot all-reduce's CPU twin: rank-order float sums, one bf16
// rounding, in place allowed.
#include <cmath>
#include <cstdint>
#include <vector>

#include "comm/one_shot_all_reduce.h"
#include "gtest/gtest.h"
#include "kernels/bf16.h"

namespace verdict {
namespace {

TEST(OneShotAllReduceCpuTest, SumsFloatsInRankOrder) {
  // (1e8 - 1e8) + 1 = 1 in float, while the reverse order, (1 - 1e8) + 1e8,
  // gives 0: the order shows.
  const std::vector<float> a = {1e8f, 2.0f, -0.0f};
  const std::vector<float> b = {-1e8f, 3.0f, -0.0f};
  const std::vector<float> c = {1.0f, 0.5f, -0.0f};
  std::vector<float> out(3);
  OneShotAllReduceCpu({a.data(), b.data(), c.data()}, 3, DataType::kFloat32, out.data());
  EXPECT_EQ(out[0], 1.0f);
  EXPECT_EQ(out[1], 5.5f);
  // The sum starts from rank 0's value: -0 + -0 + -0 stays -0, as NCCL's.
  EXPECT_TRUE(std::signbit(out[2]));
}

TEST(OneShotAllReduceCpuTest, RoundsABf16SumOnce) {
  // 1 + 2^-8 + 2^-8 = 1 + 2^-7: each addend alone is below half a bf16 ulp
  // at 1 (2^-8 is exactly half, a tie to even, so rounding after every
  // addition would stay at 1).
  const uint16_t one = FloatToBf16(1.0f);
  const uint16_t small = FloatToBf16(0.00390625f);  // 2^-8
  std::vector<uint16_t> a = {one, FloatToBf16(-2.5f)};
  const std::vector<uint16_t> b = {small, FloatToBf16(0.5f)};
  const std::vector<uint16_t> c = {small, FloatToBf16(0.25f)};
  OneShotAllReduceCpu({a.data(), b.data(), c.data()}, 2, DataType::kBFloat16, a.data());
  EXPECT_EQ(Bf16ToFloat(a[0]), 1.0078125f);  // 1 + 2^-7
  EXPECT_EQ(Bf16ToFloat(a[1]), -1.75f);
}

TEST(OneShotAllReduceCpuTest, OneRankIsTheInput) {
  const std::vector<float> a = {3.25f, -7.0f, -0.0f};
  std::vector<float> out(3);
  OneShotAllReduceCpu({a.data()}, 3, DataType::kFloat32, out.data());
  EXPECT_EQ(out, a);
  EXPECT_TRUE(std::signbit(out[2]));
}

}  // namespace
}  // namespace verdict
