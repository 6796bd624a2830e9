// The measured cost of one speculative decode step: seconds as a function of
// the batch size B (requests in the step) and the verify tokens M (target
// rows the step runs). The planner prices each candidate budget k at
// cost(B, B + k) (seeds/002_d567d7ab3f14fa00.txt: "plans a per-step verify
// budget from a measured cost table"). The cost is the whole step's, the
// draft passes included: they do not depend on M, but a budget's committed
// tokens pay for them too, so a table of the verify alone overprices the
// savings of trimming wherever drafting is a large share of the step.
//
// JSON form (what `Save` writes and `Load` reads):
//   {"batch_sizes":   [1, 8, 64],          strictly increasing, positive
//    "verify_tokens": [1, 16, 128, 512],   strictly increasing, positive
//    "seconds":       [[...], [...], [...]]}  seconds[b][m], each > 0
// Grid values are at most 2^31 - 1 (counts of requests and rows); every
// number is finite.
// An optional "tp": the tensor-parallel degree the table was measured at
// (a positive integer; `verdict profile` writes it), so that a server at
// another degree can say its costs come from elsewhere. An optional
// "measured_on": {"device": ..., "target": ..., "draft": ...}, the GPU (or
// "cpu") and the two models' shapes (ModelShapeName) it was measured with,
// non-empty strings of at most kMaxOriginLength bytes; `verdict profile`
// writes it, and `--cost-table auto` (scheduler/cost_table_catalog.h) picks
// a table by it. Other keys are ignored, so a profiler may add its own
// metadata.
//
// Optional draft split (the draft planner needs it; scheduler/draft_planner.h):
//   "draft_passes":       5,               the draft passes each measured step ran
//   "draft_pass_seconds": [...]            one per batch size: one draft pass
// "seconds" stays the whole step at draft_passes passes, so the verify planner
// reads a split table as before; the verify alone is seconds minus
// draft_passes * draft_pass_seconds[b], which must stay positive at every
// cell. The two keys come together or not at all. A table without them still
// loads: has_draft_split() is false and the draft planner falls back to
// drafting the full depth for every request (what a whole-step table was
// measured at).
//
// Optional with the split, the draft phase of a step that ran one pass:
//   "one_pass_draft_seconds": [...]        one per batch size
// A step's first draft pass costs more than the others: it catches the
// draft up on the tokens the last step committed (and on every token of a
// step the request sat out), and the draft phase has costs of its own (the
// confidence signals, the hand-off to the verify). With it the draft phase
// of P passes is priced through the two measured points, one pass and
// draft_passes passes: D(0) = 0, D(P) = one + (P - 1) * (draft_passes * pass
// - one) / (draft_passes - 1); without it D(P) = P * pass. Each value must
// be positive and at most draft_passes * draft_pass_seconds[b] (one pass
// does not cost more than all of them). Cells with
// M < B cannot be measured (each request verifies at least one row); a
// profiler writes the time at M = B there.
//
// `verdict profile` (runtime/profile_command.h) measures the table on the
// running engine: for each batch size B it pins the verify budget to
// fractions of the block, so that the compact step runs M = B + round(f * B *
// gamma) rows, and writes the median step seconds (draft passes plus verify)
// per (B, M), each batch
// size's curve carried over the union of the measured M.
#ifndef VERDICT_SCHEDULER_COST_TABLE_H_
#define VERDICT_SCHEDULER_COST_TABLE_H_

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace verdict {

// Predictions never go below this, so linear extrapolation below the grid
// cannot price a step at zero or negative seconds.
inline constexpr double kMinStepSeconds = 1e-6;

class CostTable;

// What a table was measured on (the JSON's "measured_on").
struct CostTableOrigin {
  std::string device;  // the GPU's name as CUDA gives it, or "cpu"
  std::string target;  // the target's shape (ModelShapeName)
  std::string draft;   // the draft's shape

  friend bool operator==(const CostTableOrigin&, const CostTableOrigin&) = default;
};
inline constexpr size_t kMaxOriginLength = 256;

// The table at one batch size, as a function of verify tokens: the cells
// interpolated along the batch axis at every token knot. Exists so that the
// planner can price M = B, B+1, ... without re-interpolating along B; its
// values are bit-identical to CostTable::Predict. Valid while the table it
// came from is alive.
class CostCurve {
 public:
  double At(double verify_tokens) const;

  // Same value as At; queries must be non-decreasing between calls that share
  // `segment` (start it at 0), which makes a sweep over M linear in its
  // length.
  double AtNondecreasing(double verify_tokens, int* segment) const {
    const int n = static_cast<int>(knots_.size());
    int s = *segment;
    // The segment FindSegment would pick: the last knot <= x, at most n - 2.
    while (s + 2 < n && knots_[s + 1] <= verify_tokens) ++s;
    *segment = s;
    return Evaluate(s, verify_tokens);
  }

  // Calls visit(k, At(first + k)) for k = 0, 1, ..., count - 1, in order,
  // with the same values as At (first integral, so that first + k is exact):
  // the planner's sweep over candidate budgets. Inline, so that the per-k
  // work is a multiply and an add; inline code is compiled with the caller's
  // flags, so a caller that needs the same bits as At builds without
  // floating-point contraction, as //scheduler does.
  template <typename Visit>
  void Sweep(double first, int64_t count, Visit visit) const {
    const int n = static_cast<int>(knots_.size());
    const double* const knots = knots_.data();
    int s = 0;
    int64_t k = 0;
    double m = first;  // first + k, exact for the integer counts used here
    while (k < count) {
      while (s + 2 < n && knots[s + 1] <= m) ++s;
      // Within segment s until m reaches the next knot (the last segment
      // runs to the end).
      const bool last = s + 2 >= n;
      const double next = last ? 0.0 : knots[s + 1];
      for (; k < count && (last || m < next); ++k, m += 1.0) visit(k, Evaluate(s, m));
    }
  }

 private:
  friend class CostTable;

  double Evaluate(int s, double verify_tokens) const {
    const double v = seconds_[s] + slopes_[s] * (verify_tokens - knots_.data()[s]);
    return v > kMinStepSeconds ? v : kMinStepSeconds;
  }

  absl::Span<const double> knots_;  // the table's verify_tokens
  std::vector<double> seconds_;     // one per knot
  // slopes_[s] = (seconds_[s+1] - seconds_[s]) / (knots_[s+1] - knots_[s]);
  // a single knot has one slope of 0.
  std::vector<double> slopes_;
};

// rows[p] = the requests whose draft depth is above p, for p below the
// deepest depth: the rows of each draft pass of a step (runs deepest first,
// so each pass is a prefix of the one before).
void DraftRowsPerPass(absl::Span<const int32_t> depths, std::vector<int64_t>* rows);

class CostTable {
 public:
  // `seconds` is row-major, seconds[b * verify_tokens.size() + m]. Refuses a
  // grid that is empty or not strictly increasing, a non-positive or
  // non-finite grid value, a size mismatch, and a non-positive or non-finite
  // time; each message names the offending entry.
  static absl::StatusOr<CostTable> Create(std::vector<double> batch_sizes,
                                          std::vector<double> verify_tokens,
                                          std::vector<double> seconds);
  // Parses the JSON form above; a missing cell is refused with its indices
  // and its (batch, tokens) coordinates.
  static absl::StatusOr<CostTable> FromJson(std::string_view text);
  static absl::StatusOr<CostTable> Load(const std::string& path);

  // Round-trips exactly: FromJson(ToJson()) predicts the same bits.
  std::string ToJson() const;
  absl::Status Save(const std::string& path) const;

  // Predicted step seconds. Bilinear inside the grid; beyond it, linear along
  // each axis with the slope of the edge segment (an axis with a single knot
  // is constant along it). Interpolates along the batch axis first, then along
  // tokens. Never below kMinStepSeconds.
  double Predict(double batch_size, double verify_tokens) const;

  // Fills `curve` (reusing its storage) with the table at `batch_size`.
  void CurveAt(double batch_size, CostCurve* curve) const;

  // The TP degree the table was measured at; 0 when it does not say.
  int measured_tp() const { return measured_tp_; }
  void set_measured_tp(int tp) { measured_tp_ = tp; }
  // Where the table was measured; nullopt when it does not say.
  const std::optional<CostTableOrigin>& origin() const { return origin_; }
  void set_origin(std::optional<CostTableOrigin> origin) { origin_ = std::move(origin); }

  // Adds the draft split (see the top of this file): one draft pass's seconds
  // per batch size, from steps that ran `draft_passes` passes. Refuses a size
  // mismatch, a non-positive or non-finite time, draft_passes outside
  // [1, 255], and a split that leaves a cell's verify at or below zero.
  absl::Status SetDraftSplit(std::vector<double> draft_pass_seconds, int draft_passes);
  bool has_draft_split() const { return draft_passes_ > 0; }
  int draft_passes() const { return draft_passes_; }
  const std::vector<double>& draft_pass_seconds() const { return draft_pass_seconds_; }
  // One draft pass at `batch_size`: linear along the batch axis as Predict,
  // never below 0. 0 without a split.
  double PredictDraftPass(double batch_size) const;
  // Adds the one-pass draft phase (see the top of this file), per batch
  // size. Needs the split first; refuses a size mismatch, a non-positive or
  // non-finite time, a value above draft_passes passes, and draft_passes 1
  // (the one-pass step is then the measured step itself).
  absl::Status SetOnePassDraft(std::vector<double> one_pass_draft_seconds);
  bool has_one_pass_draft() const { return !one_pass_draft_seconds_.empty(); }
  const std::vector<double>& one_pass_draft_seconds() const { return one_pass_draft_seconds_; }
  // The draft phase of a step of `passes` passes at `batch_size`: D(passes)
  // above, linear along the batch axis as Predict. 0 without a split.
  double PredictDraftPhase(double batch_size, int passes) const;
  // What the draft passes the table's steps ran beyond `passes` cost at
  // `batch_size`: PredictDraftPhase at draft_passes less at `passes`. 0
  // without a split.
  double PassesNotRunSeconds(double batch_size, int passes) const;
  // The step with `passes` draft passes (0 = plain decode): Predict minus
  // PassesNotRunSeconds. Without a split it is Predict, whatever `passes`.
  // Never below kMinStepSeconds.
  double PredictStep(double batch_size, double verify_tokens, int passes) const;

  // Steps whose draft passes run fewer rows than the batch (requests that
  // draft less deep, or not at all, leave the deeper passes): pass p runs
  // rows_per_pass[p] rows (DraftRowsPerPass), and costs what a pass over
  // that many rows costs, not what one over the whole batch does.
  //
  // One pass over `rows` rows, the step's first or a later one: with the
  // one-pass phase measured the first costs one(rows) and each later one
  // (draft_passes * pass(rows) - one(rows)) / (draft_passes - 1), the terms
  // of PredictDraftPhase; without it each costs pass(rows). 0 at no rows or
  // without a split.
  double PredictDraftPassAt(double rows, bool first) const;
  // The draft phase of passes over rows_per_pass rows: the sum of
  // PredictDraftPassAt. Over `passes` passes of the whole batch it is
  // PredictDraftPhase (up to rounding).
  double PredictDraftPhaseAt(absl::Span<const int64_t> rows_per_pass) const;
  // The step at (batch_size, verify_tokens) whose draft phase ran
  // rows_per_pass: Predict less the table's own draft phase at batch_size,
  // plus PredictDraftPhaseAt. Without a split it is Predict. Never below
  // kMinStepSeconds.
  double PredictStepAt(double batch_size, double verify_tokens,
                       absl::Span<const int64_t> rows_per_pass) const;
  // PredictStepAt from its parts: `whole` = Predict(batch_size, ...) and
  // `phase` = PredictDraftPhaseAt(...), for planners that sweep them.
  double StepFromParts(double batch_size, double whole, double phase) const;
  // StepFromParts with the table's own draft phase at the batch size given
  // (table_phase = PredictDraftPhase(batch_size, draft_passes())), for a
  // planner that prices many plans of one batch size.
  // Inline: a planner calls it for every plan it compares.
  double StepFromPhases(double whole, double table_phase, double phase) const {
    if (!has_draft_split()) return whole;
    const double v = whole - (table_phase - phase);
    return v > kMinStepSeconds ? v : kMinStepSeconds;
  }

  const std::vector<double>& batch_sizes() const { return batch_sizes_; }
  const std::vector<double>& verify_tokens() const { return verify_tokens_; }
  double seconds(std::size_t b, std::size_t m) const {
    return seconds_[b * verify_tokens_.size() + m];
  }

 private:
  CostTable() = default;

  // A first and a later draft pass at `batch_size` (PredictDraftPassAt).
  struct PassCosts {
    double first;
    double later;
  };
  PassCosts DraftPassCosts(double batch_size) const;

  std::vector<double> batch_sizes_;
  std::vector<double> verify_tokens_;
  std::vector<double> seconds_;
  int measured_tp_ = 0;
  std::optional<CostTableOrigin> origin_;
  std::vector<double> draft_pass_seconds_;  // empty without a split
  int draft_passes_ = 0;
  std::vector<double> one_pass_draft_seconds_;  // empty without the one-pass point
};

}  // namespace verdict

#endif  // VERDICT_SCHEDULER_COST_TABLE_H_
