// The "pattern" of Split, Replace and the Replace decoder: either a literal
// string ({"String": ...}) or a regex ({"Regex": ...}). Also the Unicode
// character classes that added-token matching and Strip use, as the
// `tokenizers` library defines them.
#ifndef VERDICT_RUNTIME_TEXT_TEXT_PATTERN_H_
#define VERDICT_RUNTIME_TEXT_TEXT_PATTERN_H_

#include <cstdint>
#include <memory>
#include <string>
#include "absl/strings/string_view.h"
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"
#include "runtime/text/pcre2_regex.h"

namespace verdict::hf {

class TextPattern {
 public:
  // Reads spec["pattern"]; `where` names the component in errors.
  static absl::StatusOr<TextPattern> Parse(const nlohmann::json& spec, absl::string_view where);
  static TextPattern Literal(std::string literal);
  static absl::StatusOr<TextPattern> Regex(absl::string_view regex);

  // Non-empty, non-overlapping matches, left to right.
  void FindAll(absl::string_view text, std::vector<Pcre2Regex::Match>* matches) const;
  std::string ReplaceAll(absl::string_view text, absl::string_view content) const;

 private:
  std::string literal_;
  std::shared_ptr<const Pcre2Regex> regex_;  // null for a literal
};

// White_Space (Rust's char::is_whitespace).
bool IsWhitespace(uint32_t c);
// A word character as a Unicode regex's \w has it: alphabetic, a mark, a
// decimal digit, a connector punctuation ('_') or a joiner. (A superscript
// digit such as '²' is none.) Added tokens' single_word looks at it.
bool IsWordChar(uint32_t c);

absl::string_view TrimLeadingWhitespace(absl::string_view text);
absl::string_view TrimTrailingWhitespace(absl::string_view text);

}  // namespace verdict::hf

#endif  // VERDICT_RUNTIME_TEXT_TEXT_PATTERN_H_
