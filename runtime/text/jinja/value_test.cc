#include "runtime/text/jinja/value.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace verdict::jinja {
namespace {

TEST(ValueTest, TruthinessIsPython) {
  EXPECT_FALSE(Value().Truthy());
  EXPECT_FALSE(Value::None().Truthy());
  EXPECT_FALSE(Value(0).Truthy());
  EXPECT_FALSE(Value(0.0).Truthy());
  EXPECT_FALSE(Value("").Truthy());
  EXPECT_FALSE(Value::List({}).Truthy());
  EXPECT_FALSE(Value::FromDict(Dict()).Truthy());
  EXPECT_TRUE(Value(" ").Truthy());
  EXPECT_TRUE(Value(-1).Truthy());
  EXPECT_TRUE(Value::List({Value(0)}).Truthy());
  // jinja2's select/map return generators, which are always true.
  EXPECT_TRUE(Value::List({}, Value::ListFlavor::kGenerator).Truthy());
}

TEST(ValueTest, StrAndReprFollowPython) {
  EXPECT_EQ(Value().Str(), "");
  EXPECT_EQ(Value::None().Str(), "None");
  EXPECT_EQ(Value(true).Str(), "True");
  EXPECT_EQ(Value(42).Str(), "42");
  EXPECT_EQ(Value("it's").Repr(), "\"it's\"");
  EXPECT_EQ(Value("a\n'\"").Repr(), "'a\\n\\'\"'");
  EXPECT_EQ(Value("caf\xc3\xa9\xc2\xa0").Repr(), "'caf\xc3\xa9\\xa0'");
  // A Markup prints as its text; its repr names the class, as markupsafe's.
  EXPECT_EQ(Value::Markup("<b>").Str(), "<b>");
  EXPECT_EQ(Value::Markup("<b>").Repr(), "Markup('<b>')");
  EXPECT_TRUE(Value::Markup("a").is_markup());
  EXPECT_FALSE(Value("a").is_markup());
  EXPECT_TRUE(Equals(Value::Markup("a"), Value("a")));
  Dict d;
  d.Set(Value("k"), Value::List({Value(1), Value::None()}));
  EXPECT_EQ(Value::FromDict(d).Str(), "{'k': [1, None]}");
  EXPECT_EQ(Value::List({Value(1)}, Value::ListFlavor::kTuple).Str(), "(1,)");
  EXPECT_EQ(Value::List({Value(1), Value(2)}, Value::ListFlavor::kTuple).Str(), "(1, 2)");
}

TEST(ValueTest, FloatsPrintLikePythonRepr) {
  EXPECT_EQ(FormatFloat(1.0), "1.0");
  EXPECT_EQ(FormatFloat(1.5), "1.5");
  EXPECT_EQ(FormatFloat(0.1 + 0.2), "0.30000000000000004");
  EXPECT_EQ(FormatFloat(1e16), "1e+16");
  EXPECT_EQ(FormatFloat(1.5e-7), "1.5e-07");
  EXPECT_EQ(FormatFloat(0.0001), "0.0001");
  EXPECT_EQ(FormatFloat(123456789012345.0), "123456789012345.0");
  EXPECT_EQ(FormatFloat(-0.0), "-0.0");
  EXPECT_EQ(FormatFloat(1.0 / 0.0), "inf");
}

TEST(ValueTest, EqualityAcrossNumbersAndContainers) {
  EXPECT_TRUE(Equals(Value(1), Value(1.0)));
  EXPECT_TRUE(Equals(Value(true), Value(1)));
  EXPECT_FALSE(Equals(Value("1"), Value(1)));
  EXPECT_TRUE(Equals(Value::None(), Value::None()));
  EXPECT_FALSE(Equals(Value(), Value::None()));
  EXPECT_TRUE(Equals(Value::List({Value(1)}), Value::List({Value(1.0)})));
  // A tuple is not equal to a list in Python.
  EXPECT_FALSE(Equals(Value::List({Value(1)}), Value::List({Value(1)}, Value::ListFlavor::kTuple)));
  Dict a, b;
  a.Set(Value("x"), Value(1));
  a.Set(Value("y"), Value(2));
  b.Set(Value("y"), Value(2));
  b.Set(Value("x"), Value(1));
  EXPECT_TRUE(Equals(Value::FromDict(a), Value::FromDict(b)));
}

TEST(ValueTest, Ordering) {
  EXPECT_TRUE(*LessThan(Value(1), Value(1.5)));
  EXPECT_TRUE(*LessThan(Value("a"), Value("b")));
  EXPECT_TRUE(*LessThan(Value::List({Value(1), Value(2)}), Value::List({Value(1), Value(3)})));
  EXPECT_FALSE(LessThan(Value(1), Value("a")).ok());
}

TEST(ValueTest, DictKeepsInsertionOrderAndReplacesInPlace) {
  Dict d;
  d.Set(Value("b"), Value(1));
  d.Set(Value("a"), Value(2));
  d.Set(Value("b"), Value(3));
  ASSERT_EQ(d.size(), 2u);
  EXPECT_EQ(d.entries()[0].first.as_string(), "b");
  EXPECT_EQ(d.entries()[0].second.as_int(), 3);
  EXPECT_EQ(d.FindString("a")->as_int(), 2);
  EXPECT_EQ(d.FindString("c"), nullptr);
}

TEST(ValueTest, JsonLikeJsonDumps) {
  Value v = Value::FromJson(nlohmann::ordered_json::parse(
      R"({"z": 1, "a": [1.0, "\u00e9\n\"", null, true], "e": {}})"));
  EXPECT_EQ(*v.ToJson(false, -1, ", ", ": ", false),
            "{\"z\": 1, \"a\": [1.0, \"\xc3\xa9\\n\\\"\", null, true], \"e\": {}}");
  EXPECT_EQ(*v.ToJson(false, -1, ", ", ": ", true),
            "{\"a\": [1.0, \"\xc3\xa9\\n\\\"\", null, true], \"e\": {}, \"z\": 1}");
  EXPECT_EQ(*Value::List({Value(1), Value::List({})}).ToJson(false, 2, ",", ": ", false),
            "[\n  1,\n  []\n]");
  EXPECT_EQ(*Value("\xc3\xa9\xf0\x9f\x9a\xa2").ToJson(true, -1, ", ", ": ", false),
            "\"\\u00e9\\ud83d\\udea2\"");
  EXPECT_FALSE(Value().ToJson(false, -1, ", ", ": ", false).ok());
}

TEST(ValueTest, CodePointsAndPythonWhitespace) {
  EXPECT_THAT(SplitCodePoints("a\xc3\xa9\xf0\x9f\x9a\xa2"),
              ::testing::ElementsAre("a", "\xc3\xa9", "\xf0\x9f\x9a\xa2"));
  EXPECT_TRUE(IsPythonSpace("\xe3\x80\x80"));  // U+3000
  EXPECT_FALSE(IsPythonSpace("x"));
  EXPECT_EQ(PythonStrip("\xc2\xa0 x \n", true, true), "x");
  EXPECT_EQ(PythonStrip("  x  ", false, true), "  x");
}

}  // namespace
}  // namespace verdict::jinja
