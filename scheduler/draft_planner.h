// The draft planner: before the draft passes, on every TP rank, decides how
// many draft passes the step runs and how deep each request drafts (0 = the
// request runs as a plain decode row in the verify forward; 0 for all = a
// plain decode step). The objective is the verify planner's: expected
// committed tokens per predicted second of the whole step
// (seeds/002_d567d7ab3f14fa00.txt, "the budget objective"), priced with the
// cost table's draft split (scheduler/cost_table.h).
//
// Decision. Request i may draft up to cap_i = min(gamma, max_verify_len_i -
// 1) tokens (0 when its speculation is disabled or it emitted a stop).
// Drafting j+1 tokens gains survival s_ij = c_i0 * ... * c_ij (the estimator's
// predicted acceptance per position; one or two steps old under overlap).
// A plan is a depth d_i per request; it runs P = max d_i draft passes, pass
// p over the n_p requests with d_i > p, and the verify runs B + sum d_i rows,
// so it costs
//   PredictStepAt(B, B + sum d_i, n_0 .. n_{P-1})
// (each pass priced at its own rows, the first apart when the table has the
// one-pass phase: a request that leaves the deeper passes makes them
// cheaper, so a step where only the confident requests draft costs what it
// runs) and commits B + sum_i sum_{j < d_i} s_ij tokens in expectation. For
// each limit P and total depth k the plan is the top k survivals among
// drafts j < P (survival never rises along a request's drafts, so the top k
// is a prefix per request), priced exactly; the planner takes the best over
// every (P, k), the first on ties in (P, k) order. When a pass's price is
// affine in its rows, the cost depends on k and the actual maximum depth
// only, and this is the optimum over all depth vectors; otherwise it is the
// best of the plans that draft the surest tokens.
//
// Catch-up. A request that sat out steps (depth 0) left its draft behind by
// the tokens those steps committed; its next drafting step's first pass
// feeds them all (StepExecutor: pass 0 catches up on every token the draft
// has not seen). The table's passes were measured on requests that draft
// every step, so a plan prices its first pass at its rows plus the
// catch-up tokens of the requests it makes draft (each such token priced as
// a row of that pass). A request far behind then drafts only when its
// drafts pay for its catch-up this step; the plans compared stay the top k
// survivals, each priced with its catch-up.
//
// Exploration. While the confidence source is on its prior, the
// confidences are its prior rates (ConfidenceSource::UnseenConfidence: 1
// before anything is seen, near the measured acceptance rate after a few
// dozen observations), and every request that may draft drafts at least one
// token, so that the first position's observations, which the source's first
// fit needs, keep coming; deeper drafts are planned as above, on top of those
// first drafts (the plans compared are every first draft plus the surest k
// of the others). A pair whose drafts do not pay then explores at one draft
// a request instead of gamma.
//
// Fallbacks: without a draft split in the table, or with no table, every
// request drafts its cap (what a whole-step table was measured at). An
// operator's speculation limit (drafts_allowed false) makes every depth 0.
//
// Determinism: as the verify planner: double arithmetic in a fixed order, a
// total order on candidates, no threads. DraftPlanHash is what the engine
// compares across ranks.
#ifndef VERDICT_SCHEDULER_DRAFT_PLANNER_H_
#define VERDICT_SCHEDULER_DRAFT_PLANNER_H_

#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "scheduler/cost_table.h"
#include "scheduler/verify_planner.h"

