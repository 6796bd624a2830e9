// Where the planner's confidences come from: one confidence per draft, the
// estimated chance that the target accepts it given that every earlier draft
// of the request was accepted. Confidence orders verification; only the
// target decides acceptance (seeds/001_4939eb13572a4c80.txt, "Confidence
// schedules verification; verification decides acceptance").
//
// Two sources share one interface (seeds/002_d567d7ab3f14fa00.txt,
// "Confidence"):
//  - OnlineAcceptanceEstimator, for drafts without a confidence head: per draft
//    position k a logistic model c_k = sigmoid(w_k * x + b_k) on
//    x = logit(q_max), refit online from verify outcomes;
//  - HeadConfidence, for drafts that carry a trained confidence head.
// Both are deterministic: every TP rank feeds the same stream and ends in the
// same state, bit for bit, which StateHash lets the engine check.
#ifndef VERDICT_SCHEDULER_ACCEPTANCE_ESTIMATOR_H_
#define VERDICT_SCHEDULER_ACCEPTANCE_ESTIMATOR_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace verdict {

// What the engine knows after one request's verify, for the confidence source.
struct VerifyObservation {
  int64_t request_id = 0;
  // The gamma draft signals the confidences of this step were scored from
  // (see ConfidenceSource::Score). Under overlap scheduling these are the
  // signals of the step that was verified, not of the newest drafts.
  absl::Span<const float> draft_signals;
  // Drafts the target verified for the request: the plan's verify length - 1.
  int32_t num_verified_drafts = 0;
  // Accepted prefix: drafts accepted before the first rejection, at most
  // num_verified_drafts.
  int32_t accepted_drafts = 0;
};

class ConfidenceSource {
 public:
  virtual ~ConfidenceSource() = default;

  // Draft positions per request (gamma).
  virtual int gamma() const = 0;

  // False while the source is on its prior: the verify planner must then
  // verify every draft (and so collect observations for every position).
  virtual bool ready() const = 0;

  // signals[i * gamma + j] is what the draft reported for draft j of request
  // i: the maximum probability q_max of the distribution the draft token was
  // drawn from, at the request's temperature (1 for greedy rows), or the
  // output of its confidence head. Writes confidences[i * gamma + j] in
  // [0, 1]. Refuses spans of different sizes or a size that is not a
  // multiple of gamma.
  virtual absl::Status Score(absl::Span<const float> signals,
                             absl::Span<double> confidences) const = 0;

  // The confidence of a draft at position k whose signal is not known yet
  // (planning a request at a depth it has not drafted to): the source's
  // recent acceptance rate at k, 1 while it has seen nothing there (an
  // implementation may answer for a position without a rate from the
  // positions before it, or shrink a rate of few observations towards 1).
  virtual double UnseenConfidence(int k) const = 0;

  // Folds one verify step's outcomes, whatever their order in the span.
  virtual absl::Status Observe(absl::Span<const VerifyObservation> observations) = 0;

  // Hash of everything that decides future confidences; equal on every rank.
  virtual uint64_t StateHash() const = 0;
};

struct AcceptanceEstimatorOptions {
  int gamma = 5;
  // Steps between two refits of a position. Positions are staggered: k
  // refits on the steps where steps % interval == k * interval / gamma.
  int refit_interval_steps = 32;
  // Observations a position needs before its first fit; until the first
  // position has a fit the estimator is not ready and the planner verifies
  // everything (a deeper position without a fit scores as the one before it).
  int min_observations = 128;
  // Until that first fit, a position's confidence is its acceptance rate
  // with this many accepted pseudo-observations added: 1 before anything is
  // seen, and near the true rate after a few dozen observations. The draft
  // planner explores on it (scheduler/draft_planner.h), so that a pair
  // whose drafts do not pay stops drafting deep long before the fit.
  int prior_observations = 8;
  // Most recent observations kept per position: the fit follows a drifting
  // workload, and memory and refit time stay bounded.
  int window = 4096;
  // L2 penalty on (w, b); keeps the fit finite when a window is separable.
  double l2 = 1.0;
  // q_max is clamped to [q_floor, 1 - q_floor] before the logit, so
  // x stays finite (|x| <= 13.8 for the default).
  double q_floor = 1e-6;
  int max_newton_iterations = 50;
};

