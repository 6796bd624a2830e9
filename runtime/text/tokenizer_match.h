// Whether a draft model's tokenizer is the target's: speculative decoding
// hands the draft's token ids to the target unchanged, so two tokenizers
// that map one id to different text make every accepted token wrong
// without any error. Sizes alone do not show that (two vocabularies of
// 32000 pieces can differ in every piece), so the pieces are compared.
#ifndef VERDICT_RUNTIME_TEXT_TOKENIZER_MATCH_H_
#define VERDICT_RUNTIME_TEXT_TOKENIZER_MATCH_H_

#include <string>

#include "absl/status/status.h"
#include "runtime/text/tokenizer.h"

namespace verdict {

// OK when `target` and `draft` have the same size, BOS and EOS, and every
// id has the same piece and the same text with special tokens skipped
// (so a token special in one and plain text in the other differs).
// Otherwise FailedPrecondition naming both folders and the first
// difference.
absl::Status CheckSameTokenizer(const Tokenizer& target, const std::string& target_dir,
                                const Tokenizer& draft, const std::string& draft_dir);

// Loads the tokenizers of both folders and compares them as above.
absl::Status CheckDraftTokenizer(const std::string& target_dir, const std::string& draft_dir);
// The same for a target tokenizer already loaded (from `target_dir`): only
// the draft's is read.
absl::Status CheckDraftTokenizer(const Tokenizer& target, const std::string& target_dir,
                                 const std::string& draft_dir);

}  // namespace verdict

#endif  // VERDICT_RUNTIME_TEXT_TOKENIZER_MATCH_H_
