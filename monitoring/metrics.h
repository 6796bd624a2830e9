// The verdict_* metric families and the Prometheus pull exposer.
//
// Names follow Prometheus conventions: base units (seconds, tokens, ratios
// in [0, 1]), `_total` for counters, `_seconds` for latency histograms.
// Metrics are observational only: nothing in the step's data flow reads them
// back, and every caller may hold a null ServingMetrics pointer instead.
//
// The families, by what they watch (deploy/README.md lists them with the
// alerts and dashboard panels built on them):
//   serving       verdict_requests_total{outcome}, verdict_prompt_tokens_total,
//                 verdict_generated_tokens_total, verdict_time_to_first_token_seconds,
//                 verdict_inter_token_latency_seconds, verdict_request_latency_seconds,
//                 verdict_running_requests, verdict_waiting_requests,
//                 verdict_max_running_requests, verdict_max_waiting_requests,
//                 verdict_kv_cache_usage_ratio
//   speculation   verdict_draft_tokens_{proposed,verified,accepted}_total,
//                 verdict_draft_position_{verified,accepted}_total{position},
//                 verdict_step_acceptance_length, verdict_request_acceptance_length,
//                 verdict_step_verify_tokens, verdict_planned_budget_ratio,
//                 verdict_verify_mode_info{mode}, verdict_num_draft_tokens,
//                 verdict_decode_steps_total
//   planner       verdict_step_draft_seconds, verdict_step_verify_seconds,
//                 verdict_step_predicted_seconds,
//                 verdict_step_prediction_relative_error, verdict_plan_steps_total{reason},
//                 verdict_estimator_ready, verdict_estimator_{fitted,slope,intercept}{position},
//                 verdict_estimator_{observations,refits}_total{position},
//                 verdict_estimator_brier_score{position},
//                 verdict_estimator_brier_samples_total{position},
//                 verdict_graph_replays_total{model},
//                 verdict_eager_passes_total{model, reason}
//   TP            verdict_plan_checks_total, verdict_plan_mismatches_total,
//                 verdict_step_collective_seconds, verdict_tp_world_size,
//                 verdict_tp_ranks_up, verdict_rank_decode_steps_total{rank},
//                 verdict_rank_verify_seconds_total{rank},
//                 verdict_rank_collective_seconds_total{rank}
//
// Threading: the recording methods are called from the engine thread, except
// RecordRequestRejected (the threads that submit requests); prometheus-cpp's
// metrics are thread-safe, and the few running sums kept here are touched by
// the engine thread only. Configure must run before the engine loop starts.
#ifndef VERDICT_MONITORING_METRICS_H_
#define VERDICT_MONITORING_METRICS_H_

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "prometheus/counter.h"
#include "prometheus/exposer.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"

namespace verdict {

// How a request ended; the label value of verdict_requests_total.
enum class RequestOutcome { kStop, kLength, kCancelled, kRejected, kError };

const char* RequestOutcomeName(RequestOutcome outcome);

// What the engine runs with, fixed for the life of a server.
struct EngineInfo {
  std::string verify_mode;   // "static", "cap-accept" or "compact"
  int num_draft_tokens = 0;  // gamma: positions 0..gamma-1 get a `position` label
  int world_size = 1;        // TP degree: ranks 0..world_size-1 get a `rank` label
  int max_running_requests = 0;
  int max_waiting_requests = 0;
  // Every value the plan reason can take (PlanReasonName), so that each
  // verdict_plan_steps_total series exists, at 0, before its first step.
  std::vector<std::string> plan_reasons;
  // The same for verdict_draft_plan_steps_total (DraftReasonName).
  std::vector<std::string> draft_reasons;
};

// One speculative request's verify in a step.
struct DraftOutcome {
  int proposed = 0;  // drafts the draft model produced (the request's draft depth)
  int verified = 0;  // drafts the target checked (the verify length - 1)
  int accepted = 0;  // accepted prefix, <= verified
};

// One decode step as rank 0 saw it.
struct StepRecord {
  std::string_view plan_reason;  // PlanReasonName of the step's plan
  std::string_view draft_reason;  // DraftReasonName of the step's draft plan
  int draft_passes = 0;           // the draft passes the step ran
  int drafting_requests = 0;      // requests that proposed drafts
  // Speculative requests that drafted nothing (depth 0): a plain decode row
  // each, one committed token.
  int plain_rows = 0;
  // Drafts the plan verifies and the full block's drafts (speculative
  // requests x gamma); the ratio is recorded when the block is not empty.
  int64_t planned_budget = 0;
  int64_t full_block_drafts = 0;
  int64_t verify_tokens = 0;       // target rows the step ran
  double draft_seconds = 0;        // measured: the draft passes and their sampler
  double verify_seconds = 0;       // measured: target forward + sampler
  double predicted_seconds = 0;    // the cost table's, draft + verify; NaN without one
  double collective_seconds = 0;   // this rank's time inside collectives during the step
  // One entry per speculative request of the step.
  absl::Span<const DraftOutcome> drafts;
};

// The estimator's state at one draft position.
struct EstimatorPositionState {
  bool fitted = false;
  double slope = 0;
  double intercept = 0;
  int64_t observations = 0;  // ever folded
  int64_t refits = 0;        // accepted refits
};

// Cumulative figures of one TP rank, gathered to rank 0.
struct RankFigures {
  int64_t decode_steps = 0;
  double verify_seconds = 0;
  double collective_seconds = 0;
};

class ServingMetrics {
 public:
  explicit ServingMetrics(std::shared_ptr<prometheus::Registry> registry);

