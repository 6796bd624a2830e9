// The engine's public interface: what a front end (HTTP server, `verdict
// generate`, the load generator) submits and what it gets back.
//
// A request is tokenized before submission; the engine streams
// GenerationEvents back on one thread of its own (not its scheduling loop's),
// in order, ending with exactly one event whose `finished` is true. Callbacks
// must be quick and must not call back into the engine except Cancel().
#ifndef VERDICT_RUNTIME_ENGINE_GENERATION_H_
#define VERDICT_RUNTIME_ENGINE_GENERATION_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace verdict {

// The smallest positive temperature a request may ask for. Far below it the
// scaled logits (logit / temperature) leave float range (1e-40 turns a logit
// of 1 into infinity) and would fail the whole batch; at it, the sampled
// distribution is already greedy to float precision for any logit gap
// above 0.01 (exp(-100)), so nothing is lost by refusing smaller values.
inline constexpr float kMinTemperature = 1e-4f;

struct SamplingParams {
  float temperature = 1.0f;  // 0 means greedy; otherwise >= kMinTemperature
  int top_k = 0;             // 0 means no top-k filter
  float top_p = 1.0f;        // 1 means no top-p filter
  float min_p = 0.0f;        // 0 means no min-p filter: keep p >= min_p * p_max
  std::optional<uint64_t> seed;  // unset: the engine draws one per request
  int max_tokens = 16;
  std::vector<std::string> stop;   // stop strings, not included in the output
  std::vector<int32_t> stop_token_ids;
  bool ignore_eos = false;
  int logprobs = 0;          // >0: return the chosen token's logprob
  bool speculation = true;   // false: plain autoregressive decoding
  int max_draft_tokens = -1; // per-request cap on drafts per step; -1 = engine's
};

struct GenerationRequest {
  std::string id;
  std::vector<int32_t> prompt_token_ids;
  SamplingParams params;
};

enum class FinishReason { kNone, kStop, kLength, kCancelled, kError };

const char* FinishReasonName(FinishReason reason);

struct GenerationUsage {
  int prompt_tokens = 0;
  int completion_tokens = 0;
  int draft_tokens = 0;     // drafts proposed for this request
  int accepted_tokens = 0;  // drafts accepted by verification
  int verify_steps = 0;     // speculative steps this request took part in
  // Steps in which the request drafted nothing (its draft depth was 0): one
  // plain decode row, one token. accepted + verify_steps + plain_steps is
  // every token a speculative request committed.
  int plain_steps = 0;
};

// New output of one request since the previous event.
struct GenerationEvent {
  std::string request_id;
  std::vector<int32_t> token_ids;
  std::string text;             // detokenized delta (stop strings removed)
  std::vector<float> logprobs;  // one per token when requested
  bool finished = false;
  FinishReason finish_reason = FinishReason::kNone;
  std::string error;            // set when finish_reason == kError
  GenerationUsage usage;        // running totals
};

using GenerationCallback = std::function<void(const GenerationEvent&)>;

class GenerationService {
 public:
  virtual ~GenerationService() = default;
  // Queues a request. Errors: invalid parameters (InvalidArgument), a prompt
  // longer than the context (OutOfRange), a full queue (ResourceExhausted),
  // shutting down (Unavailable).
  virtual absl::Status Submit(GenerationRequest request, GenerationCallback on_event) = 0;
  // Cancels a queued or running request and frees its cache; its last event
  // has finish_reason kCancelled. Unknown or finished ids are ignored.
  virtual void Cancel(const std::string& request_id) = 0;
};

}  // namespace verdict

#endif  // VERDICT_RUNTIME_ENGINE_GENERATION_H_
