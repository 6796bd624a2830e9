// `verdict profile` on the CPU backend with the bundled pair: the grid it is
// asked for, the pins reaching the steps, the table it writes, and its
// refusals.
#include "runtime/cli/profile_command.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "comm/local_communicator.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "runtime/engine/engine.h"
#include "scheduler/cost_table.h"

namespace verdict {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::unique_ptr<Engine> MakeEngine(Communicator* comm, EngineOptions options,
                                   bool dummy_weights = false, int64_t kv_cache_tokens = 8192) {
  options.cpu_threads = 2;
  options.kv_cache_tokens = kv_cache_tokens;
  absl::StatusOr<std::unique_ptr<Engine>> engine =
      Engine::Create(options, ModelSource{"models/target", dummy_weights, 1},
                     ModelSource{"models/draft", dummy_weights, 2}, comm);
  EXPECT_TRUE(engine.ok()) << engine.status();
  return engine.ok() ? *std::move(engine) : nullptr;
}

EngineOptions CompactOptions() {
  EngineOptions options;
  options.verify_mode = VerifyMode::kCompact;
  return options;
}

TEST(ProfileTest, MeasuresTheGridItIsAskedForWithThePinsInPlace) {
  LocalCommunicator comm;
  std::unique_ptr<Engine> engine = MakeEngine(&comm, CompactOptions());
  ASSERT_NE(engine, nullptr);
  ProfileOptions options;
  options.batch_sizes = {2, 1};
  options.budget_fractions = {1.0, 0.0};
  options.warmup_steps = 1;
  options.repeats = 2;
  options.output_path = ::testing::TempDir() + "/profile_cost_table.json";
  options.progress = false;
  absl::StatusOr<ProfileResult> result = RunProfile(*engine, options);
  ASSERT_TRUE(result.ok()) << result.status();

  // gamma 5: M = B at fraction 0, B + 5B at fraction 1, then the one-pass
  // cell at M = 2B.
  ASSERT_EQ(result->cells.size(), 6u);
  struct Expected {
    int batch;
    int64_t tokens;
    int depth;
  };
  const std::vector<Expected> expected = {{1, 1, 0}, {1, 6, 0}, {1, 2, 1},
                                          {2, 2, 0}, {2, 12, 0}, {2, 4, 1}};
  for (size_t i = 0; i < expected.size(); ++i) {
    const ProfileCell& cell = result->cells[i];
    EXPECT_EQ(cell.batch_size, expected[i].batch) << i;
    EXPECT_EQ(cell.verify_tokens, expected[i].tokens) << i;
    EXPECT_EQ(cell.draft_depth, expected[i].depth) << i;
    EXPECT_EQ(cell.draft_passes, expected[i].depth > 0 ? 1 : 5) << i;
    ASSERT_EQ(cell.seconds.size(), 2u) << i;
    for (const double s : cell.seconds) EXPECT_GT(s, 0.0) << i;
    EXPECT_DOUBLE_EQ(cell.median_seconds, 0.5 * (cell.seconds[0] + cell.seconds[1])) << i;
  }

  // Every pinned step at a cell's full batch ran the cell's rows: the pin
  // reached the planner and the compact verify.
  int pinned_steps = 0;
  for (const StepTiming& t : result->steps) {
    if (t.plan_reason != PlanReason::kPinnedBudget) continue;
    ASSERT_TRUE(t.pinned_budget_fraction.has_value());
    const bool one_pass = t.draft_reason == DraftReason::kPinnedDepth;
    const int depth = one_pass ? 1 : 5;
    if (t.draft_passes > 0) {
      EXPECT_EQ(t.draft_passes, depth) << "step " << t.step;
    }
    const int64_t drafts =
        *t.pinned_budget_fraction == 1.0 ? int64_t{t.draft_passes} * t.batch_size : 0;
    EXPECT_EQ(t.budget, drafts) << "step " << t.step;
    EXPECT_EQ(t.verify_tokens, t.batch_size + drafts) << "step " << t.step;
    ++pinned_steps;
  }
  EXPECT_GE(pinned_steps, 6 * (1 + 2));

  // A cell's time is the whole step's: each measured value is the draft
  // passes plus the verify of a pinned step at the cell's batch and rows.
  for (const ProfileCell& cell : result->cells) {
    for (const double seconds : cell.seconds) {
      const bool found =
          std::any_of(result->steps.begin(), result->steps.end(), [&](const StepTiming& t) {
            return t.plan_reason == PlanReason::kPinnedBudget && t.batch_size == cell.batch_size &&
                   t.verify_tokens == cell.verify_tokens && t.draft_seconds > 0.0 &&
                   (t.draft_reason == DraftReason::kPinnedDepth) == (cell.draft_depth > 0) &&
                   seconds == t.draft_seconds + t.verify_seconds;
          });
      EXPECT_TRUE(found) << "B=" << cell.batch_size << " M=" << cell.verify_tokens;
    }
  }

  // The file loads as a cost table with that grid and the medians on it.
  absl::StatusOr<CostTable> table = CostTable::Load(options.output_path);
  ASSERT_TRUE(table.ok()) << table.status();
  EXPECT_THAT(table->batch_sizes(), ElementsAre(1, 2));
  EXPECT_THAT(table->verify_tokens(), ElementsAre(1, 2, 6, 12));
  EXPECT_EQ(table->measured_tp(), 1);
  // Keyed as the engine keys its tables, so --cost-table auto finds it.
  ASSERT_TRUE(table->origin().has_value());
  ASSERT_TRUE(engine->cost_table_key().has_value());
  EXPECT_EQ(*table->origin(), engine->cost_table_key()->origin);
  EXPECT_EQ(table->origin()->device, "cpu");
  for (size_t b = 0; b < 2; ++b) {
    for (size_t m = 0; m < 4; ++m) EXPECT_GT(table->seconds(b, m), 0.0) << b << "," << m;
  }
  for (const ProfileCell& cell : result->cells) {
    if (cell.draft_depth > 0) continue;  // not a cell of the grid
    EXPECT_DOUBLE_EQ(table->Predict(cell.batch_size, static_cast<double>(cell.verify_tokens)),
                     cell.median_seconds);
  }
  EXPECT_EQ(table->ToJson(), result->table->ToJson());

  // The draft split: every measured step ran gamma passes, and each batch
  // size's pass time is the median over its cells' steps of draft seconds
  // over passes.
  ASSERT_TRUE(table->has_draft_split());
  EXPECT_EQ(table->draft_passes(), 5);
  for (size_t b = 0; b < 2; ++b) {
    std::vector<double> passes;
    for (const ProfileCell& cell : result->cells) {
      if (cell.batch_size != table->batch_sizes()[b] || cell.draft_depth > 0) continue;
      passes.insert(passes.end(), cell.draft_pass_seconds.begin(), cell.draft_pass_seconds.end());
    }
    ASSERT_EQ(passes.size(), 4u) << b;
    std::sort(passes.begin(), passes.end());
    EXPECT_DOUBLE_EQ(table->draft_pass_seconds()[b], 0.5 * (passes[1] + passes[2])) << b;
    EXPECT_GT(table->draft_pass_seconds()[b], 0.0);
  }
  // The one-pass draft phase: the median of the one-pass cell's steps, in
  // the table when no batch size's exceeds the split's five passes (on a
  // loaded machine a noisy one-pass cell can, and the phase is left out).
  std::vector<double> one_pass(2);
  bool within_the_split = true;
  for (size_t b = 0; b < 2; ++b) {
    const ProfileCell& cell = result->cells[3 * b + 2];
    ASSERT_EQ(cell.draft_depth, 1);
    ASSERT_EQ(cell.draft_pass_seconds.size(), 2u);
    one_pass[b] = 0.5 * (cell.draft_pass_seconds[0] + cell.draft_pass_seconds[1]);
    EXPECT_GT(one_pass[b], 0.0) << b;
    if (one_pass[b] > table->draft_passes() * table->draft_pass_seconds()[b]) {
      within_the_split = false;
    }
  }
  ASSERT_EQ(table->has_one_pass_draft(), within_the_split);
  if (within_the_split) {
    for (size_t b = 0; b < 2; ++b) {
      EXPECT_DOUBLE_EQ(table->one_pass_draft_seconds()[b], one_pass[b]) << b;
    }
  }
}

TEST(ProfileTest, OnePassCellsCanBeLeftOut) {
  LocalCommunicator comm;
  std::unique_ptr<Engine> engine = MakeEngine(&comm, CompactOptions());
  ASSERT_NE(engine, nullptr);
  ProfileOptions options;
  options.batch_sizes = {1};
  options.budget_fractions = {0.0, 1.0};
  options.warmup_steps = 0;
  options.repeats = 1;
  options.progress = false;
  options.one_pass_cells = false;
  absl::StatusOr<ProfileResult> result = RunProfile(*engine, options);
  ASSERT_TRUE(result.ok()) << result.status();
  ASSERT_EQ(result->cells.size(), 2u);
  for (const ProfileCell& cell : result->cells) EXPECT_EQ(cell.draft_depth, 0);
  ASSERT_TRUE(result->table.has_value());
  EXPECT_TRUE(result->table->has_draft_split());
  EXPECT_FALSE(result->table->has_one_pass_draft());
  for (const StepTiming& t : result->steps) EXPECT_NE(t.draft_reason, DraftReason::kPinnedDepth);
}

TEST(ProfileTest, RefusesSimulatedAcceptanceOtherThanOne) {
  EngineOptions options = CompactOptions();
  options.simulate_acceptance = 0.5;
  EXPECT_THAT(std::string(CheckProfileEngineOptions(options).message()),
              HasSubstr("--simulate-acceptance 0.5"));
  LocalCommunicator comm;
  std::unique_ptr<Engine> engine = MakeEngine(&comm, options, /*dummy_weights=*/true);
  ASSERT_NE(engine, nullptr);
  ProfileOptions profile;
  profile.batch_sizes = {1};
  profile.budget_fractions = {0.0};
  profile.progress = false;
  absl::StatusOr<ProfileResult> result = RunProfile(*engine, profile);
  EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(result.status().message()), HasSubstr("simulate-acceptance"));
  // The engine refuses the pin itself too; unpinning stays possible.
  const absl::Status pin = engine->PinVerifyBudget(0.5);
  EXPECT_EQ(pin.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(pin.message()), HasSubstr("simulate-acceptance"));
  EXPECT_TRUE(engine->PinVerifyBudget(std::nullopt).ok());

