// End-to-end tests of the engine on the CPU backend with the bundled
// draft/target pair (models/), and a statistical test on a tiny random pair.
#include "runtime/engine/engine.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "comm/local_communicator.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "runtime/engine/engine_test_util.h"
#include "runtime/model/random_model.h"

namespace verdict {
namespace {

const auto& kPrompts = kBundledPrompts;

std::unique_ptr<Engine> MakeEngine(Communicator* comm, EngineOptions options,
                                   bool speculation = true) {
  options.speculation = speculation;
  options.cpu_threads = 2;
  options.kv_cache_tokens = 8192;
  std::optional<ModelSource> draft;
  if (speculation) draft = ModelSource{"models/draft"};
  absl::StatusOr<std::unique_ptr<Engine>> engine =
      Engine::Create(options, ModelSource{"models/target"}, draft, comm);
  EXPECT_TRUE(engine.ok()) << engine.status();
  return engine.ok() ? *std::move(engine) : nullptr;
}

std::vector<GenerationRequest> GreedyRequests(const Engine& engine, int max_tokens) {
  std::vector<GenerationRequest> requests;
  for (size_t i = 0; i < std::size(kPrompts); ++i) {
    requests.push_back(
        TextRequest(engine, "r" + std::to_string(i), kPrompts[i], max_tokens, 0.0f, i));
    requests.back().params.ignore_eos = true;
  }
  return requests;
}

// Appends every step's timing to *steps (the engine calls from its loop
// thread).
void RecordSteps(Engine& engine, std::vector<StepTiming>* steps) {
  auto mu = std::make_shared<std::mutex>();
  engine.set_step_observer([mu, steps](const StepTiming& t) {
    std::lock_guard<std::mutex> lock(*mu);
    steps->push_back(t);
  });
}

class EngineTest : public ::testing::Test {
 protected:
  // Greedy autoregressive outputs of the target alone: the reference.
  static void SetUpTestSuite() {
    LocalCommunicator comm;
    std::unique_ptr<Engine> engine = MakeEngine(&comm, EngineOptions(), /*speculation=*/false);
    ASSERT_NE(engine, nullptr);
    EngineHarness harness(engine.get());
    reference_ = new std::vector<CollectedOutput>(
        harness.GenerateAll(GreedyRequests(*engine, kMaxTokens)));
  }
  static void TearDownTestSuite() { delete reference_; }