// Per-position logistic model of acceptance, refit by Newton's method (IRLS)
// with L2 regularisation. A fit whose slope comes out negative (the signal
// does not order acceptance at that position) is replaced by the
// intercept-only fit: slope 0, the position's acceptance rate. It scores the
// draft distribution, never the drawn token, so trimming stays lossless
// (seeds/002_d567d7ab3f14fa00.txt).
//
// Determinism by construction: observations are folded in request-id order,
// in double precision, on the calling thread; exp and log are the
// determinism.h versions, so two estimators fed the same stream end
// bit-identical on any host.
class OnlineAcceptanceEstimator final : public ConfidenceSource {
 public:
  static absl::StatusOr<OnlineAcceptanceEstimator> Create(
      const AcceptanceEstimatorOptions& options);

  int gamma() const override { return options_.gamma; }
  bool ready() const override;
  // A fitted position scores its fit. Before the first position has a fit,
  // a draft at a position without one scores the position's prior rate
  // (PriorRate), whatever its signal; after it, a deeper position without a
  // fit scores as the position before it for the same request: positions
  // deep in the block are observed only after every earlier draft was
  // accepted, so at low acceptance their fits come late, and the planners
  // would otherwise run on the prior until then.
  absl::Status Score(absl::Span<const float> signals,
                     absl::Span<double> confidences) const override;
  // Per request, in request-id order: drafts 0..accepted_drafts-1 are accepted
  // observations; draft accepted_drafts, if it was verified, is the rejected
  // one; later drafts are not observations (a draft after the first rejection
  // says nothing about its own acceptance). Then refits the positions whose
  // turn it is (see refit_interval_steps). Refuses, without changing the
  // state, a signal span of the wrong size, counts out of range or a
  // repeated request id.
  absl::Status Observe(absl::Span<const VerifyObservation> observations) override;
  uint64_t StateHash() const override;
  // A fitted position: the acceptance rate of its window. A position
  // without a fit: PriorRate(k) before the first position's fit, the
  // position before it after.
  double UnseenConfidence(int k) const override;
  // (accepted + prior_observations) / (observations + prior_observations)
  // over position k's window: the rate the source plans with before its
  // first fit.
  double PriorRate(int k) const;

  // The feature of one signal: logit(clamped q_max).
  double Feature(float q_max) const;

  struct Position {
    bool fitted = false;
    double slope = 0;             // w_k
    double intercept = 0;         // b_k
    int64_t observations = 0;     // ever folded
    int64_t accepted = 0;         // ever folded with outcome 1
    int64_t refits = 0;           // accepted refits
    int64_t rejected_refits = 0;  // refits that did not converge (the last fit stays)
  };
  const Position& position(int k) const { return positions_[k]; }
  int64_t steps() const { return steps_; }
  const AcceptanceEstimatorOptions& options() const { return options_; }

 private:
  explicit OnlineAcceptanceEstimator(const AcceptanceEstimatorOptions& options);

  // One position's recent observations, oldest first from `head`.
  struct Window {
    std::vector<double> x;
    std::vector<uint8_t> y;
    int size = 0;
    int head = 0;      // slot of the oldest observation once full
    int accepted = 0;  // observations in the window with outcome 1
  };
  void Push(int k, double x, bool accepted);
  void Refit(int k);

  AcceptanceEstimatorOptions options_;
  std::vector<Position> positions_;
  std::vector<Window> windows_;
  int64_t steps_ = 0;
  std::vector<int> order_;  // reused: observation indices sorted by request id
};

// A draft that carries a trained confidence head: the signal is the head's
// output, taken as the confidence (clamped to [0, 1], NaN as 0). Always
// ready; Observe only keeps acceptance counts per position, for metrics.
// A gamma below 1 is taken as 1.
class HeadConfidence final : public ConfidenceSource {
 public:
  explicit HeadConfidence(int gamma);

  int gamma() const override { return gamma_; }
  bool ready() const override { return true; }
  absl::Status Score(absl::Span<const float> signals,
                     absl::Span<double> confidences) const override;
  absl::Status Observe(absl::Span<const VerifyObservation> observations) override;
  uint64_t StateHash() const override;
  // The acceptance rate at k over every observation; 1 before the first.
  double UnseenConfidence(int k) const override;

  int64_t observations(int k) const { return observations_[k]; }
  int64_t accepted(int k) const { return accepted_[k]; }

 private:
  int gamma_;
  std::vector<int64_t> observations_;
  std::vector<int64_t> accepted_;
  std::vector<int> order_;  // reused by Observe
};

}  // namespace verdict

#endif  // VERDICT_SCHEDULER_ACCEPTANCE_ESTIMATOR_H_
