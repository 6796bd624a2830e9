// `verdict bench`: a streaming OpenAI-API load generator with a concurrency
// sweep, against a running `verdict serve` (or any server that speaks
// /v1/completions with verdict's usage). For each concurrency it warms the
// server up, runs a fixed number of requests of fixed output length, and
// reports decode tok/s, request throughput, TTFT and ITL percentiles,
// acceptance length and verify tokens per request; it writes PREFIX.json,
// PREFIX.csv and PREFIX.md (--bench-out) and prints the table.
// tools/bench/sweep.py runs it over server configurations; tools/bench/plot.py
// charts the results.
//
// Exit status: 0 when every request completed exactly as asked, 1 when some
// did not (the reports are still written) or the server cannot be reached,
// 2 for bad flags.
#ifndef VERDICT_RUNTIME_CLI_BENCH_COMMAND_H_
#define VERDICT_RUNTIME_CLI_BENCH_COMMAND_H_

#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace verdict {

int RunBenchCommand(absl::Span<char* const> positional);

// Parses "1,4,8": positive integers, comma-separated.
absl::StatusOr<std::vector<int>> ParseConcurrencyList(absl::string_view list);

}  // namespace verdict

#endif  // VERDICT_RUNTIME_CLI_BENCH_COMMAND_H_
