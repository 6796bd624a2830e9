// `verdict serve`: the OpenAI-compatible server on rank 0, the engine loop on
// every rank, Prometheus metrics, and the graceful drain on SIGTERM.
#ifndef VERDICT_RUNTIME_CLI_SERVE_COMMAND_H_
#define VERDICT_RUNTIME_CLI_SERVE_COMMAND_H_

#include "absl/types/span.h"

namespace verdict {

int RunServeCommand(absl::Span<char* const> positional);

}  // namespace verdict

#endif  // VERDICT_RUNTIME_CLI_SERVE_COMMAND_H_
