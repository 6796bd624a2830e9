#include "scheduler/verify_planner.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <utility>
#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "runtime/model/graph_shapes.h"
#include "scheduler/acceptance_estimator.h"
#include "scheduler/cost_table.h"

namespace verdict {
namespace {

using ::testing::ElementsAre;

double Uniform(std::mt19937_64& rng) { return static_cast<double>(rng() >> 11) * 0x1.0p-53; }

VerifyPlanner MakePlanner(VerifyMode mode, int gamma, std::optional<CostTable> table,
                          std::optional<double> pinned = std::nullopt) {
  PlannerOptions options;
  options.mode = mode;
  options.gamma = gamma;
  options.pinned_budget_fraction = pinned;
  options.log = [](std::string_view) {};
  absl::StatusOr<VerifyPlanner> planner =
      VerifyPlanner::Create(std::move(options), std::move(table));
  EXPECT_TRUE(planner.ok()) << planner.status();
  return *std::move(planner);
}

// A table that depends on M only, through its knots.
CostTable TokensOnlyTable(std::vector<double> tokens, std::vector<double> seconds) {
  return *CostTable::Create({1}, std::move(tokens), std::move(seconds));
}

VerifyPlan PlanOrDie(VerifyPlanner& planner, const std::vector<double>& confidences,
                     const std::vector<int32_t>& max_lens, const std::vector<uint8_t>& flags = {},
                     bool ready = true, int64_t prefill_rows = 0) {
  VerifyPlan plan;
  PlannerInput input{confidences, max_lens, flags, ready};
  input.prefill_rows = prefill_rows;
  const absl::Status s = planner.Plan(input, &plan);
  EXPECT_TRUE(s.ok()) << s;
  return plan;
}

// seeds/001_4939eb13572a4c80.txt, "Make it yours": two requests, three candidate confidences each,
// a budget of three draft positions.
class SeedExerciseTest : public ::testing::Test {
 protected:
  const std::vector<double> confidences_ = {0.9, 0.9, 0.9,  // request 0: survivals 0.9, 0.81, 0.729
                                            0.6, 0.5, 0.4};  // request 1: survivals 0.6, 0.3, 0.12
  const std::vector<int32_t> max_lens_ = {4, 4};
};

TEST_F(SeedExerciseTest, ExpectedAcceptanceAllocationBeatsEqualAllocation) {
  // Budget pinned to three of the six drafts.
  VerifyPlanner planner = MakePlanner(VerifyMode::kCompact, 3, std::nullopt, 0.5);
  const VerifyPlan plan = PlanOrDie(planner, confidences_, max_lens_);
  EXPECT_EQ(plan.reason, PlanReason::kPinnedBudget);
  EXPECT_EQ(plan.budget, 3);
  // The three largest survivals all belong to request 0.
  EXPECT_THAT(plan.verify_lens, ElementsAre(4, 1));
  EXPECT_NEAR(plan.predicted_committed_tokens, 2 + 0.9 + 0.81 + 0.729, 1e-12);  // 4.439
  EXPECT_EQ(plan.verify_tokens, 5);

  // Equal allocation cannot split three drafts evenly; either near-equal
  // split commits fewer tokens in expectation.
  EXPECT_NEAR(ExpectedCommittedTokens(confidences_, 3, std::vector<int32_t>{3, 2}),
              2 + 0.9 + 0.81 + 0.6, 1e-12);
  EXPECT_NEAR(ExpectedCommittedTokens(confidences_, 3, std::vector<int32_t>{2, 3}),
              2 + 0.9 + 0.6 + 0.3, 1e-12);
  EXPECT_NEAR(ExpectedCommittedTokens(confidences_, 3, plan.verify_lens),
              plan.predicted_committed_tokens, 1e-12);
}

TEST_F(SeedExerciseTest, ObjectiveChoosesTheSameBudgetOnAStaircase) {
  // One second up to 5 verify tokens (B = 2 plus three drafts), two seconds
  // from 6: the fourth draft would double the step for 0.6 more tokens.
  VerifyPlanner planner =
      MakePlanner(VerifyMode::kCompact, 3, TokensOnlyTable({2, 5, 6, 8}, {1.0, 1.0, 2.0, 2.0}));
  const VerifyPlan plan = PlanOrDie(planner, confidences_, max_lens_);
  EXPECT_EQ(plan.reason, PlanReason::kPlanned);
  EXPECT_EQ(plan.budget, 3);
  EXPECT_THAT(plan.verify_lens, ElementsAre(4, 1));
  EXPECT_EQ(plan.predicted_step_seconds, 1.0);
  EXPECT_NEAR(plan.predicted_committed_tokens, 4.439, 1e-12);
}

TEST_F(SeedExerciseTest, StateCorrectionsFollowTheOutcome) {
  // Request 0 verifies drafts 0..2, request 1 none. Whatever the outcome,
  // the confidence source sees only verified drafts up to the first
  // rejection; request 1's unverified drafts are not observations.
  const std::vector<float> signals = {0.9f, 0.9f, 0.9f, 0.6f, 0.5f, 0.4f};
  struct Outcome {
    int accepted0;
    std::vector<int64_t> observed;  // per position, after folding
  };
  for (const Outcome& o : {Outcome{0, {1, 0, 0}}, Outcome{1, {1, 1, 0}}, Outcome{3, {1, 1, 1}}}) {
    HeadConfidence source(3);
    const std::vector<VerifyObservation> step = {
        {0, absl::MakeConstSpan(signals).subspan(0, 3), /*verified=*/3, o.accepted0},
        {1, absl::MakeConstSpan(signals).subspan(3, 3), /*verified=*/0, 0}};
    ASSERT_TRUE(source.Observe(step).ok());
    for (int k = 0; k < 3; ++k)
      EXPECT_EQ(source.observations(k), o.observed[k]) << o.accepted0 << " " << k;
    // Committed tokens: the accepted prefix plus the row after it (the
    // correction, or the bonus when all three pass); positions advance by
    // that, never by the draft length.
    EXPECT_EQ(o.accepted0 + 1, std::min(o.accepted0, 3) + 1);
  }
}

TEST(VerifyPlannerTest, TiesBreakByPositionThenRequest) {
  // Equal confidences everywhere: survivals tie across requests at each
  // position, so the budget fills position 0 of every request first, in
  // request order.
  VerifyPlanner planner = MakePlanner(VerifyMode::kCompact, 3, std::nullopt, 4.0 / 9.0);
  const VerifyPlan plan = PlanOrDie(planner, std::vector<double>(9, 0.8), {4, 4, 4});
  EXPECT_EQ(plan.budget, 4);
  EXPECT_THAT(plan.verify_lens, ElementsAre(3, 2, 2));
}

TEST(VerifyPlannerTest, RatioTiesGoToTheSmallerBudget) {
  // Survival 1 everywhere and a cost proportional to M: tau(k) / cost is 1
  // for every k, so the first k, 0, wins.
  VerifyPlanner planner = MakePlanner(VerifyMode::kCompact, 2, TokensOnlyTable({1, 3}, {1.0, 3.0}));
  const VerifyPlan plan = PlanOrDie(planner, {1.0, 1.0}, {3});
  EXPECT_EQ(plan.reason, PlanReason::kPlanned);
  EXPECT_EQ(plan.budget, 0);
  EXPECT_THAT(plan.verify_lens, ElementsAre(1));
}

TEST(VerifyPlannerTest, FindsTheGlobalPeakOfAStaircase) {
  // tau(k) = 1 + k. Peaks: k = 3 (4 / 1), k = 7 (8 / 1.5) and k = 15
  // (16 / 3, the same ratio as k = 7). A search that stops at the first peak
  // would answer 3; the tie goes to 7.
  VerifyPlanner planner =
      MakePlanner(VerifyMode::kCompact, 15,
                  TokensOnlyTable({1, 4, 5, 8, 9, 16}, {1.0, 1.0, 1.5, 1.5, 3.0, 3.0}));
  const VerifyPlan plan = PlanOrDie(planner, std::vector<double>(15, 1.0), {16});
  EXPECT_EQ(plan.budget, 7);
  EXPECT_THAT(plan.verify_lens, ElementsAre(8));
  EXPECT_EQ(plan.predicted_step_seconds, 1.5);
}

TEST(VerifyPlannerTest, AllZeroConfidencesVerifyNoDraft) {
  VerifyPlanner planner =
      MakePlanner(VerifyMode::kCompact, 4, TokensOnlyTable({1, 64}, {0.01, 0.05}));
  const VerifyPlan plan = PlanOrDie(planner, std::vector<double>(12, 0.0), {5, 5, 5});
  EXPECT_EQ(plan.reason, PlanReason::kPlanned);
  EXPECT_EQ(plan.budget, 0);
  EXPECT_THAT(plan.verify_lens, ElementsAre(1, 1, 1));
  EXPECT_EQ(plan.verify_tokens, 3);
  EXPECT_EQ(plan.predicted_committed_tokens, 3.0);
}

TEST(VerifyPlannerTest, StopEmittedCountsAsZeroConfidence) {
  VerifyPlanner planner =
      MakePlanner(VerifyMode::kCompact, 2, TokensOnlyTable({1, 64}, {0.01, 0.0102}));
  const VerifyPlan plan = PlanOrDie(planner, {0.9, 0.9, 0.9, 0.9}, {3, 3}, {kStopEmitted, 0});
  EXPECT_THAT(plan.verify_lens, ElementsAre(1, 3));
}

TEST(VerifyPlannerTest, SurvivalBelowTheFloorIsNeverACandidate) {
  // Survival 1e-7 < 1e-6 on draft 1 of request 0 even though the step is
  // free to lengthen (a nearly flat table).
  VerifyPlanner planner =
      MakePlanner(VerifyMode::kCompact, 2, TokensOnlyTable({1, 64}, {0.01, 0.0101}));
  const VerifyPlan plan = PlanOrDie(planner, {1e-3, 1e-4, 0.9, 0.9}, {3, 3});
  EXPECT_THAT(plan.verify_lens, ElementsAre(2, 3));
}

TEST(VerifyPlannerTest, FlatTableVerifiesEverything) {
  VerifyPlanner planner =
      MakePlanner(VerifyMode::kCompact, 5, TokensOnlyTable({1, 512}, {0.02, 0.02}));
  const VerifyPlan plan = PlanOrDie(planner, std::vector<double>(10, 0.1), {6, 3});
  EXPECT_EQ(plan.reason, PlanReason::kSmallBatch);
  EXPECT_THAT(plan.verify_lens, ElementsAre(6, 3));
  EXPECT_EQ(plan.budget, 7);
  EXPECT_FALSE(plan.packed);
  EXPECT_EQ(plan.verify_tokens, 12);
  EXPECT_EQ(plan.predicted_step_seconds, 0.02);
}

TEST(VerifyPlannerTest, SmallBatchShortcutOnlyWhenTheShortestPlanCostsTheFullBlock) {
  // Flat up to 16 tokens (a captured graph tier), rising after it.
  const CostTable table = TokensOnlyTable({1, 16, 64}, {0.01, 0.01, 0.04});
  VerifyPlanner planner = MakePlanner(VerifyMode::kCompact, 3, table);
  // B = 4: the full block is 16 rows, as cheap as 4 rows.
  EXPECT_EQ(PlanOrDie(planner, std::vector<double>(12, 0.2), std::vector<int32_t>(4, 4)).reason,
            PlanReason::kSmallBatch);
  // B = 8: 32 rows cost more than 8; low confidences get trimmed.
  const VerifyPlan plan =
      PlanOrDie(planner, std::vector<double>(24, 0.2), std::vector<int32_t>(8, 4));
  EXPECT_EQ(plan.reason, PlanReason::kPlanned);
  EXPECT_LT(plan.verify_tokens, 32);
}

// A planned budget of every draft of every request is the full block:
// compact runs it in the uniform layout (static's rows and graphs). A plan
// with fewer rows than that, trimmed or capped by a length limit, packs.
TEST(VerifyPlannerTest, CompactRunsAFullPlannedBudgetInTheUniformLayout) {
  // Rows are cheap next to the step: every sure draft pays for itself.
  const CostTable table = TokensOnlyTable({1, 64}, {0.010, 0.0101});
  VerifyPlanner compact = MakePlanner(VerifyMode::kCompact, 5, table);
  std::vector<double> confidences(3 * 5, 0.99);
  const VerifyPlan full = PlanOrDie(compact, confidences, {6, 6, 6});
  ASSERT_EQ(full.reason, PlanReason::kPlanned);
  EXPECT_THAT(full.verify_lens, ElementsAre(6, 6, 6));
  EXPECT_EQ(full.budget, 15);
  EXPECT_FALSE(full.packed);
  EXPECT_EQ(full.verify_tokens, 3 * 6);

  // Request 1 has two tokens left: its plan stops at its cap, fewer rows.
  const VerifyPlan capped = PlanOrDie(compact, confidences, {6, 3, 6});
  ASSERT_EQ(capped.reason, PlanReason::kPlanned);
  EXPECT_THAT(capped.verify_lens, ElementsAre(6, 3, 6));
  EXPECT_TRUE(capped.packed);
  EXPECT_EQ(capped.verify_tokens, 3 + 12);

  // The last draft of request 2 below min_survival: trimmed, packed.
  confidences[2 * 5 + 4] = 1e-9;
  const VerifyPlan trimmed = PlanOrDie(compact, confidences, {6, 6, 6});
  ASSERT_EQ(trimmed.reason, PlanReason::kPlanned);
  EXPECT_THAT(trimmed.verify_lens, ElementsAre(6, 6, 5));
  EXPECT_TRUE(trimmed.packed);
  EXPECT_EQ(trimmed.verify_tokens, 3 + 14);
}

TEST(VerifyPlannerTest, ModesShareLengthsButNotLayout) {
  const CostTable table =
      *CostTable::Create({1, 64}, {1, 64, 512}, {0.010, 0.014, 0.060, 0.020, 0.024, 0.090});
  std::mt19937_64 rng(21);
  std::vector<double> confidences(16 * 5);
  for (double& c : confidences) c = 0.3 + 0.69 * Uniform(rng);
  const std::vector<int32_t> caps(16, 6);

  VerifyPlanner compact = MakePlanner(VerifyMode::kCompact, 5, table);
  VerifyPlanner cap_accept = MakePlanner(VerifyMode::kCapAccept, 5, table);
  VerifyPlanner static_mode = MakePlanner(VerifyMode::kStatic, 5, table);
  const VerifyPlan c = PlanOrDie(compact, confidences, caps);
  const VerifyPlan a = PlanOrDie(cap_accept, confidences, caps);
  const VerifyPlan s = PlanOrDie(static_mode, confidences, caps);

  ASSERT_EQ(c.reason, PlanReason::kPlanned);
  EXPECT_GT(c.budget, 0);
  EXPECT_LT(c.budget, 16 * 5);
  EXPECT_EQ(a.verify_lens, c.verify_lens);
  EXPECT_EQ(a.budget, c.budget);
  EXPECT_TRUE(c.packed);
  EXPECT_FALSE(a.packed);
  EXPECT_EQ(c.verify_tokens, 16 + c.budget);
  EXPECT_EQ(a.verify_tokens, 16 * 6);
  EXPECT_EQ(c.predicted_step_seconds, table.Predict(16, 16 + c.budget));
  EXPECT_EQ(a.predicted_step_seconds, table.Predict(16, 96));

  EXPECT_EQ(s.reason, PlanReason::kStaticMode);
  EXPECT_EQ(s.verify_lens, caps);
  EXPECT_EQ(s.verify_tokens, 96);
  EXPECT_NE(PlanHash(c), PlanHash(a));
}

TEST(VerifyPlannerTest, WithoutATableVerifiesEverythingAndSaysSoOnce) {
  std::vector<std::string> log;
  PlannerOptions options;
  options.mode = VerifyMode::kCompact;
  options.gamma = 2;
  options.log = [&log](std::string_view line) { log.emplace_back(line); };
  VerifyPlanner planner = *VerifyPlanner::Create(std::move(options), std::nullopt);
  EXPECT_FALSE(planner.has_cost_table());
  for (int step = 0; step < 5; ++step) {
    const VerifyPlan plan = PlanOrDie(planner, {0.1, 0.1, 0.5, 0.5}, {3, 2});
    EXPECT_EQ(plan.reason, PlanReason::kNoCostTable);
    EXPECT_THAT(plan.verify_lens, ElementsAre(3, 2));
    EXPECT_TRUE(std::isnan(plan.predicted_step_seconds));
  }
  ASSERT_EQ(log.size(), 1u);
  EXPECT_THAT(log[0], ::testing::HasSubstr("no cost table"));
}

TEST(VerifyPlannerTest, ConfidencePriorVerifiesEverything) {
  VerifyPlanner planner =
      MakePlanner(VerifyMode::kCompact, 2, TokensOnlyTable({1, 64}, {0.01, 0.05}));
  const VerifyPlan plan = PlanOrDie(planner, {0.0, 0.0, 0.0, 0.0}, {3, 3}, {}, /*ready=*/false);
  EXPECT_EQ(plan.reason, PlanReason::kConfidencePrior);
  EXPECT_THAT(plan.verify_lens, ElementsAre(3, 3));
}

TEST(VerifyPlannerTest, AStepWithoutDraftsVerifiesOneRowPerRequestInEveryMode) {
  const CostTable table =
      *CostTable::Create({1, 64}, {1, 64, 512}, {0.010, 0.014, 0.060, 0.020, 0.024, 0.090});
  const std::vector<double> confidences(3 * 5, 0.9);
  const std::vector<int32_t> caps(3, 6);
  for (const VerifyMode mode :
       {VerifyMode::kStatic, VerifyMode::kCapAccept, VerifyMode::kCompact}) {
    VerifyPlanner planner = MakePlanner(mode, 5, table);
    PlannerInput input;
    input.confidences = confidences;
    input.max_verify_lens = caps;
    input.drafts = false;
    VerifyPlan plan;
    ASSERT_TRUE(planner.Plan(input, &plan).ok());
    EXPECT_EQ(plan.reason, PlanReason::kNoDrafts) << VerifyModeName(mode);
    EXPECT_THAT(plan.verify_lens, ElementsAre(1, 1, 1));
    EXPECT_EQ(plan.budget, 0);
    EXPECT_EQ(plan.verify_tokens, 3);
    EXPECT_FALSE(plan.packed);
    // The table prices steps with draft passes: no prediction for this one.
    EXPECT_TRUE(std::isnan(plan.predicted_step_seconds));
    EXPECT_EQ(plan.predicted_committed_tokens, 3.0);
    EXPECT_EQ(PlanReasonName(plan.reason), "no-drafts");
  }
}

// The draft plan's depths cap each request's verify length at depth + 1 and
// make the uniform layout each request's drafts and its last row; with the
// table's draft split the step is priced at the passes it ran.
TEST(VerifyPlannerTest, DraftDepthsCapTheLengthsAndShapeTheUniformLayout) {
  CostTable table =
      *CostTable::Create({1, 64}, {1, 64, 512}, {0.010, 0.014, 0.060, 0.020, 0.024, 0.090});
  ASSERT_TRUE(table.SetDraftSplit({0.001, 0.002}, 5).ok());
  const std::vector<double> confidences(3 * 5, 0.9);
  const std::vector<int32_t> caps(3, 6);
  const std::vector<int32_t> depths = {0, 2, 5};
  for (const VerifyMode mode : {VerifyMode::kStatic, VerifyMode::kCapAccept}) {
    VerifyPlanner planner = MakePlanner(mode, 5, table);
    PlannerInput input;
    input.confidences = confidences;
    input.max_verify_lens = caps;
    input.draft_depths = depths;
    input.draft_passes = 5;
    VerifyPlan plan;
    ASSERT_TRUE(planner.Plan(input, &plan).ok());
    if (mode == VerifyMode::kStatic) {
      EXPECT_THAT(plan.verify_lens, ElementsAre(1, 3, 6));
      EXPECT_EQ(plan.budget, 7);
    }
    for (size_t i = 0; i < depths.size(); ++i) EXPECT_LE(plan.verify_lens[i], depths[i] + 1);
    EXPECT_EQ(plan.verify_tokens, 1 + 3 + 6) << VerifyModeName(mode);
    EXPECT_FALSE(plan.packed);
    // Each pass at its rows: two requests draft in the first two passes,
    // one in the last three; cheaper than five passes over all three.
    const std::vector<int64_t> rows = {2, 2, 1, 1, 1};
    EXPECT_DOUBLE_EQ(plan.predicted_step_seconds, table.PredictStepAt(3, 10, rows));
    EXPECT_LT(plan.predicted_step_seconds, table.PredictStep(3, 10, 5));

    // Two passes, over two rows and one: the table's whole step less its
    // five passes at B = 3, plus those two.
    const std::vector<int32_t> shallow = {0, 2, 1};
    input.draft_depths = shallow;
    input.draft_passes = 2;
    ASSERT_TRUE(planner.Plan(input, &plan).ok());
    EXPECT_EQ(plan.verify_tokens, 1 + 3 + 2);
    const std::vector<int64_t> shallow_rows = {2, 1};
    EXPECT_DOUBLE_EQ(plan.predicted_step_seconds,
                     table.PredictStepAt(3, plan.verify_tokens, shallow_rows));
    EXPECT_LT(plan.predicted_step_seconds, table.PredictStep(3, plan.verify_tokens, 2));
  }
  // Compact: a plan of every proposed draft is the full block, unpacked.
  VerifyPlanner compact = MakePlanner(VerifyMode::kCompact, 5, CostTable(table));
  PlannerInput input;
  const std::vector<double> sure(3 * 5, 1.0);
  input.confidences = sure;
  input.max_verify_lens = caps;
  input.draft_depths = depths;
  input.draft_passes = 5;
  VerifyPlan plan;
  ASSERT_TRUE(compact.Plan(input, &plan).ok());
  EXPECT_THAT(plan.verify_lens, ElementsAre(1, 3, 6));
  EXPECT_FALSE(plan.packed);
  EXPECT_EQ(plan.verify_tokens, 10);

  // A step without drafts is priced as plain decode when the table can.
  input.draft_depths = {};
  input.draft_passes = 0;
  input.drafts = false;
  ASSERT_TRUE(compact.Plan(input, &plan).ok());
  EXPECT_EQ(plan.reason, PlanReason::kNoDrafts);
  EXPECT_DOUBLE_EQ(plan.predicted_step_seconds, table.PredictStep(3, 3, 0));

  // Depths outside [0, gamma], of the wrong count, or more passes than gamma.
  const std::vector<int32_t> deep = {0, 6, 1};
  const std::vector<int32_t> two = {1, 1};
  input.drafts = true;
  input.draft_passes = 1;
  input.draft_depths = deep;
  EXPECT_THAT(std::string(compact.Plan(input, &plan).message()), ::testing::HasSubstr("depth 6"));
  input.draft_depths = two;
  EXPECT_THAT(std::string(compact.Plan(input, &plan).message()),
              ::testing::HasSubstr("2 draft depths for 3"));
  input.draft_depths = {};
  input.draft_passes = 6;
  EXPECT_THAT(std::string(compact.Plan(input, &plan).message()),
              ::testing::HasSubstr("6 draft passes"));
}

TEST(VerifyPlannerTest, PinnedBudgetHitsTheTokenCountItAsks) {
  // Pinned budgets include drafts of zero survival: a profiler measuring
  // cost(B, M) needs exactly M rows, even from scratch (no table, prior).
  VerifyPlanner planner = MakePlanner(VerifyMode::kCompact, 4, std::nullopt, 0.25);
  const VerifyPlan plan =
      PlanOrDie(planner, std::vector<double>(16, 0.0), {5, 5, 5, 5}, {}, /*ready=*/false);
  EXPECT_EQ(plan.reason, PlanReason::kPinnedBudget);
  EXPECT_EQ(plan.budget, 4);
  EXPECT_THAT(plan.verify_lens, ElementsAre(2, 2, 2, 2));
  EXPECT_EQ(plan.verify_tokens, 8);

  // A fraction above what the caps allow takes what there is.
  VerifyPlanner all = MakePlanner(VerifyMode::kCompact, 4, std::nullopt, 1.0);
  EXPECT_THAT(PlanOrDie(all, std::vector<double>(8, 0.5), {2, 9}).verify_lens, ElementsAre(2, 5));
}

TEST(VerifyPlannerTest, PinMovesOnARunningPlanner) {
  VerifyPlanner planner = MakePlanner(VerifyMode::kCompact, 4, std::nullopt);
  const std::vector<double> confidences(16, 0.5);
  EXPECT_EQ(PlanOrDie(planner, confidences, {5, 5, 5, 5}).reason, PlanReason::kNoCostTable);
  ASSERT_TRUE(planner.SetPinnedBudgetFraction(0.5).ok());
  VerifyPlan plan = PlanOrDie(planner, confidences, {5, 5, 5, 5});
  EXPECT_EQ(plan.reason, PlanReason::kPinnedBudget);
  EXPECT_EQ(plan.verify_tokens, 4 + 8);
  ASSERT_TRUE(planner.SetPinnedBudgetFraction(1.0).ok());
  EXPECT_EQ(PlanOrDie(planner, confidences, {5, 5, 5, 5}).verify_tokens, 4 + 16);
  // A bad pin is refused and leaves the pin as it was.
  EXPECT_FALSE(planner.SetPinnedBudgetFraction(-0.1).ok());
  EXPECT_FALSE(planner.SetPinnedBudgetFraction(std::nan("")).ok());
  EXPECT_EQ(planner.options().pinned_budget_fraction, 1.0);
  ASSERT_TRUE(planner.SetPinnedBudgetFraction(std::nullopt).ok());
  EXPECT_EQ(PlanOrDie(planner, confidences, {5, 5, 5, 5}).reason, PlanReason::kNoCostTable);

  VerifyPlanner fixed = MakePlanner(VerifyMode::kStatic, 4, std::nullopt);
  EXPECT_FALSE(fixed.SetPinnedBudgetFraction(0.5).ok());
  EXPECT_TRUE(fixed.SetPinnedBudgetFraction(std::nullopt).ok());
}

TEST(VerifyPlannerTest, CapsAndFlags) {
  VerifyPlanner planner =
      MakePlanner(VerifyMode::kCompact, 3, TokensOnlyTable({1, 64}, {0.01, 0.0101}));
  const VerifyPlan plan = PlanOrDie(planner, std::vector<double>(12, 0.95), {2, 100, 4, 4},
                                    {0, 0, kSpeculationDisabled, 0});
  // Request 0 is capped at 2 rows, request 1's 100 means the full block,
  // request 2 does not speculate.
  EXPECT_THAT(plan.verify_lens, ElementsAre(2, 4, 1, 4));
}

TEST(VerifyPlannerTest, RefusesMalformedInput) {
  VerifyPlanner planner = MakePlanner(VerifyMode::kCompact, 2, std::nullopt);
  VerifyPlan plan;
  const std::vector<double> conf = {0.5, 0.5, 0.5, 0.5};
  EXPECT_FALSE(planner.Plan({conf, std::vector<int32_t>{3}, {}, true}, &plan).ok());
  EXPECT_FALSE(planner.Plan({conf, std::vector<int32_t>{3, 0}, {}, true}, &plan).ok());
  EXPECT_FALSE(
      planner.Plan({conf, std::vector<int32_t>{3, 3}, std::vector<uint8_t>{0}, true}, &plan).ok());
  const std::vector<int32_t> lens = {3, 3};  // outlives the input's span
  PlannerInput prompts{conf, lens, {}, true};
  prompts.prefill_rows = -1;
  EXPECT_FALSE(planner.Plan(prompts, &plan).ok());
  prompts.prefill_rows = kMaxPrefillRows + 1;
  EXPECT_FALSE(planner.Plan(prompts, &plan).ok());
  prompts.prefill_rows = kMaxPrefillRows;
  EXPECT_TRUE(planner.Plan(prompts, &plan).ok());
}

TEST(VerifyPlannerTest, CreateRefusesBadOptions) {
  PlannerOptions o;
  o.gamma = 0;
  EXPECT_FALSE(VerifyPlanner::Create(o, std::nullopt).ok());
  o = {};
  o.mode = VerifyMode::kStatic;
  o.pinned_budget_fraction = 0.5;
  EXPECT_FALSE(VerifyPlanner::Create(o, std::nullopt).ok());
  o = {};
  o.mode = VerifyMode::kCompact;
  o.pinned_budget_fraction = 1.5;
  EXPECT_FALSE(VerifyPlanner::Create(o, std::nullopt).ok());
  o = {};
  o.min_survival = 0;
  EXPECT_FALSE(VerifyPlanner::Create(o, std::nullopt).ok());
}

TEST(VerifyPlannerTest, EmptyBatch) {
  VerifyPlanner planner =
      MakePlanner(VerifyMode::kCompact, 3, TokensOnlyTable({1, 64}, {0.01, 0.05}));
  const VerifyPlan plan = PlanOrDie(planner, {}, {});
  EXPECT_EQ(plan.reason, PlanReason::kEmptyBatch);
  EXPECT_TRUE(plan.verify_lens.empty());
  EXPECT_EQ(plan.verify_tokens, 0);
}

TEST(VerifyModeTest, NamesRoundTrip) {
  for (VerifyMode m : {VerifyMode::kStatic, VerifyMode::kCapAccept, VerifyMode::kCompact}) {
    EXPECT_EQ(*ParseVerifyMode(VerifyModeName(m)), m);
  }
  EXPECT_FALSE(ParseVerifyMode("ragged").ok());
}

// ---------------------------------------------------------------------------
// Random cases against references.

struct RandomCase {
  int batch;
  int gamma;
  std::vector<double> confidences;
  std::vector<int32_t> max_lens;
  std::vector<uint8_t> flags;
};

RandomCase MakeRandomCase(std::mt19937_64& rng, int max_batch, int max_gamma) {
  RandomCase c;
  c.batch = 1 + static_cast<int>(rng() % max_batch);
  c.gamma = 1 + static_cast<int>(rng() % max_gamma);
  // A few values repeat on purpose, so survivals tie across requests.
  const double palette[] = {0.0, 1e-4, 0.25, 0.5, 0.5, 0.8, 0.9, 1.0};
  for (int t = 0; t < c.batch * c.gamma; ++t) {
    c.confidences.push_back(rng() % 3 == 0 ? palette[rng() % 8] : Uniform(rng));
  }
  for (int i = 0; i < c.batch; ++i) {
    c.max_lens.push_back(1 + static_cast<int32_t>(rng() % (c.gamma + 2)));
    const uint64_t r = rng() % 16;
    c.flags.push_back(r == 0 ? kSpeculationDisabled : (r == 1 ? kStopEmitted : 0));
  }
  return c;
}

// A monotone table with random steps in M and a random slope in B: knots
// at the batch sizes `bs`, and in M from 1 to `max_m`, 1 to `max_gap` apart.
CostTable RandomTable(std::mt19937_64& rng, std::vector<double> bs = {1, 2, 5, 16},
                      double max_m = 40, int max_gap = 4) {
  std::vector<double> ms;
  for (double m = 1; m <= max_m; m += 1 + static_cast<double>(rng() % max_gap)) ms.push_back(m);
  std::vector<double> seconds;
  for (size_t b = 0; b < bs.size(); ++b) {
    double t = 0.01 + 0.002 * static_cast<double>(b);
    for (size_t m = 0; m < ms.size(); ++m) {
      t += rng() % 3 == 0 ? 0.004 * Uniform(rng) : 0.0002 * Uniform(rng);
      seconds.push_back(t);
    }
  }
  return *CostTable::Create(bs, ms, seconds);
}

// Survivals, caps and how many leading drafts of each request may be
// candidates, as the planner defines them.
struct Prepared {
  std::vector<double> survival;
  std::vector<int> allowed;
};

Prepared Prepare(const RandomCase& c) {
  Prepared p;
  p.survival.assign(c.batch * c.gamma, 0.0);
  for (int i = 0; i < c.batch; ++i) {
    double s = (c.flags[i] & kStopEmitted) ? 0.0 : 1.0;
    for (int j = 0; j < c.gamma; ++j) {
      s *= std::clamp(c.confidences[i * c.gamma + j], 0.0, 1.0);
      p.survival[i * c.gamma + j] = s;
    }
    const int cap = (c.flags[i] & kSpeculationDisabled) ? 1 : std::min(c.max_lens[i], c.gamma + 1);
    int allowed = 0;
    while (allowed < cap - 1 && p.survival[i * c.gamma + allowed] >= 1e-6) ++allowed;
    p.allowed.push_back(allowed);
  }
  return p;
}

// Reference: every candidate in one std::stable_sort by the documented key.
std::vector<int32_t> ReferenceLengths(const RandomCase& c, const Prepared& p, int64_t k) {
  struct Cand {
    double s;
    int j, i;
  };
  std::vector<Cand> all;
  for (int i = 0; i < c.batch; ++i) {
    for (int j = 0; j < p.allowed[i]; ++j) all.push_back({p.survival[i * c.gamma + j], j, i});
  }
  std::stable_sort(all.begin(), all.end(), [](const Cand& a, const Cand& b) {
    if (a.s != b.s) return a.s > b.s;
    if (a.j != b.j) return a.j < b.j;
    return a.i < b.i;
  });
  std::vector<int32_t> lens(c.batch, 1);
  std::vector<std::vector<int>> taken(c.batch);
  for (int64_t t = 0; t < k; ++t) {
    ++lens[all[t].i];
    taken[all[t].i].push_back(all[t].j);
  }
  // The top k of this order is prefix-closed per request.
  for (int i = 0; i < c.batch; ++i) {
    std::sort(taken[i].begin(), taken[i].end());
    for (size_t t = 0; t < taken[i].size(); ++t) EXPECT_EQ(taken[i][t], static_cast<int>(t));
  }
  return lens;
}

TEST(VerifyPlannerRandomTest, MatchesBruteForceOverPrefixClosedAllocations) {
  std::mt19937_64 rng(20240601);
  int planned = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    const RandomCase c = MakeRandomCase(rng, 4, 4);
    const CostTable table = RandomTable(rng);
    // Half the steps carry joining prompts: every budget pays their rows.
    const int64_t prefill = trial % 2 == 0 ? 0 : 1 + static_cast<int64_t>(rng() % 30);
    VerifyPlanner planner = MakePlanner(VerifyMode::kCompact, c.gamma, table);
    const VerifyPlan plan =
        PlanOrDie(planner, c.confidences, c.max_lens, c.flags, /*ready=*/true, prefill);
    const auto cost = [&](int64_t k) { return table.Predict(c.batch, c.batch + k + prefill); };
    const Prepared p = Prepare(c);
    if (plan.reason == PlanReason::kSmallBatch) continue;
    ASSERT_EQ(plan.reason, PlanReason::kPlanned);
    ++planned;

    // Every prefix-closed allocation within the candidates: request i
    // verifies its first n_i <= allowed_i drafts.
    int64_t total_allowed = 0;
    for (int a : p.allowed) total_allowed += a;
    std::vector<double> best_tau(total_allowed + 1, -1.0);
    std::vector<int> n(c.batch, 0);
    while (true) {
      double tau = c.batch;
      int64_t k = 0;
      for (int i = 0; i < c.batch; ++i) {
        for (int j = 0; j < n[i]; ++j) tau += p.survival[i * c.gamma + j];
        k += n[i];
      }
      best_tau[k] = std::max(best_tau[k], tau);
      int i = 0;
      while (i < c.batch && n[i] == p.allowed[i]) n[i++] = 0;
      if (i == c.batch) break;
      ++n[i];
    }
    double best_ratio = -1;
    for (int64_t k = 0; k <= total_allowed; ++k) {
      best_ratio = std::max(best_ratio, best_tau[k] / cost(k));
    }
    // The plan reaches the best objective over all prefix-closed allocations,
    // and its budget is the best allocation of its own size.
    const double ratio = plan.predicted_committed_tokens / plan.predicted_step_seconds;
    EXPECT_GE(ratio, best_ratio * (1 - 1e-12)) << "trial " << trial;
    EXPECT_NEAR(plan.predicted_committed_tokens, best_tau[plan.budget], 1e-12) << "trial " << trial;
    EXPECT_NEAR(ExpectedCommittedTokens(c.confidences, c.gamma, plan.verify_lens),
                plan.predicted_committed_tokens, 1e-12);
    // No smaller budget reaches the same objective (ties go to the smaller k).
    for (int64_t k = 0; k < plan.budget; ++k) {
      EXPECT_LT(best_tau[k] / cost(k), ratio * (1 + 1e-12))
          << "trial " << trial;
    }
    EXPECT_EQ(plan.verify_lens, ReferenceLengths(c, p, plan.budget)) << "trial " << trial;
    EXPECT_EQ(plan.predicted_step_seconds,
              table.Predict(c.batch, plan.verify_tokens + prefill));
  }
  EXPECT_GT(planned, 1000);
}

TEST(VerifyPlannerRandomTest, LargeBatchesMatchTheReferenceOrder) {
  // Large batches whose survival buckets exceed the insertion sort limit,
  // with exact ties or with distinct close values, and pinned budgets of
  // several sizes.
  std::mt19937_64 rng(77);
  for (int trial = 0; trial < 200; ++trial) {
    RandomCase c = MakeRandomCase(rng, 300, 8);
    if (trial % 3 == 0) {
      for (double& x : c.confidences) x = (rng() % 2) ? 1.0 : 0.5;  // survivals are powers of two
    } else if (trial % 3 == 1) {
      // Distinct survivals packed into a few buckets, in no particular order.
      for (double& x : c.confidences) x = 0.9990 + 0.0005 * Uniform(rng);
    }
    const Prepared p = Prepare(c);
    for (const double fraction : {0.1, 0.37, 0.8}) {
      // Pinned plans reach below min_survival; compare on the candidates the
      // reference keeps by capping the fraction at what they hold.
      int64_t total_allowed = 0;
      for (int a : p.allowed) total_allowed += a;
      const double f = std::min(fraction, static_cast<double>(total_allowed) / (c.batch * c.gamma));
      VerifyPlanner planner = MakePlanner(VerifyMode::kCompact, c.gamma, std::nullopt, f);
      const VerifyPlan plan = PlanOrDie(planner, c.confidences, c.max_lens, c.flags);
      ASSERT_LE(plan.budget, total_allowed);
      EXPECT_EQ(plan.verify_lens, ReferenceLengths(c, p, plan.budget)) << "trial " << trial;
    }
    const CostTable table = RandomTable(rng);
    VerifyPlanner planner = MakePlanner(VerifyMode::kCompact, c.gamma, table);
    const VerifyPlan plan = PlanOrDie(planner, c.confidences, c.max_lens, c.flags);
    if (plan.reason == PlanReason::kPlanned) {
      EXPECT_EQ(plan.verify_lens, ReferenceLengths(c, p, plan.budget)) << "trial " << trial;
    }
  }
}

// With launched rows (the CUDA backend's graph tiers, runtime/model/
// graph_shapes.h), each budget is priced at the rows its step launches: the
// plan is the first best of tau(k) / cost(B, launched(B + k)) over the
// sorted order, where the longest query is that of the first k candidates;
// so a planned budget fills its tier.
TEST(VerifyPlannerRandomTest, LaunchedRowsPricingMatchesBruteForce) {
  std::mt19937_64 rng(20261206);
  const auto launched = LaunchedTokens;
  int planned = 0, below_tier_end = 0;
  for (int trial = 0; trial < 1500; ++trial) {
    const RandomCase c = MakeRandomCase(rng, 48, 6);
    // A monotone table to 400 rows, steps and slopes at random.
    const CostTable table = RandomTable(rng, {1, 8, 32, 64}, 400, 40);
    PlannerOptions options;
    options.mode = VerifyMode::kCompact;
    options.gamma = c.gamma;
    options.log = [](std::string_view) {};
    options.launch_tokens = launched;
    absl::StatusOr<VerifyPlanner> planner = VerifyPlanner::Create(std::move(options), table);
    ASSERT_TRUE(planner.ok()) << planner.status();
    // Prompt rows ride on the launched rows in half the steps.
    const int64_t prefill = trial % 2 == 0 ? 0 : 1 + static_cast<int64_t>(rng() % 60);
    const VerifyPlan plan =
        PlanOrDie(*planner, c.confidences, c.max_lens, c.flags, /*ready=*/true, prefill);
    if (plan.reason == PlanReason::kSmallBatch) continue;
    ASSERT_EQ(plan.reason, PlanReason::kPlanned);
    ++planned;

    const Prepared p = Prepare(c);
    int64_t total = 0;
    for (int a : p.allowed) total += a;
    const auto priced_at = [&](int64_t k, int64_t* rows) {
      const std::vector<int32_t> lens = ReferenceLengths(c, p, k);
      const int max_query = *std::max_element(lens.begin(), lens.end());
      *rows = launched(c.batch, c.batch + k, max_query);
      double tau = c.batch;
      for (int i = 0; i < c.batch; ++i) {
        for (int j = 0; j + 1 < lens[i]; ++j) tau += p.survival[i * c.gamma + j];
      }
      return std::pair<double, double>{
          tau, table.Predict(c.batch, static_cast<double>(*rows + prefill))};
    };
    int64_t best_k = 0, best_rows = 0;
    auto [best_tau, best_cost] = priced_at(0, &best_rows);
    std::vector<int64_t> rows_of(total + 1, best_rows);
    for (int64_t k = 1; k <= total; ++k) {
      const auto [tau, cost] = priced_at(k, &rows_of[k]);
      if (tau * best_cost > best_tau * cost) {
        best_k = k;
        best_tau = tau;
        best_cost = cost;
      }
    }
    ASSERT_EQ(plan.budget, best_k) << "trial " << trial;
    EXPECT_EQ(plan.verify_lens, ReferenceLengths(c, p, best_k)) << "trial " << trial;
    if (plan.packed) {
      EXPECT_EQ(plan.predicted_step_seconds, table.Predict(c.batch, rows_of[best_k] + prefill))
          << "trial " << trial;
    }
    // The next candidate would have run in the same launch, for more
    // tokens, unless it is less than nothing (survival 0).
    if (best_k < total && rows_of[best_k + 1] == rows_of[best_k]) ++below_tier_end;
  }
  EXPECT_GT(planned, 500);
  std::printf("planned %d, budgets below the end of their tier %d\n", planned, below_tier_end);
}

TEST(VerifyPlannerRandomTest, SamePlanAndHashOnEveryRun) {
  std::mt19937_64 rng(5);
  const CostTable table = RandomTable(rng);
  VerifyPlanner a = MakePlanner(VerifyMode::kCompact, 7, table);
  VerifyPlanner b = MakePlanner(VerifyMode::kCompact, 7, table);
  VerifyPlan pa, pb;
  for (int step = 0; step < 200; ++step) {
    const RandomCase c = MakeRandomCase(rng, 64, 7);
    std::vector<double> conf(c.batch * 7);
    for (double& x : conf) x = Uniform(rng);
    std::vector<int32_t> caps(c.batch, 8);
    ASSERT_TRUE(a.Plan({conf, caps, {}, true}, &pa).ok());
    ASSERT_TRUE(b.Plan({conf, caps, {}, true}, &pb).ok());
    EXPECT_EQ(PlanHash(pa), PlanHash(pb));
    if (pa.budget > 0) {
      pb.verify_lens[0] ^= 1;
      EXPECT_NE(PlanHash(pa), PlanHash(pb));
    }
  }
}

}  // namespace
}  // namespace verdict
