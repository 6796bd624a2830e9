// The verify planner: every step, on every TP rank, decides how many target
// rows each request gets, from the drafts' confidences and the cost table
// (seeds/001_4939eb13572a4c80.txt, "DeepInfer also allocates verification by
// confidence"; seeds/002_d567d7ab3f14fa00.txt, "Modifications"). It chooses
// a total budget by expected committed tokens per predicted second, then
// gives the budget to the most likely drafts.
//
// Vocabulary. A request has gamma drafts. Its verify length L counts the
// target rows verified for it: rows 0..L-2 check drafts 0..L-2 and row L-1,
// the last verified row, yields the bonus token (all L-1 drafts accepted) or
// the correction token. So L = 1 verifies no draft and still commits one
// token; L = gamma + 1 is the full block. The fused sampler uses L as its
// cutoff: acceptance never runs past draft L-2.
//
// Determinism: the plan depends only on the inputs, through double arithmetic
// in a fixed order and a sort with a total order (survival descending, then
// draft position ascending, then request index ascending); no threads, no
// hashed containers. PlanHash lets the engine compare plans across ranks.
#ifndef VERDICT_SCHEDULER_VERIFY_PLANNER_H_
#define VERDICT_SCHEDULER_VERIFY_PLANNER_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "scheduler/cost_table.h"

