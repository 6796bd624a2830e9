#include "runtime/text/utf8.h"

#include <string>

#include "gtest/gtest.h"

namespace verdict::utf8 {
namespace {

const std::string kFffd(kReplacement.data(), kReplacement.size());

TEST(Utf8Test, ValidatesWellFormedText) {
  EXPECT_TRUE(IsValid(""));
  EXPECT_TRUE(IsValid("plain ascii"));
  EXPECT_TRUE(IsValid("caf\xC3\xA9 \xE4\xB8\xAD \xF0\x9F\x98\x80"));
  EXPECT_FALSE(IsValid("\xC3"));              // truncated
  EXPECT_FALSE(IsValid("\xC0\x80"));          // overlong
  EXPECT_FALSE(IsValid("\xED\xA0\x80"));      // surrogate
  EXPECT_FALSE(IsValid("\xF4\x90\x80\x80"));  // beyond U+10FFFF
  EXPECT_FALSE(IsValid("\x80"));              // stray continuation
}

// The replacement policy of Python's errors="replace" and Rust's
// from_utf8_lossy: one U+FFFD per maximal ill-formed subsequence.
TEST(Utf8Test, LossyDecodingReplacesMaximalSubparts) {
  EXPECT_EQ(FromLossy("abc"), "abc");
  EXPECT_EQ(FromLossy("\xF0\x9F\x98" "a"), kFffd + "a");
  EXPECT_EQ(FromLossy("\xED\xA0\x80"), kFffd + kFffd + kFffd);
  EXPECT_EQ(FromLossy("\xC0\x80"), kFffd + kFffd);
  EXPECT_EQ(FromLossy("\xE2\x82"), kFffd);
  EXPECT_EQ(FromLossy("x\xE4\xB8\xADy"), "x\xE4\xB8\xADy");
}

TEST(Utf8Test, AppendsAndDecodesCodePoints) {
  for (uint32_t c : {0x41u, 0xE9u, 0x4E2Du, 0x1F600u, 0x10FFFFu}) {
    std::string s;
    Append(c, &s);
    EXPECT_TRUE(IsValid(s));
    EXPECT_EQ(CharLength(static_cast<unsigned char>(s[0])), s.size());
    EXPECT_EQ(Decode(s, 0), c);
  }
}

}  // namespace
}  // namespace verdict::utf8
