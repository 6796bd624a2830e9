#include "scheduler/verify_planner.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdio>
#include <limits>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "scheduler/determinism.h"

namespace verdict {
namespace {

// Candidates are sorted by a key taken from the top bits of the survival's
// double: for non-negative doubles the bit pattern orders like the value, so
// the key orders the candidates exactly up to candidates that share a key,
// which a final insertion sort settles. The key range aims at this many keys
// per candidate, so that sharing is rare, within 2^kMaxKeyBits keys (two
// radix digits of at most kMaxKeyBits / 2 bits).
constexpr int64_t kKeysPerCandidate = 256;
constexpr int kMaxKeyBits = 22;
constexpr int kMaxDigitBits = (kMaxKeyBits + 2) / 2;  // the tail key may need one more bit
// Below this many candidates, insertion sort alone.
constexpr int32_t kRadixMin = 32;
// Candidate::slot packs (j, i) as j << kRequestBits | i.
constexpr int kRequestBits = 24;
constexpr int kMaxGamma = 255;
constexpr int64_t kMaxBatch = (int64_t{1} << kRequestBits) - 1;

// The biased binary exponent of a positive double.
int64_t Exponent(double v) { return static_cast<int64_t>(std::bit_cast<uint64_t>(v) >> 52); }

// The full order: survival descending, then position j, then request i
// (the slot orders as (j, i)).
bool Before(const VerifyPlanner::Candidate& a, const VerifyPlanner::Candidate& b) {
  if (a.survival > b.survival) return true;
  if (a.survival < b.survival) return false;
  return a.slot < b.slot;
}

// Insertion sort, which costs n plus the inversions, for inputs that are
// almost in order. If the inversions exceed a budget linear in n (many
// candidates sharing a key, adversarially), std::sort finishes the job:
// the order is strict and total ((j, i) is unique), so both give the same
// result.
void FinishSort(VerifyPlanner::Candidate* a, int32_t n) {
  int64_t budget = 8 * static_cast<int64_t>(n) + 256;
  for (int32_t t = 1; t < n; ++t) {
    if (!Before(a[t], a[t - 1])) continue;
    const VerifyPlanner::Candidate c = a[t];
    int32_t u = t;
    do {
      a[u] = a[u - 1];
      --u;
      --budget;
    } while (u > 0 && Before(c, a[u - 1]));
    a[u] = c;
    if (budget < 0) {
      std::sort(a, a + n, Before);
      return;
    }
  }
}

// Into [0, 1]; NaN becomes 0.
double ClampConfidence(double c) {
  c = c > 0.0 ? c : 0.0;
  return c < 1.0 ? c : 1.0;
}

absl::Status CheckPinnedBudget(VerifyMode mode, std::optional<double> fraction) {
  if (!fraction.has_value()) return absl::OkStatus();
  const double f = *fraction;
  if (!(f >= 0.0) || !(f <= 1.0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("verify planner: pinned budget fraction ", f, " is outside [0, 1]"));
  }
  if (mode == VerifyMode::kStatic) {
    return absl::InvalidArgumentError(
        "verify planner: a pinned budget needs cap-accept or compact mode (static verifies "
        "everything)");
  }
  return absl::OkStatus();
}

}  // namespace

std::string_view VerifyModeName(VerifyMode mode) {
  switch (mode) {
    case VerifyMode::kStatic:
      return "static";
    case VerifyMode::kCapAccept:
      return "cap-accept";
    case VerifyMode::kCompact:
      return "compact";
  }
  return "unknown";
}

absl::StatusOr<VerifyMode> ParseVerifyMode(std::string_view name) {
  if (name == "static") return VerifyMode::kStatic;
  if (name == "cap-accept" || name == "cap_accept") return VerifyMode::kCapAccept;
  if (name == "compact") return VerifyMode::kCompact;
  return absl::InvalidArgumentError(absl::StrCat("unknown verify mode '", std::string(name),
                                                 "' (static, cap-accept or compact)"));
}

std::string_view PlanReasonName(PlanReason reason) {
  switch (reason) {
    case PlanReason::kPlanned:
      return "planned";
    case PlanReason::kPinnedBudget:
      return "pinned-budget";
    case PlanReason::kStaticMode:
      return "static-mode";
    case PlanReason::kNoCostTable:
      return "no-cost-table";
    case PlanReason::kConfidencePrior:
      return "confidence-prior";
    case PlanReason::kSmallBatch:
      return "small-batch";
    case PlanReason::kEmptyBatch:
      return "empty-batch";
    case PlanReason::kNoDrafts:
      return "no-drafts";
  }
  return "unknown";
}

uint64_t PlanHash(const VerifyPlan& plan) {
  Fnv1a64 h;
  h.AddI64(static_cast<int64_t>(plan.mode));
  h.AddI64(static_cast<int64_t>(plan.reason));
  h.AddI64(static_cast<int64_t>(plan.verify_lens.size()));
  for (int32_t len : plan.verify_lens) h.AddI64(len);
  h.AddI64(plan.budget);
  h.AddI64(plan.verify_tokens);
  h.AddU64(plan.packed ? 1 : 0);
  h.AddDouble(plan.predicted_step_seconds);
  h.AddDouble(plan.predicted_committed_tokens);
  return h.digest();
}

double ExpectedCommittedTokens(absl::Span<const double> confidences, int gamma,
                               absl::Span<const int32_t> verify_lens) {
  double total = static_cast<double>(verify_lens.size());
  for (size_t i = 0; i < verify_lens.size(); ++i) {
    double survival = 1.0;
    const int drafts = std::min(verify_lens[i] - 1, gamma);
    for (int j = 0; j < drafts; ++j) {
      survival *= ClampConfidence(confidences[i * gamma + j]);
      total += survival;
    }
  }
  return total;
}

absl::StatusOr<VerifyPlanner> VerifyPlanner::Create(PlannerOptions options,
                                                    std::optional<CostTable> cost_table) {
  if (options.gamma < 1 || options.gamma > kMaxGamma) {
    return absl::InvalidArgumentError(
        absl::StrCat("verify planner: gamma = ", options.gamma, " (1 to ", kMaxGamma, ")"));
  }
  if (!(options.min_survival >= 1e-12) || !(options.min_survival <= 1.0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "verify planner: min_survival = ", options.min_survival, " is outside [1e-12, 1]"));
  }
  if (absl::Status s = CheckPinnedBudget(options.mode, options.pinned_budget_fraction); !s.ok()) {
    return s;
  }
  return VerifyPlanner(std::move(options), std::move(cost_table));
}

