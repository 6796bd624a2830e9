#include "scheduler/draft_planner.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "scheduler/cost_table.h"
#include "scheduler/verify_planner.h"

namespace verdict {
namespace {

// Whole-step seconds rising with the verify tokens and the batch, plus a
// split of `pass` seconds per draft pass at each batch size, measured at
// `passes` passes.
CostTable SplitTable(const std::vector<double>& pass, int passes, double verify_slope) {
  const std::vector<double> batch_sizes = {1, 2, 4, 8};
  const std::vector<double> tokens = {1, 4, 8, 16, 40};
  std::vector<double> seconds;
  for (size_t b = 0; b < batch_sizes.size(); ++b) {
    for (double m : tokens) {
      seconds.push_back(passes * pass[b] + 0.01 + 0.001 * batch_sizes[b] + verify_slope * m);
    }
  }
  CostTable table = *CostTable::Create(batch_sizes, tokens, seconds);
  EXPECT_TRUE(table.SetDraftSplit(pass, passes).ok());
  return table;
}

// SplitTable with a one-pass draft phase of `one_pass_share` of all the
// passes at every batch size (a first pass dearer than the rest).
CostTable OnePassTable(const std::vector<double>& pass, int passes, double verify_slope,
                       double one_pass_share) {
  CostTable table = SplitTable(pass, passes, verify_slope);
  std::vector<double> one_pass;
  for (double p : pass) one_pass.push_back(one_pass_share * passes * p);
  EXPECT_TRUE(table.SetOnePassDraft(one_pass).ok());
  return table;
}

double Objective(const CostTable& table, const std::vector<double>& confidences, int gamma,
                 const std::vector<int32_t>& depths) {
  const double b = static_cast<double>(depths.size());
  double gain = b;
  int64_t total = 0;
  int passes = 0;
  for (size_t i = 0; i < depths.size(); ++i) {
    double survival = 1;
    for (int j = 0; j < depths[i]; ++j) {
      survival *= confidences[i * gamma + j];
      gain += survival;
    }
    total += depths[i];
    passes = std::max(passes, static_cast<int>(depths[i]));
  }
  std::vector<int64_t> rows;
  DraftRowsPerPass(depths, &rows);
  EXPECT_EQ(static_cast<int>(rows.size()), passes);
  return gain / table.PredictStepAt(b, b + static_cast<double>(total), rows);
}

// The least depth of each request: with first drafts forced, 1 for every
// request whose cap is at least 1; else 0.
std::vector<int32_t> DepthFloors(const std::vector<int32_t>& caps, bool first_drafts_forced) {
  std::vector<int32_t> floors(caps.size(), 0);
  if (first_drafts_forced) {
    for (size_t i = 0; i < caps.size(); ++i) floors[i] = std::min(caps[i], 1);
  }
  return floors;
}

// The best objective over every depth vector between the floors and the caps.
double BruteForce(const CostTable& table, const std::vector<double>& confidences, int gamma,
                  const std::vector<int32_t>& caps, bool first_drafts_forced = false) {
  const std::vector<int32_t> floors = DepthFloors(caps, first_drafts_forced);
  std::vector<int32_t> depths = floors;
  double best = -1;
  while (true) {
    best = std::max(best, Objective(table, confidences, gamma, depths));
    size_t i = 0;
    while (i < depths.size() && depths[i] == caps[i]) {
      depths[i] = floors[i];
      ++i;
    }
    if (i == depths.size()) break;
    ++depths[i];
  }
  return best;
}

// The best of the plans that draft the surest tokens, as the planner
// defines them: for each limit P on the depth and each k, the top k drafts
// of positions below P (survival descending, then position, then request).
// With first drafts forced: every first draft, plus the top k of the rest.
double BestOfSurestPlans(const CostTable& table, const std::vector<double>& confidences,
                         int gamma, const std::vector<int32_t>& caps,
                         bool first_drafts_forced = false) {
  struct Draft {
    double survival;
    int position, request;
  };
  const int batch = static_cast<int>(caps.size());
  const std::vector<int32_t> floors = DepthFloors(caps, first_drafts_forced);
  double best = Objective(table, confidences, gamma, floors);
  for (int limit = 1; limit <= gamma; ++limit) {
    std::vector<Draft> drafts;
    for (int i = 0; i < batch; ++i) {
      double survival = 1;
      for (int j = 0; j < std::min(limit, static_cast<int>(caps[i])); ++j) {
        survival *= confidences[i * gamma + j];
        if (j >= floors[i]) drafts.push_back({survival, j, i});
      }
    }
    std::sort(drafts.begin(), drafts.end(), [](const Draft& a, const Draft& b) {
      if (a.survival != b.survival) return a.survival > b.survival;
      if (a.position != b.position) return a.position < b.position;
      return a.request < b.request;
    });
    std::vector<int32_t> depths = floors;
    for (const Draft& d : drafts) {
      depths[d.request] = std::max(depths[d.request], d.position + 1);
      best = std::max(best, Objective(table, confidences, gamma, depths));
    }
  }
  return best;
}

TEST(DraftPlannerTest, MatchesBruteForceOverDepths) {
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  int planned_partial = 0, planned_none = 0, planned_mixed = 0;
  for (int trial = 0; trial < 400; ++trial) {
    const int gamma = 1 + static_cast<int>(rng() % 4);
    const int batch = 1 + static_cast<int>(rng() % 5);
    // A pass's price affine in its rows (a fixed part and one per row), so
    // that with every pass priced alike the top-k plans hold the optimum and
    // the brute force must match.
    const double fixed = 0.0005 + 0.01 * unit(rng);
    const double per_row = 0.002 * unit(rng);
    std::vector<double> pass;
    for (double rows : {1.0, 2.0, 4.0, 8.0}) pass.push_back(fixed + per_row * rows);
    // Half the cases price the first pass apart (a one-pass phase between
    // one mean pass and all of them): its price per row then differs from
    // the later passes', so a plan's price depends on how many requests
    // draft, not only on its drafts and depth, and the planner's plan is the
    // best of the surest-token plans, which the brute force may beat.
    const int passes = 1 + static_cast<int>(rng() % 5);
    const double slope = 0.002 * unit(rng);
    const bool first_pass_apart = passes > 1 && trial % 2 == 1;
    const CostTable table = first_pass_apart
                                ? OnePassTable(pass, passes, slope,
                                               (1.0 + (passes - 1) * unit(rng)) / passes)
                                : SplitTable(pass, passes, slope);
    std::vector<double> confidences(batch * gamma);
    for (double& c : confidences) c = 0.05 + 0.95 * unit(rng);
    std::vector<int32_t> max_lens(batch);
    std::vector<uint8_t> flags(batch, 0);
    std::vector<int32_t> caps(batch);
    for (int i = 0; i < batch; ++i) {
      max_lens[i] = 1 + static_cast<int>(rng() % (gamma + 2));
      if (rng() % 8 == 0) flags[i] = kSpeculationDisabled;
      caps[i] = flags[i] != 0 ? 0 : std::min(gamma, max_lens[i] - 1);
    }
    DraftPlanner planner = *DraftPlanner::Create({.gamma = gamma, .min_survival = 1e-12}, table);
    DraftPlan plan;
    // One trial in three on the confidence source's prior, where every
    // request that may draft drafts one token at least.
    const bool prior = trial % 3 == 2;
    ASSERT_TRUE(planner.Plan({.confidences = confidences, .max_verify_lens = max_lens,
                              .flags = flags, .confidence_ready = !prior},
                             &plan)
                    .ok());
    ASSERT_EQ(plan.reason, prior ? DraftReason::kConfidencePrior : DraftReason::kPlanned);
    ASSERT_EQ(plan.depths.size(), static_cast<size_t>(batch));
    for (int i = 0; i < batch; ++i) {
      ASSERT_GE(plan.depths[i], prior ? std::min(caps[i], 1) : 0) << "trial " << trial;
      ASSERT_LE(plan.depths[i], caps[i]) << "trial " << trial << " request " << i;
    }
    const double got = Objective(table, confidences, gamma, plan.depths);
    ASSERT_NEAR(got, BestOfSurestPlans(table, confidences, gamma, caps, prior), got * 1e-12)
        << "trial " << trial;
    if (!first_pass_apart) {
      const double want = BruteForce(table, confidences, gamma, caps, prior);
      ASSERT_GE(got, want * (1 - 1e-12)) << "trial " << trial;
    }
    EXPECT_NEAR(plan.predicted_committed_tokens / plan.predicted_step_seconds, got, got * 1e-12);
    EXPECT_EQ(plan.passes, *std::max_element(plan.depths.begin(), plan.depths.end()));
    if (prior) continue;
    if (plan.passes == 0) ++planned_none;
    if (plan.passes > 0 && plan.passes < gamma) ++planned_partial;
    if (plan.drafting_requests > 0 && plan.drafting_requests < batch) ++planned_mixed;
  }
  // The random cases reach every kind of decision, so the comparison above
  // covers them all.
  EXPECT_GT(planned_none, 0);
  EXPECT_GT(planned_partial, 0);
  EXPECT_GT(planned_mixed, 0);
}

// The sort of large batches (by the survivals' bits) against a comparison
// sort on the same total order: survivals that are equal, survivals that
// differ only below the bits its rounds look at (a few units in the last
// place), and spread ones, listed in any order.
TEST(DraftPlannerTest, SortBySurvivalIsTheTotalOrder) {
  std::mt19937_64 rng(5);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  const auto before = [](const DraftCandidate& a, const DraftCandidate& b) {
    if (a.survival != b.survival) return a.survival > b.survival;
    if (a.position != b.position) return a.position < b.position;
    return a.request < b.request;
  };
  std::vector<DraftCandidate> scratch;
  int near_ties = 0;
  for (const int n : {1, 7, 255, 256, 1000, 3000}) {
    for (int trial = 0; trial < 6; ++trial) {
      const int gamma = 5;
      std::vector<DraftCandidate> candidates;
      for (int i = 0; i < n; ++i) {
        double survival = unit(rng);
        switch (rng() % 4) {
          case 0: survival = 0.25 * static_cast<double>(1 + rng() % 4); break;  // equal ones
          case 1: {
            // Within a few units in the last place of 0.6: the same top bits.
            uint64_t bits = std::bit_cast<uint64_t>(0.6) + rng() % 5;
            survival = std::bit_cast<double>(bits);
            ++near_ties;
            break;
          }
          case 2: survival = 0.0; break;  // a forced first draft of confidence 0
          default: break;
        }
        candidates.push_back({survival, i / gamma, i % gamma});
      }
      std::shuffle(candidates.begin(), candidates.end(), rng);
      std::vector<DraftCandidate> want = candidates;
      std::sort(want.begin(), want.end(), before);
      SortBySurvival(&candidates, &scratch);
      ASSERT_EQ(candidates.size(), want.size());
      for (size_t k = 0; k < want.size(); ++k) {
        ASSERT_EQ(candidates[k].survival, want[k].survival) << n << " candidates, at " << k;
        ASSERT_EQ(candidates[k].request, want[k].request) << n << " candidates, at " << k;
        ASSERT_EQ(candidates[k].position, want[k].position) << n << " candidates, at " << k;
      }
    }
  }
  EXPECT_GT(near_ties, 1000);
}

// Batches with hundreds of candidate drafts (the planner sorts those by
// their bits rather than by comparison) and many equal survivals (a few
// confidence levels), whose order the ties rule decides: the plan is still
// the best of the surest-token plans.
TEST(DraftPlannerTest, LargeBatchesWithEqualSurvivalsPlanAsTheSurestTokens) {
  std::mt19937_64 rng(11);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  const double levels[] = {0.3, 0.5, 0.8, 0.9, 1.0};
  int planned_partial = 0;
  for (int trial = 0; trial < 8; ++trial) {
    const int gamma = 5;
    const int batch = 60 + static_cast<int>(rng() % 340);
    // Prices of the order of the batch's own token (about a millisecond),
    // so that some plans draft for part of the batch.
    const double fixed = 0.01 * unit(rng);
    const double per_row = 0.0005 + 0.001 * unit(rng);
    std::vector<double> pass;
    for (double rows : {1.0, 2.0, 4.0, 8.0}) pass.push_back(fixed + per_row * rows);
    const double slope = 0.001 * unit(rng);
    const CostTable table = trial % 2 == 1
                                ? OnePassTable(pass, gamma, slope, (1.0 + 4 * unit(rng)) / gamma)
                                : SplitTable(pass, gamma, slope);
    std::vector<double> confidences(batch * gamma);
    for (double& c : confidences) c = levels[rng() % std::size(levels)];
    std::vector<int32_t> max_lens(batch);
    std::vector<int32_t> caps(batch);
    for (int i = 0; i < batch; ++i) {
      max_lens[i] = 1 + static_cast<int>(rng() % (gamma + 2));
      caps[i] = std::min(gamma, max_lens[i] - 1);
    }
    DraftPlanner planner = *DraftPlanner::Create({.gamma = gamma, .min_survival = 1e-12}, table);
    DraftPlan plan;
    ASSERT_TRUE(planner.Plan({.confidences = confidences, .max_verify_lens = max_lens}, &plan).ok());
    ASSERT_EQ(plan.reason, DraftReason::kPlanned);
    const double got = Objective(table, confidences, gamma, plan.depths);
    ASSERT_NEAR(got, BestOfSurestPlans(table, confidences, gamma, caps), got * 1e-12)
        << "trial " << trial << ", " << batch << " requests";
    if (plan.drafting_requests > 0 && plan.drafting_requests < batch) ++planned_partial;
  }
  EXPECT_GT(planned_partial, 0);
}

TEST(DraftPlannerTest, ExpensiveDraftPassesGivePlainDecode) {
  const CostTable table = SplitTable({0.05, 0.05, 0.05, 0.05}, 4, 0.0001);
  DraftPlanner planner = *DraftPlanner::Create({.gamma = 4}, table);
  const std::vector<double> confidences(2 * 4, 0.3);
  const std::vector<int32_t> max_lens = {5, 5};
  DraftPlan plan;
  ASSERT_TRUE(planner.Plan({.confidences = confidences, .max_verify_lens = max_lens}, &plan).ok());
  EXPECT_EQ(plan.reason, DraftReason::kPlanned);
  EXPECT_EQ(plan.depths, (std::vector<int32_t>{0, 0}));
  EXPECT_EQ(plan.passes, 0);
  EXPECT_EQ(plan.drafting_requests, 0);
  EXPECT_DOUBLE_EQ(plan.predicted_committed_tokens, 2.0);
  EXPECT_DOUBLE_EQ(plan.predicted_step_seconds, table.PredictStep(2, 2, 0));
}

TEST(DraftPlannerTest, ConfidentRequestDraftsAndDoubtfulOneDoesNot) {
  const CostTable table = SplitTable({0.001, 0.001, 0.001, 0.001}, 3, 0.002);
  DraftPlanner planner = *DraftPlanner::Create({.gamma = 3}, table);
  const std::vector<double> confidences = {0.99, 0.99, 0.99, 0.01, 0.01, 0.01};
  const std::vector<int32_t> max_lens = {4, 4};
  DraftPlan plan;
  ASSERT_TRUE(planner.Plan({.confidences = confidences, .max_verify_lens = max_lens}, &plan).ok());
  EXPECT_EQ(plan.depths, (std::vector<int32_t>{3, 0}));
  EXPECT_EQ(plan.passes, 3);
  EXPECT_EQ(plan.drafting_requests, 1);
  EXPECT_EQ(plan.total_depth, 3);
}

TEST(DraftPlannerTest, FallbacksAndOverride) {
  const std::vector<double> confidences(2 * 3, 0.01);
  const std::vector<int32_t> max_lens = {4, 2};
  const std::vector<uint8_t> stopped = {0, kStopEmitted};
  DraftPlan plan;

  // A whole-step table: everyone drafts its cap, as before the split existed.
  CostTable whole = *CostTable::Create({1}, {1, 8}, {0.01, 0.02});
  DraftPlanner no_split = *DraftPlanner::Create({.gamma = 3}, whole);
  ASSERT_TRUE(no_split.Plan({.confidences = confidences, .max_verify_lens = max_lens}, &plan).ok());
  EXPECT_EQ(plan.reason, DraftReason::kNoDraftSplit);
  EXPECT_EQ(plan.depths, (std::vector<int32_t>{3, 1}));
  EXPECT_EQ(plan.passes, 3);

  DraftPlanner no_table = *DraftPlanner::Create({.gamma = 3}, std::nullopt);
  ASSERT_TRUE(no_table
                  .Plan({.confidences = confidences, .max_verify_lens = max_lens,
                         .flags = stopped},
                        &plan)
                  .ok());
  EXPECT_EQ(plan.reason, DraftReason::kNoDraftSplit);
  EXPECT_EQ(plan.depths, (std::vector<int32_t>{3, 0}));
  EXPECT_TRUE(std::isnan(plan.predicted_step_seconds));

  DraftPlanner split = *DraftPlanner::Create({.gamma = 3}, SplitTable({1e-4, 1e-4, 1e-4, 1e-4}, 3, 0.001));
  ASSERT_TRUE(split
                  .Plan({.confidences = confidences, .max_verify_lens = max_lens,
                         .confidence_ready = false},
                        &plan)
                  .ok());
  EXPECT_EQ(plan.reason, DraftReason::kConfidencePrior);
  EXPECT_EQ(plan.depths, (std::vector<int32_t>{1, 1}));  // doubtful drafts: the floor

  ASSERT_TRUE(split
                  .Plan({.confidences = confidences, .max_verify_lens = max_lens,
                         .drafts_allowed = false},
                        &plan)
                  .ok());
  EXPECT_EQ(plan.reason, DraftReason::kOperatorLimit);
  EXPECT_EQ(plan.depths, (std::vector<int32_t>{0, 0}));
  EXPECT_EQ(plan.passes, 0);

  ASSERT_TRUE(split.Plan({}, &plan).ok());
  EXPECT_EQ(plan.reason, DraftReason::kEmptyBatch);
  EXPECT_TRUE(plan.depths.empty());

  // A pinned depth, capped per request, on the prior and without a table
  // alike; an operator's limit still wins; unpinning plans again.
  for (DraftPlanner* planner : {&split, &no_table}) {
    ASSERT_TRUE(planner->SetPinnedDepth(2).ok());
    ASSERT_TRUE(planner
                    ->Plan({.confidences = confidences, .max_verify_lens = max_lens,
                            .confidence_ready = false},
                           &plan)
                    .ok());
    EXPECT_EQ(plan.reason, DraftReason::kPinnedDepth);
    EXPECT_EQ(plan.depths, (std::vector<int32_t>{2, 1}));
    EXPECT_EQ(plan.passes, 2);
    ASSERT_TRUE(planner
                    ->Plan({.confidences = confidences, .max_verify_lens = max_lens,
                            .drafts_allowed = false},
                           &plan)
                    .ok());
    EXPECT_EQ(plan.reason, DraftReason::kOperatorLimit);
    ASSERT_TRUE(planner->SetPinnedDepth(std::nullopt).ok());
  }
  ASSERT_TRUE(split.Plan({.confidences = confidences, .max_verify_lens = max_lens}, &plan).ok());
  EXPECT_EQ(plan.reason, DraftReason::kPlanned);
  EXPECT_FALSE(split.SetPinnedDepth(4).ok());
  EXPECT_FALSE(split.SetPinnedDepth(-1).ok());
  ASSERT_TRUE(split.SetPinnedDepth(0).ok());
  ASSERT_TRUE(split.Plan({.confidences = confidences, .max_verify_lens = max_lens}, &plan).ok());
  EXPECT_EQ(plan.depths, (std::vector<int32_t>{0, 0}));
}

// On the confidence source's prior, every request that may draft drafts at
// least one token (the observations the source's first fit needs), and
// deeper where the objective, with those first drafts paid for, says so: a
// request whose speculation is off or that emitted a stop drafts nothing.
// Where a first draft alone does not pay but a deeper one does once the
// first is paid for, the prior's plan drafts deeper than the ready one.
TEST(DraftPlannerTest, OnThePriorEveryRequestThatMayDraftDraftsAtLeastOne) {
  const CostTable table = SplitTable({0.001, 0.001, 0.001, 0.001}, 3, 0.002);
  DraftPlanner planner = *DraftPlanner::Create({.gamma = 3}, table);
  const std::vector<int32_t> max_lens = {4, 4, 4, 2};
  const std::vector<uint8_t> flags = {0, 0, kSpeculationDisabled, 0};
  DraftPlan plan;
  for (const double rate : {1.0, 0.99, 0.6, 0.2, 0.01, 0.0}) {
    const std::vector<double> confidences(4 * 3, rate);
    DraftPlannerInput input{.confidences = confidences, .max_verify_lens = max_lens,
                            .flags = flags, .confidence_ready = false};
    ASSERT_TRUE(planner.Plan(input, &plan).ok());
    EXPECT_EQ(plan.reason, DraftReason::kConfidencePrior);
    EXPECT_EQ(plan.depths[2], 0) << "rate " << rate;
    EXPECT_EQ(plan.drafting_requests, 3) << "rate " << rate;
    for (int i : {0, 1, 3}) EXPECT_GE(plan.depths[i], 1) << "rate " << rate << ", request " << i;
    if (rate >= 0.99) EXPECT_EQ(plan.depths, (std::vector<int32_t>{3, 3, 0, 1})) << rate;
    if (rate <= 0.01) EXPECT_EQ(plan.depths, (std::vector<int32_t>{1, 1, 0, 1})) << rate;
  }

  // A first pass that holds 95% of the passes' time: at confidence 0.5 no
  // draft pays for it, but once it is paid for, every later draft does.
  const CostTable dear_first_table =
      OnePassTable({0.004, 0.004, 0.004, 0.004}, 4, 1e-4, 0.95);
  DraftPlanner dear_first = *DraftPlanner::Create({.gamma = 4}, dear_first_table);
  const std::vector<double> halves(4, 0.5);
  const std::vector<int32_t> one_request = {5};
  ASSERT_TRUE(dear_first.Plan({.confidences = halves, .max_verify_lens = one_request}, &plan).ok());
  EXPECT_EQ(plan.depths, (std::vector<int32_t>{0}));
  ASSERT_TRUE(dear_first
                  .Plan({.confidences = halves, .max_verify_lens = one_request,
                         .confidence_ready = false},
                        &plan)
                  .ok());
  EXPECT_EQ(plan.depths, (std::vector<int32_t>{4}));
}

// The first pass priced apart moves the decision: when it holds 95% of
// the passes' time, the later passes cost 1/60 of a mean pass, and the
// planner that stopped at three passes on the mean-pass table drafts all
// four.
TEST(DraftPlannerTest, ADearFirstPassAndCheapLaterPassesDraftDeeper) {
  const std::vector<double> pass = {0.001, 0.001, 0.001, 0.001};
  const std::vector<double> confidences(4 * 4, 0.6);
  const std::vector<int32_t> max_lens(4, 5);
  DraftPlan mean_plan, dear_plan;
  DraftPlanner mean = *DraftPlanner::Create({.gamma = 4}, SplitTable(pass, 4, 0.0001));
  ASSERT_TRUE(
      mean.Plan({.confidences = confidences, .max_verify_lens = max_lens}, &mean_plan).ok());
  DraftPlanner dear = *DraftPlanner::Create({.gamma = 4}, OnePassTable(pass, 4, 0.0001, 0.95));
  ASSERT_TRUE(
      dear.Plan({.confidences = confidences, .max_verify_lens = max_lens}, &dear_plan).ok());
  EXPECT_EQ(mean_plan.passes, 3);
  EXPECT_EQ(dear_plan.passes, 4);
  // The dear table is priced through its own draft phase.
  EXPECT_DOUBLE_EQ(dear_plan.predicted_step_seconds,
                   OnePassTable(pass, 4, 0.0001, 0.95)
                       .PredictStep(4, 4 + static_cast<double>(dear_plan.total_depth),
                                    dear_plan.passes));
}

// Passes priced at their rows: with eight requests, of which two are
// confident, a pass over the two costs a fraction of one over all eight, so
// those two draft deep and the rest run as plain decode rows; priced at the
// whole batch, the same passes do not pay and nobody drafts.
TEST(DraftPlannerTest, OnlyTheConfidentRequestsDraftWhenPassesCostTheirRows) {
  std::vector<double> pass;
  for (double rows : {1.0, 2.0, 4.0, 8.0}) pass.push_back(0.0002 + 0.0009 * rows);
  const CostTable table = SplitTable(pass, 4, 0.00005);
  std::vector<double> confidences(8 * 4, 0.1);
  for (int j = 0; j < 4; ++j) {
    confidences[2 * 4 + j] = 0.95;
    confidences[5 * 4 + j] = 0.95;
  }
  const std::vector<int32_t> max_lens(8, 5);
  DraftPlanner planner = *DraftPlanner::Create({.gamma = 4}, table);
  DraftPlan plan;
  ASSERT_TRUE(planner.Plan({.confidences = confidences, .max_verify_lens = max_lens}, &plan).ok());
  ASSERT_EQ(plan.reason, DraftReason::kPlanned);
  EXPECT_EQ(plan.drafting_requests, 2);
  EXPECT_GT(plan.depths[2], 1);
  EXPECT_EQ(plan.depths[2], plan.depths[5]);
  for (int i : {0, 1, 3, 4, 6, 7}) EXPECT_EQ(plan.depths[i], 0) << i;
  // The same two at the whole batch's price: less than plain decode.
  const double b = 8;
  double gain = b;
  double survival = 1;
  for (int j = 0; j < plan.depths[2]; ++j) gain += 2 * (survival *= 0.95);
  EXPECT_LT(gain / table.PredictStep(b, b + plan.total_depth, plan.passes),
            b / table.PredictStep(b, b, 0));
  EXPECT_GT(plan.predicted_committed_tokens / plan.predicted_step_seconds,
            b / table.PredictStep(b, b, 0));
}

// Two confident requests alike, both worth drafting; one sat out steps and
// its draft must first catch up on their 40 tokens. Its first pass then
// costs 40 rows more, more than its drafts earn, so only the other drafts,
// and the plan's price carries the catch-up of the requests it drafts.
TEST(DraftPlannerTest, ARequestFarBehindDraftsOnlyWhenItsDraftsPayForItsCatchUp) {
  std::vector<double> pass;
  for (double rows : {1.0, 2.0, 4.0, 8.0}) pass.push_back(0.0002 + 0.0009 * rows);
  const CostTable table = SplitTable(pass, 4, 0.00005);
  std::vector<double> confidences(2 * 4, 0.95);
  const std::vector<int32_t> max_lens(2, 5);
  DraftPlanner planner = *DraftPlanner::Create({.gamma = 4}, table);

  DraftPlan even;
  ASSERT_TRUE(planner.Plan({.confidences = confidences, .max_verify_lens = max_lens}, &even).ok());
  ASSERT_EQ(even.drafting_requests, 2);
  EXPECT_EQ(even.catch_up_tokens, 0);

  const std::vector<int32_t> behind = {0, 40};
  DraftPlan plan;
  ASSERT_TRUE(planner
                  .Plan({.confidences = confidences, .max_verify_lens = max_lens,
                         .catch_up_tokens = behind},
                        &plan)
                  .ok());
  EXPECT_GT(plan.depths[0], 0);
  EXPECT_EQ(plan.depths[1], 0);
  EXPECT_EQ(plan.catch_up_tokens, 0);

  // Both drafting with the catch-up priced: worse than the plan taken.
  std::vector<int64_t> rows;
  DraftRowsPerPass(even.depths, &rows);
  rows[0] += 40;
  EXPECT_LT(even.predicted_committed_tokens / table.PredictStepAt(2, 2 + even.total_depth, rows),
            plan.predicted_committed_tokens / plan.predicted_step_seconds);

  // A catch-up small enough to pay for: both draft, and the price has it.
  const std::vector<int32_t> slightly = {0, 1};
  ASSERT_TRUE(planner
                  .Plan({.confidences = confidences, .max_verify_lens = max_lens,
                         .catch_up_tokens = slightly},
                        &plan)
                  .ok());
  ASSERT_EQ(plan.drafting_requests, 2);
  EXPECT_EQ(plan.catch_up_tokens, 1);
  DraftRowsPerPass(plan.depths, &rows);
  rows[0] += 1;
  EXPECT_DOUBLE_EQ(plan.predicted_step_seconds,
                   table.PredictStepAt(2, 2 + plan.total_depth, rows));
  EXPECT_NE(DraftPlanHash(plan), DraftPlanHash(even));
}

TEST(DraftPlannerTest, RefusesMalformedInput) {
  DraftPlanner planner = *DraftPlanner::Create({.gamma = 2}, std::nullopt);
  DraftPlan plan;
  const std::vector<double> three(3, 0.5);
  const std::vector<int32_t> two = {3, 3};
  EXPECT_FALSE(planner.Plan({.confidences = three, .max_verify_lens = two}, &plan).ok());
  const std::vector<double> four(4, 0.5);
  const std::vector<int32_t> zero = {3, 0};
  EXPECT_FALSE(planner.Plan({.confidences = four, .max_verify_lens = zero}, &plan).ok());
  const std::vector<uint8_t> one_flag = {0};
  EXPECT_FALSE(
      planner.Plan({.confidences = four, .max_verify_lens = two, .flags = one_flag}, &plan).ok());
  const std::vector<int32_t> one_count = {2};
  const std::vector<int32_t> negative = {0, -1};
  EXPECT_FALSE(planner
                   .Plan({.confidences = four, .max_verify_lens = two,
                          .catch_up_tokens = one_count},
                         &plan)
                   .ok());
  EXPECT_FALSE(planner
                   .Plan({.confidences = four, .max_verify_lens = two,
                          .catch_up_tokens = negative},
                         &plan)
                   .ok());
  EXPECT_FALSE(DraftPlanner::Create({.gamma = 0}, std::nullopt).ok());
  EXPECT_FALSE(DraftPlanner::Create({.gamma = 2, .min_survival = 0}, std::nullopt).ok());
}

TEST(DraftPlannerTest, HashCoversTheDecision) {
  const CostTable table = SplitTable({0.001, 0.001, 0.001, 0.001}, 3, 0.002);
  DraftPlanner a = *DraftPlanner::Create({.gamma = 3}, table);
  DraftPlanner b = *DraftPlanner::Create({.gamma = 3}, table);
  const std::vector<double> confidences = {0.99, 0.99, 0.99, 0.01, 0.01, 0.01};
  const std::vector<int32_t> max_lens = {4, 4};
  DraftPlan pa, pb;
  ASSERT_TRUE(a.Plan({.confidences = confidences, .max_verify_lens = max_lens}, &pa).ok());
  ASSERT_TRUE(b.Plan({.confidences = confidences, .max_verify_lens = max_lens}, &pb).ok());
  EXPECT_EQ(DraftPlanHash(pa), DraftPlanHash(pb));
  DraftPlan changed = pa;
  changed.depths[1] = 1;
  EXPECT_NE(DraftPlanHash(changed), DraftPlanHash(pa));
  changed = pa;
  changed.passes = 2;
  EXPECT_NE(DraftPlanHash(changed), DraftPlanHash(pa));
  changed = pa;
  changed.reason = DraftReason::kNoDraftSplit;
  EXPECT_NE(DraftPlanHash(changed), DraftPlanHash(pa));
}

}  // namespace
}  // namespace verdict
