#include "runtime/text/added_tokens.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace verdict::hf {
namespace {

using nlohmann::json;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

// Each segment as "text" or "#id[text]".
std::vector<std::string> Cut(const AddedTokenMatcher& m, const std::string& text) {
  std::vector<Segment> segments;
  m.Split(text, &segments);
  std::vector<std::string> out;
  for (const Segment& s : segments) {
    const std::string part = text.substr(s.begin, s.end - s.begin);
    out.push_back(s.id < 0 ? part : "#" + std::to_string(s.id) + "[" + part + "]");
  }
  return out;
}

AddedToken Token(int32_t id, std::string content) {
  AddedToken t;
  t.id = id;
  t.content = std::move(content);
  return t;
}

TEST(AddedTokensTest, LeftmostThenLongest) {
  AddedTokenMatcher m({Token(1, "<s>"), Token(2, "<s><s>"), Token(3, "s>x")});
  EXPECT_THAT(Cut(m, "a<s><s>x<s>"), ElementsAre("a", "#2[<s><s>]", "x", "#1[<s>]"));
  EXPECT_THAT(Cut(m, "no tokens"), ElementsAre("no tokens"));
  EXPECT_THAT(Cut(m, ""), ElementsAre());
}

TEST(AddedTokensTest, StripAndSingleWord) {
  AddedToken mask = Token(7, "<mask>");
  mask.lstrip = true;
  AddedToken code = Token(8, "[[code]]");
  code.rstrip = true;
  AddedToken word = Token(9, "verdict");
  word.single_word = true;
  AddedTokenMatcher m({mask, code, word});
  EXPECT_THAT(Cut(m, "x  <mask> y"), ElementsAre("x", "#7[  <mask>]", " y"));
  EXPECT_THAT(Cut(m, "[[code]] \t y"), ElementsAre("#8[[[code]] \t ]", "y"));
  EXPECT_THAT(Cut(m, "a verdict."), ElementsAre("a ", "#9[verdict]", "."));
  // Inside a word, or beside '_' or a combining mark, it is no single word;
  // a superscript digit is not a word character.
  EXPECT_THAT(Cut(m, "verdicts"), ElementsAre("verdicts"));
  EXPECT_THAT(Cut(m, "_verdict"), ElementsAre("_verdict"));
  EXPECT_THAT(Cut(m, "verdict\xCC\x81"), ElementsAre("verdict\xCC\x81"));
  EXPECT_THAT(Cut(m, "verdict\xC2\xB2"), ElementsAre("#9[verdict]", "\xC2\xB2"));
}

TEST(AddedTokensTest, ParseRejectsDuplicates) {
  absl::StatusOr<std::vector<AddedToken>> t = ParseAddedTokens(json::parse(
      R"([{"id": 5, "content": "<a>", "special": true}, {"id": 6, "content": "b"}])"));
  ASSERT_TRUE(t.ok()) << t.status();
  ASSERT_EQ(t->size(), 2u);
  EXPECT_TRUE((*t)[0].special);
  EXPECT_FALSE((*t)[0].normalized);  // special tokens default to raw matching
  EXPECT_TRUE((*t)[1].normalized);
  t = ParseAddedTokens(json::parse(R"([{"id": 5, "content": "a"}, {"id": 5, "content": "b"}])"));
  ASSERT_FALSE(t.ok());
  EXPECT_THAT(std::string(t.status().message()), HasSubstr("id 5 is used twice"));
  t = ParseAddedTokens(json::parse(R"([{"id": 1, "content": "a"}, {"id": 2, "content": "a"}])"));
  ASSERT_FALSE(t.ok());
  EXPECT_THAT(std::string(t.status().message()), HasSubstr("\"a\" is listed twice"));
}

// Ids that do not fit are refused rather than wrapped (2^32 would become 0),
// and the largest int32 is refused too: the vocabulary's size is one more.
TEST(AddedTokensTest, ParseRejectsIdsBeyondInt32) {
  for (const char* id : {"4294967296", "2147483647", "18446744073709551615"}) {
    absl::StatusOr<std::vector<AddedToken>> t = ParseAddedTokens(
        json::parse(absl::StrCat(R"([{"id": )", id, R"(, "content": "<a>"}])")));
    EXPECT_FALSE(t.ok()) << id;
  }
  EXPECT_TRUE(ParseAddedTokens(json::parse(R"([{"id": 2147483646, "content": "<a>"}])")).ok());
}

}  // namespace
}  // namespace verdict::hf
