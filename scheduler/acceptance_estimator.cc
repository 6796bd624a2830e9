#include "scheduler/acceptance_estimator.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "scheduler/determinism.h"

namespace verdict {
namespace {

absl::Status CheckScoreSpans(int gamma, absl::Span<const float> signals,
                             absl::Span<double> confidences) {
  if (signals.size() != confidences.size()) {
    return absl::InvalidArgumentError(absl::StrCat("confidence: ", signals.size(), " signals but ",
                                                   confidences.size(), " confidence slots"));
  }
  if (signals.size() % gamma != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "confidence: ", signals.size(), " signals is not a multiple of gamma = ", gamma));
  }
  return absl::OkStatus();
}

// Checks one step's observations and fills `order` with their indices sorted
// by request id: the fold order that makes the state independent of how the
// engine happened to list the requests.
absl::Status CheckAndOrder(int gamma, absl::Span<const VerifyObservation> observations,
                           std::vector<int>* order) {
  for (size_t i = 0; i < observations.size(); ++i) {
    const VerifyObservation& o = observations[i];
    if (static_cast<int>(o.draft_signals.size()) != gamma) {
      return absl::InvalidArgumentError(absl::StrCat("observation of request ", o.request_id, ": ",
                                                     o.draft_signals.size(),
                                                     " draft signals, gamma = ", gamma));
    }
    if (o.num_verified_drafts < 0 || o.num_verified_drafts > gamma) {
      return absl::InvalidArgumentError(absl::StrCat("observation of request ", o.request_id, ": ",
                                                     o.num_verified_drafts,
                                                     " verified drafts, gamma = ", gamma));
    }
    if (o.accepted_drafts < 0 || o.accepted_drafts > o.num_verified_drafts) {
      return absl::InvalidArgumentError(absl::StrCat("observation of request ", o.request_id, ": ",
                                                     o.accepted_drafts, " accepted of ",
                                                     o.num_verified_drafts, " verified drafts"));
    }
  }
  order->resize(observations.size());
  for (size_t i = 0; i < observations.size(); ++i) (*order)[i] = static_cast<int>(i);
  std::sort(order->begin(), order->end(),
            [&](int a, int b) { return observations[a].request_id < observations[b].request_id; });
  for (size_t i = 1; i < order->size(); ++i) {
    if (observations[(*order)[i]].request_id == observations[(*order)[i - 1]].request_id) {
      return absl::InvalidArgumentError(absl::StrCat(
          "request ", observations[(*order)[i]].request_id, " is observed twice in one step"));
    }
  }
  return absl::OkStatus();
}

// Calls fold(k, accepted) for each observation a verify outcome makes, in
// position order: the accepted drafts, then the first rejected one if it was
// verified. Drafts after it were never reached by acceptance
// (seeds/001_4939eb13572a4c80.txt: rejected positions must not remain
// visible as accepted state), so they are not observations.
template <typename Fold>
void ForEachOutcome(const VerifyObservation& o, Fold fold) {
  for (int k = 0; k < o.accepted_drafts; ++k) fold(k, true);
  if (o.accepted_drafts < o.num_verified_drafts) fold(o.accepted_drafts, false);
}

}  // namespace

absl::StatusOr<OnlineAcceptanceEstimator> OnlineAcceptanceEstimator::Create(
    const AcceptanceEstimatorOptions& options) {
  if (options.gamma < 1)
    return absl::InvalidArgumentError(absl::StrCat("estimator: gamma = ", options.gamma));
  if (options.refit_interval_steps < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("estimator: refit_interval_steps = ", options.refit_interval_steps));
  }
  if (options.min_observations < 2) {
    return absl::InvalidArgumentError(absl::StrCat(
        "estimator: min_observations = ", options.min_observations, " (a fit needs at least 2)"));
  }
  if (options.prior_observations < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "estimator: prior_observations = ", options.prior_observations, " (must be at least 1)"));
  }
  if (options.window < options.min_observations) {
    return absl::InvalidArgumentError(
        absl::StrCat("estimator: window = ", options.window,
                     " is below min_observations = ", options.min_observations));
  }
  if (!(options.l2 > 0) || !std::isfinite(options.l2)) {
    return absl::InvalidArgumentError(
        absl::StrCat("estimator: l2 = ", options.l2, " (must be positive)"));
  }
  if (!(options.q_floor > 0) || !(options.q_floor < 0.5)) {
    return absl::InvalidArgumentError(absl::StrCat("estimator: q_floor = ", options.q_floor));
  }
  if (options.max_newton_iterations < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("estimator: max_newton_iterations = ", options.max_newton_iterations));
  }
  return OnlineAcceptanceEstimator(options);
}

