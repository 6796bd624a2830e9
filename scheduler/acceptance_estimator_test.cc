#include "scheduler/acceptance_estimator.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "absl/status/status.h"
#include "gtest/gtest.h"
#include "scheduler/determinism.h"

namespace verdict {
namespace {

double Uniform(std::mt19937_64& rng) { return static_cast<double>(rng() >> 11) * 0x1.0p-53; }

// A synthetic draft: per position k, the target accepts a draft with chance
// sigmoid(slope[k] * logit(q_max) + intercept[k]).
struct TrueModel {
  std::vector<double> slope;
  std::vector<double> intercept;
};

// One step's worth of requests and their outcomes; owns the signal storage
// the observations point into.
struct Step {
  std::vector<float> signals;
  std::vector<VerifyObservation> observations;
};

Step MakeStep(const TrueModel& model, int batch, int64_t first_id, std::mt19937_64& rng,
              bool random_verified) {
  const int gamma = static_cast<int>(model.slope.size());
  Step step;
  step.signals.resize(batch * gamma);
  for (float& q : step.signals) q = static_cast<float>(0.05 + 0.949 * Uniform(rng));
  for (int i = 0; i < batch; ++i) {
    VerifyObservation o;
    o.request_id = first_id + i;
    o.draft_signals = absl::MakeConstSpan(step.signals).subspan(i * gamma, gamma);
    o.num_verified_drafts = random_verified ? static_cast<int32_t>(rng() % (gamma + 1)) : gamma;
    int accepted = 0;
    while (accepted < o.num_verified_drafts) {
      const double x = DeterministicLogit(o.draft_signals[accepted], 1e-6);
      const double c = DeterministicSigmoid(model.slope[accepted] * x + model.intercept[accepted]);
      if (Uniform(rng) >= c) break;
      ++accepted;
    }
    o.accepted_drafts = accepted;
    step.observations.push_back(o);
  }
  return step;
}

AcceptanceEstimatorOptions SmallOptions(int gamma) {
  AcceptanceEstimatorOptions options;
  options.gamma = gamma;
  options.refit_interval_steps = 8;
  options.min_observations = 64;
  options.window = 2048;
  return options;
}

TEST(OnlineAcceptanceEstimatorTest, PriorVerifiesEverything) {
  OnlineAcceptanceEstimator est = *OnlineAcceptanceEstimator::Create(SmallOptions(3));
  EXPECT_FALSE(est.ready());
  const std::vector<float> signals = {0.1f, 0.5f, 0.99f, 0.3f, 0.0f, 1.0f};
  std::vector<double> confidences(6, -1);
  ASSERT_TRUE(est.Score(signals, absl::MakeSpan(confidences)).ok());
  for (double c : confidences) EXPECT_EQ(c, 1.0);
}

// Before the first fit every draft scores its position's prior rate,
// whatever its signal: 1 with nothing seen, then the position's acceptance
// rate shrunk towards 1 by prior_observations, which nears the true rate as
// observations come. Each position counts its own observations (a deeper
// one only those that reached it).
TEST(OnlineAcceptanceEstimatorTest, BeforeTheFirstFitDraftsScoreTheirPositionsPriorRate) {
  AcceptanceEstimatorOptions options = SmallOptions(3);
  options.min_observations = 4096;  // no fit in this test
  options.window = 4096;
  OnlineAcceptanceEstimator est = *OnlineAcceptanceEstimator::Create(options);
  // Acceptance 0.3 at every position, whatever the signal.
  const TrueModel model{{0.0, 0.0, 0.0}, {std::log(0.3 / 0.7), std::log(0.3 / 0.7),
                                         std::log(0.3 / 0.7)}};
  std::mt19937_64 rng(23);
  std::vector<int64_t> seen(3, 0), accepted(3, 0);
  const std::vector<float> signals = {0.01f, 0.5f, 0.99f, 0.99f, 0.5f, 0.01f};
  std::vector<double> confidences(6);
  for (int step = 0; step < 60; ++step) {
    ASSERT_TRUE(est.Score(signals, absl::MakeSpan(confidences)).ok());
    for (int k = 0; k < 3; ++k) {
      const double pseudo = options.prior_observations;
      const double expected = (static_cast<double>(accepted[k]) + pseudo) /
                              (static_cast<double>(seen[k]) + pseudo);
      EXPECT_EQ(est.PriorRate(k), expected) << "step " << step << ", position " << k;
      EXPECT_EQ(est.UnseenConfidence(k), expected) << "step " << step << ", position " << k;
      EXPECT_EQ(confidences[k], expected) << "step " << step << ", position " << k;
      EXPECT_EQ(confidences[3 + k], expected) << "step " << step << ", position " << k;
    }
    const Step s = MakeStep(model, 4, step * 4, rng, false);
    for (const VerifyObservation& o : s.observations) {
      for (int k = 0; k <= std::min(o.accepted_drafts, 2); ++k) {
        ++seen[k];
        accepted[k] += k < o.accepted_drafts ? 1 : 0;
      }
    }
    ASSERT_TRUE(est.Observe(s.observations).ok());
    ASSERT_FALSE(est.ready());
  }
  // 240 observations at the first position: within four standard errors
  // (0.03) of 0.3 once the 8 pseudo-observations' pull (about +0.02) is in.
  ASSERT_EQ(seen[0], 240);
  EXPECT_NEAR(est.PriorRate(0), 0.3, 4 * std::sqrt(0.3 * 0.7 / 240) + 8.0 / 248);
  EXPECT_LT(est.PriorRate(1), 1.0);
}

// Observations at the first position only (every request verifies one
// draft): once it has a fit the estimator is ready, and the deeper
// positions, still without one, score as the position before them.
TEST(OnlineAcceptanceEstimatorTest, DeeperPositionsWithoutAFitScoreAsTheOneBefore) {
  const AcceptanceEstimatorOptions options = SmallOptions(3);
  OnlineAcceptanceEstimator est = *OnlineAcceptanceEstimator::Create(options);
  std::mt19937_64 rng(11);
  std::uniform_real_distribution<float> unit(0.05f, 0.99f);
  for (int step = 0; !est.position(0).fitted; ++step) {
    ASSERT_LT(step, 100);
    std::vector<std::vector<float>> signals(8);
    std::vector<VerifyObservation> obs;
    for (int r = 0; r < 8; ++r) {
      const float q = unit(rng);
      signals[r] = {q, 0.5f, 0.5f};
      const int32_t accepted = unit(rng) < q ? 1 : 0;
      obs.push_back({step * 8 + r, signals[r], 1, accepted});
    }
    ASSERT_TRUE(est.Observe(obs).ok());
  }
  ASSERT_TRUE(est.ready());
  EXPECT_FALSE(est.position(1).fitted);
  EXPECT_FALSE(est.position(2).fitted);
  const std::vector<float> signals = {0.2f, 0.9f, 0.9f, 0.95f, 0.1f, 0.1f};
  std::vector<double> confidences(6, -1);
  ASSERT_TRUE(est.Score(signals, absl::MakeSpan(confidences)).ok());
  for (int r = 0; r < 2; ++r) {
    EXPECT_GT(confidences[3 * r], 0.0);
    EXPECT_LT(confidences[3 * r], 1.0);
    EXPECT_EQ(confidences[3 * r + 1], confidences[3 * r]);
    EXPECT_EQ(confidences[3 * r + 2], confidences[3 * r]);
  }
  // A higher signal scores higher at the first position (the fit follows
  // acceptance = q), and the deeper positions follow it.
  EXPECT_GT(confidences[3], confidences[0]);
  EXPECT_EQ(est.UnseenConfidence(2), est.UnseenConfidence(0));
  EXPECT_LT(est.UnseenConfidence(0), 1.0);
}

TEST(OnlineAcceptanceEstimatorTest, OnlyVerifiedPositionsUpToTheFirstRejectionAreObservations) {
  AcceptanceEstimatorOptions options = SmallOptions(4);
  OnlineAcceptanceEstimator est = *OnlineAcceptanceEstimator::Create(options);
  const std::vector<float> s = {0.9f, 0.8f, 0.7f, 0.6f};
  const std::vector<VerifyObservation> step = {
      {1, s, /*verified=*/3, /*accepted=*/1},  // 0 accepted, 1 rejected, 2 after the rejection
      {2, s, 2, 2},                            // 0, 1 accepted; 2, 3 not verified
      {3, s, 0, 0},                            // nothing verified
      {4, s, 4, 4},                            // everything accepted
  };
  ASSERT_TRUE(est.Observe(step).ok());
  EXPECT_EQ(est.position(0).observations, 3);
  EXPECT_EQ(est.position(0).accepted, 3);
  EXPECT_EQ(est.position(1).observations, 3);
  EXPECT_EQ(est.position(1).accepted, 2);
  EXPECT_EQ(est.position(2).observations, 1);
  EXPECT_EQ(est.position(2).accepted, 1);
  EXPECT_EQ(est.position(3).observations, 1);
  EXPECT_EQ(est.position(3).accepted, 1);
  EXPECT_EQ(est.steps(), 1);
}

TEST(OnlineAcceptanceEstimatorTest, RecoversTheAcceptanceModel) {
  const TrueModel truth{{1.2, 0.9, 0.6}, {0.5, 0.2, -0.1}};
  AcceptanceEstimatorOptions options = SmallOptions(3);
  options.window = 8192;
  OnlineAcceptanceEstimator est = *OnlineAcceptanceEstimator::Create(options);
  std::mt19937_64 rng(7);
  for (int step = 0; step < 400; ++step) {
    const Step s = MakeStep(truth, 64, step * 64, rng, /*random_verified=*/false);
    ASSERT_TRUE(est.Observe(s.observations).ok());
  }
  ASSERT_TRUE(est.ready());
  for (int k = 0; k < 3; ++k) {
    const auto& p = est.position(k);
    // Every window is full (8192 observations). Over x = logit(q), q uniform
    // in [0.05, 0.999], the Fisher information of this model gives standard
    // errors of at most 0.028 for the slope and 0.029 for the intercept at
    // that n: 0.15 is more than 5 sigma.
    ASSERT_GE(p.observations, options.window) << k;
    EXPECT_NEAR(p.slope, truth.slope[k], 0.15) << k;
    EXPECT_NEAR(p.intercept, truth.intercept[k], 0.15) << k;
    EXPECT_GT(p.refits, 0);
  }
  // Scores follow the fitted curve.
  std::vector<double> c(3);
  const std::vector<float> signals = {0.9f, 0.9f, 0.9f};
  ASSERT_TRUE(est.Score(signals, absl::MakeSpan(c)).ok());
  for (int k = 0; k < 3; ++k) {
    const double want = DeterministicSigmoid(truth.slope[k] * std::log(9.0) + truth.intercept[k]);
    EXPECT_NEAR(c[k], want, 0.04) << k;
  }
}

TEST(OnlineAcceptanceEstimatorTest, SameStreamGivesIdenticalStateWhateverTheListingOrder) {
  const TrueModel truth{{1.0, 0.8, 0.7, 0.5, 0.4}, {0.3, 0.1, 0.0, -0.2, -0.3}};
  OnlineAcceptanceEstimator a = *OnlineAcceptanceEstimator::Create(SmallOptions(5));
  OnlineAcceptanceEstimator b = *OnlineAcceptanceEstimator::Create(SmallOptions(5));
  std::mt19937_64 rng(11);
  std::mt19937_64 shuffle_rng(12);
  for (int step = 0; step < 300; ++step) {
    Step s = MakeStep(truth, 16, step * 1000, rng, /*random_verified=*/true);
    ASSERT_TRUE(a.Observe(s.observations).ok());
    std::shuffle(s.observations.begin(), s.observations.end(), shuffle_rng);
    ASSERT_TRUE(b.Observe(s.observations).ok());
  }
  ASSERT_TRUE(a.ready());
  EXPECT_EQ(a.StateHash(), b.StateHash());
  for (int k = 0; k < 5; ++k) {
    EXPECT_EQ(std::bit_cast<uint64_t>(a.position(k).slope),
              std::bit_cast<uint64_t>(b.position(k).slope));
    EXPECT_EQ(std::bit_cast<uint64_t>(a.position(k).intercept),
              std::bit_cast<uint64_t>(b.position(k).intercept));
  }
}

TEST(OnlineAcceptanceEstimatorTest, HashSeesADifferentStream) {
  const TrueModel truth{{1.0, 0.8}, {0.3, 0.1}};
  OnlineAcceptanceEstimator a = *OnlineAcceptanceEstimator::Create(SmallOptions(2));
  OnlineAcceptanceEstimator b = *OnlineAcceptanceEstimator::Create(SmallOptions(2));
  std::mt19937_64 rng(3);
  for (int step = 0; step < 50; ++step) {
    Step s = MakeStep(truth, 16, step * 16, rng, false);
    ASSERT_TRUE(a.Observe(s.observations).ok());
    if (step == 17) s.signals[5] = std::nextafter(s.signals[5], 1.0f);  // one ulp of one signal
    ASSERT_TRUE(b.Observe(s.observations).ok());
  }
  EXPECT_NE(a.StateHash(), b.StateHash());
}

TEST(OnlineAcceptanceEstimatorTest, FitsAsSoonAsEnoughObservationsThenOnlyOnTheInterval) {
  AcceptanceEstimatorOptions options = SmallOptions(1);
  options.refit_interval_steps = 5;
  options.min_observations = 40;
  OnlineAcceptanceEstimator est = *OnlineAcceptanceEstimator::Create(options);
  const TrueModel truth{{1.0}, {0.0}};
  std::mt19937_64 rng(5);
  // 10 observations per step: 40 reached at step 4, which fits at once (not
  // at its turn, step 5); later fits come on the interval, steps 5 and 10.
  for (int step = 1; step <= 9; ++step) {
    const Step s = MakeStep(truth, 10, step * 10, rng, false);
    ASSERT_TRUE(est.Observe(s.observations).ok());
    EXPECT_EQ(est.position(0).fitted, step >= 4) << step;
    EXPECT_EQ(est.position(0).refits, step < 4 ? 0 : step < 5 ? 1 : 2) << step;
  }
  const Step s = MakeStep(truth, 10, 100, rng, false);
  ASSERT_TRUE(est.Observe(s.observations).ok());
  EXPECT_EQ(est.position(0).refits, 3);
}

TEST(OnlineAcceptanceEstimatorTest, ANegativeSlopeFallsBackToTheAcceptanceRate) {
  // Acceptance falls as the draft grows confident: the two-parameter fit
  // has w < 0, so the position plans with its acceptance rate instead.
  const TrueModel inverted{{-1.5}, {0.0}};
  AcceptanceEstimatorOptions options = SmallOptions(1);
  OnlineAcceptanceEstimator est = *OnlineAcceptanceEstimator::Create(options);
  std::mt19937_64 rng(9);
  for (int step = 0; step < 64; ++step) {
    const Step s = MakeStep(inverted, 32, step * 32, rng, false);
    ASSERT_TRUE(est.Observe(s.observations).ok());
  }
  const auto& position = est.position(0);
  ASSERT_TRUE(position.fitted);
  EXPECT_EQ(position.slope, 0.0);
  // The first fit at step 2 (64 observations), then one per interval.
  EXPECT_EQ(position.refits, 1 + 64 / options.refit_interval_steps);
  EXPECT_EQ(position.rejected_refits, 0);
  // Every signal scores the same: the window's acceptance rate (the L2
  // penalty on b moves it by far less than the tolerance).
  const double rate = static_cast<double>(position.accepted) / position.observations;
  std::vector<double> c(2);
  const std::vector<float> signals = {0.05f, 0.99f};
  ASSERT_TRUE(est.Score(signals, absl::MakeSpan(c)).ok());
  EXPECT_EQ(c[0], c[1]);
  EXPECT_NEAR(c[0], rate, 0.02);
}

TEST(OnlineAcceptanceEstimatorTest, OneSignalForEveryDraftStillGetsReady) {
  // Dummy weights give every draft the same near-uniform distribution, so
  // every signal is the same tiny q_max, and simulated acceptance accepts
  // each verified draft with a fixed chance. The estimator must still become
  // ready, at the acceptance rate, so that the planner plans.
  constexpr double kRate = 0.8;
  constexpr int kGamma = 3;
  AcceptanceEstimatorOptions options = SmallOptions(kGamma);
  OnlineAcceptanceEstimator est = *OnlineAcceptanceEstimator::Create(options);
  std::mt19937_64 rng(11);
  std::bernoulli_distribution accept(kRate);
  const float q_max = 1.0f / 128256;
  constexpr int kRequests = 32;
  std::vector<float> signals(kRequests * kGamma, q_max);
  for (int step = 0; step < 64; ++step) {
    std::vector<VerifyObservation> observations(kRequests);
    for (int r = 0; r < kRequests; ++r) {
      VerifyObservation& o = observations[r];
      o.request_id = step * kRequests + r;
      o.draft_signals = absl::MakeConstSpan(&signals[r * kGamma], kGamma);
      o.num_verified_drafts = kGamma;
      while (o.accepted_drafts < kGamma && accept(rng)) ++o.accepted_drafts;
    }
    ASSERT_TRUE(est.Observe(observations).ok());
  }
  ASSERT_TRUE(est.ready());
  std::vector<double> c(kGamma);
  ASSERT_TRUE(est.Score(absl::MakeConstSpan(signals.data(), kGamma), absl::MakeSpan(c)).ok());
  for (int k = 0; k < kGamma; ++k) {
    const auto& position = est.position(k);
    EXPECT_EQ(position.slope, 0.0) << k;
    // Each position's observations are Bernoulli(kRate): the estimate stays
    // within four standard errors of it.
    const double tolerance = 4.0 * std::sqrt(kRate * (1 - kRate) / position.observations);
    EXPECT_NEAR(c[k], kRate, tolerance) << k << " (" << position.observations << " observations)";
  }
}

TEST(OnlineAcceptanceEstimatorTest, WindowFollowsADrift) {
  AcceptanceEstimatorOptions options = SmallOptions(1);
  options.window = 512;
  OnlineAcceptanceEstimator est = *OnlineAcceptanceEstimator::Create(options);
  std::mt19937_64 rng(13);
  for (int step = 0; step < 64; ++step) {
    ASSERT_TRUE(est.Observe(MakeStep({{1.0}, {2.0}}, 32, step * 32, rng, false).observations).ok());
  }
  const double before = est.position(0).intercept;
  for (int step = 64; step < 128; ++step) {
    ASSERT_TRUE(
        est.Observe(MakeStep({{1.0}, {-2.0}}, 32, step * 32, rng, false).observations).ok());
  }
  // The last 512 observations all come from the second model; the prior fit
  // is forgotten. The intercept's standard error at n = 512 is 0.17 for
  // either model: 0.85 is 5 sigma, and the two fits are 4 apart.
  EXPECT_NEAR(before, 2.0, 0.85);
  EXPECT_NEAR(est.position(0).intercept, -2.0, 0.85);
}

// A position without a signal (a request that never drafted that deep) is
// scored at the acceptance rate of the position's window once the position
// has a fit; before, at the prior rate: the window's rate with
// prior_observations accepted pseudo-observations. The window slides with
// the stream.
TEST(OnlineAcceptanceEstimatorTest, UnseenConfidenceIsTheWindowsAcceptanceRate) {
  AcceptanceEstimatorOptions options = SmallOptions(2);
  options.window = 512;
  OnlineAcceptanceEstimator est = *OnlineAcceptanceEstimator::Create(options);
  EXPECT_EQ(est.UnseenConfidence(0), 1.0);
  EXPECT_EQ(est.UnseenConfidence(1), 1.0);
  std::mt19937_64 rng(17);
  std::vector<uint8_t> outcomes;  // position 0's observations, in folding order
  const auto rate_of_last = [&](size_t n) {
    n = std::min(n, outcomes.size());
    const int accepted = std::count(outcomes.end() - static_cast<std::ptrdiff_t>(n),
                                    outcomes.end(), uint8_t{1});
    return static_cast<double>(accepted) / static_cast<double>(n);
  };
  for (int step = 0; step < 96; ++step) {
    const TrueModel model = step < 48 ? TrueModel{{1.0, 1.0}, {2.0, 0.0}}
                                      : TrueModel{{1.0, 1.0}, {-2.0, 0.0}};
    const Step s = MakeStep(model, 16, step * 16, rng, false);
    for (const VerifyObservation& o : s.observations) outcomes.push_back(o.accepted_drafts > 0);
    ASSERT_TRUE(est.Observe(s.observations).ok());
    if (!est.position(0).fitted) {
      const double pseudo = options.prior_observations;
      const double seen = static_cast<double>(outcomes.size());
      EXPECT_EQ(est.UnseenConfidence(0), (rate_of_last(512) * seen + pseudo) / (seen + pseudo))
          << "step " << step;
    } else {
      EXPECT_EQ(est.UnseenConfidence(0), rate_of_last(512)) << "step " << step;
    }
  }
  // The window holds only the second model's observations by now: a low
  // rate, far from the first model's.
  EXPECT_LT(est.UnseenConfidence(0), 0.5);
  EXPECT_GT(rate_of_last(outcomes.size()), est.UnseenConfidence(0));
  EXPECT_EQ(est.UnseenConfidence(-1), 1.0);
  EXPECT_EQ(est.UnseenConfidence(2), 1.0);
}

TEST(OnlineAcceptanceEstimatorTest, RefusesMalformedObservationsWithoutChangingState) {
  OnlineAcceptanceEstimator est = *OnlineAcceptanceEstimator::Create(SmallOptions(3));
  const std::vector<float> s3 = {0.5f, 0.5f, 0.5f};
  const std::vector<float> s2 = {0.5f, 0.5f};
  ASSERT_TRUE(est.Observe(std::vector<VerifyObservation>{{1, s3, 2, 1}}).ok());
  const uint64_t before = est.StateHash();
  EXPECT_FALSE(
      est.Observe(std::vector<VerifyObservation>{{1, s2, 1, 1}}).ok());  // wrong signal count
  EXPECT_FALSE(
      est.Observe(std::vector<VerifyObservation>{{1, s3, 2, 3}}).ok());  // accepted > verified
  EXPECT_FALSE(
      est.Observe(std::vector<VerifyObservation>{{1, s3, 4, 0}}).ok());  // verified > gamma
  EXPECT_FALSE(est.Observe(std::vector<VerifyObservation>{{1, s3, -1, 0}}).ok());
  EXPECT_FALSE(est.Observe(std::vector<VerifyObservation>{{5, s3, 1, 1}, {5, s3, 1, 0}})
                   .ok());  // repeated id
  EXPECT_EQ(est.StateHash(), before);
  EXPECT_EQ(est.steps(), 1);
}

TEST(OnlineAcceptanceEstimatorTest, ScoreRefusesMismatchedSpans) {
  OnlineAcceptanceEstimator est = *OnlineAcceptanceEstimator::Create(SmallOptions(3));
  std::vector<double> c(4);
  const std::vector<float> four(4, 0.5f);
  const std::vector<float> three(3, 0.5f);
  EXPECT_FALSE(est.Score(four, absl::MakeSpan(c)).ok());   // not a multiple of gamma
  EXPECT_FALSE(est.Score(three, absl::MakeSpan(c)).ok());  // size mismatch
}

TEST(OnlineAcceptanceEstimatorTest, CreateRefusesBadOptions) {
  AcceptanceEstimatorOptions o;
  o.gamma = 0;
  EXPECT_FALSE(OnlineAcceptanceEstimator::Create(o).ok());
  o = {};
  o.window = o.min_observations - 1;
  EXPECT_FALSE(OnlineAcceptanceEstimator::Create(o).ok());
  o = {};
  o.l2 = 0;
  EXPECT_FALSE(OnlineAcceptanceEstimator::Create(o).ok());
  o = {};
  o.refit_interval_steps = 0;
  EXPECT_FALSE(OnlineAcceptanceEstimator::Create(o).ok());
  o = {};
  o.q_floor = 0.5;
  EXPECT_FALSE(OnlineAcceptanceEstimator::Create(o).ok());
  o = {};
  o.prior_observations = 0;
  EXPECT_FALSE(OnlineAcceptanceEstimator::Create(o).ok());
}

TEST(HeadConfidenceTest, PassesTheHeadThroughTheSameInterface) {
  HeadConfidence head(2);
  ConfidenceSource& source = head;
  EXPECT_TRUE(source.ready());
  const std::vector<float> signals = {0.25f, 1.5f, -0.1f, std::nanf("")};
  std::vector<double> c(4);
  ASSERT_TRUE(source.Score(signals, absl::MakeSpan(c)).ok());
  EXPECT_EQ(c, (std::vector<double>{0.25, 1.0, 0.0, 0.0}));
  const uint64_t before = source.StateHash();
  ASSERT_TRUE(source
                  .Observe(std::vector<VerifyObservation>{
                      {1, absl::MakeConstSpan(signals).subspan(0, 2), 2, 1},
                      {2, absl::MakeConstSpan(signals).subspan(2, 2), 1, 1}})
                  .ok());
  EXPECT_EQ(head.observations(0), 2);
  EXPECT_EQ(head.accepted(0), 2);
  EXPECT_EQ(head.observations(1), 1);
  EXPECT_EQ(head.accepted(1), 0);
  EXPECT_NE(source.StateHash(), before);
  EXPECT_EQ(source.UnseenConfidence(0), 1.0);  // 2 of 2
  EXPECT_EQ(source.UnseenConfidence(1), 0.0);  // 0 of 1
  EXPECT_EQ(HeadConfidence(2).UnseenConfidence(0), 1.0);  // nothing seen
}

}  // namespace
}  // namespace verdict
