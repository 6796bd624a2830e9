// The engine: continuous batching and the speculative step, on every
// tensor-parallel rank (seeds 000, 001, 002; docs: architecture.md).
//
// Each iteration, rank 0 broadcasts a StepControl (arrived and cancelled
// requests), every rank admits the same requests by KV capacity, and runs
// one decode step over the running batch (a joining prompt is read by that
// step's verify forward, and by the draft's first pass once the request
// drafts; --prefill separate reads it in prefill passes before the step):
//   the draft planner picks each request's draft depth (0 to gamma) from its
//   latest drafts' confidences and the cost table's draft split
//   -> the draft model runs max(depth) passes, each over the requests that
//   draft that deep (none at all: a plain decode step)
//   -> the confidence source scores the drafts -> the verify planner picks
//   verify lengths -> rank 0's depths and lengths are broadcast and used by
//   every rank
//   -> the target verifies the planned rows -> the fused sampler accepts
//   -> each accepted token is appended with its stop checks.
// Positions advance by accepted tokens; the draft's cache is reconciled by
// re-feeding the tokens it has not seen (at most two after a step).
//
// The step has a CPU half, here (batch membership, caps, confidences, the
// plan, its broadcast and check, then the commit: stop checks, streaming,
// the estimator's update), and a device half, the StepExecutor
// (runtime/step_executor.h: prefill, drafts, verify forward, sampler, and
// the device's own view of each request's tokens and positions).
//
// Overlap scheduling (--overlap on; docs/architecture.md): the CPU plans
// step N+1 while the executor's worker thread runs step N. Each iteration
// enqueues the step it planned, then commits the step before it:
//   plan N+1 (from confidences one or two steps old) -> enqueue N+1
//   -> await N -> commit N (stop checks, stream, observe, finish)
// so step N's tokens reach the CPU one step later. The executor fixes step
// N+1's positions and inputs from step N's accepted counts, caps the plan by
// the tokens the device knows are left, and gives a request whose step N
// emitted a stop token no drafts in step N+1 (EngineStats::
// stop_skipped_steps). Tokens the device produced for a request the CPU has
// already finished are dropped; its caches are freed only once the last
// step that names it is done. The pipeline's shape depends on nothing but
// the step count, so every rank plans from the same state and plans alike;
// the models' collectives run on the executor's own communicator (a
// duplicate), the control messages and plans on `comm`.
#ifndef VERDICT_RUNTIME_ENGINE_ENGINE_H_
#define VERDICT_RUNTIME_ENGINE_ENGINE_H_

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "comm/communicator.h"
#include "comm/nvlink_all_reduce.h"
#include "monitoring/metrics.h"
#include "runtime/engine/collective_timer.h"
#include "runtime/engine/event_delivery.h"
#include "runtime/engine/generation.h"
#include "runtime/engine/step_control.h"
#include "runtime/engine/step_executor.h"
#include "runtime/model/kv_cache.h"
#include "runtime/model/llama_model.h"
#include "runtime/text/tokenizer.h"
#include "scheduler/acceptance_estimator.h"
#include "scheduler/cost_table_catalog.h"
#include "scheduler/draft_planner.h"
#include "scheduler/stop_checker.h"
#include "scheduler/verify_planner.h"

