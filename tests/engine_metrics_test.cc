// The engine's metrics on a real workload (one process, CPU backend, a tiny
// random draft/target pair so that a few hundred steps take seconds):
//
//   Metrics are observational: the same seeded workload gives the same
//   tokens and the same counters with metrics on and off.
//
//   The figures agree with the engine's own counters: steps, drafts
//   proposed, verified and accepted (in total and per position), acceptance
//   lengths, plan reasons, measured and predicted step seconds, rank 0's
//   gathered figures, and the estimator: once it is ready every position has
//   a fit, a Brier score in [0, 1] from verified drafts, and the planner
//   trims with the cost table.
//
//   Under overlap scheduling the figures still add up to the counters, with
//   every step counted, those whose tokens were dropped included.
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "comm/local_communicator.h"
#include "gtest/gtest.h"
#include "monitoring/metrics.h"
#include "runtime/engine/engine.h"
#include "runtime/engine/engine_test_util.h"
#include "runtime/model/model_config.h"
#include "runtime/model/random_model.h"

namespace verdict {
namespace {

constexpr int kVocab = 128;
constexpr int kGamma = 5;
constexpr int kRequests = 240;

std::string TmpDir() {
  const char* dir = std::getenv("TEST_TMPDIR");
  return dir != nullptr ? dir : "/tmp";
}

// A draft close to the target (same seed, slightly smaller weights): it is
// accepted often but not always, so every draft position gets observations
// of both outcomes within a few hundred steps.
std::string WriteTinyPair() {
  const std::string dir = TmpDir() + "/engine_metrics_pair";
  ModelConfig config = TinyModelConfig(ModelFamily::kLlama);
  config.vocab_size = kVocab;
  config.max_position_embeddings = 1024;
  config.num_layers = 1;
  config.layer_uses_sliding_window = {false};
  RandomModelOptions target;
  target.seed = 23;
  target.stddev = 0.6f;
  RandomModelOptions draft = target;
  draft.stddev = 0.55f;
  EXPECT_TRUE(WriteRandomModel(dir + "/target", config, target).ok());
  EXPECT_TRUE(WriteRandomModel(dir + "/draft", config, draft).ok());
  for (const char* model : {"target", "draft"}) {
    std::filesystem::copy_file("models/target/tokenizer.model",
                               dir + "/" + model + "/tokenizer.model",
                               std::filesystem::copy_options::overwrite_existing);
  }
  return dir;
}

// seconds = 0.010 + 0.0004 per verified row: a fixed cost per step and a
// price per row, so the planner trims drafts unlikely to be accepted.
std::string WriteCostTable() {
  const std::string path = TmpDir() + "/engine_metrics_cost_table.json";
  std::ofstream out(path);
  out << R"({"batch_sizes": [1, 16, 64],
            "verify_tokens": [1, 16, 128, 512],
            "seconds": [[0.0104, 0.0164, 0.0612, 0.2148],
                        [0.0110, 0.0170, 0.0618, 0.2154],
                        [0.0130, 0.0190, 0.0638, 0.2174]]})";
  return path;
}

// Short requests, 16 at a time, three in four sampled at temperature 1.
std::vector<GenerationRequest> Workload() {
  std::mt19937 rng(11);
  std::vector<GenerationRequest> requests;
  for (int i = 0; i < kRequests; ++i) {
    GenerationRequest r;
    r.id = absl::StrCat("m", i);
    const int prompt_len = 3 + static_cast<int>(rng() % 10);
    for (int k = 0; k < prompt_len; ++k) {
      r.prompt_token_ids.push_back(3 + static_cast<int32_t>(rng() % (kVocab - 3)));
    }
    r.params.max_tokens = 16 + 4 * (i % 7);
    r.params.temperature = i % 4 == 0 ? 0.0f : 1.0f;
    r.params.seed = 104729u * i + 7;
    r.params.ignore_eos = true;
    requests.push_back(r);
  }
  return requests;
}

