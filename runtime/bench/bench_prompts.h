// The prompts `verdict bench` sends: a built-in set of openings from the
// public-domain books the bundled models were trained on (the corpus of
// tools/test_models), or a JSONL file with one {"prompt": ...} per line,
// where a prompt is a string or a list of token ids.
#ifndef VERDICT_RUNTIME_BENCH_BENCH_PROMPTS_H_
#define VERDICT_RUNTIME_BENCH_BENCH_PROMPTS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "nlohmann/json.hpp"

namespace verdict {

struct BenchPrompt {
  std::string text;                // used when token_ids is empty
  std::vector<int32_t> token_ids;  // sent as is (the API takes ids)

  // The request's `prompt` field.
  nlohmann::json ToJson() const;
};

// The built-in set: 32 openings (Austen, Melville, Dickens, Wells, Verne,
// the King James Version), always in the same order.
const std::vector<BenchPrompt>& BuiltinPrompts();

// Parses JSONL text: one object a line with a `prompt` that is a non-empty
// string or a non-empty list of non-negative integers; blank lines are
// skipped; other fields are ignored. Errors name the line.
absl::StatusOr<std::vector<BenchPrompt>> ParsePromptsJsonl(absl::string_view text);

// "builtin" or a JSONL file's path.
absl::StatusOr<std::vector<BenchPrompt>> LoadPrompts(const std::string& source);

}  // namespace verdict

#endif  // VERDICT_RUNTIME_BENCH_BENCH_PROMPTS_H_