  // Creates the per-position and per-rank series and records the constant
  // gauges. Call once, before the engine loop runs.
  void Configure(const EngineInfo& info);

  // ---- serving
  void RecordRequestFinished(RequestOutcome outcome, int prompt_tokens, int generated_tokens,
                             double end_to_end_seconds);
  // A request refused because the queue was full: counted under
  // outcome="rejected" only (it has no tokens and no latency).
  void RecordRequestRejected();
  void RecordTimeToFirstToken(double seconds);
  void RecordInterTokenLatency(double seconds);
  void SetQueueDepth(int running, int waiting);
  void SetKvCacheUsage(double fraction);

  // ---- speculation and planner
  // One speculative step: how many drafts were proposed, verified and
  // accepted over the whole batch (RecordStep records these too).
  void RecordSpeculativeStep(int proposed, int verified, int accepted);
  // Everything one decode step reports.
  void RecordStep(const StepRecord& step);
  // A finished speculative request: its committed tokens per verify step.
  void RecordRequestAcceptanceLength(double tokens_per_verify);
  // One verified draft whose position had a fitted model when it was scored:
  // the squared error (confidence - accepted)^2 joins the position's running
  // mean, the Brier score.
  void RecordCalibration(int position, double confidence, bool accepted);
  void RecordEstimator(bool ready, absl::Span<const EstimatorPositionState> positions);
  // Cumulative forward passes each model replayed from a CUDA graph; the
  // counters follow them. Next to verdict_decode_steps_total they say how
  // many of a step's passes replay (one verify and gamma - 1 draft passes
  // can; a new pass shape runs eagerly until its graph exists).
  void RecordGraphReplays(int64_t target, int64_t draft);
  // Cumulative passes of `model` (target, draft) that ran eagerly with CUDA
  // graphs on, for `reason` (ModelRunner::EagerReasonName).
  void RecordEagerPasses(const std::string& model, const std::string& reason, int64_t total);

  // ---- tensor parallelism
  void RecordPlanCheck(bool mismatch);
  // Cumulative totals of `rank`; counters follow them (never backwards).
  void RecordRankFigures(int rank, const RankFigures& figures);
  void SetRanksUp(int ranks);

  const std::shared_ptr<prometheus::Registry>& registry() const { return registry_; }