struct WorkloadRun {
  std::map<std::string, CollectedOutput> outputs;
  EngineStats stats;
  std::string metrics_text;  // empty with metrics off
};

// Submits every request before the loop starts, so that the batches, and
// with them the plans, do not depend on thread timing.
WorkloadRun RunWorkload(const std::string& dir, bool with_metrics, bool overlap = false) {
  WorkloadRun run;
  EngineOptions options;
  options.verify_mode = VerifyMode::kCompact;
  options.overlap = overlap;
  options.cost_table_path = WriteCostTable();
  options.max_running_requests = 16;
  options.kv_cache_tokens = 16384;
  options.cpu_threads = 1;
  options.num_draft_tokens = kGamma;
  LocalCommunicator comm;
  absl::StatusOr<std::unique_ptr<Engine>> engine = Engine::Create(
      options, ModelSource{dir + "/target"}, ModelSource{dir + "/draft"}, &comm);
  EXPECT_TRUE(engine.ok()) << engine.status();
  if (!engine.ok()) return run;
  auto registry = std::make_shared<prometheus::Registry>();
  std::optional<ServingMetrics> metrics;
  if (with_metrics) {
    metrics.emplace(registry);
    (*engine)->set_metrics(&*metrics);
  }

  std::mutex mu;
  std::condition_variable cv;
  int pending = 0;
  for (GenerationRequest& r : Workload()) {
    const std::string id = r.id;
    {
      std::lock_guard<std::mutex> lock(mu);
      ++pending;
    }
    const absl::Status s =
        (*engine)->Submit(std::move(r), [&, id](const GenerationEvent& e) {
          std::lock_guard<std::mutex> lock(mu);
          CollectedOutput& out = run.outputs[id];
          out.token_ids.insert(out.token_ids.end(), e.token_ids.begin(), e.token_ids.end());
          out.usage = e.usage;
          if (e.finished) {
            out.finish_reason = e.finish_reason;
            --pending;
            cv.notify_all();
          }
        });
    EXPECT_TRUE(s.ok()) << s;
  }
  {
    EngineHarness harness(engine->get());
    std::unique_lock<std::mutex> lock(mu);
    EXPECT_TRUE(cv.wait_for(lock, std::chrono::seconds(50), [&] { return pending == 0; }))
        << pending << " requests still running";
  }
  run.stats = (*engine)->stats();
  if (with_metrics) run.metrics_text = SerializeMetrics(*registry);
  return run;
}

// Series name with its labels as exposed ("name{a=\"b\"}") -> value.
std::map<std::string, double> ParseExposition(const std::string& text) {
  std::map<std::string, double> values;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    const size_t space = line.rfind(' ');
    values[line.substr(0, space)] = std::stod(line.substr(space + 1));
  }
  return values;
}

// The sum of every series of `family` (all label values).
double SumOf(const std::map<std::string, double>& m, const std::string& family) {
  double sum = 0;
  for (const auto& [series, value] : m) {
    if (series == family || series.rfind(family + "{", 0) == 0) sum += value;
  }
  return sum;
}

class EngineMetricsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const std::string dir = WriteTinyPair();
    with_ = new WorkloadRun(RunWorkload(dir, /*with_metrics=*/true));
    without_ = new WorkloadRun(RunWorkload(dir, /*with_metrics=*/false));
    overlapped_ = new WorkloadRun(RunWorkload(dir, /*with_metrics=*/true, /*overlap=*/true));
    const EngineStats& st = with_->stats;
    std::printf("workload: %lld steps, %lld request-steps, %lld drafts verified, %lld accepted\n",
                static_cast<long long>(st.steps), static_cast<long long>(st.spec_steps),
                static_cast<long long>(st.verified), static_cast<long long>(st.accepted));
  }
  static void TearDownTestSuite() {
    delete with_;
    delete without_;
    delete overlapped_;
  }
  static WorkloadRun* with_;
  static WorkloadRun* without_;
  static WorkloadRun* overlapped_;  // overlap scheduling on, metrics on
};
WorkloadRun* EngineMetricsTest::with_ = nullptr;
WorkloadRun* EngineMetricsTest::without_ = nullptr;
WorkloadRun* EngineMetricsTest::overlapped_ = nullptr;

