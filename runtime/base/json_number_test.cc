#include "runtime/base/json_number.h"

#include <cmath>
#include <cstdint>
#include <limits>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace verdict {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;

constexpr int64_t kInt32Max = std::numeric_limits<int32_t>::max();
constexpr int64_t kInt64Min = std::numeric_limits<int64_t>::min();
constexpr int64_t kInt64Max = std::numeric_limits<int64_t>::max();
constexpr uint64_t kUint64Max = std::numeric_limits<uint64_t>::max();

// Parsed from text, as every input reaches the parsers: non-negative
// literals are stored as unsigned 64-bit, negative ones as signed.
json Parse(const char* text) { return json::parse(text); }

TEST(JsonIntegerTest, AcceptsTheEndsOfTheRange) {
  EXPECT_EQ(*JsonIntegerAs<int32_t>(Parse("2147483647"), "x"), kInt32Max);
  EXPECT_EQ(*JsonIntegerAs<int32_t>(Parse("-2147483648"), "x"), -kInt32Max - 1);
  EXPECT_EQ(*JsonIntegerAs<int64_t>(Parse("-9223372036854775808"), "x"), kInt64Min);
  EXPECT_EQ(*JsonIntegerAs<int64_t>(Parse("9223372036854775807"), "x"), kInt64Max);
  EXPECT_EQ(*JsonIntegerAs<uint64_t>(Parse("18446744073709551615"), "x"), kUint64Max);
  EXPECT_EQ(*JsonIntegerAs<uint32_t>(Parse("4294967295"), "x"), 4294967295u);
  EXPECT_EQ(*JsonInteger(Parse("0"), "x", 0, 0), 0);
  EXPECT_EQ(*JsonInteger(Parse("-5"), "x", -5, -1), -5);
}

TEST(JsonIntegerTest, AcceptsSignedAndUnsignedStorage) {
  // Values built in code keep the C++ type they were built from.
  EXPECT_EQ(*JsonInteger(json(int64_t{7}), "x", 0, 10), 7);
  EXPECT_EQ(*JsonInteger(json(uint64_t{7}), "x", 0, 10), 7);
  EXPECT_EQ(*JsonUnsigned(json(int64_t{7}), "x", 0, 10), 7u);
  EXPECT_EQ(*JsonUnsigned(json(uint64_t{7}), "x", 0, 10), 7u);
}

TEST(JsonIntegerTest, RefusesWhatDoesNotFit) {
  const char* const too_big_for_int32[] = {"2147483648", "4294967297", "9223372036854775807",
                                           "9223372036854775808", "18446744073709551615",
                                           "-2147483649", "-9223372036854775808"};
  for (const char* text : too_big_for_int32) {
    EXPECT_FALSE(JsonIntegerAs<int32_t>(Parse(text), "x").ok()) << text;
  }
  // 2^63 and above do not fit int64 (they must not wrap to negative values).
  EXPECT_FALSE(JsonIntegerAs<int64_t>(Parse("9223372036854775808"), "x").ok());
  EXPECT_FALSE(JsonIntegerAs<int64_t>(Parse("18446744073709551615"), "x").ok());
  EXPECT_FALSE(JsonInteger(Parse("18446744073709551615"), "x", -1, kInt64Max).ok());
  // Beyond UINT64_MAX the literal is stored as a float, and refused as one.
  EXPECT_FALSE(JsonIntegerAs<uint64_t>(Parse("18446744073709551616"), "x").ok());
  // -1 for unsigned fields.
  EXPECT_FALSE(JsonIntegerAs<uint32_t>(Parse("-1"), "x").ok());
  EXPECT_FALSE(JsonIntegerAs<uint64_t>(Parse("-1"), "x").ok());
  EXPECT_FALSE(JsonIntegerAs<uint64_t>(Parse("-9223372036854775808"), "x").ok());
  EXPECT_FALSE(JsonIntegerAs<uint32_t>(Parse("4294967296"), "x").ok());
  // Ranges narrower than the type.
  EXPECT_FALSE(JsonInteger(Parse("0"), "x", 1, 10).ok());
  EXPECT_FALSE(JsonInteger(Parse("11"), "x", 1, 10).ok());
  EXPECT_FALSE(JsonInteger(Parse("-1"), "x", 0, 10).ok());
  EXPECT_FALSE(JsonInteger(Parse("3"), "x", -5, -1).ok());
  EXPECT_FALSE(JsonUnsigned(Parse("1"), "x", 2, 10).ok());
  EXPECT_FALSE(JsonUnsigned(Parse("11"), "x", 2, 10).ok());
}