  static constexpr int kMaxTokens = 40;
  static std::vector<CollectedOutput>* reference_;
};
std::vector<CollectedOutput>* EngineTest::reference_ = nullptr;

TEST_F(EngineTest, ReferenceRunsToTheTokenLimit) {
  ASSERT_EQ(reference_->size(), std::size(kPrompts));
  for (const CollectedOutput& out : *reference_) {
    EXPECT_EQ(out.finish_reason, FinishReason::kLength) << out.error;
    EXPECT_EQ(out.token_ids.size(), static_cast<size_t>(kMaxTokens));
    EXPECT_EQ(out.usage.completion_tokens, kMaxTokens);
    EXPECT_EQ(out.finished_events, 1);
    EXPECT_EQ(out.usage.draft_tokens, 0);
  }
}

// Seed 000: at temperature 0 speculative decoding emits exactly the target's
// greedy tokens, whatever the plan, with overlap scheduling on and off; 16
// requests decode together.
class GreedyEquivalenceTest
    : public EngineTest,
      public ::testing::WithParamInterface<std::tuple<VerifyMode, bool>> {};

TEST_P(GreedyEquivalenceTest, SpeculativeEqualsAutoregressive) {
  LocalCommunicator comm;
  EngineOptions options;
  options.verify_mode = std::get<0>(GetParam());
  options.overlap = std::get<1>(GetParam());
  std::unique_ptr<Engine> engine = MakeEngine(&comm, options);
  ASSERT_NE(engine, nullptr);
  EngineHarness harness(engine.get());
  std::vector<CollectedOutput> outputs = harness.GenerateAll(GreedyRequests(*engine, kMaxTokens));
  int64_t accepted = 0;
  for (size_t i = 0; i < outputs.size(); ++i) {
    EXPECT_EQ(outputs[i].token_ids, (*reference_)[i].token_ids) << "prompt " << kPrompts[i];
    EXPECT_EQ(outputs[i].text, (*reference_)[i].text);
    EXPECT_EQ(outputs[i].finish_reason, FinishReason::kLength);
    EXPECT_GT(outputs[i].usage.draft_tokens, 0);
    accepted += outputs[i].usage.accepted_tokens;
  }
  const EngineStats stats = engine->stats();
  // The trained draft agrees with the target often: fewer steps than tokens.
  EXPECT_GT(accepted, 0);
  EXPECT_LT(stats.steps, kMaxTokens);
  // Every committed token is a reference token: nothing after the limit.
  EXPECT_EQ(stats.generated, static_cast<int64_t>(std::size(kPrompts)) * kMaxTokens);
}

INSTANTIATE_TEST_SUITE_P(Modes, GreedyEquivalenceTest,
                         ::testing::Combine(::testing::Values(VerifyMode::kStatic,
                                                              VerifyMode::kCapAccept,
                                                              VerifyMode::kCompact),
                                            ::testing::Bool()),
                         ModeAndOverlapTestName);

// --speculation-max-batch: steps of more requests draft nothing; once the
// batch shrinks to the limit the draft catches up on the tokens it missed
// (its first pass takes them all, the prompt too: a request joining a batch
// above the limit skips the draft's prefill pass, which --prefill separate
// runs for the others) and drafting resumes, with the target's greedy tokens
// throughout. Half the requests stop early, so the batch goes from 16 to 8.
class SpeculationMaxBatchTest : public EngineTest,
                                public ::testing::WithParamInterface<std::tuple<VerifyMode, bool>> {
};

TEST_P(SpeculationMaxBatchTest, LargeBatchesDecodeWithoutDraftsAndLoseNothing) {
  constexpr int kLimit = 8;
  constexpr int kShortTokens = 12;
  // Accepted drafts per proposed draft of the long requests, with and
  // without the limit, and the limited run's steps.
  const auto run = [&](int limit, std::vector<StepTiming>* steps) {
    LocalCommunicator comm;
    EngineOptions options;
    options.verify_mode = std::get<0>(GetParam());
    options.overlap = std::get<1>(GetParam());
    options.speculation_max_batch = limit;
    options.fused_prefill = false;
    std::unique_ptr<Engine> engine = MakeEngine(&comm, options);
    EXPECT_NE(engine, nullptr);
    if (engine == nullptr) return 0.0;
    RecordSteps(*engine, steps);
    EngineHarness harness(engine.get());
    std::vector<GenerationRequest> requests = GreedyRequests(*engine, kMaxTokens);
    EXPECT_EQ(requests.size(), 2u * kLimit);
    for (int i = 0; i < kLimit; ++i) requests[i].params.max_tokens = kShortTokens;
    const std::vector<CollectedOutput> outputs = harness.GenerateAll(requests);
    harness.Stop();
    int64_t drafted = 0, accepted = 0;
    for (size_t i = 0; i < outputs.size(); ++i) {
      const std::vector<int32_t>& reference = (*reference_)[i].token_ids;
      const size_t want = i < kLimit ? kShortTokens : kMaxTokens;
      EXPECT_EQ(outputs[i].token_ids.size(), want) << i;
      EXPECT_TRUE(
          std::equal(outputs[i].token_ids.begin(), outputs[i].token_ids.end(), reference.begin()))
          << "prompt " << kPrompts[i] << ", limit " << limit;
      if (i >= kLimit) {
        drafted += outputs[i].usage.draft_tokens;
        accepted += outputs[i].usage.accepted_tokens;
      }
    }
    EXPECT_GT(drafted, 0) << "limit " << limit;
    return drafted > 0 ? static_cast<double>(accepted) / drafted : 0.0;
  };
  std::vector<StepTiming> steps, unlimited_steps;
  const double limited_rate = run(kLimit, &steps);
  const double unlimited_rate = run(0, &unlimited_steps);

  // A request that joined a batch above the limit did not prefill its
  // draft: the long ones caught up on their prompts when they first drafted
  // (and their tokens match the reference above). Requests that joined
  // while the batch was still at the limit or under it, and every request
  // without the limit, prefill the draft at admission.
  int64_t deferred_prompt_tokens = 0;
  for (const StepTiming& t : steps) {
    if (t.batch_size > kLimit) {
      EXPECT_EQ(t.draft_prefill_seconds, 0.0) << "step " << t.step;
      deferred_prompt_tokens += t.prefill_tokens;
    }
  }
  EXPECT_GT(deferred_prompt_tokens, 0);
  const auto draft_prefill_seconds = [](const std::vector<StepTiming>& run_steps) {
    double seconds = 0;
    for (const StepTiming& t : run_steps) seconds += t.draft_prefill_seconds;
    return seconds;
  };
  EXPECT_GT(draft_prefill_seconds(unlimited_steps), 0.0);

  // Steps above the limit drafted nothing and ran one row per request.
  int no_draft_steps = 0, drafting_steps = 0;
  for (const StepTiming& t : steps) {
    if (t.batch_size > kLimit) {
      EXPECT_EQ(t.plan_reason, PlanReason::kNoDrafts) << "step " << t.step;
      EXPECT_EQ(t.budget, 0) << "step " << t.step << " of " << t.batch_size << " requests";
      EXPECT_EQ(t.verify_tokens, t.batch_size) << "step " << t.step;
      ++no_draft_steps;
    } else if (t.budget > 0) {
      ++drafting_steps;
    }
  }
  EXPECT_GT(no_draft_steps, 0);
  EXPECT_GT(drafting_steps, 0);
  // After the catch-up the draft sees the whole context again, so its drafts
  // are accepted about as often as without the limit; a draft that missed
  // tokens would propose garbage.
  EXPECT_GT(limited_rate, 0.5 * unlimited_rate)
      << "accepted per draft: " << limited_rate << " with the limit, " << unlimited_rate
      << " without";
}

TEST(SpeculationMaxBatchOptionTest, NegativeIsRefusedWithTheFlag) {
  LocalCommunicator comm;
  EngineOptions options;
  options.speculation_max_batch = -1;
  options.kv_cache_tokens = 8192;
  absl::StatusOr<std::unique_ptr<Engine>> engine =
      Engine::Create(options, ModelSource{"models/target"}, ModelSource{"models/draft"}, &comm);
  ASSERT_FALSE(engine.ok());
  EXPECT_EQ(engine.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(engine.status().message()),
              ::testing::HasSubstr("--speculation-max-batch"));
}

INSTANTIATE_TEST_SUITE_P(Modes, SpeculationMaxBatchTest,
                         ::testing::Combine(::testing::Values(VerifyMode::kStatic,
                                                              VerifyMode::kCompact),
                                            ::testing::Bool()),
                         [](const auto& info) {
                           return std::string(VerifyModeName(std::get<0>(info.param))) +
                                  (std::get<1>(info.param) ? "_overlap" : "");
                         });

// The engine's behaviour that overlap scheduling must keep: each test runs
// with overlap off and on.
class EngineOverlapTest : public EngineTest, public ::testing::WithParamInterface<bool> {
 protected:
  EngineOptions Options() const {
    EngineOptions options;
    options.overlap = GetParam();
    return options;
  }
};

INSTANTIATE_TEST_SUITE_P(Overlap, EngineOverlapTest, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "on" : "off"; });

// Overlap: speculation off runs the same pipeline, one row per request.
TEST_P(EngineOverlapTest, AutoregressiveEqualsTheReference) {
  LocalCommunicator comm;
  std::unique_ptr<Engine> engine = MakeEngine(&comm, Options(), /*speculation=*/false);
  ASSERT_NE(engine, nullptr);
  EngineHarness harness(engine.get());
  std::vector<CollectedOutput> outputs = harness.GenerateAll(GreedyRequests(*engine, kMaxTokens));
  for (size_t i = 0; i < outputs.size(); ++i) {
    EXPECT_EQ(outputs[i].token_ids, (*reference_)[i].token_ids) << "prompt " << kPrompts[i];
  }
  EXPECT_EQ(engine->stats().generated, static_cast<int64_t>(std::size(kPrompts)) * kMaxTokens);
}

// Each step reports the scheduling thread's own time: its planning, and
// under overlap its wait for the device's outcome (the CPU backend's forward
// takes far longer than planning, so the thread waits at some step); without
// overlap the thread runs the step itself and never waits.
TEST_P(EngineOverlapTest, StepsReportPlanningAndWaitingTime) {
  LocalCommunicator comm;
  std::unique_ptr<Engine> engine = MakeEngine(&comm, Options(), /*speculation=*/true);
  ASSERT_NE(engine, nullptr);
  std::vector<StepTiming> steps;
  RecordSteps(*engine, &steps);
  EngineHarness harness(engine.get());
  harness.GenerateAll(GreedyRequests(*engine, kMaxTokens));
  ASSERT_FALSE(steps.empty());
  double awaited = 0;
  for (const StepTiming& t : steps) {
    EXPECT_GT(t.plan_seconds, 0) << "step " << t.step;
    EXPECT_LT(t.plan_seconds, 60) << "step " << t.step;
    EXPECT_GE(t.await_seconds, 0) << "step " << t.step;
    if (!GetParam()) EXPECT_EQ(t.await_seconds, 0) << "step " << t.step;
    awaited += t.await_seconds;
  }
  if (GetParam()) EXPECT_GT(awaited, 0);
}

// Requests that join while others run, and a request that turns
// speculation off or caps its drafts, still produce the reference tokens.
TEST_P(EngineOverlapTest, RequestsJoiningMidRunAndPerRequestSwitchesLoseNoTokens) {
  LocalCommunicator comm;
  std::unique_ptr<Engine> engine = MakeEngine(&comm, Options());
  ASSERT_NE(engine, nullptr);
  EngineHarness harness(engine.get());
  std::vector<GenerationRequest> requests = GreedyRequests(*engine, kMaxTokens);
  requests[1].params.speculation = false;
  requests[2].params.max_draft_tokens = 1;
  for (size_t i = 0; i < requests.size(); ++i) {
    ASSERT_TRUE(harness.Submit(requests[i]).ok());
    if (i % 4 == 3) {
      // Let the batch run a while before the next group arrives.
      while (harness.output(requests[i].id).events < 2 &&
             harness.output(requests[i].id).finished_events == 0) {
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
    }
  }
  harness.WaitAll();
  for (size_t i = 0; i < requests.size(); ++i) {
    EXPECT_EQ(harness.output(requests[i].id).token_ids, (*reference_)[i].token_ids) << i;
  }
  EXPECT_EQ(harness.output(requests[1].id).usage.draft_tokens, 0);
  const CollectedOutput capped = harness.output(requests[2].id);
  EXPECT_GT(capped.usage.verify_steps, 0);
  EXPECT_LE(capped.usage.accepted_tokens, capped.usage.verify_steps);
}

// Seed 000: a stop on an accepted draft drops the drafts after it and the
// sampled token. The stop id is a token the reference emits mid-output.
//
// The device flags the stop when it emits it (emitted_stop_token). With
// overlap on, the request's next step is already planned by then: the
// executor gives it no drafts there (one per request, since each request
// runs alone), and the tokens of that step never reach the output. With
// overlap off the CPU finishes the request before planning another step.
TEST_P(EngineOverlapTest, StopTokenEndsOutputAndDropsLaterTokens) {
  LocalCommunicator comm;
  std::unique_ptr<Engine> engine = MakeEngine(&comm, Options());
  ASSERT_NE(engine, nullptr);
  EngineHarness harness(engine.get());
  std::vector<GenerationRequest> requests = GreedyRequests(*engine, kMaxTokens);
  int checked = 0;
  for (size_t i = 0; i < requests.size(); ++i) {
    const std::vector<int32_t>& ref = (*reference_)[i].token_ids;
    const int32_t stop_id = ref[5];
    const size_t first = std::find(ref.begin(), ref.end(), stop_id) - ref.begin();
    requests[i].params.stop_token_ids = {stop_id};
    ASSERT_TRUE(harness.Submit(requests[i]).ok());
    harness.WaitAll();
    const CollectedOutput out = harness.output(requests[i].id);
    EXPECT_EQ(out.finish_reason, FinishReason::kStop);
    EXPECT_EQ(out.token_ids, std::vector<int32_t>(ref.begin(), ref.begin() + first)) << i;
    EXPECT_EQ(out.usage.completion_tokens, static_cast<int>(first) + 1);
    ++checked;
  }
  EXPECT_EQ(checked, static_cast<int>(std::size(kPrompts)));
  int64_t drafted = 0;
  for (const GenerationRequest& r : requests) drafted += harness.output(r.id).usage.draft_tokens;
  // The last request's skipped step may still be running: read the counters
  // once the loop has ended.
  harness.Stop();
  const EngineStats stats = engine->stats();
  EXPECT_EQ(stats.stop_skipped_steps, GetParam() ? checked : 0);
  // The dropped steps' drafts are not counted: every counted draft belongs
  // to a committed step.
  EXPECT_EQ(stats.drafted, drafted);
}

// generation_config.json's end-of-sequence ids stop generation like
// config.json's (Llama 3.1 lists three there).
TEST_F(EngineTest, GenerationConfigEosStops) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::path(std::getenv("TEST_TMPDIR")) / "target_with_generation_config";
  fs::create_directories(dir);
  for (const auto& entry : fs::directory_iterator("models/target")) {
    if (entry.path().filename() == "generation_config.json") continue;
    fs::create_symlink(fs::absolute(entry.path()), dir / entry.path().filename());
  }
  const std::vector<int32_t>& ref = (*reference_)[0].token_ids;
  const int32_t eos = ref[5];
  const size_t first = std::find(ref.begin(), ref.end(), eos) - ref.begin();
  std::ofstream(dir / "generation_config.json")
      << "{\"eos_token_id\": [" << eos << "], \"temperature\": 0.7}";

  LocalCommunicator comm;
  EngineOptions options;
  options.cpu_threads = 2;
  options.kv_cache_tokens = 8192;
  absl::StatusOr<std::unique_ptr<Engine>> engine = Engine::Create(
      options, ModelSource{dir.string()}, ModelSource{"models/draft"}, &comm);
  ASSERT_TRUE(engine.ok()) << engine.status();
  EngineHarness harness(engine->get());
  GenerationRequest request = GreedyRequests(**engine, kMaxTokens)[0];
  request.params.ignore_eos = false;
  std::vector<CollectedOutput> out = harness.GenerateAll({request});
  EXPECT_EQ(out[0].finish_reason, FinishReason::kStop);
  EXPECT_EQ(out[0].token_ids, std::vector<int32_t>(ref.begin(), ref.begin() + first));

  // An id beyond the vocabulary is refused at start-up, naming the file.
  std::ofstream(dir / "generation_config.json") << R"({"eos_token_id": [2, 999999]})";
  absl::StatusOr<std::unique_ptr<Engine>> bad = Engine::Create(
      options, ModelSource{dir.string()}, ModelSource{"models/draft"}, &comm);
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(std::string(bad.status().message()), ::testing::HasSubstr("generation_config.json"));
}

// A stop string is a CPU-only stop: under overlap the device runs the
// request one step past it, and those tokens are dropped.
TEST_P(EngineOverlapTest, StopStringCutsTheText) {
  LocalCommunicator comm;
  std::unique_ptr<Engine> engine = MakeEngine(&comm, Options());
  ASSERT_NE(engine, nullptr);
  EngineHarness harness(engine.get());
  GenerationRequest request = GreedyRequests(*engine, kMaxTokens)[0];
  const std::string& text = (*reference_)[0].text;
  const std::string stop = text.substr(text.size() / 2, 4);
  request.params.stop = {stop};
  std::vector<CollectedOutput> out = harness.GenerateAll({request});
  EXPECT_EQ(out[0].finish_reason, FinishReason::kStop);
  EXPECT_EQ(out[0].text, text.substr(0, text.find(stop)));
}

TEST_P(EngineOverlapTest, CancelEndsTheRequestAndFreesItsCache) {
  LocalCommunicator comm;
  std::unique_ptr<Engine> engine = MakeEngine(&comm, Options());
  ASSERT_NE(engine, nullptr);
  EngineHarness harness(engine.get());
  GenerationRequest request = GreedyRequests(*engine, 900)[0];
  ASSERT_TRUE(harness.Submit(request).ok());
  while (harness.output(request.id).events == 0) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  engine->Cancel(request.id);
  harness.WaitAll();
  const CollectedOutput out = harness.output(request.id);
  EXPECT_EQ(out.finish_reason, FinishReason::kCancelled);
  EXPECT_LT(out.usage.completion_tokens, 900);
  // The cache is free again: 8192 positions admit a 900-token request at once.
  std::vector<CollectedOutput> again = harness.GenerateAll({GreedyRequests(*engine, 8)[1]});
  EXPECT_EQ(again[0].finish_reason, FinishReason::kLength);
}

TEST_F(EngineTest, BadRequestsAreRefusedWithTheField) {
  LocalCommunicator comm;
  std::unique_ptr<Engine> engine = MakeEngine(&comm, EngineOptions());
  ASSERT_NE(engine, nullptr);
  EngineHarness harness(engine.get());
  GenerationRequest too_long = GreedyRequests(*engine, 2000)[0];
  absl::Status s = harness.Submit(too_long);
  EXPECT_EQ(s.code(), absl::StatusCode::kOutOfRange) << s;
  EXPECT_THAT(std::string(s.message()), ::testing::HasSubstr("context of 1024"));
  GenerationRequest bad_token = GreedyRequests(*engine, 4)[0];
  bad_token.prompt_token_ids.push_back(4096);
  s = harness.Submit(bad_token);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), ::testing::HasSubstr("4096"));
  GenerationRequest empty = GreedyRequests(*engine, 4)[0];
  empty.prompt_token_ids.clear();
  EXPECT_EQ(harness.Submit(empty).code(), absl::StatusCode::kInvalidArgument);
  // A positive temperature so small that the scaled logits overflow.
  for (float tiny : {1e-40f, 1e-30f, 0.5f * kMinTemperature}) {
    GenerationRequest cold = GreedyRequests(*engine, 4)[0];
    cold.params.temperature = tiny;
    s = harness.Submit(cold);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << tiny;
    EXPECT_THAT(std::string(s.message()), ::testing::HasSubstr("temperature")) << tiny;
  }
  for (float min_p : {-0.5f, 1.5f, std::nanf("")}) {
    GenerationRequest bad = GreedyRequests(*engine, 4)[0];
    bad.params.min_p = min_p;
    s = harness.Submit(bad);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << min_p;
    EXPECT_THAT(std::string(s.message()), ::testing::HasSubstr("min_p")) << min_p;
  }
  // The engine keeps serving.
  std::vector<CollectedOutput> ok = harness.GenerateAll({GreedyRequests(*engine, 3)[0]});
  EXPECT_EQ(ok[0].token_ids.size(), 3u);
}

