// The draft plan in the running engine (scheduler/draft_planner.h): with a
// cost table whose draft split makes drafting a loss, the engine decodes
// like speculation off once the estimator is ready (no draft pass, one row
// per request); with one that makes drafting cheap it drafts in full; in
// between, requests draft to different depths. In every verify mode,
// overlap on and off, the greedy output is the target's own. Built for the
// CPU backend, and with VERDICT_TEST_CUDA for the CUDA one (a GPU test).
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "comm/local_communicator.h"
#include "gtest/gtest.h"
#include "runtime/engine/engine.h"
#include "runtime/engine/engine_test_util.h"

namespace verdict {
namespace {

constexpr int kRequests = 16;
constexpr int kMaxTokens = 192;

// A table of batch sizes 1 and 16 whose steps cost `fixed` + `row` per
// verify row plus five draft passes of `pass` seconds each.
std::string WriteTable(const std::string& name, double fixed, double row, double pass) {
  const std::string path = ::testing::TempDir() + "/" + name + ".json";
  std::ofstream out(path);
  const auto cell = [&](int m) { return fixed + row * m + 5 * pass; };
  char text[512];
  std::snprintf(text, sizeof(text),
                R"({"batch_sizes": [1, 16], "verify_tokens": [1, 16, 96],
                    "seconds": [[%.9g, %.9g, %.9g], [%.9g, %.9g, %.9g]],
                    "draft_passes": 5, "draft_pass_seconds": [%.9g, %.9g]})",
                cell(1), cell(16), cell(96), cell(1), cell(16), cell(96), pass, pass);
  out << text;
  return path;
}

std::unique_ptr<Engine> MakeEngine(Communicator* comm, EngineOptions options, bool speculation) {
  options.speculation = speculation;
  options.cpu_threads = 2;
#ifdef VERDICT_TEST_CUDA
  options.backend = ModelBackend::kCuda;
#endif
  options.kv_cache_tokens = 16384;
  std::optional<ModelSource> draft;
  if (speculation) draft = ModelSource{"models/draft"};
  absl::StatusOr<std::unique_ptr<Engine>> engine =
      Engine::Create(options, ModelSource{"models/target"}, draft, comm);
  EXPECT_TRUE(engine.ok()) << engine.status();
  return engine.ok() ? *std::move(engine) : nullptr;
}

std::vector<GenerationRequest> GreedyRequests(const Engine& engine) {
  std::vector<GenerationRequest> requests;
  for (int i = 0; i < kRequests; ++i) {
    const char* prompt = kBundledPrompts[i % std::size(kBundledPrompts)];
    requests.push_back(TextRequest(engine, "r" + std::to_string(i), prompt, kMaxTokens, 0.0f, i));
    requests.back().params.ignore_eos = true;
  }
  return requests;
}

class DraftPlanEngineTest : public ::testing::TestWithParam<std::tuple<VerifyMode, bool>> {
 protected:
  static void SetUpTestSuite() {
    LocalCommunicator comm;
    std::unique_ptr<Engine> engine = MakeEngine(&comm, EngineOptions(), /*speculation=*/false);
    ASSERT_NE(engine, nullptr);
    EngineHarness harness(engine.get());
    reference_ = new std::vector<CollectedOutput>(harness.GenerateAll(GreedyRequests(*engine)));
  }
  static void TearDownTestSuite() { delete reference_; }

  struct Run {
    std::vector<StepTiming> steps;
    EngineStats stats;
  };

  // Serves the requests with `table`; expects the target's greedy tokens.
  Run Serve(const std::string& table) {
    LocalCommunicator comm;
    EngineOptions options;
    options.verify_mode = std::get<0>(GetParam());
    options.overlap = std::get<1>(GetParam());
    options.cost_table_path = table;
    std::unique_ptr<Engine> engine = MakeEngine(&comm, options, /*speculation=*/true);
    Run run;
    if (engine == nullptr) return run;
    std::mutex mu;
    engine->set_step_observer([&](const StepTiming& t) {
      std::lock_guard<std::mutex> lock(mu);
      run.steps.push_back(t);
    });
    EngineHarness harness(engine.get());
    const std::vector<CollectedOutput> outputs = harness.GenerateAll(GreedyRequests(*engine));
    harness.Stop();
    for (size_t i = 0; i < outputs.size(); ++i) {
      EXPECT_EQ(outputs[i].token_ids, (*reference_)[i].token_ids) << "request " << i;
      EXPECT_EQ(outputs[i].finish_reason, FinishReason::kLength) << outputs[i].error;
    }
    run.stats = engine->stats();
    return run;
  }

  static std::vector<CollectedOutput>* reference_;
};
std::vector<CollectedOutput>* DraftPlanEngineTest::reference_ = nullptr;