absl::Status VerifyPlanner::SetPinnedBudgetFraction(std::optional<double> fraction) {
  if (absl::Status s = CheckPinnedBudget(options_.mode, fraction); !s.ok()) return s;
  options_.pinned_budget_fraction = fraction;
  return absl::OkStatus();
}

VerifyPlanner::VerifyPlanner(PlannerOptions options, std::optional<CostTable> cost_table)
    : options_(std::move(options)),
      cost_table_(std::move(cost_table)),
      digit_count_(std::size_t{2} << kMaxDigitBits, 0) {}

void VerifyPlanner::CollectCandidates(int64_t batch, bool pinned) {
  const int gamma = options_.gamma;
  const double floor = options_.min_survival;
  const double* const survival = survival_.data();
  const int32_t* const caps = caps_.data();
  int32_t* const reach = reach_.data();
  // Per request, how many leading drafts are candidates; survival never
  // rises along a request's drafts, so those at or above min_survival are a
  // prefix.
  int32_t n = 0;
  int32_t widest = 0;
  double lowest = 2.0;    // smallest candidate survival >= min_survival
  double highest = -1.0;  // largest one
  for (int64_t i = 0; i < batch; ++i) {
    const double* s = survival + i * gamma;
    const int32_t cap = caps[i] - 1;
    int32_t above = cap;
    if (cap > 0 && !(s[cap - 1] >= floor)) {
      above = 0;
      while (s[above] >= floor) ++above;
    }
    if (above > 0) {
      highest = std::max(highest, s[0]);
      lowest = std::min(lowest, s[above - 1]);
    }
    reach[i] = pinned ? cap : above;
    n += reach[i];
    widest = std::max(widest, reach[i]);
  }
  num_candidates_ = n;

  // The sort key: the survival's top bits, counted down from `highest`, with
  // 2^mantissa_bits keys per octave; survivals below min_survival (pinned
  // budgets only) share the last key. Every choice depends on the inputs
  // only, so every rank makes the same one.
  uint32_t tail = 0;
  int shift = 52;
  uint64_t top = 0;
  if (highest >= lowest) {
    const int64_t octaves = Exponent(highest) - Exponent(lowest) + 1;
    const int64_t target = std::min<int64_t>(int64_t{1} << kMaxKeyBits, kKeysPerCandidate * n);
    int mantissa_bits = 0;
    while (mantissa_bits < 52 && (octaves << (mantissa_bits + 1)) <= target) ++mantissa_bits;
    shift = 52 - mantissa_bits;
    top = std::bit_cast<uint64_t>(highest) >> shift;
    tail = static_cast<uint32_t>(top - (std::bit_cast<uint64_t>(lowest) >> shift)) + 1;
  }
  digit_bits_ = 1;
  while ((uint64_t{1} << (2 * digit_bits_)) <= tail) ++digit_bits_;
  const uint32_t mask = (uint32_t{1} << digit_bits_) - 1;
  const int digit_bits = digit_bits_;

  // Enumerated j-major, so that candidates with equal survival arrive in
  // (j, i) order, which the stable radix passes keep; both digit histograms
  // are counted on the way.
  const bool count_digits = n >= kRadixMin;
  int32_t* const low_count = digit_count_.data();
  int32_t* const high_count = low_count + (int32_t{1} << kMaxDigitBits);
  Candidate* const out = candidates_.data();
  int32_t t = 0;
  for (int32_t j = 0; j < widest; ++j) {
    const uint32_t position = static_cast<uint32_t>(j) << kRequestBits;
    for (int64_t i = 0; i < batch; ++i) {
      if (j >= reach[i]) continue;
      const double s = survival[i * gamma + j];
      const uint32_t key =
          s >= lowest ? static_cast<uint32_t>(top - (std::bit_cast<uint64_t>(s) >> shift)) : tail;
      out[t++] = Candidate{s, key, position | static_cast<uint32_t>(i)};
      if (count_digits) {
        ++low_count[key & mask];
        ++high_count[key >> digit_bits];
      }
    }
  }
}