namespace verdict {

enum class DraftReason {
  kPlanned,          // depths from the objective
  kNoDraftSplit,     // the table cannot price passes apart: everyone drafts its cap
  kConfidencePrior,  // the source is on its prior: planned on its rates, one draft at least
  kOperatorLimit,    // drafts_allowed false (--speculation-max-batch): nobody drafts
  kEmptyBatch,       // no requests
  kPinnedDepth,      // SetPinnedDepth (`verdict profile`): every request drafts min(pin, cap)
};
std::string_view DraftReasonName(DraftReason reason);

struct DraftPlannerOptions {
  int gamma = 5;               // 1 to 255
  double min_survival = 1e-6;  // drafts below it are never planned; in [1e-12, 1]
};

// Same layout as PlannerInput: index i = 0..B-1.
struct DraftPlannerInput {
  absl::Span<const double> confidences;  // B * gamma, clamped to [0, 1], NaN is 0
  absl::Span<const int32_t> max_verify_lens;  // B, each >= 1
  absl::Span<const uint8_t> flags;            // kSpeculationDisabled | kStopEmitted; may be empty
  // B or empty (none): tokens committed by the steps each request sat out
  // since it last drafted, which its next first pass catches up on.
  absl::Span<const int32_t> catch_up_tokens;
  bool confidence_ready = true;
  bool drafts_allowed = true;
};

struct DraftPlan {
  DraftReason reason = DraftReason::kEmptyBatch;
  std::vector<int32_t> depths;  // per request, in [0, cap_i]
  int passes = 0;               // max depth: the draft passes the step runs
  int drafting_requests = 0;    // requests with depth > 0
  int64_t total_depth = 0;      // sum of depths
  int64_t catch_up_tokens = 0;  // of the drafting requests: extra rows of the first pass
  // PredictStepAt(B, B + total_depth, each pass's rows, the first's plus
  // catch_up_tokens); NaN without a table.
  double predicted_step_seconds = 0;
  double predicted_committed_tokens = 0;  // B + the survivals of the drafted tokens
};

uint64_t DraftPlanHash(const DraftPlan& plan);

// A draft the planner may plan: request's draft at position (0-based), with
// the product of the request's confidences up to it.
struct DraftCandidate {
  double survival;
  int32_t request;
  int32_t position;
};

// Orders candidates (survivals >= 0, no two of one request and position) by
// survival down, then position and request up: the total order every rank
// ranks drafts by. `scratch` is the sort's buffer, kept by the caller from
// step to step.
void SortBySurvival(std::vector<DraftCandidate>* candidates, std::vector<DraftCandidate>* scratch);

// One per rank, from the scheduling thread (Plan reuses its buffers).
class DraftPlanner {
 public:
  static absl::StatusOr<DraftPlanner> Create(DraftPlannerOptions options,
                                             std::optional<CostTable> cost_table);

  // Refuses malformed input (sizes, a maximum verify length below 1, more
  // than 2^24 - 1 requests) without planning.
  absl::Status Plan(const DraftPlannerInput& input, DraftPlan* plan);

  const DraftPlannerOptions& options() const { return options_; }

  // Pins every request's depth to min(depth, cap) until unpinned (nullopt),
  // whatever the table and the confidences say (an operator's limit still
  // makes it 0), so that `verdict profile` can measure steps of fewer
  // passes. Refuses a depth outside [0, gamma].
  absl::Status SetPinnedDepth(std::optional<int> depth);
  std::optional<int> pinned_depth() const { return pinned_depth_; }

 private:
  DraftPlanner(DraftPlannerOptions options, std::optional<CostTable> cost_table)
      : options_(options), cost_table_(std::move(cost_table)) {}

  // The depths of the best (limit, k) plan (see the decision above), into
  // plan->depths, which holds batch zeros on entry. With first drafts
  // forced, every request whose cap is at least 1 drafts one token and
  // the plans compared add the surest k of the other drafts to those.
  void PlanByObjective(const DraftPlannerInput& input, int64_t batch, bool first_drafts_forced,
                       DraftPlan* plan);
  void Finish(int64_t batch, absl::Span<const double> confidences,
              absl::Span<const int32_t> catch_up_tokens, DraftPlan* plan);

  DraftPlannerOptions options_;
  std::optional<CostTable> cost_table_;
  std::optional<int> pinned_depth_;
  std::vector<int32_t> caps_;
  std::vector<DraftCandidate> candidates_;
  std::vector<DraftCandidate> sort_scratch_;
  std::vector<double> survival_;  // by request, while listing the candidates
  std::vector<int32_t> depth_scratch_;
  std::vector<int64_t> rows_per_pass_;
  std::vector<double> first_pass_seconds_;  // by rows, 0..the largest batch so far
  std::vector<double> later_pass_seconds_;
  std::vector<double> first_by_drafters_;  // the first pass's price after n first drafts
  CostCurve curve_;                     // the table at the step's batch size
  std::vector<double> verify_seconds_;  // by drafted tokens k: Predict(B, B + k)
};

}  // namespace verdict

#endif  // VERDICT_SCHEDULER_DRAFT_PLANNER_H_