// Min-p 1 keeps only the most likely token (p >= p_max), so sampling at
// temperature 1 emits the greedy tokens whatever the seed, in the draft's
// proposals and the target's verification alike.
TEST_F(EngineTest, MinPOneSamplesTheGreedyTokens) {
  LocalCommunicator comm;
  std::unique_ptr<Engine> engine = MakeEngine(&comm, EngineOptions());
  ASSERT_NE(engine, nullptr);
  EngineHarness harness(engine.get());
  std::vector<GenerationRequest> requests = GreedyRequests(*engine, kMaxTokens);
  for (size_t i = 0; i < requests.size(); ++i) {
    requests[i].params.temperature = 1.0f;
    requests[i].params.min_p = 1.0f;
    requests[i].params.seed = 77 + i;
  }
  std::vector<CollectedOutput> outputs = harness.GenerateAll(requests);
  ASSERT_EQ(outputs.size(), reference_->size());
  for (size_t i = 0; i < outputs.size(); ++i) {
    EXPECT_EQ(outputs[i].token_ids, (*reference_)[i].token_ids) << "prompt " << kPrompts[i];
  }
}

// Same seed, same sampled tokens: run after run, with the prompts read in
// the step's own passes or in prefill passes of their own (--prefill), with
// overlap on or off.
TEST_F(EngineTest, SameSeedSameSampledOutput) {
  LocalCommunicator comm;
  std::vector<std::vector<int32_t>> runs;
  constexpr int kRuns = 4;
  for (int run = 0; run < kRuns; ++run) {
    EngineOptions options;
    options.fused_prefill = run != 2;
    options.overlap = run == 3;
    std::unique_ptr<Engine> engine = MakeEngine(&comm, options);
    ASSERT_NE(engine, nullptr);
    EngineHarness harness(engine.get());
    std::vector<GenerationRequest> requests;
    for (int i = 0; i < 4; ++i) {
      requests.push_back(TextRequest(*engine, "s" + std::to_string(i), kPrompts[i], 24, 1.0f,
                                     1000 + i));
    }
    for (const CollectedOutput& out : harness.GenerateAll(requests)) {
      runs.push_back(out.token_ids);
    }
  }
  for (int run = 1; run < kRuns; ++run) {
    for (int i = 0; i < 4; ++i) EXPECT_EQ(runs[i], runs[4 * run + i]) << "run " << run << ", " << i;
  }
  EXPECT_NE(runs[0], runs[1]);
}