// Draft passes ten times a verify row's cost and a step's fixed cost a
// tenth of a row: no draft ever pays once the estimator has a fit, so the
// engine runs plain decode steps: no draft pass, one row per request.
TEST_P(DraftPlanEngineTest, CostlyDraftsGiveZeroDraftStepsWithTheTargetsTokens) {
  const Run run = Serve(WriteTable("costly_drafts", 1e-4, 1e-3, 1e-2));
  int plain = 0;
  for (const StepTiming& t : run.steps) {
    if (t.draft_passes > 0) continue;
    ++plain;
    EXPECT_EQ(t.drafting_requests, 0) << "step " << t.step;
    EXPECT_EQ(t.verify_tokens, t.batch_size) << "step " << t.step;
    EXPECT_EQ(t.budget, 0) << "step " << t.step;
    EXPECT_EQ(t.plan_reason, PlanReason::kNoDrafts) << "step " << t.step;
  }
  EXPECT_GT(plain, 0) << "the estimator never got ready";
  EXPECT_EQ(run.stats.plain_steps, plain);
  // The steps on the estimator's prior drafted, and only one token a
  // request: at the prior rates costly drafts do not pay, so what drafts is
  // the floor that feeds the estimator's first fit.
  EXPECT_GT(run.stats.draft_passes, 0);
  int prior = 0;
  for (const StepTiming& t : run.steps) {
    if (t.draft_reason != DraftReason::kConfidencePrior) continue;
    ++prior;
    EXPECT_EQ(t.draft_passes, 1) << "step " << t.step;
    EXPECT_EQ(t.drafting_requests, t.batch_size) << "step " << t.step;
  }
  EXPECT_GT(prior, 0);
  // Plain decoding from the estimator's first fit to the end (about 60
  // steps of 16 requests get every position fitted).
  EXPECT_GT(plain, 20);
  // Once plain, always plain: nothing new reaches the estimator.
  bool seen_plain = false;
  for (const StepTiming& t : run.steps) {
    if (seen_plain) EXPECT_EQ(t.draft_passes, 0) << "step " << t.step;
    seen_plain = seen_plain || t.draft_passes == 0;
  }
}

// Draft passes nearly free against verify rows: drafting pays, so steps keep
// drafting after the estimator's fit, and the draft statistics add up.
TEST_P(DraftPlanEngineTest, CheapDraftsKeepDraftingWithTheTargetsTokens) {
  const Run run = Serve(WriteTable("cheap_drafts", 1e-2, 1e-5, 1e-6));
  int drafting = 0;
  int64_t passes = 0;
  for (const StepTiming& t : run.steps) {
    passes += t.draft_passes;
    if (t.draft_passes > 0) ++drafting;
    EXPECT_LE(t.drafting_requests, t.batch_size);
  }
  EXPECT_EQ(run.stats.draft_passes, passes);
  EXPECT_GT(drafting, 0.9 * static_cast<double>(run.steps.size()));
  EXPECT_GT(run.stats.accepted, 0);
  EXPECT_LT(run.stats.steps, kMaxTokens / 2);
}

// Draft passes a fifth of a step's fixed cost, rows a fiftieth: a draft
// pays where its chance of acceptance is high enough, so requests draft to
// different depths and steps run fewer passes than gamma.
TEST_P(DraftPlanEngineTest, PayingDraftsGivePartialDepthsWithTheTargetsTokens) {
  const Run run = Serve(WriteTable("paying_drafts", 1e-2, 2e-4, 2e-3));
  int shallow_steps = 0;
  for (const StepTiming& t : run.steps) {
    if (t.draft_passes > 0 && t.draft_passes < 5) ++shallow_steps;
  }
  EXPECT_GT(shallow_steps, 0);
  EXPECT_LT(run.stats.drafted, 5 * run.stats.spec_steps) << "every request drafted in full";
  EXPECT_GT(run.stats.accepted, 0);

  // On the estimator's prior: the first step, with nothing seen (prior
  // rates of 1, where all five drafts pay on this table), drafts five; as
  // observations come, the prior rates fall towards the pair's acceptance
  // and the prior's steps draft shallower, though never nothing.
  std::vector<StepTiming> prior;
  for (const StepTiming& t : run.steps) {
    if (t.draft_reason == DraftReason::kConfidencePrior) prior.push_back(t);
  }
  std::sort(prior.begin(), prior.end(),
            [](const StepTiming& a, const StepTiming& b) { return a.step < b.step; });
  ASSERT_FALSE(prior.empty());
  EXPECT_EQ(prior.front().draft_passes, 5);
  int shallow_prior_steps = 0;
  for (const StepTiming& t : prior) {
    EXPECT_GE(t.draft_passes, 1) << "step " << t.step;
    if (t.draft_passes < 5) ++shallow_prior_steps;
  }
  EXPECT_GT(shallow_prior_steps, 0);
}

INSTANTIATE_TEST_SUITE_P(Modes, DraftPlanEngineTest,
                         ::testing::Combine(::testing::Values(VerifyMode::kStatic,
                                                              VerifyMode::kCapAccept,
                                                              VerifyMode::kCompact),
                                            ::testing::Bool()),
                         ModeAndOverlapTestName);

}  // namespace
}  // namespace verdict
