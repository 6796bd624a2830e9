#include "kernels/bf16.h"

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "gtest/gtest.h"

namespace verdict {
namespace {

TEST(Bf16Test, ExactValuesRoundTrip) {
  for (float value : {0.0f, 1.0f, -2.0f, 0.5f, 256.0f, 3.140625f, -0.0078125f}) {
    EXPECT_EQ(Bf16ToFloat(FloatToBf16(value)), value) << value;
  }
  EXPECT_EQ(FloatToBf16(1.0f), 0x3f80);
  EXPECT_EQ(FloatToBf16(-2.0f), 0xc000);
  EXPECT_EQ(FloatToBf16(-0.0f), 0x8000);
  EXPECT_EQ(Bf16ToFloat(0x3f81), 1.0078125f);  // 1 + 2^-7, one step above 1
}

TEST(Bf16Test, EveryNonNanValueRoundTrips) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const float f = Bf16ToFloat(static_cast<uint16_t>(h));
    if (std::isnan(f)) continue;
    ASSERT_EQ(FloatToBf16(f), h) << std::hex << h;
  }
}

TEST(Bf16Test, RoundsToNearestTiesToEven) {
  // Between 1 (0x3f80) and 1 + 2^-7 (0x3f81) the midpoint is 1 + 2^-8.
  EXPECT_EQ(FloatToBf16(1.0f + 0x1p-8f), 0x3f80);             // tie: even stays
  EXPECT_EQ(FloatToBf16(1.0f + 0x1p-8f + 0x1p-20f), 0x3f81);  // above the midpoint
  EXPECT_EQ(FloatToBf16(1.0f + 0x1p-8f - 0x1p-20f), 0x3f80);  // below it
  // Between 0x3f81 and 0x3f82 the tie goes up, to the even 0x3f82.
  EXPECT_EQ(FloatToBf16(1.0f + 3 * 0x1p-8f), 0x3f82);
  EXPECT_EQ(FloatToBf16(-(1.0f + 3 * 0x1p-8f)), 0xbf82);
  // Rounding carries into the exponent.
  EXPECT_EQ(FloatToBf16(0x1.ffp0f), 0x4000);
}

TEST(Bf16Test, SpecialValues) {
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(FloatToBf16(inf), 0x7f80);
  EXPECT_EQ(FloatToBf16(-inf), 0xff80);
  // The largest float rounds past the largest bf16 to infinity.
  EXPECT_EQ(FloatToBf16(std::numeric_limits<float>::max()), 0x7f80);
  EXPECT_EQ(FloatToBf16(std::nanf("")), 0x7fff);
  EXPECT_EQ(FloatToBf16(-std::nanf("")), 0x7fff);
  EXPECT_TRUE(std::isnan(Bf16ToFloat(0x7fff)));
  // Subnormals keep their top bits.
  EXPECT_EQ(FloatToBf16(0x1p-130f), 0x0008);  // 2^-130 = 2^19 * 2^-149
}

TEST(Bf16Test, VectorsAndRoundTripConvertEachElement) {
  const std::vector<float> values = {1.0f + 0x1p-8f, -2.0f, 1.0f + 3 * 0x1p-8f};
  const std::vector<uint16_t> bits = FloatToBf16Vector(values);
  EXPECT_EQ(bits, (std::vector<uint16_t>{0x3f80, 0xc000, 0x3f82}));
  EXPECT_EQ(Bf16ToFloatVector(bits), (std::vector<float>{1.0f, -2.0f, 1.0f + 4 * 0x1p-8f}));
  EXPECT_EQ(RoundToBf16(values[2]), 1.0f + 4 * 0x1p-8f);
}

TEST(Bf16Test, AccumulateAddsInFloatAndRoundsOnce) {
  const uint16_t in[] = {FloatToBf16(0x1p-8f), FloatToBf16(3 * 0x1p-8f), FloatToBf16(0x1.4p-8f),
                         FloatToBf16(-1.0f), FloatToBf16(2.5f)};
  uint16_t inout[] = {0x3f80, 0x3f80, 0x3f80, 0x3f80, FloatToBf16(-0.5f)};
  AccumulateBf16(in, inout, 5);
  EXPECT_EQ(inout[0], 0x3f80);  // 1 + 2^-8: tie, stays at the even 1
  EXPECT_EQ(inout[1], 0x3f82);  // 1 + 3 * 2^-8: tie, up to the even neighbour
  EXPECT_EQ(inout[2], 0x3f81);  // 1 + 1.25 * 2^-8: above the midpoint
  EXPECT_EQ(inout[3], 0x0000);  // 1 - 1 is +0
  EXPECT_EQ(inout[4], FloatToBf16(2.0f));
}

}  // namespace
}  // namespace verdict