namespace verdict {

// Where a model's weights come from.
struct ModelSource {
  // Hugging Face layout (config.json, *.safetensors), or "builtin:NAME" for
  // a public model's shape (BuiltinModelConfig), which needs dummy weights.
  std::string dir;
  bool dummy_weights = false; // --load-format dummy: seeded random weights
  uint64_t dummy_seed = 0;
  std::string tokenizer_dir;  // the target's tokenizer.model; empty: `dir`
  // The target's tokenizer when the caller has loaded it already (to compare
  // the draft's with it); null: loaded from tokenizer_dir.
  std::shared_ptr<const Tokenizer> tokenizer;
};

// Where the models run. Both backends compute the same forward pass
// (llama_model.h); the CUDA one takes one GPU per rank.
enum class ModelBackend { kCpu, kCuda };

// Small all-reduces of the CUDA backend at TP > 1: NCCL (kOff), or one-shot
// kernels over peer-mapped memory of the host's GPUs (comm/nvlink_all_reduce.h;
// kOn fails the start when the ranks cannot map each other's memory, kAuto
// then keeps NCCL).
enum class OneShotAllReduce { kOff, kOn, kAuto };

// CUDA graphs captured when the engine starts, before it serves
// (ModelRunner::CaptureGraphs; graph_shapes.h): none, a block of tokens per
// request (plain decode, full verify steps, the draft's passes), or every
// token tier a ragged step can reach (compact packing).
enum class GraphCaptureTiers { kOff, kBlocks, kAll };

inline constexpr char kAutoCostTable[] = "auto";

struct EngineOptions {
  int num_draft_tokens = 5;  // gamma
  // Tensor-parallel degree of the draft model: 0 shards it like the target
  // (every rank holds 1/TP of it, with collectives in every pass); 1 keeps
  // a whole draft on every rank, which runs its passes without collectives
  // and proposes the same drafts at every TP degree. The ranks then agree on
  // their drafts because they run the same kernels on the same inputs (one
  // GPU model per job); a divergence would show at the next plan check, in
  // the estimator's hash, which the drafts' confidences feed.
  int draft_tp = 0;
  VerifyMode verify_mode = VerifyMode::kStatic;
  bool speculation = true;   // false: plain autoregressive decoding
  int max_running_requests = 64;
  int max_waiting_requests = 1024;
  int64_t max_model_len = 0;        // 0: the target's max_position_embeddings
  int64_t kv_cache_tokens = 65536;  // per model, positions of paged KV
  // The cost table's file; empty: verify everything; kAutoCostTable: the
  // first table in cost_table_dirs measured on this GPU, these models'
  // shapes, this TP degree and gamma (scheduler/cost_table_catalog.h), else
  // none.
  std::string cost_table_path;
  std::vector<std::string> cost_table_dirs;  // searched under kAutoCostTable
  float draft_prob_penalty = 5e-5f;
  uint64_t seed = 0;                // seeds requests that bring none
  int plan_check_interval = 64;     // steps between cross-rank plan checks
  int cpu_threads = 0;              // 0: all cores
  // In [0, 1]: every verified draft is accepted with this chance instead of
  // by the target (kernels/verify_sampler.h, simulated acceptance), so that
  // dummy weights give realistic acceptance lengths in benchmarks. Refused
  // unless the target's weights are dummy; ignored, with a log line, when
  // speculation is off (nothing is drafted). Negative: off.
  double simulate_acceptance = -1;
  // An operator's override of the draft planner: steps of more requests
  // than this draft nothing, and every request verifies one row, as with
  // speculation off; the draft catches up on the tokens it missed in its
  // first pass of the next step that drafts. 0: no limit (the draft planner
  // decides, from a cost table with the draft split).
  int speculation_max_batch = 0;
  // Overlap scheduling: the CPU plans step N+1 while a worker thread runs
  // step N (see the top of this file). Off by default: every plan then uses
  // the fresh drafts' confidences, and steps run one at a time.
  bool overlap = false;
  // Where joining prompts are read (StepExecutor::Options::fused_prefill):
  // true, in the step's own passes, where the verify planner prices the
  // target's prompt rows (Request::prefill_rows); false, in prefill passes
  // of their own.
  bool fused_prefill = true;
  ModelBackend backend = ModelBackend::kCpu;
  bool cuda_graphs = true;  // CUDA backend: replay repeated step shapes from graphs
  // CUDA backend: pad steps to repeating launch shapes first
  // (CudaModelOptions::pad_graph_shapes).
  bool pad_graph_shapes = true;
  // CUDA backend with pad_graph_shapes: the launch shapes captured at start,
  // for steps of up to graph_capture_batch requests (0: up to
  // max_running_requests). Shapes not captured are captured on their
  // second use.
  GraphCaptureTiers graph_capture = GraphCaptureTiers::kBlocks;
  int graph_capture_batch = 0;
  // CUDA backend at TP > 1 (each model sharded over the ranks); ignored
  // elsewhere. On one host with NVLink the one-shot kernels beat NCCL's
  // ring for a decode step's messages (docs/PERF.md, tensor parallel).
  OneShotAllReduce one_shot_all_reduce = OneShotAllReduce::kAuto;
  // The longest one device collective (NCCL) may take.
  absl::Duration comm_timeout = absl::Seconds(30);
};

// Running totals, for `verdict generate` and tests.
struct EngineStats {
  int64_t steps = 0;             // decode steps
  int64_t spec_steps = 0;        // request-steps that drafted
  int64_t drafted = 0;           // draft tokens proposed
  int64_t verified = 0;          // draft tokens verified
  int64_t accepted = 0;          // draft tokens accepted
  // Request-steps that rejected a verified draft. Each verified draft up to
  // the first reject is one accept test, so accepted / (accepted + rejected)
  // is the per-draft acceptance rate.
  int64_t rejected = 0;
  int64_t generated = 0;         // tokens committed
  int64_t draft_passes = 0;      // draft passes run, all steps
  int64_t plain_steps = 0;       // decode steps that ran no draft pass
  // Request-steps that drafted nothing because the request's previous step
  // emitted a stop token on the device: under overlap, a step planned
  // before that stop reached the CPU (seed 000).
  int64_t stop_skipped_steps = 0;
  int64_t plan_checks = 0;
  int64_t plan_mismatches = 0;
  std::vector<int32_t> last_verify_lens;  // the latest step's plan
  // Passes the models replayed from CUDA graphs (ModelRunner::graph_replays).
  int64_t target_graph_replays = 0;
  int64_t draft_graph_replays = 0;
  // All-reduces the models enqueued as one-shot kernels (captured ones
  // count once, at capture).
  int64_t one_shot_all_reduces = 0;
};

// One decode step as a rank saw it (Engine::set_step_observer): what
// `verdict profile` measures the cost table from.
struct StepTiming {
  int64_t step = 0;           // decode steps so far, this one included
  int batch_size = 0;         // requests in the step
  int64_t verify_tokens = 0;  // target rows the verify ran
  int64_t budget = 0;         // drafts the plan verifies
  PlanReason plan_reason = PlanReason::kEmptyBatch;
  std::optional<double> pinned_budget_fraction;  // the planner's pin for the step
  int draft_passes = 0;       // the draft passes the step ran
  DraftReason draft_reason = DraftReason::kEmptyBatch;  // why it ran them
  int drafting_requests = 0;  // requests that proposed drafts
  // The catch-up tokens of the drafting requests, as the draft plan priced
  // them (DraftPlan::catch_up_tokens).
  int64_t catch_up_tokens = 0;
  double draft_seconds = 0;   // the draft passes and their sampler, this rank's clock
  double verify_seconds = 0;  // target forward and sampler, this rank's clock
  // The prefills of the requests admitted since the previous step: their
  // prompt tokens and the wall time of each model's prefill forward (0
  // under fused_prefill, where the verify and draft times hold them).
  int64_t prefill_tokens = 0;
  // The prompt rows of in-step prefill the verify planner priced into the
  // step's verify (PlannerInput::prefill_rows): under fused_prefill, the
  // target's share of prefill_tokens.
  int64_t priced_prefill_rows = 0;
  double target_prefill_seconds = 0;
  double draft_prefill_seconds = 0;
  // The cost table's price of the step as planned (draft + verify); NaN
  // without a table.
  double predicted_seconds = 0;
  // The scheduling thread's own time, this rank's clock: planning the step
  // (its confidences, the draft plan and the verify plan), and under overlap
  // waiting for its outcome. A wait near 0 means the device waited for the
  // CPU instead: the step's pace was the CPU's.
  double plan_seconds = 0;
  double await_seconds = 0;
  // When the step was committed, on this rank's clock: the gaps between
  // steps hold what draft_seconds and verify_seconds do not (planning,
  // prefills, the commit itself).
  absl::Time committed_at;
};

class Engine : public GenerationService {
 public:
  // `comm` carries the control messages, the verify lengths and the
  // tensor-parallel collectives of the CPU backend; its world size is the TP
  // degree. It must outlive the engine.
  static absl::StatusOr<std::unique_ptr<Engine>> Create(const EngineOptions& options,
                                                        const ModelSource& target,
                                                        std::optional<ModelSource> draft,
                                                        Communicator* comm);
  ~Engine() override;