// A request's text is the decode of its tokens, including what the
// detokenizer still held when the request ended: sampled at a temperature
// that makes every id about as likely, outputs end in byte pieces and
// partial characters.
TEST_F(EngineTest, TextIsTheDecodeOfTheTokens) {
  LocalCommunicator comm;
  std::unique_ptr<Engine> engine = MakeEngine(&comm, EngineOptions());
  ASSERT_NE(engine, nullptr);
  EngineHarness harness(engine.get());
  std::vector<GenerationRequest> requests;
  for (int i = 0; i < 64; ++i) {
    requests.push_back(TextRequest(*engine, "t" + std::to_string(i), kPrompts[i % 4], 1 + i % 17,
                                   100.0f, 500 + i));
    requests.back().params.ignore_eos = true;
  }
  int held_at_the_end = 0;
  const std::vector<CollectedOutput> outputs = harness.GenerateAll(requests);
  ASSERT_EQ(outputs.size(), requests.size());
  for (size_t i = 0; i < outputs.size(); ++i) {
    // The prompt's text, then the output's (its first space included).
    const std::vector<int32_t>& prompt = requests[i].prompt_token_ids;
    std::vector<int32_t> all = prompt;
    all.insert(all.end(), outputs[i].token_ids.begin(), outputs[i].token_ids.end());
    absl::StatusOr<std::string> prompt_text = engine->tokenizer().Decode(prompt);
    absl::StatusOr<std::string> whole = engine->tokenizer().Decode(all);
    ASSERT_TRUE(prompt_text.ok() && whole.ok());
    ASSERT_EQ(whole->compare(0, prompt_text->size(), *prompt_text), 0);
    const std::string text = whole->substr(prompt_text->size());
    EXPECT_EQ(outputs[i].text, text) << i;
    IncrementalDetokenizer appended(&engine->tokenizer(), prompt);
    std::string streamed;
    for (int32_t id : outputs[i].token_ids) streamed += *appended.Append(id);
    held_at_the_end += streamed != text;
  }
  // The case this test is for happened.
  EXPECT_GT(held_at_the_end, 0);
}