void VerifyPlanner::SortCandidates() {
  const int32_t n = num_candidates_;
  Candidate* const out = sorted_.data();
  const Candidate* const in = candidates_.data();
  if (n < kRadixMin) {
    std::copy(in, in + n, out);
    FinishSort(out, n);
    return;
  }
  // Two stable counting-sort passes (LSD radix) over the key's low and high
  // digits; digit_count_ holds both histograms and is zero between steps.
  const int digit_bits = digit_bits_;
  const uint32_t digits = uint32_t{1} << digit_bits;
  const uint32_t mask = digits - 1;
  int32_t* const low_count = digit_count_.data();
  int32_t* const high_count = low_count + (int32_t{1} << kMaxDigitBits);
  int32_t low_running = 0;
  int32_t high_running = 0;
  for (uint32_t d = 0; d < digits; ++d) {
    const int32_t lc = low_count[d];
    const int32_t hc = high_count[d];
    low_count[d] = low_running;
    high_count[d] = high_running;
    low_running += lc;
    high_running += hc;
  }
  Candidate* const scratch = radix_scratch_.data();
  for (int32_t t = 0; t < n; ++t) scratch[low_count[in[t].key & mask]++] = in[t];
  for (int32_t t = 0; t < n; ++t) out[high_count[scratch[t].key >> digit_bits]++] = scratch[t];
  std::fill(low_count, low_count + digits, 0);
  std::fill(high_count, high_count + digits, 0);
  // Candidates that share a key (ties, or survivals closer than the key's
  // resolution) are now adjacent; settle them.
  FinishSort(out, n);
}

void VerifyPlanner::VerifyEverything(int64_t batch, PlanReason reason, VerifyPlan* plan) {
  const int gamma = options_.gamma;
  double tokens = static_cast<double>(batch);
  int64_t budget = 0;
  for (int64_t i = 0; i < batch; ++i) {
    plan->verify_lens[i] = caps_[i];
    budget += caps_[i] - 1;
    for (int j = 0; j < caps_[i] - 1; ++j) tokens += survival_[i * gamma + j];
  }
  plan->reason = reason;
  plan->budget = budget;
  plan->verify_tokens = block_rows_;
  plan->packed = false;
  plan->predicted_step_seconds = PredictStep(batch, plan->verify_tokens);
  plan->predicted_committed_tokens = tokens;
}

