// The device side of the decode step: what the GPU does, and what it knows
// that the CPU learns only when a step's results come back (seed 000,
// "Device copies for the next step"; docs/architecture.md, overlap
// scheduling).
//
// Per running request the executor keeps the device's view: every token the
// device emitted (the CPU commits them later, and may drop those after a
// stop), the positions whose keys are valid in each cache, and whether the
// request's latest step emitted one of its stop ids. A StepJob from the CPU
// names the requests of a step and their planned verify lengths; the
// executor fixes the rest from its own state, so a step planned before the
// previous one's results reached the CPU still starts where that one ended:
//  - row 0's input is the request's last emitted token, at its position;
//  - the draft model first catches up on the tokens it has not seen;
//  - a request whose previous step emitted a stop token, or that has emitted
//    its max_tokens, proposes no draft and verifies one row (seed 000: its
//    next drafts get confidence 0, so the planned step verifies none);
//  - the planned verify length is capped by the tokens the request has left,
//    by its own draft cap and by the drafts it proposed, so no step writes
//    past its KV reservation.
//
// Then it proposes the drafts, runs the target's verify forward and the
// fused sampler, and returns per request the emitted tokens, the accepted
// prefix, the drafts' confidence signals and the stop flag (StepOutcome).
//
// Two ways to drive it. Overlap off: the engine calls Admit, ProposeDrafts
// and Verify on its own thread, and plans between the last two from the
// fresh drafts. Overlap on: Start() runs every Enqueue()d job (admissions,
// drafts, verify) on a worker thread, first in first out, while the engine's
// thread plans the next step; Await() returns the outcomes in order. The
// worker is the only thread that runs the models then, so their collectives
// need a communicator of their own (Communicator::Duplicate).
#ifndef VERDICT_RUNTIME_ENGINE_STEP_EXECUTOR_H_
#define VERDICT_RUNTIME_ENGINE_STEP_EXECUTOR_H_

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/verify_sampler.h"
#include "runtime/engine/collective_timer.h"
#include "runtime/engine/device_sampling.h"
#include "runtime/model/llama_model.h"

namespace verdict {

// What the device needs of an admitted request. Its cache handles come from
// the engine, which frees them only once no queued or running job names the
// request.
struct ExecutorRequest {
  int64_t id = 0;  // the engine's admission order
  std::vector<int32_t> prompt_token_ids;
  int target_kv = -1;
  int draft_kv = -1;    // -1 when the request does not speculate
  bool speculative = false;
  // Whether Admit prefills the draft too (Options::fused_prefill false).
  // Without, the draft has seen no token of the request, and its first
  // drafting step's first pass catches up on all of them; under
  // fused_prefill that is so for every request, and the flag only tells
  // whether the engine priced the prompt as catch-up (Engine::Admit).
  bool prefill_draft = true;
  int max_draft_tokens = -1;  // < 0: gamma
  int max_tokens = 1;
  float temperature = 1.0f;
  int32_t top_k = 0;
  float top_p = 1.0f;
  float min_p = 0.0f;
  uint64_t seed = 0;
  // The ids whose emission the sampler flags (emitted_stop_token): EOS
  // unless ignored, and the request's stop_token_ids.
  std::vector<int32_t> stop_token_ids;
};

struct StepJob {
  int64_t step = 0;  // the engine's decode step number, for errors
  // Overlap on: requests to prefill before the step (they are in `batch`).
  std::vector<ExecutorRequest> admitted;
  // Requests the engine finished: their device state is dropped before the
  // step (a job never names a request released by an earlier job).
  std::vector<int64_t> released;
  std::vector<int64_t> batch;        // request ids, in batch order
  std::vector<int32_t> verify_lens;  // the plan (rank 0's), per batch entry
  // The draft plan (rank 0's), per batch entry: the drafts it proposes, 0 to
  // gamma (scheduler/draft_planner.h). 0 makes the request a plain decode
  // row of the verify forward; 0 for all runs no draft pass at all. The step
  // runs max(draft_depths) draft passes, each over the requests that draft
  // that deep.
  std::vector<int32_t> draft_depths;
  // The plan's layout (VerifyPlan::packed): true, each request runs only its
  // verify_lens rows (compact mode, trimmed or pinned budget); false, every
  // drafting request runs the full block and the sampler's cutoff stops
  // acceptance at its verify length.
  bool packed = false;
};

// One step's results, per request in batch order.
struct StepOutcome {
  int64_t step = 0;
  std::vector<uint8_t> drafted;  // proposed drafts this step
  std::vector<int32_t> draft_depths;  // how many (0 where none)
  int draft_passes = 0;               // the draft passes the step ran
  // Would have drafted, but its previous step emitted a stop token on the
  // device: no drafts, one verify row.
  std::vector<uint8_t> stop_skipped;
  std::vector<int32_t> verify_lens;  // rows verified: drafts verified + 1
  std::vector<int32_t> accepted;     // last_valid_offset
  std::vector<uint8_t> emitted_stop;
  // The emitted tokens (accepted drafts, then the sampled token) and their
  // logprobs: request i's are [token_offsets[i], token_offsets[i + 1]).
  std::vector<int32_t> token_offsets;
  std::vector<int32_t> tokens;
  std::vector<float> logprobs;
  // [batch * gamma]: the confidence signal of each proposed draft (0 where
  // none was proposed: past the request's depth).
  std::vector<float> signals;
  int64_t verify_tokens = 0;           // target rows of the verify forward
  int64_t draft_nanoseconds = 0;       // the draft passes and their sampler
  int64_t verify_nanoseconds = 0;      // the verify forward and the sampler
  int64_t collective_nanoseconds = 0;  // in the models' collectives, whole job
  // The prefills of the requests admitted since the previous outcome (in
  // this job under overlap, else by Admit calls before it): their prompt
  // tokens and the wall time of the target's and the draft's prefill
  // forwards, which the draft and verify times leave out. Under
  // fused_prefill the target's prompt tokens are counted in the step whose
  // verify forward reads them, and their time is in verify_nanoseconds (the
  // prefill times stay 0; the draft's catch-up is in draft_nanoseconds).
  int64_t prefill_tokens = 0;
  int64_t target_prefill_nanoseconds = 0;
  int64_t draft_prefill_nanoseconds = 0;
};

class StepExecutor {
 public:
  struct Options {
    int gamma = 5;
    int vocab_size = 0;
    SamplerConfig sampler;
    // The CUDA backend's samplers: the models write their logits to the
    // device and both samplers run there. Null: the CPU samplers, on host
    // logits.
    DeviceSampling* device_sampling = nullptr;
    // Where a joining prompt is read. True: in the step's own passes (the
    // target's verify forward reads the prompt ahead of the request's first
    // verify rows, the draft's first pass with its catch-up), so a join
    // costs no extra read of either model's weights, and the draft reads a
    // prompt only once the request drafts. False: Admit runs a prefill
    // forward of each model (of the target alone without prefill_draft).
    bool fused_prefill = true;
  };