// The prompt rows the planners price into a step's verify are the rows its
// verify forward reads: under in-step prefill, every prompt but its last
// token, in the step of the request's first verify, with overlap on and off
// and with requests joining a running batch (at most 3 run at once); with
// separate prefill passes, none.
TEST_F(EngineTest, PricedPromptRowsAreTheRowsTheVerifyReads) {
  LocalCommunicator comm;
  for (const bool fused : {true, false}) {
    for (const bool overlap : {false, true}) {
      EngineOptions options;
      options.fused_prefill = fused;
      options.overlap = overlap;
      options.max_running_requests = 3;
      std::unique_ptr<Engine> engine = MakeEngine(&comm, options);
      ASSERT_NE(engine, nullptr);
      std::vector<StepTiming> steps;
      RecordSteps(*engine, &steps);
      EngineHarness harness(engine.get());
      std::vector<GenerationRequest> requests;
      int64_t prompt_rows = 0;
      for (int i = 0; i < 7; ++i) {
        requests.push_back(TextRequest(*engine, "p" + std::to_string(i),
                                       kPrompts[i % std::size(kPrompts)], 6 + 5 * i, 0.0f, i));
        requests.back().params.ignore_eos = true;
        prompt_rows += static_cast<int64_t>(requests.back().prompt_token_ids.size()) - 1;
      }
      for (const CollectedOutput& out : harness.GenerateAll(requests)) {
        EXPECT_EQ(out.finish_reason, FinishReason::kLength) << out.error;
      }
      harness.Stop();
      const std::string run =
          std::string(fused ? "in-step" : "separate") + (overlap ? ", overlap" : "");
      int64_t priced = 0, joining_steps = 0;
      for (const StepTiming& t : steps) {
        if (fused) {
          EXPECT_EQ(t.priced_prefill_rows, t.prefill_tokens) << run << ", step " << t.step;
        } else {
          EXPECT_EQ(t.priced_prefill_rows, 0) << run << ", step " << t.step;
        }
        priced += t.priced_prefill_rows;
        if (t.priced_prefill_rows > 0 && t.step > 1) ++joining_steps;
      }
      EXPECT_EQ(priced, fused ? prompt_rows : 0) << run;
      // Requests joined a running batch, not only the first step.
      if (fused) EXPECT_GT(joining_steps, 0) << run;
    }
  }
}