  // Rank 0 only (the ranks that serve clients).
  absl::Status Submit(GenerationRequest request, GenerationCallback on_event) override;
  void Cancel(const std::string& request_id) override;

  // Runs the step loop on the calling thread until a shutdown reaches every
  // rank. Every rank calls it. Returns the first error of a collective or a
  // step; then the other ranks fail within the communicator's deadline.
  absl::Status Run();

  // Rank 0: stop admitting; requests still running at `deadline` are
  // cancelled; then every rank's Run() returns.
  void Shutdown(absl::Time deadline = absl::InfinitePast());

  // Any rank, from any thread (a signal-handling thread): asks for a
  // graceful shutdown. The ranks exchange the request every iteration, so
  // rank 0 learns of it however many ranks got the signal.
  void RequestDrain() { drain_requested_local_.store(true); }
  // Rank 0: true once any rank asked for a drain.
  bool drain_requested() const { return drain_requested_any_.load(); }

  // Rank 0: where serving metrics go; optional (null: none). Set before Run;
  // configures `metrics` with the engine's mode, gamma and TP degree.
  void set_metrics(ServingMetrics* metrics);

  // Rank 0: pins the planner's verify budget to `fraction` of the block's
  // drafts (nullopt unpins). The pin travels with the next StepControl, so
  // every rank applies it before the same step. Refused in static mode,
  // outside [0, 1], and under a simulated acceptance other than 1 (as the
  // scheduler of seeds/002_d567d7ab3f14fa00.txt, "Cost table", refuses it).
  absl::Status PinVerifyBudget(std::optional<double> fraction);