OnlineAcceptanceEstimator::OnlineAcceptanceEstimator(const AcceptanceEstimatorOptions& options)
    : options_(options), positions_(options.gamma), windows_(options.gamma) {
  for (Window& w : windows_) {
    w.x.assign(options.window, 0.0);
    w.y.assign(options.window, 0);
  }
}

bool OnlineAcceptanceEstimator::ready() const { return positions_[0].fitted; }

double OnlineAcceptanceEstimator::Feature(float q_max) const {
  return DeterministicLogit(static_cast<double>(q_max), options_.q_floor);
}

absl::Status OnlineAcceptanceEstimator::Score(absl::Span<const float> signals,
                                              absl::Span<double> confidences) const {
  if (absl::Status s = CheckScoreSpans(options_.gamma, signals, confidences); !s.ok()) return s;
  const int gamma = options_.gamma;
  const bool first_fitted = positions_[0].fitted;
  for (size_t i = 0; i < signals.size(); ++i) {
    const int k = static_cast<int>(i % gamma);
    const Position& p = positions_[k];
    if (p.fitted) {
      confidences[i] = DeterministicSigmoid(p.slope * Feature(signals[i]) + p.intercept);
    } else if (k > 0 && first_fitted) {
      // A deeper position seldom reached (it is observed only after every
      // earlier draft was accepted) scores as the one before it, so that
      // the planners need not wait for it on the prior.
      confidences[i] = confidences[i - 1];
    } else {
      confidences[i] = PriorRate(k);
    }
  }
  return absl::OkStatus();
}

absl::Status OnlineAcceptanceEstimator::Observe(absl::Span<const VerifyObservation> observations) {
  if (absl::Status s = CheckAndOrder(options_.gamma, observations, &order_); !s.ok()) return s;
  for (int index : order_) {
    const VerifyObservation& o = observations[index];
    ForEachOutcome(o,
                   [&](int k, bool accepted) { Push(k, Feature(o.draft_signals[k]), accepted); });
  }
  ++steps_;
  // Position k refits when steps_ % interval == k * interval / gamma: every
  // position every interval, staggered so that one step does not pay for all
  // of them (a refit over a full window takes about a millisecond). A
  // position without a fit fits on the first step it has enough
  // observations: until the first position has one the planners run on the
  // prior, and waiting for a turn would hold them there (or a deeper
  // position on the score of the one before it) for up to an interval
  // (those first fits are over short windows, so they are cheap).
  const int64_t interval = options_.refit_interval_steps;
  const int64_t phase = steps_ % interval;
  for (int k = 0; k < options_.gamma; ++k) {
    const bool turn = phase == k * interval / options_.gamma || !positions_[k].fitted;
    if (turn && windows_[k].size >= options_.min_observations) Refit(k);
  }
  return absl::OkStatus();
}

void OnlineAcceptanceEstimator::Push(int k, double x, bool accepted) {
  Window& w = windows_[k];
  const int capacity = options_.window;
  int slot;
  if (w.size < capacity) {
    slot = w.size++;
  } else {
    slot = w.head;
    w.head = (w.head + 1) % capacity;
    w.accepted -= w.y[slot];
  }
  w.x[slot] = x;
  w.y[slot] = accepted ? 1 : 0;
  w.accepted += w.y[slot];
  Position& p = positions_[k];
  ++p.observations;
  if (accepted) ++p.accepted;
}