  // Rate 1.0 (every pinned draft accepted) and off are fine.
  options.simulate_acceptance = 1.0;
  EXPECT_TRUE(CheckProfileEngineOptions(options).ok());
  options.simulate_acceptance = -1;
  EXPECT_TRUE(CheckProfileEngineOptions(options).ok());
  std::unique_ptr<Engine> full = MakeEngine(
      &comm,
      [] {
        EngineOptions o = CompactOptions();
        o.simulate_acceptance = 1.0;
        return o;
      }(),
      /*dummy_weights=*/true);
  ASSERT_NE(full, nullptr);
  EXPECT_TRUE(full->PinVerifyBudget(0.5).ok());
}

TEST(ProfileTest, RefusesEnginesThatCannotRunThePinnedRows) {
  EngineOptions options;
  options.verify_mode = VerifyMode::kCapAccept;
  EXPECT_THAT(std::string(CheckProfileEngineOptions(options).message()), HasSubstr("compact"));
  options = CompactOptions();
  options.speculation = false;
  EXPECT_THAT(std::string(CheckProfileEngineOptions(options).message()),
              HasSubstr("speculation is off"));
  // Every measured step must draft in full.
  options = CompactOptions();
  options.cost_table_path = "table.json";
  EXPECT_THAT(std::string(CheckProfileEngineOptions(options).message()),
              HasSubstr("--cost-table"));
  options = CompactOptions();
  options.speculation_max_batch = 4;
  EXPECT_THAT(std::string(CheckProfileEngineOptions(options).message()),
              HasSubstr("--speculation-max-batch"));
  // Static mode verifies everything: the engine refuses a pin.
  LocalCommunicator comm;
  std::unique_ptr<Engine> engine = MakeEngine(&comm, EngineOptions());
  ASSERT_NE(engine, nullptr);
  EXPECT_THAT(std::string(engine->PinVerifyBudget(0.5).message()), HasSubstr("static"));
}