  // Rank 0: pins every request's draft depth to min(depth, its cap), whatever
  // the draft planner would plan (nullopt unpins); it travels as the budget
  // pin does. With a budget pin it gives `verdict profile` steps of fewer
  // passes. Refused outside [0, gamma] and without a draft model.
  absl::Status PinDraftDepth(std::optional<int> depth);

  // Every rank: called on the loop thread after each decode step. Set before
  // Run.
  void set_step_observer(std::function<void(const StepTiming&)> observer) {
    step_observer_ = std::move(observer);
  }

  // What a cost table for this engine is measured on (its GPU, its models'
  // shapes, the TP degree, gamma); nullopt without a draft model.
  const std::optional<CostTableKey>& cost_table_key() const { return cost_table_key_; }

  // False once the loop has stopped on an error (/ready then says 503).
  bool ready() const { return !loop_failed_.load(); }

  // How long the loop's current iteration of work (admission, the step's
  // plans, its passes on the device, its commit) has been running at `now`;
  // nullopt while the loop is idle between iterations. Safe from any
  // thread. A step that never ends (a device or a collective that stopped
  // answering) holds every request; serve watches this to end the process.
  std::optional<absl::Duration> StepRunningFor(absl::Time now) const {
    const int64_t started = step_started_unix_ns_.load(std::memory_order_relaxed);
    if (started == 0) return std::nullopt;
    return now - absl::FromUnixNanos(started);
  }
  int rank() const { return comm_->rank(); }
  int world_size() const { return comm_->world_size(); }  // the TP degree
  const Tokenizer& tokenizer() const { return *tokenizer_; }
  const ModelConfig& target_config() const { return target_->config(); }
  int64_t max_model_len() const { return max_model_len_; }
  const EngineOptions& options() const { return options_; }
  // Whether requests draft (a draft model and speculation on).
  bool speculative() const { return draft_model_.has_value(); }
  EngineStats stats() const;