void OnlineAcceptanceEstimator::Refit(int k) {
  const Window& win = windows_[k];
  const int n = win.size;
  const int capacity = options_.window;
  const double l2 = options_.l2;

  // Penalised negative log-likelihood with its gradient and Hessian at
  // (w, b), summed oldest observation first (a fixed order: the sums are
  // the same bits on every rank).
  struct Eval {
    double loss, gw, gb, hww, hwb, hbb;
  };
  auto evaluate = [&](double w, double b) {
    Eval e{0, 0, 0, 0, 0, 0};
    for (int t = 0; t < n; ++t) {
      const int slot = (win.head + t) % capacity;
      const double x = win.x[slot];
      const double y = win.y[slot];
      const double z = w * x + b;
      const double ez = DeterministicExp(-std::fabs(z));  // in (0, 1]
      const double p = z >= 0 ? 1.0 / (1.0 + ez) : ez / (1.0 + ez);
      // softplus(z) - y z, the logistic loss of one observation.
      e.loss += std::max(z, 0.0) + DeterministicLog(1.0 + ez) - y * z;
      const double r = p - y;
      const double v = p * (1.0 - p);
      e.gw += r * x;
      e.gb += r;
      e.hww += v * x * x;
      e.hwb += v * x;
      e.hbb += v;
    }
    e.loss += 0.5 * l2 * (w * w + b * b);
    e.gw += l2 * w;
    e.gb += l2 * b;
    e.hww += l2;
    e.hbb += l2;
    return e;
  };

  // Damped Newton from (w, b) on the penalised loss, over both parameters or,
  // with `with_slope` false, over b alone with w held at 0. True once
  // converged; (w, b) is then the minimiser.
  auto minimise = [&](bool with_slope, double& w, double& b) {
    Eval cur = evaluate(w, b);
    for (int it = 0; it < options_.max_newton_iterations; ++it) {
      double dw = 0;
      double db = 0;
      if (with_slope) {
        const double det = cur.hww * cur.hbb - cur.hwb * cur.hwb;
        if (!(det > 0)) return false;
        dw = (cur.hbb * cur.gw - cur.hwb * cur.gb) / det;
        db = (cur.hww * cur.gb - cur.hwb * cur.gw) / det;
      } else {
        if (!(cur.hbb > 0)) return false;
        db = cur.gb / cur.hbb;
      }
      // Newton decrement: half of it estimates how far the loss is above its
      // minimum.
      const double decrement = cur.gw * dw + cur.gb * db;
      if (!(decrement >= 0) || !std::isfinite(decrement)) return false;
      if (decrement < 1e-14 * (1.0 + std::fabs(cur.loss))) return true;
      // Damped step: halve until the loss does not go up (plain Newton can
      // overshoot on logistic losses far from the optimum).
      double step = 1.0;
      bool moved = false;
      for (int halving = 0; halving < 40; ++halving, step *= 0.5) {
        const double nw = w - step * dw;
        const double nb = b - step * db;
        const Eval next = evaluate(nw, nb);
        if (next.loss <= cur.loss) {
          w = nw;
          b = nb;
          cur = next;
          moved = true;
          break;
        }
      }
      // No decrease at any step size: the loss is flat to rounding here,
      // which is the optimum as far as the arithmetic can tell, if the
      // decrement agrees.
      if (!moved) return decrement < 1e-8 * (1.0 + std::fabs(cur.loss));
    }
    return false;
  };

  Position& pos = positions_[k];
  // Warm start from the current fit: the optimum is unique (the penalised
  // loss is strictly convex), so this only saves iterations.
  double w = pos.fitted ? pos.slope : 0.0;
  double b = pos.fitted ? pos.intercept : 0.0;
  bool converged = minimise(/*with_slope=*/true, w, b);
  // A negative slope would say that a more confident draft is less likely to
  // be accepted: the signal does not order this position's acceptance. (When
  // every draft carries the same signal, as with dummy weights, the penalty
  // alone tilts the slope below 0.) The position then plans with its
  // acceptance rate: the intercept-only fit, slope 0.
  if (converged && std::isfinite(w) && w < 0) {
    w = 0;
    converged = minimise(/*with_slope=*/false, w, b);
  }
  if (!converged || !std::isfinite(w) || !std::isfinite(b)) {
    ++pos.rejected_refits;
    return;
  }
  pos.fitted = true;
  pos.slope = w;
  pos.intercept = b;
  ++pos.refits;
}