  // `draft` may be null (no speculation). `model_comm`, if given, is the
  // communicator the models' collectives go through; it only times them.
  StepExecutor(const Options& options, ModelRunner* target, ModelRunner* draft,
               const TimedCommunicator* model_comm);
  // Stops the worker (see Stop).
  ~StepExecutor();

  // ---- On the caller's thread (no worker running).

  // Registers `requests`, and prefills them unless fused_prefill; on an
  // error registers none of them.
  absl::Status Admit(const std::vector<ExecutorRequest>& requests);
  // Drops the released requests, fixes the batch from the device state and
  // proposes the drafts: fills drafted, stop_skipped and signals.
  absl::Status ProposeDrafts(const StepJob& job, StepOutcome* outcome);
  // The verify forward and the sampler for the job ProposeDrafts prepared;
  // updates the device state.
  absl::Status Verify(const StepJob& job, StepOutcome* outcome);

  // ---- Overlap: the worker thread.

  void Start();
  void Enqueue(StepJob job);
  // The outcome of the oldest job not yet awaited. After an error every
  // later job fails with it, unrun.
  absl::StatusOr<StepOutcome> Await();
  // Jobs enqueued and not yet awaited.
  int64_t in_flight() const;
  // Lets the running job finish, drops the queued ones and joins the worker.
  // Idempotent.
  void Stop();

 private:
  struct DeviceRequest {
    ExecutorRequest request;
    std::vector<int32_t> tokens;  // prompt, then every token emitted
    int64_t target_valid = 0;
    int64_t draft_valid = 0;
    bool emitted_stop = false;  // by the latest step

    int64_t generated() const {
      return static_cast<int64_t>(tokens.size() - request.prompt_token_ids.size());
    }
  };

  absl::StatusOr<StepOutcome> Execute(const StepJob& job);
  void WorkerLoop();
  absl::Status RunDrafts(const std::vector<DeviceRequest*>& batch, StepOutcome* outcome);

  const Options options_;
  ModelRunner* const target_;
  ModelRunner* const draft_;
  const TimedCommunicator* const model_comm_;
  std::map<int64_t, DeviceRequest> requests_;  // by id

  // The step between ProposeDrafts and Verify.
  std::vector<DeviceRequest*> batch_;
  std::vector<int32_t> drafts_;     // [batch * gamma]
  std::vector<float> draft_probs_;  // [batch * gamma * vocab], host sampling only
  // Device sampling: the store row of each batch entry's drafts, -1 if none.
  std::vector<int32_t> store_rows_;
  int64_t job_collective_start_ = 0;
  // Admit's prefills since the last outcome (StepOutcome's prefill fields).
  int64_t prefill_tokens_ = 0;
  int64_t target_prefill_nanoseconds_ = 0;
  int64_t draft_prefill_nanoseconds_ = 0;

  // The worker.
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::thread worker_;
  bool stopping_ = false;
  std::deque<StepJob> queued_;
  std::deque<absl::StatusOr<StepOutcome>> done_;
  int64_t in_flight_ = 0;
  absl::Status failure_;  // the first error; later jobs end with it
};

}  // namespace verdict

#endif  // VERDICT_RUNTIME_ENGINE_STEP_EXECUTOR_H_
