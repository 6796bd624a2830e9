#include "runtime/text/pcre2_regex.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace verdict {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::vector<std::string> Matches(const Pcre2Regex& re, const std::string& text) {
  std::vector<Pcre2Regex::Match> m;
  re.FindAll(text, &m);
  std::vector<std::string> out;
  for (const auto& [b, e] : m) out.push_back(text.substr(b, e - b));
  return out;
}

TEST(Pcre2RegexTest, UnicodePropertiesAndLookAhead) {
  absl::StatusOr<std::unique_ptr<Pcre2Regex>> re =
      Pcre2Regex::Compile(R"( ?\p{L}+| ?\p{N}+|\s+(?!\S)|\s+)");
  ASSERT_TRUE(re.ok()) << re.status();
  // "\s+(?!\S)" leaves the last space of a run to the word after it.
  EXPECT_THAT(Matches(**re, "caf\xC3\xA9   na\xC3\xAFve 42"),
              ElementsAre("caf\xC3\xA9", "  ", " na\xC3\xAFve", " 42"));
  // Non-ASCII letters and digits are \p{L} and \p{N} (UCP).
  EXPECT_THAT(Matches(**re, "\xE4\xB8\xAD\xE6\x96\x87\xD9\xA3"),
              ElementsAre("\xE4\xB8\xAD\xE6\x96\x87", "\xD9\xA3"));
}

TEST(Pcre2RegexTest, CaseInsensitiveGroupAndEmptyMatches) {
  absl::StatusOr<std::unique_ptr<Pcre2Regex>> re = Pcre2Regex::Compile("(?i:'s|'ll)");
  ASSERT_TRUE(re.ok());
  EXPECT_THAT(Matches(**re, "it's HE'LL"), ElementsAre("'s", "'LL"));
  // A pattern that can match empty reports only its non-empty matches.
  absl::StatusOr<std::unique_ptr<Pcre2Regex>> digits = Pcre2Regex::Compile(R"(\d*)");
  ASSERT_TRUE(digits.ok());
  EXPECT_THAT(Matches(**digits, "a12b3\xC3\xA9"), ElementsAre("12", "3"));
}

TEST(Pcre2RegexTest, CompileErrorNamesThePattern) {
  absl::StatusOr<std::unique_ptr<Pcre2Regex>> re = Pcre2Regex::Compile("(unclosed");
  ASSERT_FALSE(re.ok());
  EXPECT_THAT(std::string(re.status().message()), HasSubstr("(unclosed"));
}

}  // namespace
}  // namespace verdict