 private:
  struct Request;
  struct Model {
    std::unique_ptr<KvCache> kv;
    // Before the runner, which uses it: destroyed after it.
    std::unique_ptr<NvlinkAllReduce> one_shot_all_reduce;
    std::unique_ptr<ModelRunner> runner;
    std::unique_ptr<WeightSource> weights;
    ModelConfig config;
    // The longest context the model's CUDA graphs serve (before the
    // speculative slots); 0 on host backends.
    int64_t graph_context = 0;
  };

  Engine(const EngineOptions& options, Communicator* comm);

  // Captures the models' CUDA graphs of EngineOptions::graph_capture's
  // shapes before the engine serves (the CUDA backend), with a progress line
  // and a memory report on rank 0.
  absl::Status CaptureGraphsAhead(const EngineOptions& options);
  // `is_draft`: the draft model (the CUDA backend then runs its few-row
  // products on the skinny GEMM, CudaModelOptions::skinny_gemm).
  // `graph_context`: the context its graphs serve (the target's, for the
  // draft); 0: this model's own, from the options and its config.
  static absl::StatusOr<Model> LoadModel(const ModelSource& source, const EngineOptions& options,
                                         int speculative_slots, Communicator* comm,
                                         Communicator* device_comm, bool is_draft,
                                         int64_t graph_context = 0);
  absl::Status ValidateRequest(const GenerationRequest& request) const;

  // Rank 0: the next control message; waits briefly when idle.
  StepControl CollectControl();
  void ApplyControl(StepControl control);
  void Admit();
  // One decode step, overlap off: the draft plan from the latest drafts'
  // confidences, drafts, the verify plan from their fresh confidences,
  // verify, commit.
  absl::Status Step();
  // Overlap on: plans and enqueues the next step (if any request runs), then
  // awaits and commits the one before it.
  absl::Status StepOverlapped();
  // Overlap: awaits every step still in flight (dropping its outcome) and
  // stops the executor's worker; then frees the retired caches.
  void DrainSteps();
  // What the commit of a planned step needs (the planner's state has moved
  // on by then under overlap).
  struct PlannedStep {
    std::vector<int64_t> batch;        // request orders, batch order
    std::vector<int32_t> draft_depths;  // rank 0's draft plan (SetDraftDepths)
    int draft_passes = 0;               // max(draft_depths)
    DraftReason draft_reason = DraftReason::kEmptyBatch;
    int64_t catch_up_tokens = 0;        // DraftPlan::catch_up_tokens
    std::vector<int32_t> verify_lens;  // rank 0's plan
    PlanReason reason = PlanReason::kEmptyBatch;
    bool packed = false;  // VerifyPlan::packed, the same on every rank
    int64_t budget = 0;
    double predicted_seconds = 0;
    int64_t prefill_rows = 0;  // the prompt rows the verify planner priced (StepCaps)
    std::optional<double> pinned_budget_fraction;
    int64_t collective_nanoseconds = 0;  // this thread's, while planning
    int64_t plan_nanoseconds = 0;   // confidences, draft plan and verify plan
    int64_t await_nanoseconds = 0;  // overlap: the wait for the step's outcome