namespace verdict {

enum class VerifyMode {
  // Verify every draft; the plan does not trim (the default, as in
  // seeds/002_d567d7ab3f14fa00.txt).
  kStatic,
  // Verify every draft, accept at most the planned length: trimming changes
  // acceptance only, which checks a table and the confidences without packed
  // verify kernels.
  kCapAccept,
  // Verify only the planned rows, packed (ragged verify); a plan of the
  // full block runs in static's uniform layout.
  kCompact,
};

// "static", "cap-accept", "compact".
std::string_view VerifyModeName(VerifyMode mode);
absl::StatusOr<VerifyMode> ParseVerifyMode(std::string_view name);

// Why a plan has the lengths it has; for the log and metrics.
enum class PlanReason {
  kPlanned,          // budget from the objective
  kPinnedBudget,     // budget pinned by the options (profiling)
  kStaticMode,       // static mode verifies everything
  kNoCostTable,      // nothing to price a budget with: verify everything
  kConfidencePrior,  // the confidence source is on its prior: verify everything
  kSmallBatch,       // the shortest plan costs as much as the full block
  kEmptyBatch,       // no requests
  kNoDrafts,         // the step drafted nothing (batch above the speculation limit)
};
std::string_view PlanReasonName(PlanReason reason);

// Per-request flags (PlannerInput::flags).
inline constexpr uint8_t kSpeculationDisabled = 1u << 0;  // verify length 1
// Confidences count as 0: a planned budget gives the request no draft (it
// emitted a stop on the device; docs/architecture.md, overlap scheduling).
// Plans that verify everything still include its drafts.
inline constexpr uint8_t kStopEmitted = 1u << 1;

struct PlannerOptions {
  VerifyMode mode = VerifyMode::kStatic;
  int gamma = 5;  // 1 to 255
  // Candidates with survival below this are never verified by a planned
  // budget (their expected gain cannot pay for a row). In [1e-12, 1].
  double min_survival = 1e-6;
  // If set (in [0, 1]), the budget is pinned to this fraction of the block's
  // B * gamma drafts, rounded to nearest, with or without a cost table: the
  // profiler uses it to measure cost(B, M) at chosen M
  // (seeds/002_d567d7ab3f14fa00.txt, "Cost table"). Only in cap-accept and
  // compact modes.
  std::optional<double> pinned_budget_fraction;
  // Receives the planner's one-time notices (no cost table). Null: stderr.
  std::function<void(std::string_view)> log;
  // If set, the rows a packed step of `tokens` rows over `requests` requests,
  // the longest verifying max_query of them, actually launches: the CUDA
  // backend pads it to a captured graph's token tier
  // (runtime/model/graph_shapes.h). The planner then prices each budget at
  // its launched rows, so that it fills a tier it pays for. The function
  // must not decrease as tokens grow, and must give launch(T0) for every T
  // in (T0, launch(T0)] at the same max_query: the planner calls it once a
  // tier.
  std::function<int64_t(int64_t requests, int64_t tokens, int max_query)> launch_tokens;
};

// The most prefill rows a step may carry (PlannerInput::prefill_rows): the
// cost table's own bound on a row count.
inline constexpr int64_t kMaxPrefillRows = (int64_t{1} << 31) - 1;

// One step's requests, index i = 0..B-1 (the batch order the engine uses).
struct PlannerInput {
  // confidences[i * gamma + j]: confidence of draft j of request i, the chance
  // the target accepts it given drafts 0..j-1 accepted. Under overlap
  // scheduling these are one or two steps old. Clamped to [0, 1]; NaN is 0.
  absl::Span<const double> confidences;
  // Per request, the most target rows it may verify, >= 1 (for instance
  // 1 + the tokens left before its length limit). Values above gamma + 1
  // mean gamma + 1. Its size is B.
  absl::Span<const int32_t> max_verify_lens;
  // Per request, kSpeculationDisabled | kStopEmitted; empty means none.
  absl::Span<const uint8_t> flags;
  // ConfidenceSource::ready(): false while the source is on its prior.
  bool confidence_ready = true;
  // False: the step drafts nothing (the draft plan, or
  // EngineOptions::speculation_max_batch), so every request verifies one
  // row, whatever the mode and the confidences.
  bool drafts = true;
  // The draft plan of the step (scheduler/draft_planner.h), when it ran one:
  // per request the drafts it proposed (0 to gamma), which cap its verify
  // length at depth + 1 and make its rows in the uniform layout depth + 1.
  // Empty: every request has the full gamma (the full block is B * (gamma +
  // 1) rows).
  absl::Span<const int32_t> draft_depths;
  // The draft passes the step ran: with a cost table that has the draft
  // split, steps are priced with this many passes (CostTable::PredictStep),
  // or with each pass at its rows when draft_depths is given
  // (CostTable::PredictStepAt). Negative: at the table's own passes
  // (CostTable::Predict).
  int draft_passes = -1;
  // Target rows the step's verify forward reads ahead of its verify rows:
  // the prompts of requests joining under in-step prefill
  // (StepExecutor::Options::fused_prefill). Every budget pays them, so each
  // is priced at its verify rows plus these (a prompt row costs about what a
  // verify row does without its logits): a step that carries prompts is
  // priced at what it runs, not as a decode step. At least 0.
  int64_t prefill_rows = 0;
};

struct VerifyPlan {
  VerifyMode mode = VerifyMode::kStatic;
  PlanReason reason = PlanReason::kEmptyBatch;
  // Per request, the verify length L (see the top of this file): target rows
  // verified = drafts verified + 1, in [1, min(max_verify_len, gamma + 1)].
  // Prefix-closed by construction: drafts 0..L-2 are verified, none after.
  std::vector<int32_t> verify_lens;
  // Drafts verified in total: sum(verify_lens) - B. In a planned step this is
  // k*, the argmax of the objective.
  int64_t budget = 0;
  // Target rows the step runs: sum(verify_lens) when packed, else the full
  // block: B * (gamma + 1), or sum(draft_depths + 1) with a draft plan.
  int64_t verify_tokens = 0;
  // True when the step verifies the packed planned rows (compact mode, with a
  // pinned budget or a planned one below the full block B * gamma); false
  // for the uniform full-block layout.
  bool packed = false;
  // cost(B, verify_tokens) from the table (at the step's draft passes when
  // the input names them and the table has the split); NaN without a table,
  // and for a step without drafts unless the table can price one (the
  // draft split, at zero passes).
  double predicted_step_seconds = 0;
  // Expected committed tokens: B + the survivals of every verified draft (one
  // bonus or correction token per request, plus each draft's chance to be
  // accepted with all its predecessors).
  double predicted_committed_tokens = 0;
};

// Hash of the plan's decisions and predictions, equal on every rank that
// planned the same step; the engine compares it across TP ranks.
uint64_t PlanHash(const VerifyPlan& plan);

// B + sum over requests of the survivals of drafts 0..verify_lens[i]-2, the
// expected committed tokens of any allocation (survival of draft j = product
// of confidences 0..j). Used for metrics and to compare allocations.
double ExpectedCommittedTokens(absl::Span<const double> confidences, int gamma,
                               absl::Span<const int32_t> verify_lens);

// One per rank, used from the scheduling thread (not thread-safe: Plan
// reuses its buffers).
class VerifyPlanner {
 public:
  // Without a cost table the planner verifies everything (unless pinned) and
  // says so once through options.log.
  static absl::StatusOr<VerifyPlanner> Create(PlannerOptions options,
                                              std::optional<CostTable> cost_table);

