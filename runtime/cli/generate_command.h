// `verdict generate`: runs the engine offline on one prompt, prints the text
// on stdout and the speculative statistics on stderr.
#ifndef VERDICT_RUNTIME_CLI_GENERATE_COMMAND_H_
#define VERDICT_RUNTIME_CLI_GENERATE_COMMAND_H_

#include "absl/types/span.h"

namespace verdict {

int RunGenerateCommand(absl::Span<char* const> positional);

}  // namespace verdict

#endif  // VERDICT_RUNTIME_CLI_GENERATE_COMMAND_H_