    void SetDraftDepths(std::vector<int32_t> depths) {
      draft_depths = std::move(depths);
      draft_passes = 0;
      for (int32_t d : draft_depths) draft_passes = d > draft_passes ? d : draft_passes;
    }
  };
  // Caches of a finished request, freed once step `last_step` is done.
  struct RetiredKv {
    int64_t last_step = 0;
    int target_kv = -1;
    int draft_kv = -1;
  };
  std::vector<Request*> RunningBatch();
  // Counts a decode step; returns the collective clock at its start, from
  // which the step's collective time is measured (metrics).
  int64_t BeginStep();
  Request* FindRunning(int64_t order);
  ExecutorRequest ToExecutorRequest(const Request& request) const;
  // The job of a new step over `batch` with `step`'s plans (the releases
  // since the last one).
  StepJob NewJob(const std::vector<Request*>& batch, const PlannedStep& step);
  // Whether a step of `batch_size` requests may draft (speculation_max_batch).
  bool DraftsAtBatch(int batch_size) const;
  // Per request of a step's batch, the most rows its verify may take (its
  // draft cap and the tokens it has left) and its planner flags: the input
  // both planners share.
  struct StepCaps {
    std::vector<int32_t> max_verify_lens;
    std::vector<uint8_t> flags;
    std::vector<int32_t> catch_up_tokens;  // Request::catch_up_tokens, for the draft planner
    int64_t prefill_rows = 0;  // the sum of Request::prefill_rows, for the verify planner
  };
  StepCaps VerifyCaps(const std::vector<Request*>& batch) const;
  // [batch * gamma] confidences of each request's latest drafts
  // (Request::lagged_signals); a position it never drafted (a new request,
  // or deeper than it has drafted) takes the estimator's recent acceptance
  // rate there (ConfidenceSource::UnseenConfidence), so that a request
  // joining a batch is planned like the others, not at full depth; while
  // the estimator is on its prior, every position takes its prior rate.
  absl::Status LaggedConfidences(const std::vector<Request*>& batch,
                                 std::vector<double>* confidences);
  // The draft plan of a step over `batch` into step->draft_depths, from
  // `confidences` (lagged). `broadcast`: rank 0's depths go out now (overlap
  // off, before the drafts); otherwise PlanStep sends them with the lengths.
  absl::Status PlanDrafts(const StepCaps& caps, absl::Span<const double> confidences,
                          bool broadcast, PlannedStep* step);
  // The CPU half of a step's start after its draft plan: the verify plan
  // from `confidences`, the plan check, rank 0's verify lengths (and its
  // depths, unless PlanDrafts sent them) on every rank.
  absl::Status PlanStep(const std::vector<Request*>& batch, const StepCaps& caps,
                        absl::Span<const double> confidences, bool depths_sent,
                        PlannedStep* step);
  // Appends a step's tokens to the requests still running, with their stop
  // checks, updates the counters and the estimator, finishes requests.
  absl::Status CommitStep(const PlannedStep& step, const StepOutcome& outcome);
  void FreeRetiredKv();
  // EngineStats::stop_skipped_steps, from every step the executor ran.
  void CountStopSkipped(const StepOutcome& outcome);
  absl::Status CheckPlanAcrossRanks(const VerifyPlan& plan, const DraftPlan& draft_plan);
  // Appends one step's tokens to a request with the stop checks; returns
  // true if the request finished.
  bool Commit(Request& request, const std::vector<int32_t>& tokens,
              const std::vector<float>& logprobs);
  void Finish(Request& request, FinishReason reason, const std::string& error = "");
  // Rank 0: running and waiting requests and KV usage, after each iteration.
  void UpdateGauges();
  void Emit(Request& request, std::vector<int32_t> tokens, std::vector<float> logprobs,
            bool finished, FinishReason reason, const std::string& error);