 private:
  std::shared_ptr<prometheus::Registry> registry_;
  // serving
  prometheus::Family<prometheus::Counter>& requests_;
  prometheus::Counter& prompt_tokens_;
  prometheus::Counter& generated_tokens_;
  prometheus::Histogram& e2e_latency_;
  prometheus::Histogram& ttft_;
  prometheus::Histogram& itl_;
  prometheus::Gauge& running_;
  prometheus::Gauge& waiting_;
  prometheus::Gauge& max_running_;
  prometheus::Gauge& max_waiting_;
  prometheus::Gauge& kv_usage_;
  // speculation
  prometheus::Counter& drafts_proposed_;
  prometheus::Counter& drafts_verified_;
  prometheus::Counter& drafts_accepted_;
  prometheus::Family<prometheus::Counter>& position_verified_family_;
  prometheus::Family<prometheus::Counter>& position_accepted_family_;
  prometheus::Histogram& step_acceptance_length_;
  prometheus::Histogram& request_acceptance_length_;
  prometheus::Histogram& step_verify_tokens_;
  prometheus::Histogram& budget_ratio_;
  prometheus::Family<prometheus::Gauge>& verify_mode_family_;
  prometheus::Gauge& num_draft_tokens_;
  prometheus::Counter& decode_steps_;
  // planner
  prometheus::Histogram& draft_seconds_;
  prometheus::Histogram& verify_seconds_;
  prometheus::Histogram& predicted_seconds_;
  prometheus::Histogram& prediction_error_;
  prometheus::Histogram& draft_passes_;
  prometheus::Histogram& drafting_requests_;
  prometheus::Counter& plain_rows_;
  prometheus::Family<prometheus::Counter>& draft_plan_steps_family_;
  prometheus::Family<prometheus::Counter>& plan_steps_family_;
  prometheus::Gauge& estimator_ready_;
  prometheus::Family<prometheus::Gauge>& estimator_fitted_family_;
  prometheus::Family<prometheus::Gauge>& estimator_slope_family_;
  prometheus::Family<prometheus::Gauge>& estimator_intercept_family_;
  prometheus::Family<prometheus::Counter>& estimator_observations_family_;
  prometheus::Family<prometheus::Counter>& estimator_refits_family_;
  prometheus::Family<prometheus::Gauge>& brier_family_;
  prometheus::Family<prometheus::Counter>& brier_samples_family_;
  prometheus::Family<prometheus::Counter>& graph_replays_family_;
  prometheus::Counter& target_graph_replays_;
  prometheus::Counter& draft_graph_replays_;
  prometheus::Family<prometheus::Counter>& eager_passes_family_;
  // The eager-pass series by (model, reason), made at their first pass, so
  // that a step's records look up a map rather than the family's labels.
  // Touched by the recording (engine loop) thread only.
  absl::flat_hash_map<std::pair<std::string, std::string>, prometheus::Counter*> eager_passes_;
  // TP
  prometheus::Counter& plan_checks_;
  prometheus::Counter& plan_mismatches_;
  prometheus::Histogram& collective_seconds_;
  prometheus::Gauge& world_size_;
  prometheus::Gauge& ranks_up_;
  prometheus::Family<prometheus::Counter>& rank_steps_family_;
  prometheus::Family<prometheus::Counter>& rank_verify_family_;
  prometheus::Family<prometheus::Counter>& rank_collective_family_;

  // Per position (index = position), filled by Configure.
  struct PositionSeries {
    prometheus::Counter* verified;
    prometheus::Counter* accepted;
    prometheus::Gauge* fitted;
    prometheus::Gauge* slope;
    prometheus::Gauge* intercept;
    prometheus::Counter* observations;
    prometheus::Counter* refits;
    prometheus::Gauge* brier;
    prometheus::Counter* brier_samples;
    double squared_error_sum = 0;  // the Brier score's running sum
    int64_t samples = 0;
  };
  std::vector<PositionSeries> positions_;
  struct RankSeries {
    prometheus::Counter* steps;
    prometheus::Counter* verify_seconds;
    prometheus::Counter* collective_seconds;
  };
  std::vector<RankSeries> ranks_;
};

// The registry in Prometheus text exposition format (what /metrics serves).
std::string SerializeMetrics(const prometheus::Registry& registry);

// Serves `registry` at http://bind_address/metrics until destroyed.
// bind_address is "host:port", e.g. "127.0.0.1:9400".
absl::StatusOr<std::unique_ptr<prometheus::Exposer>> StartMetricsExposer(
    const std::string& bind_address, std::shared_ptr<prometheus::Registry> registry);

}  // namespace verdict

#endif  // VERDICT_MONITORING_METRICS_H_