TEST_F(EngineMetricsTest, MetricsDoNotChangeTheOutput) {
  ASSERT_EQ(with_->outputs.size(), static_cast<size_t>(kRequests));
  ASSERT_EQ(without_->outputs.size(), static_cast<size_t>(kRequests));
  for (const auto& [id, out] : without_->outputs) {
    EXPECT_EQ(with_->outputs[id].token_ids, out.token_ids) << id;
    EXPECT_EQ(out.finish_reason, FinishReason::kLength) << id;
  }
  EXPECT_EQ(with_->stats.steps, without_->stats.steps);
  EXPECT_EQ(with_->stats.drafted, without_->stats.drafted);
  EXPECT_EQ(with_->stats.verified, without_->stats.verified);
  EXPECT_EQ(with_->stats.accepted, without_->stats.accepted);
}

TEST_F(EngineMetricsTest, ServingAndSpeculationFiguresMatchTheEngine) {
  const EngineStats& st = with_->stats;
  const std::map<std::string, double> m = ParseExposition(with_->metrics_text);
  int64_t prompt = 0, generated = 0;
  for (const auto& [id, out] : with_->outputs) {
    prompt += out.usage.prompt_tokens;
    generated += out.usage.completion_tokens;
  }
  EXPECT_EQ(m.at("verdict_requests_total{outcome=\"length\"}"), kRequests);
  EXPECT_EQ(SumOf(m, "verdict_requests_total"), kRequests);
  EXPECT_EQ(m.at("verdict_prompt_tokens_total"), prompt);
  EXPECT_EQ(m.at("verdict_generated_tokens_total"), generated);
  EXPECT_EQ(m.at("verdict_generated_tokens_total"), st.generated);
  EXPECT_EQ(m.at("verdict_request_latency_seconds_count"), kRequests);
  EXPECT_EQ(m.at("verdict_time_to_first_token_seconds_count"), kRequests);
  EXPECT_EQ(m.at("verdict_running_requests"), 0);
  EXPECT_EQ(m.at("verdict_waiting_requests"), 0);

  EXPECT_EQ(m.at("verdict_decode_steps_total"), st.steps);
  EXPECT_EQ(m.at("verdict_draft_tokens_proposed_total"), st.drafted);
  EXPECT_EQ(m.at("verdict_draft_tokens_verified_total"), st.verified);
  EXPECT_EQ(m.at("verdict_draft_tokens_accepted_total"), st.accepted);
  EXPECT_EQ(SumOf(m, "verdict_draft_position_verified_total"), st.verified);
  EXPECT_EQ(SumOf(m, "verdict_draft_position_accepted_total"), st.accepted);
  // A later position is verified (and accepted) only with every earlier one.
  for (int k = 1; k < kGamma; ++k) {
    const std::string p = absl::StrCat("{position=\"", k, "\"}");
    const std::string q = absl::StrCat("{position=\"", k - 1, "\"}");
    EXPECT_LE(m.at("verdict_draft_position_verified_total" + p),
              m.at("verdict_draft_position_verified_total" + q));
    EXPECT_LE(m.at("verdict_draft_position_accepted_total" + p),
              m.at("verdict_draft_position_accepted_total" + q));
  }
  EXPECT_GT(m.at("verdict_draft_position_accepted_total{position=\"4\"}"), 0);
  // One acceptance length per speculative request-step: accepted + 1.
  EXPECT_EQ(m.at("verdict_step_acceptance_length_count"), st.spec_steps);
  EXPECT_EQ(m.at("verdict_step_acceptance_length_sum"), st.accepted + st.spec_steps);
  EXPECT_EQ(m.at("verdict_request_acceptance_length_count"), kRequests);
  EXPECT_EQ(m.at("verdict_verify_mode_info{mode=\"compact\"}"), 1);
  EXPECT_EQ(m.at("verdict_num_draft_tokens"), kGamma);
}