TEST(JsonIntegerTest, RefusesNonIntegers) {
  // Floats are refused even with an integral value.
  for (const char* text : {"1.0", "1.5", "-0.0", "1e30", "1e2", "true", "false", "\"1\"", "null",
                           "[1]", "{\"a\": 1}"}) {
    EXPECT_FALSE(JsonIntegerAs<int32_t>(Parse(text), "x").ok()) << text;
    EXPECT_FALSE(JsonIntegerAs<uint64_t>(Parse(text), "x").ok()) << text;
  }
}

TEST(JsonIntegerTest, MessageNamesThePathTheRangeAndTheValue) {
  absl::StatusOr<int32_t> v =
      JsonIntegerAs<int32_t>(Parse("4294967297"), "requests[2].draft_token_ids[0]", 0);
  ASSERT_FALSE(v.ok());
  EXPECT_EQ(v.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(v.status().message(),
            "requests[2].draft_token_ids[0]: expected an integer in [0, 2147483647], got "
            "4294967297");
  EXPECT_EQ(JsonUnsigned(Parse("-1"), "seed", 0, kUint64Max).status().message(),
            "seed: expected an integer in [0, 18446744073709551615], got -1");
  // Without a path, only the reason.
  EXPECT_EQ(JsonInteger(Parse("1.5"), "", 1, 8).status().message(),
            "expected an integer in [1, 8], got 1.5");
  EXPECT_THAT(JsonInteger(Parse("true"), "x", 1, 8).status().message(), HasSubstr("got true"));
}

TEST(JsonIntegerTest, LongValuesAreCutInMessages) {
  json row = json::array();
  for (int i = 0; i < 1000; ++i) row.push_back(i);
  const std::string message(JsonInteger(row, "x", 0, 1).status().message());
  EXPECT_LT(message.size(), 120u);
  EXPECT_THAT(message, HasSubstr("got [0,1,2,"));
  EXPECT_THAT(message, HasSubstr("..."));
}

TEST(JsonFiniteNumberTest, AcceptsIntegersAndFloats) {
  EXPECT_EQ(*JsonFiniteNumber(Parse("1"), "x"), 1.0);
  EXPECT_EQ(*JsonFiniteNumber(Parse("-1.5"), "x"), -1.5);
  EXPECT_EQ(*JsonFiniteNumber(Parse("1e300"), "x"), 1e300);
  EXPECT_EQ(*JsonFiniteNumber(Parse("18446744073709551615"), "x"), 18446744073709551615.0);
  EXPECT_EQ(*JsonFiniteFloat(Parse("-1e30"), "x"), -1e30f);
  EXPECT_EQ(*JsonFiniteFloat(Parse("0.25"), "x"), 0.25f);
}

TEST(JsonFiniteNumberTest, RefusesNonNumbersAndInfinities) {
  for (const char* text : {"true", "\"1\"", "null", "[1]"}) {
    EXPECT_FALSE(JsonFiniteNumber(Parse(text), "x").ok()) << text;
    EXPECT_FALSE(JsonFiniteFloat(Parse(text), "x").ok()) << text;
  }
  // nlohmann's parser refuses 1e400 itself; values built in code can still
  // be infinite or NaN.
  EXPECT_TRUE(json::parse("1e400", nullptr, /*allow_exceptions=*/false).is_discarded());
  EXPECT_FALSE(JsonFiniteNumber(json(std::numeric_limits<double>::infinity()), "x").ok());
  EXPECT_FALSE(JsonFiniteNumber(json(-std::numeric_limits<double>::infinity()), "x").ok());
  EXPECT_FALSE(JsonFiniteNumber(json(std::nan("")), "x").ok());
  // Finite as a double, infinite as a float.
  EXPECT_FALSE(JsonFiniteFloat(Parse("1e39"), "x").ok());
  EXPECT_FALSE(JsonFiniteFloat(Parse("-1e39"), "x").ok());
  EXPECT_THAT(JsonFiniteNumber(Parse("true"), "top_p").status().message(),
              HasSubstr("top_p: expected a finite number, got true"));
}

}  // namespace
}  // namespace verdict