// --simulate-acceptance on dummy weights at the bundled shapes: every
// verified draft up to a request-step's first reject is one accept test with
// the simulated rate, so accepted / (accepted + rejected) estimates it; the
// tolerance is 5 binomial standard errors of that many tests. Greedy and
// sampled requests alike.
TEST(EngineSimulatedAcceptanceTest, MeasuredAcceptanceRateIsTheSimulatedRate) {
  constexpr double kRate = 0.6;
  LocalCommunicator comm;
  EngineOptions options;
  options.simulate_acceptance = kRate;
  options.cpu_threads = 2;
  options.kv_cache_tokens = 8192;
  absl::StatusOr<std::unique_ptr<Engine>> engine =
      Engine::Create(options, ModelSource{"models/target", true, 1},
                     ModelSource{"models/draft", true, 2}, &comm);
  ASSERT_TRUE(engine.ok()) << engine.status();
  EngineHarness harness(engine->get());
  std::vector<GenerationRequest> requests;
  for (int i = 0; i < 8; ++i) {
    requests.push_back(TextRequest(**engine, "a" + std::to_string(i), kPrompts[i], 96,
                                   i % 2 == 0 ? 0.0f : 1.0f, 300 + i));
    requests.back().params.ignore_eos = true;
  }
  for (const CollectedOutput& out : harness.GenerateAll(requests)) {
    EXPECT_EQ(out.finish_reason, FinishReason::kLength) << out.error;
  }
  const EngineStats stats = (*engine)->stats();
  const double tests = static_cast<double>(stats.accepted + stats.rejected);
  ASSERT_GT(tests, 400);
  EXPECT_NEAR(stats.accepted / tests, kRate, 5.0 * std::sqrt(kRate * (1 - kRate) / tests))
      << stats.accepted << " accepted, " << stats.rejected << " rejected";
}