double VerifyPlanner::DraftPhaseNotRun(int64_t batch, absl::Span<const int32_t> draft_depths) {
  if (!cost_table_.has_value() || !cost_table_->has_draft_split() || draft_passes_ < 0) return 0;
  const double b = static_cast<double>(batch);
  double phase;
  if (draft_depths.empty()) {
    phase = cost_table_->PredictDraftPhase(b, draft_passes_);
  } else {
    DraftRowsPerPass(draft_depths, &rows_per_pass_);
    phase = cost_table_->PredictDraftPhaseAt(rows_per_pass_);
  }
  return cost_table_->PredictDraftPhase(b, cost_table_->draft_passes()) - phase;
}

double VerifyPlanner::PredictStep(int64_t batch, int64_t verify_tokens) const {
  if (!cost_table_.has_value()) return std::numeric_limits<double>::quiet_NaN();
  const double v =
      cost_table_->Predict(static_cast<double>(batch),
                           static_cast<double>(verify_tokens + prefill_rows_)) -
      draft_not_run_;
  return v > kMinStepSeconds ? v : kMinStepSeconds;
}

template <typename Priced>
void VerifyPlanner::SweepLaunchedRows(int64_t batch, const Priced& priced, int64_t* k_star,
                                      double* tau_star) {
  // As the budget grows by the sorted candidates, each request's verify
  // length is one plus the candidates of it taken so far, and the step's
  // longest query their maximum.
  constexpr uint32_t kRequestMask = (uint32_t{1} << kRequestBits) - 1;
  taken_.assign(static_cast<size_t>(batch), 0);
  int max_query = 1;
  int64_t launched = options_.launch_tokens(batch, batch, max_query);
  double cost = priced(CurveAtRows(launched));
  double best_cost = cost;  // k = 0
  launched_rows_ = launched;
  double tau = static_cast<double>(batch);
  const Candidate* const sorted = sorted_.data();
  for (int64_t k = 1; k <= num_candidates_; ++k) {
    const Candidate& c = sorted[k - 1];
    const int len = ++taken_[c.slot & kRequestMask] + 1;
    const int64_t rows = batch + k;
    if (len > max_query || rows > launched) {
      max_query = std::max(max_query, len);
      launched = options_.launch_tokens(batch, rows, max_query);
      cost = priced(CurveAtRows(launched));
    }
    tau += c.survival;
    if (tau * best_cost > *tau_star * cost) {
      *k_star = k;
      *tau_star = tau;
      best_cost = cost;
      launched_rows_ = launched;
    }
  }
}

