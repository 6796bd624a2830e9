#include "monitoring/metrics.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>
#include <stdexcept>

#include "absl/strings/str_cat.h"
#include "prometheus/text_serializer.h"

namespace verdict {
namespace {

using Buckets = prometheus::Histogram::BucketBoundaries;

// Request latencies from 1 ms to about 1 min, roughly x2 apart.
Buckets LatencyBuckets() {
  return {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60};
}

// Step and collective times: from 0.1 ms (a small GPU step) to 10 s (a
// large CPU step).
Buckets StepSecondsBuckets() {
  return {0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
          0.05,   0.1,     0.25,   0.5,   1,      2.5,   5,     10};
}

// Tokens committed per verify of one request: whole numbers from 1 (no draft
// accepted) to gamma + 1 <= 17 (every draft accepted plus the bonus token).
Buckets StepAcceptanceBuckets() { return {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 12, 14, 17}; }

// A request's mean tokens per verify: finer where most requests land.
Buckets RequestAcceptanceBuckets() {
  return {1, 1.25, 1.5, 1.75, 2, 2.25, 2.5, 2.75, 3, 3.5, 4, 5, 6, 8, 10, 17};
}

// Target rows per step: powers of two up to a large batch's full block.
Buckets VerifyTokenBuckets() {
  return {1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096};
}

// Draft passes per step: whole numbers from 0 (a plain decode step) to
// gamma <= 16.
Buckets DraftPassBuckets() { return {0, 1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 16}; }

// Requests per step: 0 (nobody drafts), then powers of two to a large batch.
Buckets RequestCountBuckets() {
  return {0, 1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024};
}

// Shares in [0, 1], tenths; the 0 bucket counts steps that verify no draft.
Buckets RatioBuckets() { return {0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1}; }

// |predicted - measured| / measured: 1% to 10x.
Buckets RelativeErrorBuckets() {
  return {0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10};
}

prometheus::Counter& Counter(prometheus::Registry& registry, const std::string& name,
                             const std::string& help) {
  return prometheus::BuildCounter().Name(name).Help(help).Register(registry).Add({});
}

prometheus::Family<prometheus::Counter>& CounterFamily(prometheus::Registry& registry,
                                                       const std::string& name,
                                                       const std::string& help) {
  return prometheus::BuildCounter().Name(name).Help(help).Register(registry);
}

prometheus::Gauge& Gauge(prometheus::Registry& registry, const std::string& name,
                         const std::string& help) {
  return prometheus::BuildGauge().Name(name).Help(help).Register(registry).Add({});
}

prometheus::Family<prometheus::Gauge>& GaugeFamily(prometheus::Registry& registry,
                                                   const std::string& name,
                                                   const std::string& help) {
  return prometheus::BuildGauge().Name(name).Help(help).Register(registry);
}

prometheus::Histogram& Histogram(prometheus::Registry& registry, const std::string& name,
                                 const std::string& help, const Buckets& buckets) {
  return prometheus::BuildHistogram().Name(name).Help(help).Register(registry).Add({}, buckets);
}

// Moves a counter up to a cumulative total reported elsewhere (another
// rank, the estimator). A total below the counter is ignored: counters
// never go back.
void AdvanceTo(prometheus::Counter& counter, double total) {
  const double delta = total - counter.Value();
  if (delta > 0) counter.Increment(delta);
}

}  // namespace

const char* RequestOutcomeName(RequestOutcome outcome) {
  switch (outcome) {
    case RequestOutcome::kStop:
      return "stop";
    case RequestOutcome::kLength:
      return "length";
    case RequestOutcome::kCancelled:
      return "cancelled";
    case RequestOutcome::kRejected:
      return "rejected";
    case RequestOutcome::kError:
      return "error";
  }
  return "unknown";
}

ServingMetrics::ServingMetrics(std::shared_ptr<prometheus::Registry> registry)
    : registry_(std::move(registry)),
      requests_(CounterFamily(*registry_, "verdict_requests_total",
                              "Finished requests by outcome")),
      prompt_tokens_(Counter(*registry_, "verdict_prompt_tokens_total",
                             "Prompt tokens of finished requests")),
      generated_tokens_(Counter(*registry_, "verdict_generated_tokens_total",
                                "Tokens generated for finished requests")),
      e2e_latency_(Histogram(*registry_, "verdict_request_latency_seconds",
                             "Time from arrival to the last token", LatencyBuckets())),
      ttft_(Histogram(*registry_, "verdict_time_to_first_token_seconds",
                      "Time from arrival to the first generated token", LatencyBuckets())),
      itl_(Histogram(*registry_, "verdict_inter_token_latency_seconds",
                     "Time between consecutive streamed tokens of a request",
                     LatencyBuckets())),
      running_(Gauge(*registry_, "verdict_running_requests", "Requests in the running batch")),
      waiting_(Gauge(*registry_, "verdict_waiting_requests", "Requests waiting for admission")),
      max_running_(Gauge(*registry_, "verdict_max_running_requests",
                         "Most requests decoded together (--max-running-requests)")),
      max_waiting_(Gauge(*registry_, "verdict_max_waiting_requests",
                         "Most requests queued beyond the running ones (--max-waiting-requests)")),
      kv_usage_(Gauge(*registry_, "verdict_kv_cache_usage_ratio",
                      "Share of KV cache blocks in use, 0 to 1")),
      drafts_proposed_(Counter(*registry_, "verdict_draft_tokens_proposed_total",
                               "Draft tokens proposed by the draft model")),
      drafts_verified_(Counter(*registry_, "verdict_draft_tokens_verified_total",
                               "Draft tokens verified by the target model")),
      drafts_accepted_(Counter(*registry_, "verdict_draft_tokens_accepted_total",
                               "Draft tokens accepted by verification")),
      position_verified_family_(CounterFamily(
          *registry_, "verdict_draft_position_verified_total",
          "Drafts verified at each draft position (0: the first draft of a step)")),
      position_accepted_family_(CounterFamily(
          *registry_, "verdict_draft_position_accepted_total",
          "Drafts accepted at each draft position, as part of the accepted prefix")),
      step_acceptance_length_(Histogram(
          *registry_, "verdict_step_acceptance_length",
          "Tokens one verify commits for one request: accepted drafts + 1",
          StepAcceptanceBuckets())),
      request_acceptance_length_(Histogram(
          *registry_, "verdict_request_acceptance_length",
          "A finished speculative request's mean tokens committed per verify step",
          RequestAcceptanceBuckets())),
      step_verify_tokens_(Histogram(*registry_, "verdict_step_verify_tokens",
                                    "Target rows one decode step verifies", VerifyTokenBuckets())),
      budget_ratio_(Histogram(
          *registry_, "verdict_planned_budget_ratio",
          "Drafts the plan verifies as a share of the drafts the step proposed (each "
          "request's draft depth)",
          RatioBuckets())),
      verify_mode_family_(GaugeFamily(*registry_, "verdict_verify_mode_info",
                                      "The verify mode (--verify-mode), as a label; value 1")),
      num_draft_tokens_(Gauge(*registry_, "verdict_num_draft_tokens",
                              "Draft tokens proposed per request and step (gamma)")),
      decode_steps_(Counter(*registry_, "verdict_decode_steps_total", "Decode steps run")),
      draft_seconds_(Histogram(*registry_, "verdict_step_draft_seconds",
                               "Measured draft time of a step: the draft passes and their sampler",
                               StepSecondsBuckets())),
      verify_seconds_(Histogram(*registry_, "verdict_step_verify_seconds",
                                "Measured verify time of a step: target forward and sampler",
                                StepSecondsBuckets())),
      predicted_seconds_(Histogram(*registry_, "verdict_step_predicted_seconds",
                                   "The cost table's prediction of a step's time (draft + verify)",
                                   StepSecondsBuckets())),
      prediction_error_(Histogram(
          *registry_, "verdict_step_prediction_relative_error",
          "|predicted - measured| / measured seconds (draft + verify) of a step with a cost table",
          RelativeErrorBuckets())),
      draft_passes_(Histogram(*registry_, "verdict_step_draft_passes",
                              "Draft passes one decode step ran (0: a plain decode step)",
                              DraftPassBuckets())),
      drafting_requests_(Histogram(*registry_, "verdict_step_drafting_requests",
                                   "Requests that proposed drafts in one decode step",
                                   RequestCountBuckets())),
      plain_rows_(Counter(*registry_, "verdict_plain_decode_rows_total",
                          "Rows of speculative requests that drafted nothing in their step "
                          "(the draft plan's depth 0): one committed token each")),
      draft_plan_steps_family_(CounterFamily(
          *registry_, "verdict_draft_plan_steps_total",
          "Decode steps by the draft plan's reason: planned depths from the cost table's "
          "draft split; no-draft-split drafted every request's cap; confidence-prior "
          "planned on the estimator's prior rates, one draft a request at least; "
          "operator-limit drafted nothing (--speculation-max-batch)")),
      plan_steps_family_(CounterFamily(
          *registry_, "verdict_plan_steps_total",
          "Decode steps by plan reason; no-cost-table, confidence-prior and small-batch "
          "fell back to verifying every draft; no-drafts steps drafted nothing "
          "(--speculation-max-batch)")),
      estimator_ready_(Gauge(*registry_, "verdict_estimator_ready",
                             "1 once every draft position has a fitted acceptance model")),
      estimator_fitted_family_(GaugeFamily(*registry_, "verdict_estimator_fitted",
                                           "1 when the position's acceptance model is fitted")),
      estimator_slope_family_(GaugeFamily(*registry_, "verdict_estimator_slope",
                                          "Slope w of the position's logistic acceptance model")),
      estimator_intercept_family_(GaugeFamily(
          *registry_, "verdict_estimator_intercept",
          "Intercept b of the position's logistic acceptance model")),
      estimator_observations_family_(CounterFamily(
          *registry_, "verdict_estimator_observations_total",
          "Verify outcomes folded into the position's acceptance model")),
      estimator_refits_family_(CounterFamily(*registry_, "verdict_estimator_refits_total",
                                             "Accepted refits of the position's model")),
      brier_family_(GaugeFamily(
          *registry_, "verdict_estimator_brier_score",
          "Running mean of (confidence - accepted)^2 over verified drafts scored by a "
          "fitted model; NaN before the first")),
      brier_samples_family_(CounterFamily(*registry_, "verdict_estimator_brier_samples_total",
                                          "Verified drafts in the position's Brier score")),
      graph_replays_family_(
          CounterFamily(*registry_, "verdict_graph_replays_total",
                        "Forward passes replayed from CUDA graphs, by model (target, draft)")),
      target_graph_replays_(graph_replays_family_.Add({{"model", "target"}})),
      draft_graph_replays_(graph_replays_family_.Add({{"model", "draft"}})),
      eager_passes_family_(CounterFamily(
          *registry_, "verdict_eager_passes_total",
          "Forward passes that ran eagerly with CUDA graphs on, by model and reason "
          "(first_use: a launch shape's first pass; partial_logits: a prefill; "
          "uncapturable: the communicator cannot be captured; capture_failed; "
          "outgrew_graph_buffers: larger than the graphs captured ahead)")),
      plan_checks_(Counter(*registry_, "verdict_plan_checks_total",
                           "Cross-rank comparisons of plan and estimator hashes")),
      plan_mismatches_(Counter(*registry_, "verdict_plan_mismatches_total",
                               "Plan checks where a rank's hashes differed from rank 0's")),
      collective_seconds_(Histogram(*registry_, "verdict_step_collective_seconds",
                                    "Rank 0's time inside collectives during a decode step",
                                    StepSecondsBuckets())),
      world_size_(Gauge(*registry_, "verdict_tp_world_size", "Tensor-parallel ranks (--tp)")),
      ranks_up_(Gauge(*registry_, "verdict_tp_ranks_up",
                      "Ranks in the engine loop: the TP degree while its collectives "
                      "complete, 0 once the loop stopped on an error")),
      rank_steps_family_(CounterFamily(
          *registry_, "verdict_rank_decode_steps_total",
          "Decode steps of each rank, as of the last gather to rank 0")),
      rank_verify_family_(CounterFamily(
          *registry_, "verdict_rank_verify_seconds_total",
          "Each rank's measured verify time (target forward and sampler)")),
      rank_collective_family_(CounterFamily(
          *registry_, "verdict_rank_collective_seconds_total",
          "Each rank's time inside collectives during decode steps")) {
  // Every outcome exists from the start, so a rate() over it is defined
  // before the first request of that kind.
  for (RequestOutcome o : {RequestOutcome::kStop, RequestOutcome::kLength,
                           RequestOutcome::kCancelled, RequestOutcome::kRejected,
                           RequestOutcome::kError}) {
    requests_.Add({{"outcome", RequestOutcomeName(o)}});
  }
  world_size_.Set(1);
  ranks_up_.Set(1);
}

void ServingMetrics::Configure(const EngineInfo& info) {
  if (!info.verify_mode.empty()) {
    verify_mode_family_.Add({{"mode", info.verify_mode}}).Set(1);
  }
  num_draft_tokens_.Set(info.num_draft_tokens);
  max_running_.Set(info.max_running_requests);
  max_waiting_.Set(info.max_waiting_requests);
  world_size_.Set(info.world_size);
  ranks_up_.Set(info.world_size);
  for (const std::string& reason : info.plan_reasons) plan_steps_family_.Add({{"reason", reason}});
  for (const std::string& reason : info.draft_reasons) {
    draft_plan_steps_family_.Add({{"reason", reason}});
  }

  positions_.clear();
  for (int k = 0; k < info.num_draft_tokens; ++k) {
    const prometheus::Labels labels{{"position", absl::StrCat(k)}};
    PositionSeries p;
    p.verified = &position_verified_family_.Add(labels);
    p.accepted = &position_accepted_family_.Add(labels);
    p.fitted = &estimator_fitted_family_.Add(labels);
    p.slope = &estimator_slope_family_.Add(labels);
    p.intercept = &estimator_intercept_family_.Add(labels);
    p.observations = &estimator_observations_family_.Add(labels);
    p.refits = &estimator_refits_family_.Add(labels);
    p.brier = &brier_family_.Add(labels);
    // No score until a fitted model's confidence meets an outcome: 0 would
    // read as perfect calibration.
    p.brier->Set(std::numeric_limits<double>::quiet_NaN());
    p.brier_samples = &brier_samples_family_.Add(labels);
    positions_.push_back(p);
  }
  ranks_.clear();
  for (int r = 0; r < info.world_size; ++r) {
    const prometheus::Labels labels{{"rank", absl::StrCat(r)}};
    ranks_.push_back(RankSeries{&rank_steps_family_.Add(labels), &rank_verify_family_.Add(labels),
                                &rank_collective_family_.Add(labels)});
  }
}

void ServingMetrics::RecordRequestFinished(RequestOutcome outcome, int prompt_tokens,
                                           int generated_tokens, double end_to_end_seconds) {
  requests_.Add({{"outcome", RequestOutcomeName(outcome)}}).Increment();
  prompt_tokens_.Increment(prompt_tokens);
  generated_tokens_.Increment(generated_tokens);
  e2e_latency_.Observe(end_to_end_seconds);
}

void ServingMetrics::RecordRequestRejected() {
  requests_.Add({{"outcome", RequestOutcomeName(RequestOutcome::kRejected)}}).Increment();
}

void ServingMetrics::RecordTimeToFirstToken(double seconds) { ttft_.Observe(seconds); }

void ServingMetrics::RecordInterTokenLatency(double seconds) { itl_.Observe(seconds); }

void ServingMetrics::SetQueueDepth(int running, int waiting) {
  running_.Set(running);
  waiting_.Set(waiting);
}

void ServingMetrics::SetKvCacheUsage(double fraction) { kv_usage_.Set(fraction); }

void ServingMetrics::RecordSpeculativeStep(int proposed, int verified, int accepted) {
  drafts_proposed_.Increment(proposed);
  drafts_verified_.Increment(verified);
  drafts_accepted_.Increment(accepted);
}

void ServingMetrics::RecordStep(const StepRecord& step) {
  decode_steps_.Increment();
  if (!step.plan_reason.empty()) {
    plan_steps_family_.Add({{"reason", std::string(step.plan_reason)}}).Increment();
  }
  if (!step.draft_reason.empty()) {
    draft_plan_steps_family_.Add({{"reason", std::string(step.draft_reason)}}).Increment();
  }
  draft_passes_.Observe(step.draft_passes);
  drafting_requests_.Observe(step.drafting_requests);
  plain_rows_.Increment(step.plain_rows);
  int proposed = 0, verified = 0, accepted = 0;
  for (const DraftOutcome& d : step.drafts) {
    proposed += d.proposed;
    verified += d.verified;
    accepted += d.accepted;
    step_acceptance_length_.Observe(d.accepted + 1);
    // Positions beyond the configured gamma cannot occur in a configured
    // engine; an unconfigured registry just keeps the totals.
    const int n = static_cast<int>(positions_.size());
    for (int k = 0; k < std::min(d.verified, n); ++k) positions_[k].verified->Increment();
    for (int k = 0; k < std::min(d.accepted, n); ++k) positions_[k].accepted->Increment();
  }
  RecordSpeculativeStep(proposed, verified, accepted);
  if (step.full_block_drafts > 0) {
    budget_ratio_.Observe(static_cast<double>(step.planned_budget) /
                          static_cast<double>(step.full_block_drafts));
  }
  step_verify_tokens_.Observe(static_cast<double>(step.verify_tokens));
  draft_seconds_.Observe(step.draft_seconds);
  verify_seconds_.Observe(step.verify_seconds);
  collective_seconds_.Observe(step.collective_seconds);
  if (std::isfinite(step.predicted_seconds)) {
    predicted_seconds_.Observe(step.predicted_seconds);
    // The table prices the whole step (scheduler/cost_table.h).
    const double measured = step.draft_seconds + step.verify_seconds;
    if (measured > 0) {
      prediction_error_.Observe(std::abs(step.predicted_seconds - measured) / measured);
    }
  }
}

void ServingMetrics::RecordRequestAcceptanceLength(double tokens_per_verify) {
  request_acceptance_length_.Observe(tokens_per_verify);
}

void ServingMetrics::RecordCalibration(int position, double confidence, bool accepted) {
  if (position < 0 || position >= static_cast<int>(positions_.size())) return;
  PositionSeries& p = positions_[position];
  const double error = confidence - (accepted ? 1.0 : 0.0);
  p.squared_error_sum += error * error;
  ++p.samples;
  p.brier->Set(p.squared_error_sum / static_cast<double>(p.samples));
  p.brier_samples->Increment();
}

void ServingMetrics::RecordEstimator(bool ready,
                                     absl::Span<const EstimatorPositionState> positions) {
  estimator_ready_.Set(ready ? 1 : 0);
  const size_t n = std::min(positions.size(), positions_.size());
  for (size_t k = 0; k < n; ++k) {
    const EstimatorPositionState& s = positions[k];
    PositionSeries& p = positions_[k];
    p.fitted->Set(s.fitted ? 1 : 0);
    p.slope->Set(s.slope);
    p.intercept->Set(s.intercept);
    AdvanceTo(*p.observations, static_cast<double>(s.observations));
    AdvanceTo(*p.refits, static_cast<double>(s.refits));
  }
}

void ServingMetrics::RecordGraphReplays(int64_t target, int64_t draft) {
  AdvanceTo(target_graph_replays_, static_cast<double>(target));
  AdvanceTo(draft_graph_replays_, static_cast<double>(draft));
}

void ServingMetrics::RecordEagerPasses(const std::string& model, const std::string& reason,
                                       int64_t total) {
  if (total == 0) return;  // no series until the first such pass
  prometheus::Counter*& series = eager_passes_[std::make_pair(model, reason)];
  if (series == nullptr) series = &eager_passes_family_.Add({{"model", model}, {"reason", reason}});
  AdvanceTo(*series, static_cast<double>(total));
}

void ServingMetrics::RecordPlanCheck(bool mismatch) {
  plan_checks_.Increment();
  if (mismatch) plan_mismatches_.Increment();
}

void ServingMetrics::RecordRankFigures(int rank, const RankFigures& figures) {
  if (rank < 0 || rank >= static_cast<int>(ranks_.size())) return;
  RankSeries& r = ranks_[rank];
  AdvanceTo(*r.steps, static_cast<double>(figures.decode_steps));
  AdvanceTo(*r.verify_seconds, figures.verify_seconds);
  AdvanceTo(*r.collective_seconds, figures.collective_seconds);
}

void ServingMetrics::SetRanksUp(int ranks) { ranks_up_.Set(ranks); }

std::string SerializeMetrics(const prometheus::Registry& registry) {
  std::ostringstream out;
  prometheus::TextSerializer().Serialize(out, registry.Collect());
  return out.str();
}

absl::StatusOr<std::unique_ptr<prometheus::Exposer>> StartMetricsExposer(
    const std::string& bind_address, std::shared_ptr<prometheus::Registry> registry) {
  // prometheus-cpp reports a failed bind by throwing; keep that inside.
  try {
    auto exposer = std::make_unique<prometheus::Exposer>(bind_address);
    exposer->RegisterCollectable(registry);
    return exposer;
  } catch (const std::exception& e) {
    return absl::UnavailableError(
        absl::StrCat("cannot serve metrics on ", bind_address, ": ", e.what()));
  }
}

}  // namespace verdict