// Dummy weights give every draft the same near-uniform distribution, so every
// confidence signal is the same; the estimator must still become ready, at
// the simulated rate, and compact then plans on the cost table. Verify rows
// here cost as much as a step's fixed part, so the plan trims drafts.
TEST(EngineSimulatedAcceptanceTest, CompactPlansOnceTheEstimatorIsReady) {
  const std::string table = ::testing::TempDir() + "/engine_test_dear_rows.json";
  {
    std::ofstream out(table);
    // seconds = 0.001 * (1 + M), M = verify rows.
    out << R"({"batch_sizes": [1, 16], "verify_tokens": [1, 16, 96],
              "seconds": [[0.002, 0.017, 0.097], [0.002, 0.017, 0.097]]})";
  }
  LocalCommunicator comm;
  EngineOptions options;
  options.verify_mode = VerifyMode::kCompact;
  options.cost_table_path = table;
  options.simulate_acceptance = 0.8;
  options.cpu_threads = 2;
  options.kv_cache_tokens = 8192;
  absl::StatusOr<std::unique_ptr<Engine>> engine = Engine::Create(
      options, ModelSource{"models/target", true, 1}, ModelSource{"models/draft", true, 2}, &comm);
  ASSERT_TRUE(engine.ok()) << engine.status();
  std::mutex mu;
  std::map<PlanReason, int> reasons;
  std::vector<StepTiming> steps;
  (*engine)->set_step_observer([&](const StepTiming& t) {
    std::lock_guard<std::mutex> lock(mu);
    ++reasons[t.plan_reason];
    steps.push_back(t);
  });
  EngineHarness harness(engine->get());
  std::vector<GenerationRequest> requests;
  for (int i = 0; i < 16; ++i) {
    // Long enough for every position's first fit (refits come every 32
    // steps, staggered by position) and some planned steps after it; the
    // first request is short, so early steps cap its verify length.
    const int max_tokens = i == 0 ? 3 : 192;
    requests.push_back(
        TextRequest(**engine, "c" + std::to_string(i), kPrompts[i % 8], max_tokens, 0.0f, 500 + i));
    requests.back().params.ignore_eos = true;
  }
  for (const CollectedOutput& out : harness.GenerateAll(requests)) {
    EXPECT_EQ(out.finish_reason, FinishReason::kLength) << out.error;
  }
  harness.Stop();
  const EngineStats stats = (*engine)->stats();
  std::lock_guard<std::mutex> lock(mu);
  EXPECT_GT(reasons[PlanReason::kConfidencePrior], 0);  // before the first fits
  EXPECT_GT(reasons[PlanReason::kPlanned], 0) << "the estimator never got ready";
  EXPECT_LT(stats.verified, stats.drafted);
  // Steps on the prior verify everything in the uniform layout, static
  // mode's rows: every request's drafts and its last row. A request drafts
  // at most the tokens it has left minus one (the table has no draft split,
  // so every request drafts that cap), so the block is the full 6 rows per
  // request until the short request nears its end. Trimmed planned steps
  // run only their planned rows.
  int packed_steps = 0;
  int full_block_steps = 0;
  for (const StepTiming& t : steps) {
    if (t.plan_reason == PlanReason::kConfidencePrior) {
      EXPECT_EQ(t.verify_tokens, t.batch_size + t.budget) << "step " << t.step;
      EXPECT_LE(t.verify_tokens, 6 * t.batch_size) << "step " << t.step;
      // The deepest request's cap: 5 unless every request nears its end.
      EXPECT_GE(t.draft_passes, 1) << "step " << t.step;
      EXPECT_LE(t.draft_passes, 5) << "step " << t.step;
      if (t.verify_tokens == 6 * t.batch_size) {
        EXPECT_EQ(t.draft_passes, 5) << "step " << t.step;
        ++full_block_steps;
      }
    } else if (t.plan_reason == PlanReason::kPlanned && t.budget < 5 * t.batch_size) {
      EXPECT_LE(t.verify_tokens, t.batch_size + t.budget) << "step " << t.step;
      ++packed_steps;
    }
  }
  EXPECT_GT(packed_steps, 0);
  EXPECT_GT(full_block_steps, 0);
}

TEST(EngineSimulatedAcceptanceTest, RefusedWithRealWeightsOrOutsideZeroOne) {
  LocalCommunicator comm;
  EngineOptions options;
  options.simulate_acceptance = 0.6;
  options.kv_cache_tokens = 8192;
  absl::StatusOr<std::unique_ptr<Engine>> real = Engine::Create(
      options, ModelSource{"models/target"}, ModelSource{"models/draft"}, &comm);
  EXPECT_EQ(real.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(real.status().message()), ::testing::HasSubstr("dummy weights"));
  options.simulate_acceptance = 1.5;
  absl::StatusOr<std::unique_ptr<Engine>> above =
      Engine::Create(options, ModelSource{"models/target", true, 1},
                     ModelSource{"models/draft", true, 2}, &comm);
  EXPECT_EQ(above.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(above.status().message()), ::testing::HasSubstr("[0, 1]"));
  // Speculation off: nothing to accept; started, with a log line.
  options.simulate_acceptance = 0.6;
  options.speculation = false;
  EXPECT_TRUE(Engine::Create(options, ModelSource{"models/target", true, 1}, std::nullopt, &comm)
                  .ok());
}

TEST(EngineDraftTpTest, OnlyOneOrTheTpDegree) {
  LocalCommunicator comm;
  EngineOptions options;
  options.kv_cache_tokens = 8192;
  options.draft_tp = 2;  // a world of one rank
  absl::StatusOr<std::unique_ptr<Engine>> refused = Engine::Create(
      options, ModelSource{"models/target"}, ModelSource{"models/draft"}, &comm);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(refused.status().message()),
              ::testing::HasSubstr("--draft-tp must be 1 or the TP degree (1)"));
  // At TP 1 both choices are the same whole draft.
  options.draft_tp = 1;
  EXPECT_TRUE(
      Engine::Create(options, ModelSource{"models/target"}, ModelSource{"models/draft"}, &comm)
          .ok());
}

// The start-up log says how tokens will be made: speculatively with the
// draft, or one target pass per token (no draft, or --speculation off).
TEST(EngineDecodingModeTest, StartUpSaysHowTokensAreMade) {
  LocalCommunicator comm;
  EngineOptions options;
  options.kv_cache_tokens = 8192;
  auto said_at_start = [&](std::optional<ModelSource> draft) {
    ::testing::internal::CaptureStderr();
    absl::StatusOr<std::unique_ptr<Engine>> engine =
        Engine::Create(options, ModelSource{"models/target", true, 1}, draft, &comm);
    const std::string said = ::testing::internal::GetCapturedStderr();
    EXPECT_TRUE(engine.ok()) << engine.status();
    return said;
  };
  const ModelSource draft{"models/draft", true, 2};
  EXPECT_THAT(said_at_start(std::nullopt),
              ::testing::HasSubstr("decoding autoregressively (no draft model)"));
  EXPECT_THAT(said_at_start(draft),
              ::testing::HasSubstr("speculative decoding: the draft models/draft proposes up to 5"));
  options.speculation = false;
  const std::string off = said_at_start(draft);
  EXPECT_THAT(off, ::testing::HasSubstr("decoding autoregressively (--speculation off)"));
  EXPECT_THAT(off, ::testing::Not(::testing::HasSubstr("speculative decoding")));
}

