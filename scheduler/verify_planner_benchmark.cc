// Planning time per step: VerifyPlanner::Plan in compact mode for 1 to 512
// requests at gamma 5 and 7, on one core, with the cost table read at the
// planned rows or at the rows the CUDA backend launches (launched=1). Target: under 20 microseconds at
// 256 requests x gamma 7 (public engines report 160 to 200 microseconds for
// their fused scheduling step). Also the estimator's per-step Score and one
// refit, and DraftPlanner::Plan up to 512 requests (with and without
// catch-up tokens).
//
//   bazel run -c opt //scheduler:verify_planner_benchmark -- \
//       --benchmark_out=$PWD/planner.json --benchmark_out_format=json
//
// The console table is for people; the JSON file carries the same numbers
// for scripts (docs/PERF.md).
#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

#include "benchmark/benchmark.h"
#include "runtime/model/graph_shapes.h"
#include "scheduler/acceptance_estimator.h"
#include "scheduler/cost_table.h"
#include "scheduler/draft_planner.h"
#include "scheduler/verify_planner.h"

namespace verdict {
namespace {

double Uniform(std::mt19937_64& rng) { return static_cast<double>(rng() >> 11) * 0x1.0p-53; }

// A table shaped like a measured one: a fixed launch cost, a per-token cost
// that grows with the batch, and a step every 64 tokens (graph tiers), so the
// objective has several local peaks.
CostTable SyntheticTable() {
  std::vector<double> bs;
  for (double b = 1; b <= 512; b *= 2) bs.push_back(b);
  std::vector<double> ms;
  for (double m = 1; m <= 8192; m *= 2) ms.push_back(m);
  for (double m = 96; m <= 4096; m += 64) ms.push_back(m);
  std::sort(ms.begin(), ms.end());
  ms.erase(std::unique(ms.begin(), ms.end()), ms.end());
  std::vector<double> seconds;
  for (double b : bs) {
    for (double m : ms) {
      const double tiers = static_cast<double>(static_cast<int64_t>(m + 63) / 64);
      seconds.push_back(0.008 + 2e-6 * b + 6e-6 * m + 4e-4 * tiers);
    }
  }
  return *CostTable::Create(bs, ms, seconds);
}

// Confidences as an estimator produces them: a per-request acceptance level
// with per-draft noise, so survivals spread over several octaves.
std::vector<double> SyntheticConfidences(int batch, int gamma, std::mt19937_64& rng) {
  std::vector<double> c(batch * gamma);
  for (int i = 0; i < batch; ++i) {
    const double level = 0.35 + 0.6 * Uniform(rng);
    for (int j = 0; j < gamma; ++j)
      c[i * gamma + j] = std::min(1.0, level * (0.85 + 0.3 * Uniform(rng)));
  }
  return c;
}

void BM_Plan(benchmark::State& state) {
  const int batch = static_cast<int>(state.range(0));
  const int gamma = static_cast<int>(state.range(1));
  PlannerOptions options;
  options.mode = VerifyMode::kCompact;
  options.gamma = gamma;
  if (state.range(2) != 0) {
    // Priced at the CUDA backend's launched rows (its graph tiers).
    options.launch_tokens = LaunchedTokens;
  }
  VerifyPlanner planner = *VerifyPlanner::Create(options, SyntheticTable());
  // Several inputs in rotation, so that no branch history repeats every step.
  constexpr int kInputs = 16;
  std::mt19937_64 rng(42);
  std::vector<std::vector<double>> confidences;
  for (int t = 0; t < kInputs; ++t) confidences.push_back(SyntheticConfidences(batch, gamma, rng));
  const std::vector<int32_t> caps(batch, gamma + 1);
  VerifyPlan plan;
  int64_t steps = 0;
  int64_t planned = 0;
  int64_t budget = 0;
  for (auto _ : state) {
    const PlannerInput input{confidences[steps % kInputs], caps, {}, true};
    if (!planner.Plan(input, &plan).ok()) state.SkipWithError("Plan failed");
    benchmark::DoNotOptimize(plan.verify_lens.data());
    planned += plan.reason == PlanReason::kPlanned;
    budget += plan.budget;
    ++steps;
  }
  state.counters["planned_frac"] = static_cast<double>(planned) / static_cast<double>(steps);
  state.counters["budget_frac"] = static_cast<double>(budget) /
                                  (static_cast<double>(steps) * static_cast<double>(batch * gamma));
  state.counters["requests_per_s"] =
      benchmark::Counter(static_cast<double>(batch), benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_Plan)
    ->ArgNames({"requests", "gamma", "launched"})
    ->ArgsProduct({{1, 2, 4, 8, 16, 32, 64, 128, 256, 512}, {5, 7}, {0, 1}})
    ->Unit(benchmark::kMicrosecond);

// The draft planner's step at the bundled pair's shape of table: a draft
// pass a seventh of a step, so that most plans draft few or none of the
// requests; with every request carrying catch-up tokens (it sat out earlier
// steps), as a batch that has decoded plainly for a while does.
void BM_DraftPlan(benchmark::State& state) {
  const int batch = static_cast<int>(state.range(0));
  const int gamma = 5;
  CostTable table = SyntheticTable();
  std::vector<double> pass_seconds;
  for (double b = 1; b <= 512; b *= 2) pass_seconds.push_back(0.0011 + 1e-6 * b);
  if (!table.SetDraftSplit(pass_seconds, gamma).ok()) {
    state.SkipWithError("SetDraftSplit failed");
    return;
  }
  DraftPlanner planner = *DraftPlanner::Create(DraftPlannerOptions{gamma}, table);
  constexpr int kInputs = 16;
  std::mt19937_64 rng(43);
  std::vector<std::vector<double>> confidences;
  for (int t = 0; t < kInputs; ++t) confidences.push_back(SyntheticConfidences(batch, gamma, rng));
  const std::vector<int32_t> caps(batch, gamma + 1);
  const std::vector<int32_t> catch_up(batch, state.range(1));
  DraftPlan plan;
  int64_t steps = 0;
  int64_t drafting = 0;
  for (auto _ : state) {
    DraftPlannerInput input;
    input.confidences = confidences[steps % kInputs];
    input.max_verify_lens = caps;
    input.catch_up_tokens = catch_up;
    if (!planner.Plan(input, &plan).ok()) state.SkipWithError("Plan failed");
    benchmark::DoNotOptimize(plan.depths.data());
    drafting += plan.drafting_requests;
    ++steps;
  }
  state.counters["drafting_frac"] =
      static_cast<double>(drafting) / (static_cast<double>(steps) * batch);
}
BENCHMARK(BM_DraftPlan)
    ->ArgNames({"requests", "catch_up"})
    ->ArgsProduct({{1, 16, 64, 128, 256, 512}, {0, 8}})
    ->Unit(benchmark::kMicrosecond);

void BM_EstimatorScore(benchmark::State& state) {
  const int batch = static_cast<int>(state.range(0));
  const int gamma = static_cast<int>(state.range(1));
  AcceptanceEstimatorOptions options;
  options.gamma = gamma;
  options.refit_interval_steps = 8;
  options.min_observations = 64;
  OnlineAcceptanceEstimator estimator = *OnlineAcceptanceEstimator::Create(options);
  // Fit every position from outcomes of a positive-slope model, so that Score
  // runs the logistic, not the prior.
  std::mt19937_64 rng(7);
  std::vector<float> signals(64 * gamma);
  std::vector<VerifyObservation> observations(64);
  for (int step = 0; step < 400 && !estimator.ready(); ++step) {
    for (float& q : signals) q = static_cast<float>(0.05 + 0.94 * Uniform(rng));
    for (int i = 0; i < 64; ++i) {
      int accepted = 0;
      while (accepted < gamma && Uniform(rng) < 0.2 + 0.75 * signals[i * gamma + accepted])
        ++accepted;
      observations[i] = {step * 64 + i, absl::MakeConstSpan(signals).subspan(i * gamma, gamma),
                         gamma, accepted};
    }
    (void)estimator.Observe(observations);
  }
  if (!estimator.ready()) {
    state.SkipWithError("estimator did not fit");
    return;
  }
  std::vector<float> step_signals(batch * gamma);
  for (float& q : step_signals) q = static_cast<float>(0.05 + 0.94 * Uniform(rng));
  std::vector<double> confidences(batch * gamma);
  for (auto _ : state) {
    if (!estimator.Score(step_signals, absl::MakeSpan(confidences)).ok())
      state.SkipWithError("Score failed");
    benchmark::DoNotOptimize(confidences.data());
  }
}
BENCHMARK(BM_EstimatorScore)
    ->ArgNames({"requests", "gamma"})
    ->ArgsProduct({{1, 16, 256, 512}, {5, 7}})
    ->Unit(benchmark::kMicrosecond);

// One refit of one position over a full window (4096 observations, the
// default), plus folding one step of 64 observations: the work a step pays
// when its turn to refit a position comes.
void BM_EstimatorRefit(benchmark::State& state) {
  AcceptanceEstimatorOptions options;
  options.gamma = 1;
  options.refit_interval_steps = 1;
  OnlineAcceptanceEstimator estimator = *OnlineAcceptanceEstimator::Create(options);
  std::mt19937_64 rng(11);
  std::vector<float> signals(64);
  std::vector<VerifyObservation> observations(64);
  int64_t next_id = 0;
  auto fill = [&] {
    for (float& q : signals) q = static_cast<float>(0.05 + 0.94 * Uniform(rng));
    for (int i = 0; i < 64; ++i) {
      const int accepted = Uniform(rng) < 0.2 + 0.75 * signals[i] ? 1 : 0;
      observations[i] = {next_id++, absl::MakeConstSpan(signals).subspan(i, 1), 1, accepted};
    }
  };
  while (estimator.position(0).observations < options.window) {
    fill();
    (void)estimator.Observe(observations);
  }
  for (auto _ : state) {
    state.PauseTiming();
    fill();
    state.ResumeTiming();
    if (!estimator.Observe(observations).ok()) state.SkipWithError("Observe failed");
  }
  state.counters["refits"] = static_cast<double>(estimator.position(0).refits);
}
BENCHMARK(BM_EstimatorRefit)->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace verdict
