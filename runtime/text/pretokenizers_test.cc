#include "runtime/text/pretokenizers.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace verdict::hf {
namespace {

using nlohmann::json;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::vector<std::string> Words(const json& spec, const std::string& text) {
  absl::StatusOr<std::unique_ptr<PreTokenizer>> p = ParsePreTokenizer(spec);
  EXPECT_TRUE(p.ok()) << p.status();
  std::vector<Piece> pieces = {{text, true}};
  if (p.ok()) (*p)->PreTokenize(&pieces);
  std::vector<std::string> out;
  for (const Piece& piece : pieces) out.push_back(piece.text);
  return out;
}

json SplitSpec(const std::string& behavior, bool invert) {
  return {{"type", "Split"}, {"pattern", {{"String", "-"}}}, {"behavior", behavior},
          {"invert", invert}};
}

// The expectations are the `tokenizers` library's outputs for the same input.
TEST(PreTokenizersTest, SplitBehaviours) {
  EXPECT_THAT(Words(SplitSpec("Removed", false), "a-b--c"), ElementsAre("a", "b", "c"));
  EXPECT_THAT(Words(SplitSpec("Removed", true), "a-b--c"), ElementsAre("-", "-", "-"));
  EXPECT_THAT(Words(SplitSpec("Isolated", false), "a-b--c"),
              ElementsAre("a", "-", "b", "-", "-", "c"));
  EXPECT_THAT(Words(SplitSpec("MergedWithPrevious", false), "a-b--c"),
              ElementsAre("a-", "b-", "-", "c"));
  EXPECT_THAT(Words(SplitSpec("MergedWithPrevious", true), "a-b--c"),
              ElementsAre("a", "-b", "-", "-c"));
  EXPECT_THAT(Words(SplitSpec("MergedWithNext", false), "a-b--c"),
              ElementsAre("a", "-b", "-", "-c"));
  EXPECT_THAT(Words(SplitSpec("Contiguous", false), "a-b--c"),
              ElementsAre("a", "-", "b", "--", "c"));
}

TEST(PreTokenizersTest, ByteLevelWithItsOwnRegex) {
  // Space becomes "Ġ" (U+0120), "é" its two bytes' characters "Ã©".
  EXPECT_THAT(Words({{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}},
                  "Hello  world's \xC3\xA9!"),
              ElementsAre("Hello", "\xC4\xA0", "\xC4\xA0world", "'s", "\xC4\xA0\xC3\x83\xC2\xA9", "!"));
  EXPECT_THAT(Words({{"type", "ByteLevel"}, {"add_prefix_space", true}, {"use_regex", false}}, "a b\n"),
              ElementsAre("\xC4\xA0" "a" "\xC4\xA0" "b" "\xC4\x8A"));
}

// U+180E MONGOLIAN VOWEL SEPARATOR is no space for the library's regex
// engine (PCRE2's own \s would take it): "\s+(?!\S)" keeps one space.
TEST(PreTokenizersTest, RegexSpacesAreWhiteSpace) {
  EXPECT_THAT(Words({{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}},
                    "  \xE1\xA0\x8E"),
              ElementsAre("\xC4\xA0", "\xC4\xA0\xC3\xA1\xC5\x82\xC4\xB0"));
  EXPECT_THAT(Words(json::parse(R"({"type": "Split", "pattern": {"Regex": "[^\\s]+"},
                                    "behavior": "Removed", "invert": true})"),
                    "a\xE1\xA0\x8E b\xE2\x80\x83" "c"),
              ElementsAre("a\xE1\xA0\x8E", "b", "c"));
}

TEST(PreTokenizersTest, MetaspaceAndDigits) {
  const json metaspace = {{"type", "Metaspace"}, {"replacement", "\xE2\x96\x81"},
                          {"prepend_scheme", "first"}, {"split", true}};
  EXPECT_THAT(Words(metaspace, "hello  world"),
              ElementsAre("\xE2\x96\x81hello", "\xE2\x96\x81", "\xE2\x96\x81world"));
  // "first" prepends only to text at the start of the input.
  absl::StatusOr<std::unique_ptr<PreTokenizer>> p = ParsePreTokenizer(metaspace);
  ASSERT_TRUE(p.ok());
  std::vector<Piece> later = {{"x", false}};
  (*p)->PreTokenize(&later);
  EXPECT_EQ(later[0].text, "x");
  EXPECT_THAT(Words({{"type", "Digits"}, {"individual_digits", false}}, "a123b4"),
              ElementsAre("a", "123", "b", "4"));
  EXPECT_THAT(Words({{"type", "Digits"}, {"individual_digits", true}}, "a12"),
              ElementsAre("a", "1", "2"));
}

TEST(PreTokenizersTest, ByteLevelCharsAreAReversibleMap) {
  EXPECT_EQ(ByteLevelChar('A'), "A");
  EXPECT_EQ(ByteLevelChar(' '), "\xC4\xA0");
  EXPECT_EQ(ByteLevelChar('\n'), "\xC4\x8A");
  EXPECT_EQ(ByteLevelChar(0xAD), "\xC5\x83");  // the soft hyphen is not printable
}

TEST(PreTokenizersTest, UnsupportedTypeIsAnError) {
  absl::StatusOr<std::unique_ptr<PreTokenizer>> p = ParsePreTokenizer({{"type", "BertPreTokenizer"}});
  ASSERT_FALSE(p.ok());
  EXPECT_THAT(std::string(p.status().message()), HasSubstr("\"BertPreTokenizer\""));
  p = ParsePreTokenizer(json::parse(R"({"type": "Split", "pattern": {"Regex": "("}, "behavior": "Isolated"})"));
  ASSERT_FALSE(p.ok());
  EXPECT_THAT(std::string(p.status().message()), HasSubstr("pre_tokenizer Split"));
}

}  // namespace
}  // namespace verdict::hf
