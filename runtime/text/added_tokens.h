// The added tokens of a tokenizer.json ("added_tokens"): strings matched
// whole in the input before normalization (normalized: false) or in each
// normalized stretch (normalized: true), leftmost first and longest among
// those, with the `tokenizers` library's lstrip, rstrip and single_word
// rules.
#ifndef VERDICT_RUNTIME_TEXT_ADDED_TOKENS_H_
#define VERDICT_RUNTIME_TEXT_ADDED_TOKENS_H_

#include <array>
#include <cstdint>
#include <string>
#include "absl/strings/string_view.h"
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace verdict::hf {

struct AddedToken {
  int32_t id = -1;
  std::string content;
  bool special = false;
  bool lstrip = false;
  bool rstrip = false;
  bool single_word = false;
  bool normalized = false;
};

// A stretch of text: an added token's id, or -1 for text to tokenize.
struct Segment {
  size_t begin, end;
  int32_t id;
};

// Finds one set of added tokens (the normalized or the raw ones) in text.
class AddedTokenMatcher {
 public:
  explicit AddedTokenMatcher(std::vector<AddedToken> tokens);

  // Cuts `text` into segments covering it in order; empty text gives none.
  void Split(absl::string_view text, std::vector<Segment>* segments) const;
  bool empty() const { return tokens_.empty(); }

 private:
  // The longest token that starts at text[pos], or -1.
  int LongestAt(absl::string_view text, size_t pos) const;

  std::vector<AddedToken> tokens_;
  // Tokens by first byte, longest first.
  std::array<std::vector<int>, 256> by_first_byte_;
};

// Reads "added_tokens"; duplicated ids or contents are errors.
absl::StatusOr<std::vector<AddedToken>> ParseAddedTokens(const nlohmann::json& spec);

}  // namespace verdict::hf

#endif  // VERDICT_RUNTIME_TEXT_ADDED_TOKENS_H_