TEST(EngineCostTableTest, SaysWhenTheTableWasMeasuredAtAnotherTp) {
  const std::string path = ::testing::TempDir() + "/engine_test_tp2_table.json";
  {
    std::ofstream out(path);
    out << R"({"tp": 2, "batch_sizes": [1, 8], "verify_tokens": [1, 48],
              "seconds": [[0.010, 0.014], [0.011, 0.020]]})";
  }
  LocalCommunicator comm;
  EngineOptions options;
  options.kv_cache_tokens = 8192;
  options.verify_mode = VerifyMode::kCompact;
  options.cost_table_path = path;
  ::testing::internal::CaptureStderr();
  absl::StatusOr<std::unique_ptr<Engine>> engine = Engine::Create(
      options, ModelSource{"models/target"}, ModelSource{"models/draft"}, &comm);
  const std::string said = ::testing::internal::GetCapturedStderr();
  ASSERT_TRUE(engine.ok()) << engine.status();
  EXPECT_THAT(said, ::testing::HasSubstr("was measured at TP 2, this job runs TP 1"));
}

TEST(EngineBuiltinShapeTest, RefusedWithoutDummyWeightsOrWithAnUnknownName) {
  LocalCommunicator comm;
  EngineOptions options;
  options.kv_cache_tokens = 8192;
  ModelSource shape{"builtin:llama-3.2-1b"};
  shape.tokenizer_dir = "models/target";
  absl::StatusOr<std::unique_ptr<Engine>> no_weights =
      Engine::Create(options, shape, std::nullopt, &comm);
  EXPECT_EQ(no_weights.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(no_weights.status().message()),
              ::testing::HasSubstr("builtin:llama-3.2-1b is a shape without weights"));
  ModelSource unknown{"builtin:llama-99b", true, 1};
  unknown.tokenizer_dir = "models/target";
  absl::StatusOr<std::unique_ptr<Engine>> missing =
      Engine::Create(options, unknown, std::nullopt, &comm);
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  // The error lists the shapes there are.
  EXPECT_THAT(std::string(missing.status().message()), ::testing::HasSubstr("llama-3.1-8b"));
}

// Seed 000: speculative sampling is lossless. On a tiny random pair whose
// draft disagrees with the target, the first three sampled tokens follow
// the same distribution with and without speculation: a two-sample
// chi-square test per position over 3000 seeds each, against the 99.9%
// quantile of chi-square with vocab - 1 = 15 degrees of freedom (37.70).
TEST(EngineLosslessTest, SampledDistributionMatchesAutoregressive) {
  const std::string dir = ::testing::TempDir() + "/lossless";
  ModelConfig config = TinyModelConfig(ModelFamily::kLlama);
  config.vocab_size = 16;
  config.max_position_embeddings = 64;
  RandomModelOptions target_options;
  target_options.seed = 11;
  target_options.stddev = 0.6f;
  // The draft shares the target's seed at a smaller scale: related but
  // different distributions, so drafts are both accepted and rejected.
  RandomModelOptions draft_options = target_options;
  draft_options.stddev = 0.45f;
  ASSERT_TRUE(WriteRandomModel(dir + "/target", config, target_options).ok());
  ASSERT_TRUE(WriteRandomModel(dir + "/draft", config, draft_options).ok());
  for (const char* model : {"target", "draft"}) {
    std::filesystem::copy_file("models/target/tokenizer.model",
                               dir + "/" + model + "/tokenizer.model",
                               std::filesystem::copy_options::overwrite_existing);
  }
  constexpr int kSamples = 3000, kPositions = 3, kVocab = 16;
  std::vector<std::vector<std::vector<int>>> counts(
      2, std::vector<std::vector<int>>(kPositions, std::vector<int>(kVocab, 0)));
  int64_t accepted = 0, verified = 0;
  for (int spec = 0; spec < 2; ++spec) {
    LocalCommunicator comm;
    EngineOptions options;
    options.num_draft_tokens = 3;
    options.speculation = spec == 1;
    options.max_running_requests = 256;
    options.max_waiting_requests = kSamples;
    options.kv_cache_tokens = 256 * 16;
    options.cpu_threads = 2;
    std::optional<ModelSource> draft;
    if (spec) draft = ModelSource{dir + "/draft"};
    absl::StatusOr<std::unique_ptr<Engine>> engine =
        Engine::Create(options, ModelSource{dir + "/target"}, draft, &comm);
    ASSERT_TRUE(engine.ok()) << engine.status();
    EngineHarness harness(engine->get());
    std::vector<GenerationRequest> requests;
    for (int i = 0; i < kSamples; ++i) {
      GenerationRequest r;
      r.id = std::to_string(i);
      r.prompt_token_ids = {5, 9, 3};
      r.params.max_tokens = kPositions;
      r.params.temperature = 1.0f;
      r.params.ignore_eos = true;
      r.params.seed = 7919 * i + spec;
      requests.push_back(r);
    }
    for (const CollectedOutput& out : harness.GenerateAll(requests)) {
      ASSERT_EQ(out.token_ids.size(), static_cast<size_t>(kPositions)) << out.error;
      for (int k = 0; k < kPositions; ++k) ++counts[spec][k][out.token_ids[k]];
    }
    const EngineStats stats = (*engine)->stats();
    if (spec) {
      accepted = stats.accepted;
      verified = stats.verified;
    }
  }
  // Both accepting and rejecting happen, so both paths are exercised.
  EXPECT_GT(accepted, verified / 10);
  EXPECT_LT(accepted, verified * 9 / 10);
  for (int k = 0; k < kPositions; ++k) {
    double chi2 = 0;
    for (int v = 0; v < kVocab; ++v) {
      const double a = counts[0][k][v], b = counts[1][k][v];
      if (a + b > 0) chi2 += (a - b) * (a - b) / (a + b);
    }
    EXPECT_LT(chi2, 37.70) << "position " << k;
  }
}

}  // namespace
}  // namespace verdict