TEST(ProfileTest, RefusesAGridTheKvCacheCannotHold) {
  // 512 positions hold a few profile requests, not 64 at once.
  LocalCommunicator comm;
  std::unique_ptr<Engine> engine = MakeEngine(&comm, CompactOptions(), false, 512);
  ASSERT_NE(engine, nullptr);
  ProfileOptions options;
  options.batch_sizes = {1, 64};
  options.budget_fractions = {0.0};
  options.repeats = 1;
  options.progress = false;
  options.output_path = ::testing::TempDir() + "/never_written.json";
  absl::StatusOr<ProfileResult> result = RunProfile(*engine, options);
  ASSERT_FALSE(result.ok());
  EXPECT_THAT(std::string(result.status().message()), HasSubstr("batch size 64 needs"));
  EXPECT_THAT(std::string(result.status().message()), HasSubstr("--kv-cache-tokens"));
  EXPECT_FALSE(std::ifstream(options.output_path).good());
}

TEST(CostTableFromCellsTest, EachBatchKeepsItsOwnCurveOnTheSharedGrid) {
  std::vector<ProfileCell> cells(5);
  cells[0] = {.batch_size = 1, .verify_tokens = 1, .median_seconds = 0.010};
  cells[1] = {.batch_size = 1, .verify_tokens = 6, .median_seconds = 0.020};
  cells[2] = {.batch_size = 4, .verify_tokens = 4, .median_seconds = 0.030};
  cells[3] = {.batch_size = 4, .verify_tokens = 14, .median_seconds = 0.040};
  cells[4] = {.batch_size = 4, .verify_tokens = 24, .median_seconds = 0.045};
  absl::StatusOr<CostTable> table = CostTableFromCells(cells);
  ASSERT_TRUE(table.ok()) << table.status();
  EXPECT_THAT(table->batch_sizes(), ElementsAre(1, 4));
  EXPECT_THAT(table->verify_tokens(), ElementsAre(1, 4, 6, 14, 24));
  // B = 1: measured at 1 and 6, linear between, rising past its block.
  EXPECT_DOUBLE_EQ(table->seconds(0, 0), 0.010);
  EXPECT_DOUBLE_EQ(table->seconds(0, 1), 0.016);
  EXPECT_DOUBLE_EQ(table->seconds(0, 2), 0.020);
  EXPECT_DOUBLE_EQ(table->seconds(0, 3), 0.036);
  // B = 4: below M = B the time at M = B (cost_table.h).
  EXPECT_DOUBLE_EQ(table->seconds(1, 0), 0.030);
  EXPECT_DOUBLE_EQ(table->seconds(1, 2), 0.032);
  EXPECT_DOUBLE_EQ(table->seconds(1, 4), 0.045);
  // A falling last segment does not extrapolate downwards.
  cells[4].median_seconds = 0.035;
  cells.push_back({.batch_size = 1, .verify_tokens = 30, .median_seconds = 0.05});
  table = CostTableFromCells(cells);
  ASSERT_TRUE(table.ok()) << table.status();
  EXPECT_DOUBLE_EQ(table->Predict(4, 30), 0.035);
  EXPECT_FALSE(table->has_draft_split());  // the cells measured no draft pass
}

