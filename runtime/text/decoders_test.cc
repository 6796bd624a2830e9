#include "runtime/text/decoders.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace verdict::hf {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;

const std::string kFffd = "\xEF\xBF\xBD";

std::string DecodeTokens(const json& spec, std::vector<std::string> tokens) {
  absl::StatusOr<std::unique_ptr<Decoder>> d = ParseDecoder(spec);
  EXPECT_TRUE(d.ok()) << d.status();
  if (!d.ok()) return "";
  (*d)->DecodeChain(&tokens);
  std::string text;
  for (const std::string& t : tokens) text += t;
  return text;
}

// The expectations are the `tokenizers` library's outputs for the same tokens.
TEST(DecodersTest, ByteLevel) {
  const json spec = {{"type", "ByteLevel"}};
  // "ĠâĢ" + "ľ" are the bytes of " “" split across two tokens.
  EXPECT_EQ(DecodeTokens(spec, {"\xC4\xA0hello", "\xC4\xA0\xC3\xA2\xC4\xA2", "\xC4\xBE"}),
            " hello \xE2\x80\x9C");
  EXPECT_EQ(DecodeTokens(spec, {"\xC4\xA0\xC3\xA2\xC4\xA2"}), " " + kFffd);
  // A token outside the byte map (an added token with a space) stays as is.
  EXPECT_EQ(DecodeTokens(spec, {"<|im start|>", "x"}), "<|im start|>x");
}

TEST(DecodersTest, Metaspace) {
  EXPECT_EQ(DecodeTokens({{"type", "Metaspace"}, {"replacement", "\xE2\x96\x81"}, {"prepend_scheme", "first"}},
                {"\xE2\x96\x81\xE2\x96\x81hi", "\xE2\x96\x81there"}),
            "hi there");
  EXPECT_EQ(DecodeTokens({{"type", "Metaspace"}, {"replacement", "\xE2\x96\x81"}, {"prepend_scheme", "never"}},
                {"\xE2\x96\x81hi", "\xE2\x96\x81there"}),
            " hi there");
}

TEST(DecodersTest, SentencePieceStyleSequence) {
  const json spec = json::parse(R"({"type": "Sequence", "decoders": [
      {"type": "Replace", "pattern": {"String": "▁"}, "content": " "},
      {"type": "ByteFallback"}, {"type": "Fuse"},
      {"type": "Strip", "content": " ", "start": 1, "stop": 0}]})");
  EXPECT_EQ(DecodeTokens(spec, {"\xE2\x96\x81" "caf", "<0xC3>", "<0xA9>", "\xE2\x96\x81ok"}),
            "caf\xC3\xA9 ok");
}

TEST(DecodersTest, ByteFallbackInvalidRunsGiveOneReplacementPerByte) {
  EXPECT_EQ(DecodeTokens({{"type", "ByteFallback"}}, {"a", "<0xE4>", "<0xB8>", "<0xAD>", "<0xE4>", "b"}),
            "a" + kFffd + kFffd + kFffd + kFffd + "b");
  EXPECT_EQ(DecodeTokens({{"type", "ByteFallback"}}, {"<0xE4>", "<0xB8>", "<0xAD>"}), "\xE4\xB8\xAD");
  EXPECT_EQ(DecodeTokens({{"type", "ByteFallback"}}, {"<0xZZ>", "<0x41"}), "<0xZZ><0x41");
}

TEST(DecodersTest, StripEachToken) {
  EXPECT_EQ(DecodeTokens({{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 1}}, {"  a  ", " b"}),
            " a b");
}

TEST(DecodersTest, UnsupportedTypeIsAnError) {
  absl::StatusOr<std::unique_ptr<Decoder>> d = ParseDecoder({{"type", "WordPiece"}});
  ASSERT_FALSE(d.ok());
  EXPECT_THAT(std::string(d.status().message()), HasSubstr("decoder type \"WordPiece\""));
  d = ParseDecoder({{"type", "Strip"}, {"start", 1}});
  ASSERT_FALSE(d.ok());
  EXPECT_THAT(std::string(d.status().message()), HasSubstr("decoder Strip"));
}

}  // namespace
}  // namespace verdict::hf
