#include "runtime/text/normalizers.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace verdict::hf {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;

std::string Normalized(const json& spec, std::string text) {
  absl::StatusOr<std::unique_ptr<Normalizer>> n = ParseNormalizer(spec);
  EXPECT_TRUE(n.ok()) << n.status();
  if (!n.ok() || *n == nullptr) return text;
  (*n)->Normalize(&text);
  return text;
}

TEST(NormalizersTest, UnicodeForms) {
  // e + COMBINING ACUTE composes; the ligature "ﬁ" only folds under NFKC.
  EXPECT_EQ(Normalized({{"type", "NFC"}}, "caf" "e\xCC\x81 \xEF\xAC\x81"), "caf\xC3\xA9 \xEF\xAC\x81");
  EXPECT_EQ(Normalized({{"type", "NFD"}}, "caf\xC3\xA9"), "cafe\xCC\x81");
  EXPECT_EQ(Normalized({{"type", "NFKC"}}, "\xEF\xAC\x81"), "fi");
  EXPECT_EQ(Normalized({{"type", "NFC"}}, "ascii stays"), "ascii stays");
}

TEST(NormalizersTest, SentencePieceStyleSequence) {
  const json spec = json::parse(R"({"type": "Sequence", "normalizers": [
      {"type": "Prepend", "prepend": "▁"},
      {"type": "Replace", "pattern": {"String": " "}, "content": "▁"}]})");
  EXPECT_EQ(Normalized(spec, "hello big world"), "▁hello▁big▁world");
  // Prepend leaves empty text empty.
  EXPECT_EQ(Normalized(spec, ""), "");
}

TEST(NormalizersTest, RegexReplaceAndStrip) {
  EXPECT_EQ(Normalized(json::parse(R"({"type": "Replace", "pattern": {"Regex": "\\s+"}, "content": " "})"),
                "a \t\n b"),
            "a b");
  EXPECT_EQ(Normalized({{"type", "Strip"}, {"strip_left", true}, {"strip_right", false}}, "  a  "), "a  ");
  EXPECT_EQ(Normalized(json(nullptr), "unchanged"), "unchanged");
}

TEST(NormalizersTest, UnsupportedTypeIsAnErrorNamingIt) {
  absl::StatusOr<std::unique_ptr<Normalizer>> n = ParseNormalizer({{"type", "Lowercase"}});
  ASSERT_FALSE(n.ok());
  EXPECT_EQ(n.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(std::string(n.status().message()), HasSubstr("normalizer type \"Lowercase\""));
  n = ParseNormalizer(json::parse(R"({"type": "Sequence", "normalizers": [{"type": "BertNormalizer"}]})"));
  ASSERT_FALSE(n.ok());
  EXPECT_THAT(std::string(n.status().message()), HasSubstr("BertNormalizer"));
  n = ParseNormalizer({{"type", "Prepend"}});
  ASSERT_FALSE(n.ok());
  EXPECT_THAT(std::string(n.status().message()), HasSubstr("normalizer Prepend: \"prepend\""));
}

}  // namespace
}  // namespace verdict::hf
