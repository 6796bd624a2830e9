// The engine: continuous batching and the speculative step, on every
// tensor-parallel rank (seeds 000, 001, 002; docs: architecture.md).
//
// Each iteration, rank 0 broadcasts a StepControl (arrived and cancelled
// requests), every rank admits the same requests by KV capacity, prefills
// them, and runs one decode step over the running batch:
//   draft model proposes gamma tokens per request with their distributions
//   -> the confidence source scores them -> the planner picks verify lengths
//   -> rank 0's lengths are broadcast and used by every rank
//   -> the target verifies the planned rows -> the fused sampler accepts
//   -> each accepted token is appended with its stop checks.
// Positions advance by accepted tokens; the draft's cache is reconciled by
// re-feeding the tokens it has not seen (at most two after a step).
#ifndef VERDICT_RUNTIME_ENGINE_H_
#define VERDICT_RUNTIME_ENGINE_H_

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
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
#include "comm/communicator.h"
#include "monitoring/collective_timer.h"
#include "monitoring/metrics.h"
#include "runtime/generation.h"
#include "runtime/kv_cache.h"
#include "runtime/llama_model.h"
#include "runtime/step_control.h"
#include "runtime/tokenizer.h"
#include "scheduler/acceptance_estimator.h"
#include "scheduler/stop_checker.h"
#include "scheduler/verify_planner.h"

namespace verdict {

// Where a model's weights come from.
struct ModelSource {
  std::string dir;            // Hugging Face layout: config.json, *.safetensors
  bool dummy_weights = false; // --load-format dummy: seeded random weights
  uint64_t dummy_seed = 0;
};

struct EngineOptions {
  int num_draft_tokens = 5;  // gamma
  VerifyMode verify_mode = VerifyMode::kStatic;
  bool speculation = true;   // false: plain autoregressive decoding
  int max_running_requests = 64;
  int max_waiting_requests = 1024;
  int64_t max_model_len = 0;        // 0: the target's max_position_embeddings
  int64_t kv_cache_tokens = 65536;  // per model, positions of paged KV
  std::string cost_table_path;      // empty: verify everything
  float draft_prob_penalty = 5e-5f;
  uint64_t seed = 0;                // seeds requests that bring none
  int plan_check_interval = 64;     // steps between cross-rank plan checks
  int cpu_threads = 0;              // 0: all cores
};

// Running totals, for `verdict generate` and tests.
struct EngineStats {
  int64_t steps = 0;             // decode steps
  int64_t spec_steps = 0;        // request-steps that drafted
  int64_t drafted = 0;           // draft tokens proposed
  int64_t verified = 0;          // draft tokens verified
  int64_t accepted = 0;          // draft tokens accepted
  int64_t generated = 0;         // tokens committed
  int64_t plan_checks = 0;
  int64_t plan_mismatches = 0;
  std::vector<int32_t> last_verify_lens;  // the latest step's plan
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

  // False once the loop has stopped on an error (/ready then says 503).
  bool ready() const { return !loop_failed_.load(); }
  int rank() const { return comm_->rank(); }
  const Tokenizer& tokenizer() const { return *tokenizer_; }
  const ModelConfig& target_config() const { return target_->config(); }
  int64_t max_model_len() const { return max_model_len_; }
  EngineStats stats() const;

 private:
  struct Request;
  struct Model {
    std::unique_ptr<KvCache> kv;
    std::unique_ptr<ModelRunner> runner;
    std::unique_ptr<WeightSource> weights;
    ModelConfig config;
  };

  Engine(const EngineOptions& options, Communicator* comm);

  static absl::StatusOr<Model> LoadModel(const ModelSource& source, const EngineOptions& options,
                                         int speculative_slots, Communicator* comm);
  absl::Status ValidateRequest(const GenerationRequest& request) const;

  // Rank 0: the next control message; waits briefly when idle.
  StepControl CollectControl();
  void ApplyControl(StepControl control);
  void Admit();
  absl::Status Prefill(const std::vector<Request*>& admitted);
  absl::Status Step();
  absl::Status ProposeDrafts(const std::vector<Request*>& batch, const std::vector<bool>& spec,
                             std::vector<int32_t>* drafts, std::vector<float>* probs,
                             std::vector<float>* signals);
  absl::Status CheckPlanAcrossRanks(const VerifyPlan& plan);
  // Appends one step's tokens to a request with the stop checks; returns
  // true if the request finished.
  bool Commit(Request& request, const std::vector<int32_t>& tokens,
              const std::vector<float>& logprobs);
  void Finish(Request& request, FinishReason reason, const std::string& error = "");
  // Rank 0: running and waiting requests and KV usage, after each iteration.
  void UpdateGauges();
  void Emit(Request& request, std::vector<int32_t> tokens, std::vector<float> logprobs,
            bool finished, FinishReason reason, const std::string& error);

  // Metrics only (rank 0 with metrics set): one decode step's figures.
  // Called before the estimator folds the step, so that its state is the one
  // that scored `confidences`.
  void RecordStepMetrics(const std::vector<Request*>& batch, const std::vector<bool>& spec,
                         const std::vector<int32_t>& verify_lens,
                         const std::vector<double>& confidences,
                         const std::vector<int32_t>& accepted, int64_t verify_tokens,
                         double verify_seconds, double collective_seconds);

  const EngineOptions options_;
  // Every collective of the engine and its models goes through this timer
  // (for the TP metrics); comm_ points at it.
  std::unique_ptr<TimedCommunicator> collective_timer_;
  Communicator* comm_;
  ServingMetrics* metrics_ = nullptr;
  std::atomic<bool> drain_requested_local_{false};
  std::atomic<bool> drain_requested_any_{false};
  std::atomic<bool> loop_failed_{false};
  Model target_model_;
  std::optional<Model> draft_model_;
  ModelRunner* target_ = nullptr;
  std::unique_ptr<Tokenizer> tokenizer_;
  std::unique_ptr<OnlineAcceptanceEstimator> estimator_;
  std::unique_ptr<VerifyPlanner> planner_;
  int64_t max_model_len_ = 0;
  int gamma_ = 0;

  // The loop's state, identical on every rank.
  std::deque<std::unique_ptr<Request>> waiting_;
  std::vector<std::unique_ptr<Request>> running_;
  int64_t next_order_ = 0;
  VerifyPlan plan_;
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
  int64_t in_flight_ = 0;  // submitted and not finished
  bool draining_ = false;
  absl::Time drain_deadline_ = absl::InfiniteFuture();
  std::mt19937_64 seed_rng_;
};

}  // namespace verdict

#endif  // VERDICT_RUNTIME_ENGINE_H_