TEST_F(EngineMetricsTest, PlannerFiguresMatchTheEngine) {
  const EngineStats& st = with_->stats;
  const std::map<std::string, double> m = ParseExposition(with_->metrics_text);
  EXPECT_EQ(SumOf(m, "verdict_plan_steps_total"), st.steps);
  // The estimator starts on its prior (verify everything), then the cost
  // table makes the planner trim.
  EXPECT_GT(m.at("verdict_plan_steps_total{reason=\"confidence-prior\"}"), 0);
  EXPECT_GT(m.at("verdict_plan_steps_total{reason=\"planned\"}"), 0);
  // Steps where nobody drafted (the last request's last token: it has no
  // room for a draft) have no block to trim and, with a table without the
  // draft split, no prediction.
  const int64_t drafting_steps = st.steps - st.plain_steps;
  EXPECT_EQ(m.at("verdict_planned_budget_ratio_count"), drafting_steps);
  EXPECT_LT(m.at("verdict_planned_budget_ratio_sum"), drafting_steps);  // some step trimmed
  for (const char* family : {"verdict_step_verify_seconds", "verdict_step_collective_seconds",
                             "verdict_step_verify_tokens", "verdict_step_draft_passes",
                             "verdict_step_drafting_requests"}) {
    EXPECT_EQ(m.at(absl::StrCat(family, "_count")), st.steps) << family;
  }
  for (const char* family :
       {"verdict_step_predicted_seconds", "verdict_step_prediction_relative_error"}) {
    EXPECT_EQ(m.at(absl::StrCat(family, "_count")), drafting_steps) << family;
  }
  EXPECT_EQ(m.at("verdict_step_draft_passes_sum"), st.draft_passes);
  EXPECT_EQ(SumOf(m, "verdict_draft_plan_steps_total"), st.steps);
  // The table has no draft split: every request drafts its cap.
  EXPECT_EQ(m.at("verdict_draft_plan_steps_total{reason=\"no-draft-split\"}"), st.steps);
  EXPECT_GT(m.at("verdict_step_verify_seconds_sum"), 0);
  // The cost table prices every step between 10 ms and 200 ms.
  EXPECT_GE(m.at("verdict_step_predicted_seconds_sum"), 0.010 * drafting_steps);
  EXPECT_LE(m.at("verdict_step_predicted_seconds_sum"), 0.200 * st.steps);
  // At least every row of every request-step, at most the full blocks.
  EXPECT_GE(m.at("verdict_step_verify_tokens_sum"), st.spec_steps + st.verified);
  // The models' graph replays as the engine counts them (none on the CPU).
  EXPECT_EQ(m.at("verdict_graph_replays_total{model=\"target\"}"), st.target_graph_replays);
  EXPECT_EQ(m.at("verdict_graph_replays_total{model=\"draft\"}"), st.draft_graph_replays);

  EXPECT_EQ(m.at("verdict_estimator_ready"), 1);
  for (int k = 0; k < kGamma; ++k) {
    const std::string p = absl::StrCat("{position=\"", k, "\"}");
    EXPECT_EQ(m.at("verdict_estimator_fitted" + p), 1) << k;
    EXPECT_GT(m.at("verdict_estimator_refits_total" + p), 0) << k;
    EXPECT_GE(m.at("verdict_estimator_observations_total" + p), 128) << k;
    // Scored by a fitted model, then verified: at most the drafts verified
    // at that position. The first position is scored by its fit from its
    // first 128 observations on; a deeper one may be fitted only after the
    // planner has begun to trim, so that no draft its fit scored was
    // verified, and its score is then NaN (no samples), not perfect.
    const double samples = m.at("verdict_estimator_brier_samples_total" + p);
    if (k == 0) EXPECT_GT(samples, 0);
    EXPECT_LE(samples, m.at("verdict_draft_position_verified_total" + p)) << k;
    const double brier = m.at("verdict_estimator_brier_score" + p);
    if (samples > 0) {
      EXPECT_GT(brier, 0) << k;
      EXPECT_LT(brier, 1) << k;
    } else {
      EXPECT_TRUE(std::isnan(brier)) << k;
    }
  }
}

