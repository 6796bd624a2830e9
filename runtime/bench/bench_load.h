// The load generator of `verdict bench`: a closed loop of streaming
// /v1/completions requests at a fixed concurrency (each client sends its
// next request as soon as its last one has ended), recording when each
// chunk of tokens arrived.
//
// Every request asks for exactly max_tokens tokens (ignore_eos) and for
// `"logprobs": 0`: the stream carries no token ids, and its logprobs list
// is the only per-chunk token count, which the decode rate and the
// inter-token latency need (a chunk holds one verify step's tokens).
#ifndef VERDICT_RUNTIME_BENCH_BENCH_LOAD_H_
#define VERDICT_RUNTIME_BENCH_BENCH_LOAD_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "runtime/bench/bench_http_client.h"
#include "runtime/bench/bench_prompts.h"
#include "runtime/bench/bench_stats.h"

namespace verdict {

struct LoadOptions {
  HttpTarget target;    // the server; requests go to /v1/completions
  std::string model;    // "" leaves `model` out (the served model)
  std::string api_key;  // "" sends no Authorization header
  int max_tokens = 128;
  double temperature = 1.0;
  double top_p = 1.0;
  double min_p = 0.0;  // sent only when above 0
  int top_k = 0;                                        // 0: no top-k filter
  uint64_t seed = 0;                                    // request i gets seed + i
  absl::Duration request_timeout = absl::Seconds(600);  // silence allowed
};

// The JSON body of request `index`.
std::string CompletionRequestBody(const LoadOptions& options, const BenchPrompt& prompt, int index);

// Sends request `index` (prompt index % prompts) and reads its stream.
// Times are taken against `point_start`. Never fails: a request that does
// not complete exactly as asked has ok false and says why in `error`.
RequestRecord RunRequest(const LoadOptions& options, const std::vector<BenchPrompt>& prompts,
                         int index, BenchClock::time_point point_start);

struct LoadProgress {
  int total = 0;
  int done = 0;
  int failed = 0;
  int64_t tokens = 0;  // streamed so far, by requests that have ended
  double elapsed_s = 0;
};

struct LoadResult {
  std::vector<RequestRecord> records;  // by index
  double duration_s = 0;               // first send to last end
};

// Runs requests 0 .. num_requests - 1 with `concurrency` clients. Calls
// on_progress (if set) every progress_interval and once at the end, from
// the calling thread.
LoadResult RunLoad(const LoadOptions& options, const std::vector<BenchPrompt>& prompts,
                   int concurrency, int num_requests,
                   const std::function<void(const LoadProgress&)>& on_progress = nullptr,
                   absl::Duration progress_interval = absl::Milliseconds(500));

}  // namespace verdict

#endif  // VERDICT_RUNTIME_BENCH_BENCH_LOAD_H_
