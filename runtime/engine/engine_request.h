// The engine's record of one request, shared by the engine's source files
// (engine.cc: creation and the client side; engine_loop.cc: admission and
// the step; engine_commit.cc: the commit); private to the engine's library.
#ifndef VERDICT_RUNTIME_ENGINE_ENGINE_REQUEST_H_
#define VERDICT_RUNTIME_ENGINE_ENGINE_REQUEST_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/time/time.h"
#include "runtime/engine/engine.h"
#include "runtime/engine/generation.h"
#include "runtime/text/tokenizer.h"
#include "scheduler/stop_checker.h"

namespace verdict {

struct Engine::Request {
  GenerationRequest req;
  int64_t order = 0;  // admission order: the estimator's request id
  std::vector<int32_t> tokens;  // prompt, then every committed token
  int prompt_len = 0;
  uint64_t seed = 0;
  bool speculative = false;  // drafts for this request
  int target_kv = -1;
  int draft_kv = -1;
  // Cache positions, step inputs and drafts are the executor's (the
  // device's view, a step ahead of `tokens` under overlap). The caches are
  // freed once the latest step whose job names the request is done.
  int64_t last_step = 0;
  bool on_device = false;  // registered with the executor, not yet released
  // Per draft position, the confidence signal of the latest draft there
  // whose result reached the CPU (NaN: never drafted that deep; empty before
  // the first drafts). They plan the request's next drafts, and under
  // overlap its next verify too. A step that drafts less deep, or not at
  // all, keeps the older signals of the positions it did not reach.
  std::vector<float> lagged_signals;
  // Tokens committed by the steps it sat out (drafted nothing) since it last
  // drafted: what its draft's next first pass catches up on beyond a
  // drafting step's usual one or two (the draft planner prices them). The
  // CPU's count: under overlap a step behind the device.
  int32_t catch_up_tokens = 0;
  // Prompt tokens the target reads in the verify of the request's first
  // step (in-step prefill: all but the last, which is its first verify
  // row); 0 once a step's job carries it, and always with separate
  // prefill. The verify planner prices them (PlannerInput::prefill_rows).
  // The draft planner does not: priced there, they made the big join steps
  // look cheap to draft in, while the joining requests' drafts read their
  // whole prompts unpriced (docs/PERF.md, "Joining prompts in the planners'
  // price").
  int32_t prefill_rows = 0;
  std::unique_ptr<StopChecker> stop;
  std::unique_ptr<IncrementalDetokenizer> detokenizer;
  GenerationUsage usage;
  absl::Time arrival;        // rank 0's clock, for latency metrics
  absl::Time last_emit;      // the previous event with tokens
  bool first_token_sent = false;
  // The client's callback (Submit's), looked up by id at the first event
  // and kept: it never changes before the request finishes, and a lookup
  // under the engine's lock for every event of every request is most of
  // what a step's events cost the scheduling thread.
  GenerationCallback callback;
  // Tokens of the finishing step, sent with the final event.
  std::vector<int32_t> unsent_tokens;
  std::vector<float> unsent_logprobs;

  int64_t num_generated() const { return static_cast<int64_t>(tokens.size()) - prompt_len; }
};

}  // namespace verdict

#endif  // VERDICT_RUNTIME_ENGINE_ENGINE_REQUEST_H_