double OnlineAcceptanceEstimator::UnseenConfidence(int k) const {
  if (k < 0 || k >= options_.gamma) return 1.0;
  if (!positions_[k].fitted) return positions_[0].fitted ? UnseenConfidence(k - 1) : PriorRate(k);
  const Window& w = windows_[k];
  return w.size > 0 ? static_cast<double>(w.accepted) / static_cast<double>(w.size) : 1.0;
}

double OnlineAcceptanceEstimator::PriorRate(int k) const {
  if (k < 0 || k >= options_.gamma) return 1.0;
  const Window& w = windows_[k];
  const double pseudo = static_cast<double>(options_.prior_observations);
  return (static_cast<double>(w.accepted) + pseudo) / (static_cast<double>(w.size) + pseudo);
}

uint64_t OnlineAcceptanceEstimator::StateHash() const {
  Fnv1a64 h;
  h.AddI64(options_.gamma);
  h.AddI64(options_.refit_interval_steps);
  h.AddI64(options_.min_observations);
  h.AddI64(options_.prior_observations);
  h.AddI64(options_.window);
  h.AddDouble(options_.l2);
  h.AddDouble(options_.q_floor);
  h.AddI64(options_.max_newton_iterations);
  h.AddI64(steps_);
  for (int k = 0; k < options_.gamma; ++k) {
    const Position& p = positions_[k];
    h.AddU64(p.fitted ? 1 : 0);
    h.AddDouble(p.slope);
    h.AddDouble(p.intercept);
    h.AddI64(p.observations);
    h.AddI64(p.accepted);
    h.AddI64(p.refits);
    h.AddI64(p.rejected_refits);
    const Window& w = windows_[k];
    h.AddI64(w.size);
    for (int t = 0; t < w.size; ++t) {
      const int slot = (w.head + t) % options_.window;
      h.AddDouble(w.x[slot]);
      h.AddU64(w.y[slot]);
    }
  }
  return h.digest();
}

HeadConfidence::HeadConfidence(int gamma)
    : gamma_(std::max(gamma, 1)), observations_(gamma_, 0), accepted_(gamma_, 0) {}

absl::Status HeadConfidence::Score(absl::Span<const float> signals,
                                   absl::Span<double> confidences) const {
  if (absl::Status s = CheckScoreSpans(gamma_, signals, confidences); !s.ok()) return s;
  for (size_t i = 0; i < signals.size(); ++i) {
    const double c = signals[i];
    confidences[i] = c > 0 ? std::min(c, 1.0) : 0.0;  // NaN fails c > 0
  }
  return absl::OkStatus();
}

absl::Status HeadConfidence::Observe(absl::Span<const VerifyObservation> observations) {
  if (absl::Status s = CheckAndOrder(gamma_, observations, &order_); !s.ok()) return s;
  for (const VerifyObservation& o : observations) {
    ForEachOutcome(o, [&](int k, bool accepted) {
      ++observations_[k];
      if (accepted) ++accepted_[k];
    });
  }
  return absl::OkStatus();
}

double HeadConfidence::UnseenConfidence(int k) const {
  if (k < 0 || k >= gamma_ || observations_[k] == 0) return 1.0;
  return static_cast<double>(accepted_[k]) / static_cast<double>(observations_[k]);
}

uint64_t HeadConfidence::StateHash() const {
  Fnv1a64 h;
  h.AddI64(gamma_);
  for (int k = 0; k < gamma_; ++k) {
    h.AddI64(observations_[k]);
    h.AddI64(accepted_[k]);
  }
  return h.digest();
}

}  // namespace verdict
