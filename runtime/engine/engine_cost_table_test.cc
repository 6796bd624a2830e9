// --cost-table auto in the engine (scheduler/cost_table_catalog.h): the
// engine keys its cost tables by its device, its models' shapes, its TP
// degree and gamma, plans with the catalog's table of that key, with
// another GPU's table of the same models when it has none of its own, and
// with none when the catalog holds only other models' tables. The project's
// H200 and H100 tables are found for the models they were measured with.
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "comm/local_communicator.h"
#include "gtest/gtest.h"
#include "runtime/engine/engine.h"
#include "runtime/engine/engine_test_util.h"
#include "runtime/model/model_config.h"
#include "scheduler/cost_table.h"
#include "scheduler/cost_table_catalog.h"

namespace verdict {
namespace {

namespace fs = std::filesystem;

std::unique_ptr<Engine> MakeEngine(Communicator* comm, const std::string& dir) {
  EngineOptions options;
  options.cpu_threads = 2;
  options.kv_cache_tokens = 8192;
  options.cost_table_path = kAutoCostTable;
  options.cost_table_dirs = {dir};
  absl::StatusOr<std::unique_ptr<Engine>> engine = Engine::Create(
      options, ModelSource{"models/target"}, ModelSource{"models/draft"}, comm);
  EXPECT_TRUE(engine.ok()) << engine.status();
  return engine.ok() ? *std::move(engine) : nullptr;
}

// A draft pass costs ten verify rows (1 ms a row, 10 ms a pass, 0.1 ms a
// step; all times `scale`): a table with a draft split, measured on
// `origin`.
void WriteCostlyDraftTable(const std::string& path, const CostTableOrigin& origin,
                           double scale = 1.0) {
  const auto cell = [scale](int m) { return scale * (1e-4 + 1e-3 * m + 5 * 1e-2); };
  CostTable t = *CostTable::Create({1, 16}, {1, 16, 96},
                                   {cell(1), cell(16), cell(96), cell(1), cell(16), cell(96)});
  ASSERT_TRUE(t.SetDraftSplit({scale * 0.01, scale * 0.01}, 5).ok());
  t.set_measured_tp(1);
  t.set_origin(origin);
  std::ofstream(path) << t.ToJson();
}

// Steps of 8 greedy requests: what the planners decided, step by step.
std::vector<StepTiming> Serve(Engine& engine) {
  std::vector<StepTiming> steps;
  std::mutex mu;
  engine.set_step_observer([&](const StepTiming& t) {
    std::lock_guard<std::mutex> lock(mu);
    steps.push_back(t);
  });
  EngineHarness harness(&engine);
  std::vector<GenerationRequest> requests;
  for (int i = 0; i < 8; ++i) {
    requests.push_back(TextRequest(engine, "r" + std::to_string(i),
                                   kBundledPrompts[i % std::size(kBundledPrompts)], 96, 0.0f, i));
    requests.back().params.ignore_eos = true;
  }
  for (const CollectedOutput& out : harness.GenerateAll(requests)) {
    EXPECT_EQ(out.finish_reason, FinishReason::kLength) << out.error;
  }
  harness.Stop();
  return steps;
}

TEST(EngineCostTableTest, AutoPlansWithTheTableOfThisEnginesKeyOnly) {
  const fs::path dir = fs::path(::testing::TempDir()) / "auto_tables";
  fs::create_directories(dir);
  LocalCommunicator comm;

  // The key: this backend, the bundled models' shapes, TP 1, gamma 5.
  std::unique_ptr<Engine> keyed = MakeEngine(&comm, dir.string());
  ASSERT_NE(keyed, nullptr);
  ASSERT_TRUE(keyed->cost_table_key().has_value());
  const CostTableKey key = *keyed->cost_table_key();
  keyed.reset();
  const absl::StatusOr<ModelConfig> target = LoadModelConfig("models/target");
  const absl::StatusOr<ModelConfig> draft = LoadModelConfig("models/draft");
  ASSERT_TRUE(target.ok() && draft.ok());
  EXPECT_EQ(key.origin.device, "cpu");
  EXPECT_EQ(key.origin.target, ModelShapeName(*target));
  EXPECT_EQ(key.origin.draft, ModelShapeName(*draft));
  EXPECT_EQ(key.tp, 1);
  EXPECT_EQ(key.gamma, 5);

  // Only other models' tables (another draft, on this device and on
  // another): no table, so every request drafts its cap and nothing is
  // priced.
  WriteCostlyDraftTable((dir / "a.json").string(),
                        CostTableOrigin{key.origin.device, key.origin.target, "llama h8"});
  WriteCostlyDraftTable((dir / "b.json").string(),
                        CostTableOrigin{"NVIDIA H200", key.origin.target, "llama h8"});
  {
    std::unique_ptr<Engine> engine = MakeEngine(&comm, dir.string());
    ASSERT_NE(engine, nullptr);
    const std::vector<StepTiming> steps = Serve(*engine);
    ASSERT_FALSE(steps.empty());
    for (const StepTiming& t : steps) {
      EXPECT_EQ(t.draft_reason, DraftReason::kNoDraftSplit) << "step " << t.step;
      EXPECT_TRUE(std::isnan(t.predicted_seconds)) << "step " << t.step;
    }
  }

  // Planned steps, each priced with the table picked; a step's price
  // depends on its shape (requests, verify rows, draft passes, drafting
  // requests, catch-up tokens), so steps of one shape in two runs whose
  // tables differ by a constant factor are priced a factor apart.
  using Shape = std::tuple<int, int64_t, int, int, int64_t>;
  const auto prices = [&]() {
    std::map<Shape, double> by_shape;
    std::unique_ptr<Engine> engine = MakeEngine(&comm, dir.string());
    EXPECT_NE(engine, nullptr);
    if (engine == nullptr) return by_shape;
    const std::vector<StepTiming> steps = Serve(*engine);
    EXPECT_FALSE(steps.empty());
    for (const StepTiming& t : steps) {
      EXPECT_GT(t.predicted_seconds, 0) << "step " << t.step;
      EXPECT_NE(t.draft_reason, DraftReason::kNoDraftSplit) << "step " << t.step;
      by_shape[Shape{t.batch_size, t.verify_tokens, t.draft_passes, t.drafting_requests,
                     t.catch_up_tokens}] = t.predicted_seconds;
    }
    return by_shape;
  };

  // These models measured on another GPU (three times slower): the
  // planners plan with it.
  WriteCostlyDraftTable((dir / "c.json").string(),
                        CostTableOrigin{"NVIDIA H200", key.origin.target, key.origin.draft}, 3.0);
  const std::map<Shape, double> other_gpu = prices();

  // This key's table beside it, though later in the directory: the
  // planners price every step with it, and the draft planner has a split to
  // plan with (on the estimator's prior too, where it plans on the prior
  // rates, one draft a request at least).
  WriteCostlyDraftTable((dir / "d.json").string(), key.origin);
  const std::map<Shape, double> own = prices();
  int shared = 0;
  for (const auto& [shape, seconds] : own) {
    const auto it = other_gpu.find(shape);
    if (it == other_gpu.end()) continue;
    ++shared;
    EXPECT_NEAR(it->second / seconds, 3.0, 1e-9);
  }
  EXPECT_GT(shared, 0);
}

// The H200 and H100 tables the project ships are found for the public
// models they were measured with (builtin:llama-3.1-8b with
// builtin:llama-3.2-1b, TP 1), keyed as the engine keys them, each on its
// own GPU.
TEST(EngineCostTableTest, TheBundledTablesAreFoundForTheirModelsAndGpus) {
  const absl::StatusOr<ModelConfig> target = BuiltinModelConfig("llama-3.1-8b");
  const absl::StatusOr<ModelConfig> draft = BuiltinModelConfig("llama-3.2-1b");
  ASSERT_TRUE(target.ok() && draft.ok());
  const std::vector<std::string> dirs = {"deploy/cost_tables"};
  for (const auto& [device, file] :
       {std::pair<std::string, std::string>{"NVIDIA H200",
                                            "h200-llama-3.1-8b-draft-llama-3.2-1b-tp1-split.json"},
        {"NVIDIA H100 80GB HBM3", "h100-llama-3.1-8b-draft-llama-3.2-1b-tp1-split.json"}}) {
    CostTableKey key;
    key.origin = {device, ModelShapeName(*target), ModelShapeName(*draft)};
    const CostTableSearch search = FindCostTable(dirs, key);
    ASSERT_TRUE(search.table.has_value()) << DescribeCostTableKey(key);
    EXPECT_NE(search.path->find(file), std::string::npos) << *search.path;
    EXPECT_TRUE(search.table->has_draft_split()) << file;
    EXPECT_TRUE(search.refused.empty());
    key.tp = 2;
    EXPECT_FALSE(FindCostTable(dirs, key).table.has_value()) << device;
  }
  // The bundled pair (models/target, models/draft) has its H100 table.
  const absl::StatusOr<ModelConfig> bundled_target = LoadModelConfig("models/target");
  const absl::StatusOr<ModelConfig> bundled_draft = LoadModelConfig("models/draft");
  ASSERT_TRUE(bundled_target.ok() && bundled_draft.ok());
  CostTableKey bundled;
  bundled.origin = {"NVIDIA H100 80GB HBM3", ModelShapeName(*bundled_target),
                    ModelShapeName(*bundled_draft)};
  const CostTableSearch bundled_search = FindCostTable(dirs, bundled);
  ASSERT_TRUE(bundled_search.table.has_value()) << DescribeCostTableKey(bundled);
  EXPECT_NE(bundled_search.path->find("h100-bundled-pair-tp1-split.json"), std::string::npos);
  EXPECT_TRUE(bundled_search.table->has_draft_split());
  EXPECT_FALSE(bundled_search.other_device);
  // A GPU without a table of its own plans with another GPU's, said to be.
  CostTableKey other;
  other.origin = {"NVIDIA A100-SXM4-80GB", ModelShapeName(*target), ModelShapeName(*draft)};
  const CostTableSearch fallback = FindCostTable(dirs, other);
  ASSERT_TRUE(fallback.table.has_value());
  EXPECT_TRUE(fallback.other_device);
  EXPECT_NE(fallback.table->origin()->device, other.origin.device);
}

}  // namespace
}  // namespace verdict
