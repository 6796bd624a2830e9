#include "scheduler/draft_planner.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "scheduler/determinism.h"

namespace verdict {
namespace {

constexpr int64_t kMaxRequests = (int64_t{1} << 24) - 1;

double Clamp(double c) {
  if (!(c > 0)) return 0;  // NaN included
  return c < 1 ? c : 1;
}

}  // namespace

std::string_view DraftReasonName(DraftReason reason) {
  switch (reason) {
    case DraftReason::kPlanned: return "planned";
    case DraftReason::kNoDraftSplit: return "no-draft-split";
    case DraftReason::kConfidencePrior: return "confidence-prior";
    case DraftReason::kOperatorLimit: return "operator-limit";
    case DraftReason::kEmptyBatch: return "empty-batch";
    case DraftReason::kPinnedDepth: return "pinned-depth";
  }
  return "unknown";
}

uint64_t DraftPlanHash(const DraftPlan& plan) {
  Fnv1a64 h;
  h.AddI64(static_cast<int64_t>(plan.reason));
  h.AddI64(static_cast<int64_t>(plan.depths.size()));
  for (int32_t d : plan.depths) h.AddI64(d);
  h.AddI64(plan.passes);
  h.AddI64(plan.drafting_requests);
  h.AddI64(plan.total_depth);
  h.AddI64(plan.catch_up_tokens);
  h.AddDouble(plan.predicted_step_seconds);
  h.AddDouble(plan.predicted_committed_tokens);
  return h.digest();
}

void SortBySurvival(std::vector<DraftCandidate>* candidates,
                    std::vector<DraftCandidate>* scratch) {
  const auto before = [](const DraftCandidate& a, const DraftCandidate& b) {
    if (a.survival != b.survival) return a.survival > b.survival;
    if (a.position != b.position) return a.position < b.position;
    return a.request < b.request;
  };
  const size_t n = candidates->size();
  if (n < 256) {
    // The same total order as the radix sort below gives.
    std::sort(candidates->begin(), candidates->end(), before);
    return;
  }
  // A stable LSD radix sort on the survivals' top 33 bits (sign, exponent
  // and 21 bits of mantissa), 11 bits a round: they are positive, so their
  // bits order as their values do (complemented: down). A round whose digit
  // is the same for every candidate is skipped. Candidates that share those
  // bits are then next to each other; the planner lists them in (position,
  // request) order, so a run is in order unless its lower bits disagree,
  // and such runs (few: the top bits resolve 2^-21 of a value) are sorted
  // whole.
  constexpr int kDigitBits = 11;
  constexpr int kLowBits = 64 - 3 * kDigitBits;
  const auto key = [](const DraftCandidate& c) { return ~std::bit_cast<uint64_t>(c.survival); };
  scratch->resize(n);
  for (int shift = kLowBits; shift < 64; shift += kDigitBits) {
    std::array<uint32_t, 1 << kDigitBits> count{};
    const auto digit = [&](const DraftCandidate& c) {
      return (key(c) >> shift) & (count.size() - 1);
    };
    for (const DraftCandidate& c : *candidates) ++count[digit(c)];
    if (std::find(count.begin(), count.end(), n) != count.end()) continue;
    uint32_t start = 0;
    for (uint32_t& c : count) start += std::exchange(c, start);
    for (const DraftCandidate& c : *candidates) (*scratch)[count[digit(c)]++] = c;
    candidates->swap(*scratch);
  }
  std::vector<DraftCandidate>& v = *candidates;
  const auto high = [&](const DraftCandidate& c) { return key(c) >> kLowBits; };
  for (size_t first = 0; first < n;) {
    size_t last = first + 1;
    while (last < n && high(v[last]) == high(v[first])) ++last;
    const auto run = v.begin();
    if (last - first > 1 && !std::is_sorted(run + first, run + last, before)) {
      std::stable_sort(run + first, run + last, before);
    }
    first = last;
  }
}

absl::StatusOr<DraftPlanner> DraftPlanner::Create(DraftPlannerOptions options,
                                                  std::optional<CostTable> cost_table) {
  if (options.gamma < 1 || options.gamma > 255) {
    return absl::InvalidArgumentError(
        absl::StrCat("draft planner: gamma = ", options.gamma, " is outside [1, 255]"));
  }
  if (!(options.min_survival >= 1e-12 && options.min_survival <= 1)) {
    return absl::InvalidArgumentError(absl::StrCat("draft planner: min_survival = ",
                                                   options.min_survival,
                                                   " is outside [1e-12, 1]"));
  }
  return DraftPlanner(options, std::move(cost_table));
}

absl::Status DraftPlanner::SetPinnedDepth(std::optional<int> depth) {
  if (depth.has_value() && (*depth < 0 || *depth > options_.gamma)) {
    return absl::InvalidArgumentError(absl::StrCat("draft planner: pinned depth ", *depth,
                                                   " is outside [0, ", options_.gamma, "]"));
  }
  pinned_depth_ = depth;
  return absl::OkStatus();
}

void DraftPlanner::Finish(int64_t batch, absl::Span<const double> confidences,
                          absl::Span<const int32_t> catch_up_tokens, DraftPlan* plan) {
  const int gamma = options_.gamma;
  plan->passes = 0;
  plan->drafting_requests = 0;
  plan->total_depth = 0;
  plan->catch_up_tokens = 0;
  double committed = static_cast<double>(batch);
  for (int64_t i = 0; i < batch; ++i) {
    const int32_t d = plan->depths[i];
    plan->passes = std::max(plan->passes, static_cast<int>(d));
    plan->drafting_requests += d > 0 ? 1 : 0;
    plan->total_depth += d;
    if (d > 0 && !catch_up_tokens.empty()) plan->catch_up_tokens += catch_up_tokens[i];
    double survival = 1.0;
    for (int j = 0; j < d; ++j) {
      survival *= Clamp(confidences[i * gamma + j]);
      committed += survival;
    }
  }
  plan->predicted_committed_tokens = committed;
  if (cost_table_.has_value()) {
    DraftRowsPerPass(plan->depths, &rows_per_pass_);
    if (!rows_per_pass_.empty()) rows_per_pass_[0] += plan->catch_up_tokens;
    plan->predicted_step_seconds =
        cost_table_->PredictStepAt(static_cast<double>(batch),
                                   static_cast<double>(batch + plan->total_depth), rows_per_pass_);
  } else {
    plan->predicted_step_seconds = std::numeric_limits<double>::quiet_NaN();
  }
}

void DraftPlanner::PlanByObjective(const DraftPlannerInput& input, int64_t batch,
                                   bool first_drafts_forced, DraftPlan* plan) {
  const int gamma = options_.gamma;
  // Candidates by position, then request, so that a stable sort by
  // survival alone orders them totally (survival down, then position and
  // request up): every rank picks the same top k. A forced first draft is
  // a candidate whatever its survival.
  candidates_.clear();
  survival_.assign(batch, 1.0);  // each request's, so far; 0 once below min_survival
  for (int j = 0; j < gamma; ++j) {
    for (int64_t i = 0; i < batch; ++i) {
      if (j >= caps_[i] || survival_[i] == 0) continue;
      survival_[i] *= Clamp(input.confidences[i * gamma + j]);
      const bool candidate =
          survival_[i] >= options_.min_survival || (first_drafts_forced && j == 0);
      if (candidate) candidates_.push_back({survival_[i], static_cast<int32_t>(i), j});
      if (survival_[i] < options_.min_survival) survival_[i] = 0;
    }
  }
  SortBySurvival(&candidates_, &sort_scratch_);
  // Forced first drafts go before every other candidate, in their order:
  // the plans compared are then all of them plus the surest k of the rest
  // (still a prefix per request, each first draft ahead of its own).
  int64_t min_k = 0;
  if (first_drafts_forced) {
    sort_scratch_.clear();
    for (const DraftCandidate& c : candidates_) {
      if (c.position == 0) sort_scratch_.push_back(c);
    }
    min_k = static_cast<int64_t>(sort_scratch_.size());
    for (const DraftCandidate& c : candidates_) {
      if (c.position != 0) sort_scratch_.push_back(c);
    }
    candidates_.swap(sort_scratch_);
  }
  const double b = static_cast<double>(batch);
  const CostTable& table = *cost_table_;
  // A pass costs what its rows do (CostTable::PredictDraftPassAt), looked
  // up per row count; the prices depend on the table alone, so they are
  // kept from plan to plan and extended as batches grow.
  for (int64_t n = static_cast<int64_t>(first_pass_seconds_.size()); n <= batch; ++n) {
    first_pass_seconds_.push_back(table.PredictDraftPassAt(static_cast<double>(n), true));
    later_pass_seconds_.push_back(table.PredictDraftPassAt(static_cast<double>(n), false));
  }
  // The verify at b + k rows for every k a plan can reach, in one sweep of
  // the batch's curve (the bits of Predict(b, b + k)), and the table's own
  // draft phase: the loop below then prices a plan with lookups alone.
  const int64_t max_k = static_cast<int64_t>(candidates_.size());
  table.CurveAt(b, &curve_);
  verify_seconds_.resize(max_k + 1);
  curve_.Sweep(b, max_k + 1, [this](int64_t k, double s) { verify_seconds_[k] = s; });
  const double table_phase = table.PredictDraftPhase(b, table.draft_passes());
  const bool catch_up = !input.catch_up_tokens.empty();
  // Objectives are compared as gain / step seconds without dividing: a
  // step's price is positive (StepFromPhases: at least kMinStepSeconds), so
  // gain / step > best_gain / best_step exactly when gain * best_step >
  // best_gain * step. The plain step is the first plan, unless first drafts
  // are forced.
  double best_gain = min_k == 0 ? b : -1.0;
  double best_step = min_k == 0 ? table.StepFromPhases(verify_seconds_[0], table_phase, 0.0) : 1.0;
  int best_limit = 0;
  int64_t best_k = 0;
  int max_position = 0;
  for (const DraftCandidate& c : candidates_) max_position = std::max(max_position, c.position + 1);
  first_by_drafters_.assign(batch + 1, 0.0);
  for (int limit = 1; limit <= max_position; ++limit) {
    rows_per_pass_.assign(limit, 0);
    double gain = b;
    int64_t k = 0;
    int64_t extra = 0;  // catch-up tokens of the requests drafting so far
    double first = 0;   // the first pass: it changes with a first draft only
    double later = 0;   // the later passes, each at its rows
    for (const DraftCandidate& c : candidates_) {
      if (c.position >= limit) continue;
      gain += c.survival;
      ++k;
      const int64_t rows = ++rows_per_pass_[c.position];
      if (c.position == 0) {
        // A request's first draft comes first among its own (its survival
        // is its largest), and brings the request's catch-up. First
        // drafts join in the same order under every limit, so the first
        // pass's price after n of them is priced once, under limit 1.
        if (limit == 1) {
          if (catch_up) extra += input.catch_up_tokens[c.request];
          first_by_drafters_[rows] =
              extra == 0 ? first_pass_seconds_[rows]
                         : table.PredictDraftPassAt(static_cast<double>(rows + extra), true);
        }
        first = first_by_drafters_[rows];
      } else {
        // A later pass gains a row (a pass of no rows costs 0).
        later += later_pass_seconds_[rows] - later_pass_seconds_[rows - 1];
      }
      if (k < min_k) continue;  // a plan holds every forced first draft
      const double step = table.StepFromPhases(verify_seconds_[k], table_phase, first + later);
      if (gain * best_step > best_gain * step) {
        best_gain = gain;
        best_step = step;
        best_limit = limit;
        best_k = k;
      }
    }
  }
  int64_t taken = 0;
  for (const DraftCandidate& c : candidates_) {
    if (taken == best_k) break;
    if (c.position >= best_limit) continue;
    plan->depths[c.request] = std::max(plan->depths[c.request], c.position + 1);
    ++taken;
  }
}

absl::Status DraftPlanner::Plan(const DraftPlannerInput& input, DraftPlan* plan) {
  const int gamma = options_.gamma;
  const int64_t batch = static_cast<int64_t>(input.max_verify_lens.size());
  if (batch > kMaxRequests) {
    return absl::InvalidArgumentError(
        absl::StrCat("draft planner: ", batch, " requests, at most ", kMaxRequests));
  }
  if (static_cast<int64_t>(input.confidences.size()) != batch * gamma) {
    return absl::InvalidArgumentError(absl::StrCat("draft planner: ", input.confidences.size(),
                                                   " confidences for ", batch,
                                                   " requests of gamma ", gamma));
  }
  if (!input.flags.empty() && static_cast<int64_t>(input.flags.size()) != batch) {
    return absl::InvalidArgumentError(absl::StrCat("draft planner: ", input.flags.size(),
                                                   " flags for ", batch, " requests"));
  }
  if (!input.catch_up_tokens.empty()) {
    if (static_cast<int64_t>(input.catch_up_tokens.size()) != batch) {
      return absl::InvalidArgumentError(absl::StrCat("draft planner: ",
                                                     input.catch_up_tokens.size(),
                                                     " catch-up counts for ", batch, " requests"));
    }
    for (int64_t i = 0; i < batch; ++i) {
      if (input.catch_up_tokens[i] < 0) {
        return absl::InvalidArgumentError(absl::StrCat("draft planner: request ", i, " has ",
                                                       input.catch_up_tokens[i],
                                                       " catch-up tokens"));
      }
    }
  }
  caps_.resize(batch);
  for (int64_t i = 0; i < batch; ++i) {
    const int32_t max_len = input.max_verify_lens[i];
    if (max_len < 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          "draft planner: request ", i, " has a maximum verify length of ", max_len));
    }
    const uint8_t f = input.flags.empty() ? 0 : input.flags[i];
    caps_[i] = (f & (kSpeculationDisabled | kStopEmitted)) != 0
                   ? 0
                   : std::min<int32_t>(gamma, max_len - 1);
  }

  plan->depths.assign(batch, 0);
  if (batch == 0) {
    plan->reason = DraftReason::kEmptyBatch;
  } else if (!input.drafts_allowed) {
    plan->reason = DraftReason::kOperatorLimit;
  } else if (pinned_depth_.has_value()) {
    plan->reason = DraftReason::kPinnedDepth;
    for (int64_t i = 0; i < batch; ++i) plan->depths[i] = std::min(caps_[i], *pinned_depth_);
  } else if (!cost_table_.has_value() || !cost_table_->has_draft_split()) {
    plan->reason = DraftReason::kNoDraftSplit;
    std::copy(caps_.begin(), caps_.end(), plan->depths.begin());
  } else {
    // On the prior the confidences are the source's prior rates; every
    // request that may draft drafts at least one token, since the first
    // position's observations are what the source's first fit needs, and
    // deeper where the objective, with those first drafts paid for, says so.
    plan->reason = input.confidence_ready ? DraftReason::kPlanned : DraftReason::kConfidencePrior;
    PlanByObjective(input, batch, /*first_drafts_forced=*/!input.confidence_ready, plan);
  }
  Finish(batch, input.confidences, input.catch_up_tokens, plan);
  return absl::OkStatus();
}

}  // namespace verdict