  // Plans one step into `plan`, reusing its storage: after the first steps,
  // planning allocates nothing. Refuses malformed input (sizes, a maximum
  // verify length below 1, more than 2^24 - 1 requests) without planning.
  //
  // Planned budget (seeds/002_d567d7ab3f14fa00.txt, "the budget objective,
  // top-k allocation"):
  // candidates are all (i, j) with j < cap_i - 1 and survival >= min_survival,
  // sorted by survival descending, then j ascending, then i ascending;
  // tau(k) = B + the top k survivals; k* = argmax over k = 0..K of
  // tau(k) / cost(B, B + k + prefill_rows), the first k on ties, over every k (the cost may
  // be a staircase with several peaks); request i verifies 1 + its selected
  // candidates. Because survival never rises along a request's drafts, the
  // top k of this order is prefix-closed.
  absl::Status Plan(const PlannerInput& input, VerifyPlan* plan);

  const PlannerOptions& options() const { return options_; }
  bool has_cost_table() const { return cost_table_.has_value(); }

  // Pins the budget of the following plans to `fraction` (nullopt unpins),
  // as PlannerOptions::pinned_budget_fraction, with the checks of Create: the
  // profiler moves the pin from cell to cell on a running engine. On error
  // the pin stays as it was.
  absl::Status SetPinnedBudgetFraction(std::optional<double> fraction);

  // One draft the budget may verify: draft j of request i. Public only for
  // the sort helpers in verify_planner.cc.
  struct Candidate {
    double survival;
    uint32_t key;   // sort key from the survival's top bits (SortCandidates)
    uint32_t slot;  // j << 24 | i: orders as (j, i)
  };

 private:
  VerifyPlanner(PlannerOptions options, std::optional<CostTable> cost_table);

  void VerifyEverything(int64_t batch, PlanReason reason, VerifyPlan* plan);
  // The step's cost at `verify_tokens` rows (and the step's prefill rows),
  // NaN without a table.
  double PredictStep(int64_t batch, int64_t verify_tokens) const;
  // What the table's whole-step seconds at `batch` say beyond the step's own
  // draft phase (0 unless the input names its passes and the table has the
  // split); with the draft depths, each pass is priced at its own rows
  // (CostTable::PredictDraftPhaseAt), as the draft planner priced it.
  double DraftPhaseNotRun(int64_t batch, absl::Span<const int32_t> draft_depths);
  // The batch's curve (curve_) at `verify_rows` plus the step's prefill
  // rows: what a step of that many verify rows reads.
  double CurveAtRows(int64_t verify_rows) const {
    return curve_.At(static_cast<double>(verify_rows + prefill_rows_));
  }
  // Fills candidates_ (j-major) with every (i, j) the step may verify and
  // chooses the sort key for them.
  void CollectCandidates(int64_t batch, bool pinned);
  // Sorts the candidates into sorted_ in the full order (survival
  // descending, then j, then i): two radix passes on the survival's top
  // bits, then an insertion sort for candidates that share a key.
  void SortCandidates();
  // k* = argmax tau(k) / cost(B, launched rows of B + k) over the sorted
  // candidates (PlannerOptions::launch_tokens), updating *k_star and
  // *tau_star (which hold k = 0 on entry) and launched_rows_.
  template <typename Priced>
  void SweepLaunchedRows(int64_t batch, const Priced& priced, int64_t* k_star, double* tau_star);

  PlannerOptions options_;
  std::optional<CostTable> cost_table_;
  bool logged_no_table_ = false;

  // Per-step scratch, reused across steps. The candidate buffers are sized
  // for the largest batch seen; num_candidates_ says how much is in use.
  std::vector<int32_t> caps_;
  std::vector<double> survival_;
  std::vector<int32_t> reach_;  // per request: leading drafts that are candidates
  std::vector<Candidate> candidates_;
  std::vector<Candidate> radix_scratch_;
  std::vector<Candidate> sorted_;
  std::vector<int32_t> digit_count_;  // two radix histograms, zero between steps
  int32_t num_candidates_ = 0;
  int draft_passes_ = -1;      // this step's PlannerInput::draft_passes
  double draft_not_run_ = 0;   // DraftPhaseNotRun of this step
  int64_t prefill_rows_ = 0;   // this step's PlannerInput::prefill_rows
  std::vector<int64_t> rows_per_pass_;
  int64_t block_rows_ = 0;     // this step's uniform layout
  int64_t block_drafts_ = 0;   // drafts in it
  int digit_bits_ = 1;  // radix digit width of this step's keys
  std::vector<int32_t> taken_;  // SweepLaunchedRows: candidates taken per request
  int64_t launched_rows_ = 0;   // the launched rows of the chosen budget
  CostCurve curve_;
};

}  // namespace verdict

#endif  // VERDICT_SCHEDULER_VERIFY_PLANNER_H_