  // Metrics only (rank 0 with metrics set): one decode step's figures, for
  // the requests whose tokens were committed. Called before the estimator
  // folds the step, so that its state is the one that scored `confidences`
  // (the step's drafts).
  void RecordStepMetrics(const PlannedStep& step, const StepOutcome& outcome,
                         const std::vector<uint8_t>& committed,
                         const std::vector<double>& confidences, int drafting,
                         int plain_rows, double collective_seconds);

  const EngineOptions options_;
  // Every collective of the engine and its models goes through this timer
  // (for the TP metrics); comm_ points at it.
  std::unique_ptr<TimedCommunicator> collective_timer_;
  Communicator* comm_;
  // The CUDA backend's tensor-parallel collectives (NCCL on the models'
  // streams); null on the CPU backend and at TP 1.
  std::unique_ptr<Communicator> device_comm_;
  // Overlap on the CPU backend at TP > 1: the models' collectives, on the
  // executor's thread (a duplicate of `comm`), and their timer.
  std::unique_ptr<Communicator> executor_comm_;
  std::unique_ptr<TimedCommunicator> executor_timer_;
  // draft_tp 1 at TP > 1: the draft model's world of one.
  std::unique_ptr<Communicator> draft_comm_;
  ServingMetrics* metrics_ = nullptr;
  std::function<void(const StepTiming&)> step_observer_;
  std::atomic<bool> drain_requested_local_{false};
  std::atomic<bool> drain_requested_any_{false};
  std::atomic<bool> loop_failed_{false};
  std::atomic<int64_t> step_started_unix_ns_{0};  // 0: between iterations
  Model target_model_;
  std::optional<Model> draft_model_;
  ModelRunner* target_ = nullptr;
  std::shared_ptr<const Tokenizer> tokenizer_;  // shared with the caller that loaded it
  std::unique_ptr<OnlineAcceptanceEstimator> estimator_;
  std::unique_ptr<DraftPlanner> draft_planner_;
  std::optional<CostTableKey> cost_table_key_;
  std::unique_ptr<VerifyPlanner> planner_;
  int64_t max_model_len_ = 0;
  int gamma_ = 0;

  // The loop's state, identical on every rank.
  std::deque<std::unique_ptr<Request>> waiting_;
  std::vector<std::unique_ptr<Request>> running_;  // by Request::order, ascending (FindRunning)
  int64_t next_order_ = 0;
  DraftPlan draft_plan_;
  VerifyPlan plan_;
  // The CUDA backend's samplers (null on the CPU backend); the executor
  // uses them, so they go after it.
  std::unique_ptr<DeviceSampling> device_sampling_;
  // The device half of the step; declared after the models, so that its
  // worker stops before they go.
  std::unique_ptr<StepExecutor> executor_;
  // Overlap: steps enqueued and not yet committed, oldest first; the
  // admissions and releases the next job carries.
  std::deque<PlannedStep> steps_in_flight_;
  std::vector<ExecutorRequest> pending_admitted_;
  std::vector<int64_t> pending_released_;
  int64_t completed_step_ = 0;  // the latest step whose outcome was awaited
  std::vector<RetiredKv> retired_kv_;
  EngineStats stats_;
  // This rank's cumulative figures for the TP metrics, sent to rank 0 with
  // the plan check. Never read by the loop's decisions.
  int64_t verify_nanoseconds_ = 0;
  int64_t step_collective_nanoseconds_ = 0;

  // Rank 0's client side, guarded by mu_.
  mutable std::mutex mu_;
  std::condition_variable cv_;
  StepControl pending_;
  std::map<std::string, GenerationCallback> callbacks_;
  // Runs the callbacks off the loop's thread (Emit queues, Run flushes).
  EventDelivery delivery_;
  int64_t in_flight_ = 0;  // submitted and not finished
  bool draining_ = false;
  absl::Time drain_deadline_ = absl::InfiniteFuture();
  std::mt19937_64 seed_rng_;
};

}  // namespace verdict

#endif  // VERDICT_RUNTIME_ENGINE_ENGINE_H_
