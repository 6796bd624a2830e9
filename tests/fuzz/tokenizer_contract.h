// The contract every loaded tokenizer keeps, checked by the tokenizer fuzz
// targets: every id it encodes lies in [0, vocab_size()) and decodes again,
// and decoding or streaming any ids (its own or arbitrary ones) returns text
// or an error. A broken contract aborts, naming the target and the text.
#ifndef VERDICT_TESTS_FUZZ_TOKENIZER_CONTRACT_H_
#define VERDICT_TESTS_FUZZ_TOKENIZER_CONTRACT_H_

#include <climits>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "runtime/text/tokenizer.h"

namespace verdict::fuzz {

[[noreturn]] inline void BreachOfContract(const char* target, const char* what,
                                          std::string_view text) {
  std::fprintf(stderr, "%s: %s (text \"%.*s\")\n", target, what, static_cast<int>(text.size()),
               text.data());
  std::abort();
}

// Streams `ids` through an IncrementalDetokenizer, as the server streams a
// generation; errors are fine, crashes are not.
inline void StreamIds(const Tokenizer& tokenizer, const std::vector<int32_t>& ids) {
  IncrementalDetokenizer stream(&tokenizer);
  for (int32_t id : ids) stream.Append(id).IgnoreError();
  stream.Finish().IgnoreError();
}

// Encodes `text` with and without BOS (text that is not UTF-8 may be
// refused); every encoding's ids are in range, decode and stream, and
// `also(ids)` checks what the tokenizer's own kind adds.
template <typename Also>
void CheckText(const char* target, const Tokenizer& tokenizer, std::string_view text, Also also) {
  for (bool add_bos : {false, true}) {
    absl::StatusOr<std::vector<int32_t>> ids = tokenizer.Encode(text, add_bos);
    if (!ids.ok()) continue;
    for (int32_t id : *ids) {
      if (id < 0 || id >= tokenizer.vocab_size()) {
        BreachOfContract(target, "an encoded id is outside the vocabulary", text);
      }
    }
    if (!tokenizer.Decode(*ids).ok()) BreachOfContract(target, "its own ids do not decode", text);
    also(*ids);
    StreamIds(tokenizer, *ids);
  }
}

// Ids around every edge: negative, the ends of the vocabulary, BOS and EOS.
inline std::vector<int32_t> EdgeIds(const Tokenizer& tokenizer) {
  const int32_t n = tokenizer.vocab_size();
  return {-1, 0, 1, n - 1, n, n + 1, tokenizer.bos_id(), tokenizer.eos_id(), INT32_MIN, INT32_MAX};
}

// Each of `ids` alone and all of them as one sequence: pieces, decoding and
// streaming give text or an error.
inline void CheckIds(const Tokenizer& tokenizer, const std::vector<int32_t>& ids) {
  for (int32_t id : ids) {
    tokenizer.IdToPiece(id);
    tokenizer.Decode({&id, 1}).IgnoreError();
  }
  tokenizer.Decode(ids).IgnoreError();
  StreamIds(tokenizer, ids);
}

}  // namespace verdict::fuzz

#endif  // VERDICT_TESTS_FUZZ_TOKENIZER_CONTRACT_H_