absl::Status VerifyPlanner::Plan(const PlannerInput& input, VerifyPlan* plan) {
  const int gamma = options_.gamma;
  const int64_t batch = static_cast<int64_t>(input.max_verify_lens.size());
  if (input.confidences.size() != static_cast<size_t>(batch * gamma)) {
    return absl::InvalidArgumentError(absl::StrCat("verify planner: ", input.confidences.size(),
                                                   " confidences for ", batch, " requests x gamma ",
                                                   gamma));
  }
  if (!input.flags.empty() && input.flags.size() != static_cast<size_t>(batch)) {
    return absl::InvalidArgumentError(
        absl::StrCat("verify planner: ", input.flags.size(), " flags for ", batch, " requests"));
  }
  if (batch > kMaxBatch) {
    return absl::InvalidArgumentError(
        absl::StrCat("verify planner: ", batch, " requests (at most ", kMaxBatch, ")"));
  }
  if (!input.draft_depths.empty() && input.draft_depths.size() != static_cast<size_t>(batch)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "verify planner: ", input.draft_depths.size(), " draft depths for ", batch, " requests"));
  }
  if (input.draft_passes > gamma) {
    return absl::InvalidArgumentError(absl::StrCat("verify planner: ", input.draft_passes,
                                                   " draft passes (gamma is ", gamma, ")"));
  }
  for (int64_t i = 0; i < batch; ++i) {
    if (!input.draft_depths.empty() &&
        (input.draft_depths[i] < 0 || input.draft_depths[i] > gamma)) {
      return absl::InvalidArgumentError(absl::StrCat("verify planner: request ", i,
                                                     " has draft depth ", input.draft_depths[i],
                                                     " (0 to gamma ", gamma, ")"));
    }
    if (input.max_verify_lens[i] < 1) {
      return absl::InvalidArgumentError(absl::StrCat("verify planner: request ", i,
                                                     " has maximum verify length ",
                                                     input.max_verify_lens[i], " (at least 1)"));
    }
  }

  if (input.prefill_rows < 0 || input.prefill_rows > kMaxPrefillRows) {
    return absl::InvalidArgumentError(absl::StrCat("verify planner: ", input.prefill_rows,
                                                   " prefill rows (0 to ", kMaxPrefillRows, ")"));
  }

  plan->mode = options_.mode;
  plan->verify_lens.resize(batch);
  draft_passes_ = input.draft_passes;
  prefill_rows_ = input.prefill_rows;
  draft_not_run_ = DraftPhaseNotRun(batch, input.draft_depths);
  if (batch == 0) {
    plan->reason = PlanReason::kEmptyBatch;
    plan->budget = 0;
    plan->verify_tokens = 0;
    plan->packed = false;
    plan->predicted_step_seconds = 0;
    plan->predicted_committed_tokens = 0;
    return absl::OkStatus();
  }

  if (!input.drafts) {
    std::fill(plan->verify_lens.begin(), plan->verify_lens.end(), 1);
    plan->reason = PlanReason::kNoDrafts;
    plan->budget = 0;
    plan->verify_tokens = batch;  // one row per request, in every layout
    plan->packed = false;
    // The table prices steps with their draft passes; this one runs none,
    // which only a table with the draft split can price.
    plan->predicted_step_seconds =
        cost_table_.has_value() && cost_table_->has_draft_split() && draft_passes_ == 0
            ? PredictStep(batch, batch)
            : std::numeric_limits<double>::quiet_NaN();
    plan->predicted_committed_tokens = static_cast<double>(batch);
    return absl::OkStatus();
  }

  // Caps in rows, and survivals: product of the (clamped) confidences up to
  // each draft; a request that emitted a stop has nothing left to verify
  // (docs/architecture.md, overlap scheduling), so its confidences count as 0.
  caps_.resize(batch);
  survival_.resize(batch * gamma);
  const double* const confidences = input.confidences.data();
  const int32_t* const max_lens = input.max_verify_lens.data();
  const uint8_t* const flags = input.flags.empty() ? nullptr : input.flags.data();
  int32_t* const caps = caps_.data();
  double* const survivals = survival_.data();
  const int32_t* const depths = input.draft_depths.empty() ? nullptr : input.draft_depths.data();
  // The uniform layout: every request's proposed drafts and its last row.
  block_rows_ = depths == nullptr ? batch * (gamma + 1) : batch;
  block_drafts_ = depths == nullptr ? batch * gamma : 0;
  for (int64_t i = 0; i < batch; ++i) {
    const uint8_t f = flags == nullptr ? 0 : flags[i];
    caps[i] = (f & kSpeculationDisabled) ? 1 : std::min<int32_t>(max_lens[i], gamma + 1);
    if (depths != nullptr) {
      caps[i] = std::min(caps[i], depths[i] + 1);
      block_rows_ += depths[i];
      block_drafts_ += depths[i];
    }
    double survival = (f & kStopEmitted) ? 0.0 : 1.0;
    for (int j = 0; j < gamma; ++j) {
      survival *= ClampConfidence(confidences[i * gamma + j]);
      survivals[i * gamma + j] = survival;
    }
  }

  if (options_.mode == VerifyMode::kStatic) {
    VerifyEverything(batch, PlanReason::kStaticMode, plan);
    return absl::OkStatus();
  }

  const bool pinned = options_.pinned_budget_fraction.has_value();
  if (!pinned) {
    if (!cost_table_.has_value()) {
      if (!logged_no_table_) {
        logged_no_table_ = true;
        const std::string message =
            absl::StrCat("verify planner: no cost table; verifying every draft (mode ",
                         std::string(VerifyModeName(options_.mode)), ")");
        if (options_.log) {
          options_.log(message);
        } else {
          std::fprintf(stderr, "%s\n", message.c_str());
        }
      }
      VerifyEverything(batch, PlanReason::kNoCostTable, plan);
      return absl::OkStatus();
    }
    if (!input.confidence_ready) {
      VerifyEverything(batch, PlanReason::kConfidencePrior, plan);
      return absl::OkStatus();
    }
    cost_table_->CurveAt(static_cast<double>(batch), &curve_);
    const double full_block = CurveAtRows(block_rows_);
    const double shortest = CurveAtRows(batch);
    // Trimming cannot pay when even verifying no draft at all costs as much
    // as the full block (seeds/002_d567d7ab3f14fa00.txt, "Small batches").
    if (shortest >= full_block) {
      VerifyEverything(batch, PlanReason::kSmallBatch, plan);
      return absl::OkStatus();
    }
  }

  // Buffers sized for every draft of the batch; they only grow, so planning
  // stops allocating once it has seen the largest batch.
  const size_t capacity = static_cast<size_t>(batch * gamma);
  if (candidates_.size() < capacity) {
    candidates_.resize(capacity);
    radix_scratch_.resize(capacity);
    sorted_.resize(capacity);
  }
  reach_.resize(batch);
  // A pinned budget may reach drafts below min_survival: the profiler needs
  // exactly the token count it asked for.
  CollectCandidates(batch, pinned);
  SortCandidates();

  int64_t k_star = 0;
  double tau_star = static_cast<double>(batch);
  if (pinned) {
    const double want =
        std::floor(*options_.pinned_budget_fraction * static_cast<double>(batch * gamma) + 0.5);
    k_star = std::min<int64_t>(static_cast<int64_t>(want), num_candidates_);
    for (int64_t t = 0; t < k_star; ++t) tau_star += sorted_[t].survival;
  } else {
    // k* = argmax tau(k) / cost(B, B + k) over every k, the first on ties.
    // Costs are positive, so a / b > c / d is compared as a * d > c * b,
    // without a division per k.
    // The whole step's curve less the draft passes it does not run: the
    // same offset at every k, as CostTable::PredictStepAt takes it.
    const double not_run = draft_not_run_;
    const auto priced = [not_run](double seconds) {
      const double v = seconds - not_run;
      return v > kMinStepSeconds ? v : kMinStepSeconds;
    };
    double tau = static_cast<double>(batch);
    const Candidate* const sorted = sorted_.data();
    if (options_.launch_tokens) {
      SweepLaunchedRows(batch, priced, &k_star, &tau_star);
    } else {
      double best_cost = priced(CurveAtRows(batch));  // k = 0
      // Budget k reads batch + k verify rows and the prefill rows.
      curve_.Sweep(static_cast<double>(batch + prefill_rows_ + 1), num_candidates_,
                   [&](int64_t index, double raw) {
                     const int64_t k = index + 1;
                     const double cost = priced(raw);
                     tau += sorted[index].survival;
                     if (tau * best_cost > tau_star * cost) {
                       // Kept a branch (the empty asm stops if-conversion):
                       // improvements come in long predictable runs, and
                       // conditional moves would put the update on the
                       // loop's critical path.
                       asm volatile("");
                       k_star = k;
                       tau_star = tau;
                       best_cost = cost;
                     }
                   });
    }
  }

  for (int64_t i = 0; i < batch; ++i) plan->verify_lens[i] = 1;
  constexpr uint32_t kRequestMask = (uint32_t{1} << kRequestBits) - 1;
  for (int64_t t = 0; t < k_star; ++t) ++plan->verify_lens[sorted_[t].slot & kRequestMask];
  plan->reason = pinned ? PlanReason::kPinnedBudget : PlanReason::kPlanned;
  plan->budget = k_star;
  // A planned budget of every draft of every request is the full block: it
  // runs in the uniform layout, static mode's rows and CUDA graphs
  // (seeds/002_d567d7ab3f14fa00.txt, "full-block plans take the cached
  // uniform layout, without packing"). A pin keeps the packed layout: the
  // profiler measures exactly its rows.
  plan->packed = options_.mode == VerifyMode::kCompact && (pinned || k_star < block_drafts_);
  plan->verify_tokens = plan->packed ? batch + k_star : block_rows_;
  plan->predicted_step_seconds = PredictStep(batch, plan->packed && options_.launch_tokens
                                                        ? launched_rows_
                                                        : plan->verify_tokens);
  plan->predicted_committed_tokens = tau_star;
  return absl::OkStatus();
}

}  // namespace verdict