TEST_F(EngineMetricsTest, RankFiguresOfAWorldOfOne) {
  const EngineStats& st = with_->stats;
  const std::map<std::string, double> m = ParseExposition(with_->metrics_text);
  EXPECT_EQ(m.at("verdict_tp_world_size"), 1);
  EXPECT_EQ(m.at("verdict_tp_ranks_up"), 1);
  EXPECT_EQ(m.at("verdict_rank_decode_steps_total{rank=\"0\"}"), st.steps);
  // The same measurements, summed in nanoseconds or in seconds.
  EXPECT_NEAR(m.at("verdict_rank_verify_seconds_total{rank=\"0\"}"),
              m.at("verdict_step_verify_seconds_sum"), 1e-6);
  // A world of one has no collectives; no plan check runs.
  EXPECT_EQ(m.at("verdict_rank_collective_seconds_total{rank=\"0\"}"), 0);
  EXPECT_EQ(m.at("verdict_plan_checks_total"), 0);
  EXPECT_EQ(m.at("verdict_plan_mismatches_total"), 0);
}

// Under overlap scheduling every step reaches the metrics, those whose
// tokens were dropped (planned before a request's end reached the CPU)
// included, and the figures still add up to the engine's counters, which
// count committed tokens only. Greedy output does not depend on the plans.
TEST_F(EngineMetricsTest, OverlapKeepsTheFiguresWhole) {
  const EngineStats& st = overlapped_->stats;
  const std::map<std::string, double> m = ParseExposition(overlapped_->metrics_text);
  ASSERT_EQ(overlapped_->outputs.size(), static_cast<size_t>(kRequests));
  const std::vector<GenerationRequest> requests = Workload();
  int64_t generated = 0;
  for (const GenerationRequest& r : requests) {
    const CollectedOutput& out = overlapped_->outputs[r.id];
    EXPECT_EQ(out.finish_reason, FinishReason::kLength) << r.id;
    EXPECT_EQ(out.token_ids.size(), static_cast<size_t>(r.params.max_tokens)) << r.id;
    if (r.params.temperature == 0.0f) {
      EXPECT_EQ(out.token_ids, without_->outputs[r.id].token_ids) << r.id;
    }
    generated += out.usage.completion_tokens;
  }
  EXPECT_EQ(st.generated, generated);
  EXPECT_EQ(m.at("verdict_generated_tokens_total"), st.generated);
  EXPECT_EQ(m.at("verdict_decode_steps_total"), st.steps);
  EXPECT_EQ(SumOf(m, "verdict_plan_steps_total"), st.steps);
  EXPECT_EQ(m.at("verdict_step_verify_seconds_count"), st.steps);
  EXPECT_EQ(m.at("verdict_rank_decode_steps_total{rank=\"0\"}"), st.steps);
  EXPECT_EQ(m.at("verdict_draft_tokens_proposed_total"), st.drafted);
  EXPECT_EQ(m.at("verdict_draft_tokens_verified_total"), st.verified);
  EXPECT_EQ(m.at("verdict_draft_tokens_accepted_total"), st.accepted);
  EXPECT_EQ(m.at("verdict_step_acceptance_length_count"), st.spec_steps);
  EXPECT_EQ(m.at("verdict_step_acceptance_length_sum"), st.accepted + st.spec_steps);
  // The estimator learned from the steps' own drafts and the planner
  // trimmed with the lagged confidences.
  EXPECT_EQ(m.at("verdict_estimator_ready"), 1);
  EXPECT_GT(m.at("verdict_plan_steps_total{reason=\"planned\"}"), 0);
  EXPECT_LT(m.at("verdict_planned_budget_ratio_sum"), st.steps);
  EXPECT_LT(st.verified, st.drafted);
}

}  // namespace
}  // namespace verdict
