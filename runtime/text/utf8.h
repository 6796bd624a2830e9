// UTF-8 facts the tokenizer.json pipeline needs: validation, character
// boundaries, and lossy decoding with the replacement policy of Rust's
// String::from_utf8_lossy (and Python's errors="replace"), which the
// `tokenizers` library's decoders use.
#ifndef VERDICT_RUNTIME_TEXT_UTF8_H_
#define VERDICT_RUNTIME_TEXT_UTF8_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include "absl/strings/string_view.h"

namespace verdict::utf8 {

// U+FFFD REPLACEMENT CHARACTER.
inline constexpr absl::string_view kReplacement = "\xEF\xBF\xBD";

// Length of the character whose lead byte is `lead`, for valid UTF-8.
inline size_t CharLength(unsigned char lead) {
  if (lead < 0x80) return 1;
  if (lead < 0xE0) return 2;
  if (lead < 0xF0) return 3;
  return 4;
}

// Length of the well-formed sequence at the start of `bytes`, or 0 when it
// starts with an ill-formed one; `*bad` then says how many bytes form its
// maximal ill-formed prefix (what one U+FFFD replaces).
size_t WellFormedPrefix(absl::string_view bytes, size_t* bad);

bool IsValid(absl::string_view text);

// `bytes` with every maximal ill-formed subsequence replaced by U+FFFD.
std::string FromLossy(absl::string_view bytes);

// Appends the UTF-8 encoding of `codepoint`.
void Append(uint32_t codepoint, std::string* out);

// The code point of the (valid) character starting at text[i].
uint32_t Decode(absl::string_view text, size_t i);

}  // namespace verdict::utf8

#endif  // VERDICT_RUNTIME_TEXT_UTF8_H_
