// tokenizer.json pre-tokenizers: split normalized text into the words that
// the model tokenizes one by one. Supported: ByteLevel (with and without its
// own GPT-2 regex), Split (string or regex; every delimiter behaviour;
// invert), Digits, Metaspace, Whitespace, WhitespaceSplit and Sequence.
#ifndef VERDICT_RUNTIME_TEXT_PRETOKENIZERS_H_
#define VERDICT_RUNTIME_TEXT_PRETOKENIZERS_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace verdict::hf {

// One word of pre-tokenization. `at_start` is whether it begins at offset 0
// of the input (Metaspace's prepend_scheme "first" looks at it).
struct Piece {
  std::string text;
  bool at_start = false;
};

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  // Replaces each piece by its sub-pieces, in order; empty pieces vanish.
  virtual void PreTokenize(std::vector<Piece>* pieces) const = 0;
};

// How a Split keeps the matches of its pattern (the `tokenizers` library's
// SplitDelimiterBehavior).
enum class SplitBehavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

absl::StatusOr<std::unique_ptr<PreTokenizer>> ParsePreTokenizer(const nlohmann::json& spec);

// The GPT-2 regex that ByteLevel applies when its use_regex is set.
inline constexpr char kGpt2Regex[] =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

// GPT-2's reversible byte-to-character map: printable bytes map to
// themselves, the rest to U+0100 onwards. Returns the UTF-8 of byte b's char.
const std::string& ByteLevelChar(unsigned char b);

}  // namespace verdict::hf

#endif  // VERDICT_RUNTIME_TEXT_PRETOKENIZERS_H_