TEST(CostTableFromCellsTest, DraftPassesOfEveryCellGiveTheSplitPerBatchSize) {
  std::vector<ProfileCell> cells(3);
  cells[0] = {.batch_size = 1, .verify_tokens = 1, .median_seconds = 0.010, .draft_passes = 5,
              .draft_pass_seconds = {0.001, 0.003, 0.002}};
  cells[1] = {.batch_size = 1, .verify_tokens = 6, .median_seconds = 0.020, .draft_passes = 5,
              .draft_pass_seconds = {0.0015}};
  cells[2] = {.batch_size = 4, .verify_tokens = 4, .median_seconds = 0.030, .draft_passes = 5,
              .draft_pass_seconds = {0.004}};
  absl::StatusOr<CostTable> table = CostTableFromCells(cells);
  ASSERT_TRUE(table.ok()) << table.status();
  ASSERT_TRUE(table->has_draft_split());
  EXPECT_EQ(table->draft_passes(), 5);
  EXPECT_THAT(table->draft_pass_seconds(), ElementsAre(0.00175, 0.004));
  // A plain decode step at B = 1 costs the whole step less its five passes.
  EXPECT_DOUBLE_EQ(table->PredictStep(1, 1, 0), 0.010 - 5 * 0.00175);

  // Cells measured at different times on a loaded machine: the second
  // cell's steps are faster than the passes the first cell's steps ran.
  // The price, the median 0.0031 s of all six steps, would take 0.0155 s
  // of that cell's 0.012 s; it is held to the cell's own draft share (a
  // median 0.1 of a step per pass, at its median step), so its verify stays.
  std::vector<ProfileCell> noisy(2);
  noisy[0] = {.batch_size = 2, .verify_tokens = 2, .seconds = {0.030, 0.031, 0.032},
              .median_seconds = 0.031, .draft_passes = 5,
              .draft_pass_seconds = {0.005, 0.005, 0.005}};
  noisy[1] = {.batch_size = 2, .verify_tokens = 7, .seconds = {0.010, 0.012, 0.014},
              .median_seconds = 0.012, .draft_passes = 5,
              .draft_pass_seconds = {0.0010, 0.0012, 0.0007}};
  table = CostTableFromCells(noisy);
  ASSERT_TRUE(table.ok()) << table.status();
  ASSERT_TRUE(table->has_draft_split());
  EXPECT_NEAR(table->draft_pass_seconds()[0], 0.1 * 0.012, 1e-15);
  EXPECT_GT(table->PredictStep(2, 7, 0), 0.0);
  // Measured calmly, the bound is above the median and leaves it alone.
  noisy[1].seconds = {0.040, 0.042, 0.044};
  noisy[1].median_seconds = 0.042;
  noisy[1].draft_pass_seconds = {0.005, 0.005, 0.005};
  table = CostTableFromCells(noisy);
  ASSERT_TRUE(table.ok()) << table.status();
  EXPECT_NEAR(table->draft_pass_seconds()[0], 0.005, 1e-15);

  // Passes that leave a cell's verify at or below zero are refused, named.
  cells[2].draft_pass_seconds = {0.007};
  table = CostTableFromCells(cells);
  EXPECT_EQ(table.status().code(), absl::StatusCode::kInternal);
  EXPECT_THAT(std::string(table.status().message()), HasSubstr("draft split"));
  // One-pass cells for every batch size give the one-pass phase (their
  // medians) and stay off the grid.
  std::vector<ProfileCell> with_one_pass = cells;
  with_one_pass.push_back({.batch_size = 1, .verify_tokens = 2, .median_seconds = 0.5,
                           .draft_passes = 1, .draft_pass_seconds = {0.003, 0.002},
                           .draft_depth = 1});
  with_one_pass.push_back({.batch_size = 4, .verify_tokens = 8, .median_seconds = 0.5,
                           .draft_passes = 1, .draft_pass_seconds = {0.009}, .draft_depth = 1});
  with_one_pass[2].draft_pass_seconds = {0.004};
  table = CostTableFromCells(with_one_pass);
  ASSERT_TRUE(table.ok()) << table.status();
  EXPECT_THAT(table->verify_tokens(), ElementsAre(1, 4, 6));
  ASSERT_TRUE(table->has_one_pass_draft());
  EXPECT_THAT(table->one_pass_draft_seconds(), ElementsAre(0.0025, 0.009));
  // Missing at one batch size: no one-pass phase, the rest as before.
  with_one_pass.pop_back();
  table = CostTableFromCells(with_one_pass);
  ASSERT_TRUE(table.ok()) << table.status();
  EXPECT_TRUE(table->has_draft_split());
  EXPECT_FALSE(table->has_one_pass_draft());
  // One that costs more than the five passes is left out, not fatal.
  with_one_pass.push_back({.batch_size = 4, .verify_tokens = 8, .median_seconds = 0.5,
                           .draft_passes = 1, .draft_pass_seconds = {0.05}, .draft_depth = 1});
  table = CostTableFromCells(with_one_pass);
  ASSERT_TRUE(table.ok()) << table.status();
  EXPECT_FALSE(table->has_one_pass_draft());

  // A cell without passes (or at another count) gives no split.
  cells[2].draft_pass_seconds.clear();
  table = CostTableFromCells(cells);
  ASSERT_TRUE(table.ok()) << table.status();
  EXPECT_FALSE(table->has_draft_split());
}

}  // namespace
}  // namespace verdict
