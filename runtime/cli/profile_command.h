// `verdict profile`: measures the cost table (scheduler/cost_table.h) on the
// running engine. For each batch size B of a grid and each budget fraction f
// it pins the planner's verify budget to round(f * B * gamma) drafts on every
// rank, runs B requests, discards warm-up steps and takes the median step
// seconds (the draft passes plus the verify) of the next steps at
// M = B + round(f * B * gamma) verify tokens
// (seeds/002_d567d7ab3f14fa00.txt, "Cost table": a pinned profiler budget,
// scheduled without a table). The engine runs compact mode, the one whose
// step runs exactly the planned rows. Under mpirun every rank runs the
// engine loop and rank 0 drives.
//
// Each batch size also gets a one-pass cell: the draft depth pinned to one
// and every draft verified (M = 2B). Its draft phase is the table's
// one_pass_draft_seconds, so that the draft planner prices a step of P
// passes on the line through one pass and gamma passes rather than as P
// mean passes: the first pass carries the draft's catch-up and the draft
// phase's own costs.
#ifndef VERDICT_RUNTIME_CLI_PROFILE_COMMAND_H_
#define VERDICT_RUNTIME_CLI_PROFILE_COMMAND_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "runtime/engine/engine.h"
#include "scheduler/cost_table.h"

namespace verdict {

struct ProfileOptions {
  std::vector<int> batch_sizes = {1, 2, 4, 8, 16, 32, 64};
  std::vector<double> budget_fractions = {0, 0.25, 0.5, 0.75, 1.0};
  int warmup_steps = 2;     // pinned steps at the full batch, not measured
  int repeats = 5;          // measured steps per cell; the cell's time is their median
  std::string output_path;  // where the table goes (empty: not written)
  bool progress = true;     // a progress line on stderr (rank 0)
  bool one_pass_cells = true;  // a one-pass cell per batch size (gamma > 1)
};

// One measured point of the grid.
struct ProfileCell {
  int batch_size = 0;
  double budget_fraction = 0;   // the pin; several may give the same M
  int64_t verify_tokens = 0;    // M = B + round(f * B * gamma)
  std::vector<double> seconds;  // the measured steps' draft + verify seconds
  double median_seconds = 0;
  // The draft passes each measured step ran (gamma; 0 without a draft) and
  // one pass's seconds in each: the step's draft time over its passes.
  int draft_passes = 0;
  std::vector<double> draft_pass_seconds;
  // 0: every request drafts gamma (a cell of the grid); 1: the one-pass
  // cell of its batch size, whose draft_pass_seconds are whole draft phases.
  int draft_depth = 0;
};

struct ProfileResult {
  // Rank 0: the cells in measuring order and the table built from them.
  std::vector<ProfileCell> cells;
  std::optional<CostTable> table;
  // Every rank: every decode step it ran, as its step observer saw it.
  std::vector<StepTiming> steps;
};

// The settings `verdict profile` needs of an engine: refuses a simulated
// acceptance other than 1.0 (seeds/002_d567d7ab3f14fa00.txt, "Cost table")
// and speculation off; the command sets compact mode before it loads the
// models, so that refusals come before the models load.
absl::Status CheckProfileEngineOptions(const EngineOptions& options);

// Every rank calls it with an engine whose loop is not running; it runs the
// loop until the grid is measured, then shuts it down. Rank 0 submits the
// requests, moves the pin from cell to cell, shows progress and writes the
// table. Every rank checks the options alike, so a refusal happens on every
// rank before any collective.
absl::StatusOr<ProfileResult> RunProfile(Engine& engine, const ProfileOptions& options);

// The cost table of measured cells: batch sizes are the cells' B, verify
// tokens the union of their M. Along M each batch size's row is its own
// measurements, joined linearly; below its smallest M it is that cell's time
// (cost_table.h: the time at M = B where M < B), above its largest it goes on
// with the last segment's slope, if that rises (the planner never asks a
// batch for more than its full block, but interpolating between batch sizes
// reads those cells).
// With draft passes in every cell, all at the same count, the table gets the
// draft split (cost_table.h): per batch size, the median pass seconds over
// its cells, so that the draft planner can price steps of fewer passes.
// One-pass cells (draft_depth 1) are not grid cells: with one for every
// batch size they give the table's one-pass draft phase (the median of
// their steps); a one-pass phase the split cannot hold (cost_table.h) is
// left out, with a message on stderr.
absl::StatusOr<CostTable> CostTableFromCells(const std::vector<ProfileCell>& cells);

// `verdict profile [--profile-batch-sizes ...] [--profile-fractions ...]`.
int RunProfileCommand(absl::Span<char* const> positional);

}  // namespace verdict

#endif  // VERDICT_RUNTIME_CLI_PROFILE_COMMAND_H_
