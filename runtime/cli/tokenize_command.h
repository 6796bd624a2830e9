// `verdict tokenize`: the target's tokenizer and chat template on JSON lines,
// without an engine: one {"text": ...} or {"messages": [...]} object a line
// in, one {"ids": [...]} line out, the ids POST /tokenize answers for the
// same fields (add_special_tokens, the chat template arguments; `text` is
// /tokenize's `prompt`).
#ifndef VERDICT_RUNTIME_CLI_TOKENIZE_COMMAND_H_
#define VERDICT_RUNTIME_CLI_TOKENIZE_COMMAND_H_

#include <istream>
#include <ostream>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "runtime/server/openai_api.h"

namespace verdict {

extern const char kTokenizeInputFormat[];

int RunTokenizeCommand(absl::Span<char* const> positional);

// Writes one {"ids": [...]} line (with "token_strs" when the line asks
// return_token_strs) for each line of `in`. Stops at the first line that is
// not a valid request: InvalidArgument (NotFound for another model's name)
// whose message starts with "line N: " and names the field.
absl::Status TokenizeLines(const OpenAiApi& api, std::istream& in, std::ostream& out);

}  // namespace verdict

#endif  // VERDICT_RUNTIME_CLI_TOKENIZE_COMMAND_H_
