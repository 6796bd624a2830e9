// `verdict profile` across tensor-parallel ranks: under mpirun every rank
// runs the profile on the bundled pair (CPU backend, compact mode) over a
// small grid while rank 0 drives it. Every rank lists the pinned steps it
// ran (step number, batch, verify tokens, budget, the pin); the lists must
// be identical on every rank, so each pin reached every rank before the
// same step (invariant 3, with plans compared across ranks every step).
// Rank 0's table must hold the whole grid. Exits 0 and prints
// "profile tp: N ranks ran the same P pinned steps", or exits 3.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "comm/communicator.h"
#include "comm/testing/mpi_world.h"
#include "runtime/cli/profile_command.h"
#include "runtime/engine/engine.h"
#include "scheduler/cost_table.h"
#include "scheduler/determinism.h"

namespace verdict {
namespace {

int Run() {
  absl::StatusOr<MpiWorld> mpi = JoinMpiWorld();
  if (!mpi.ok()) {
    std::fprintf(stderr, "%s\n", mpi.status().ToString().c_str());
    return 2;
  }
  std::unique_ptr<Communicator>& comm = mpi->comm;
  const int rank = comm->rank();
  const int world = comm->world_size();

  EngineOptions options;
  options.verify_mode = VerifyMode::kCompact;
  options.plan_check_interval = 1;
  options.kv_cache_tokens = 8192;
  const int cores = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  options.cpu_threads = std::max(1, cores / world);
  absl::StatusOr<std::unique_ptr<Engine>> engine = Engine::Create(
      options, ModelSource{"models/target"}, ModelSource{"models/draft"}, comm.get());
  if (!engine.ok()) {
    std::fprintf(stderr, "rank %d: %s\n", rank, engine.status().ToString().c_str());
    return 2;
  }

  ProfileOptions profile;
  profile.batch_sizes = {1, 2};
  profile.budget_fractions = {0.0, 0.5, 1.0};
  profile.warmup_steps = 1;
  profile.repeats = 2;
  profile.progress = rank == 0;
  absl::StatusOr<ProfileResult> result = RunProfile(**engine, profile);
  if (!result.ok()) {
    std::fprintf(stderr, "rank %d: %s\n", rank, result.status().ToString().c_str());
    return 3;
  }

  Fnv1a64 digest;
  int64_t pinned = 0;
  for (const StepTiming& t : result->steps) {
    if (t.plan_reason != PlanReason::kPinnedBudget) continue;
    digest.AddI64(t.step);
    digest.AddI64(t.batch_size);
    digest.AddI64(t.verify_tokens);
    digest.AddI64(t.budget);
    digest.AddDouble(t.pinned_budget_fraction.value_or(-1.0));
    digest.AddI64(t.draft_passes);
    digest.AddI64(static_cast<int64_t>(t.draft_reason));
    ++pinned;
  }
  const int64_t mine[2] = {static_cast<int64_t>(digest.digest()), pinned};
  std::vector<int64_t> all(2 * world);
  if (absl::Status s = comm->AllGather(mine, all.data(), 2, DataType::kInt64); !s.ok()) {
    std::fprintf(stderr, "rank %d: %s\n", rank, s.ToString().c_str());
    return 2;
  }
  bool ok = pinned > 0;
  for (int r = 1; r < world; ++r) {
    if (all[2 * r] != all[0] || all[2 * r + 1] != all[1]) {
      ok = false;
      if (rank == 0) {
        std::fprintf(stderr,
                     "profile tp: rank %d ran %lld pinned steps (digest %llx), rank 0 "
                     "%lld (digest %llx)\n",
                     r, static_cast<long long>(all[2 * r + 1]),
                     static_cast<unsigned long long>(all[2 * r]), static_cast<long long>(all[1]),
                     static_cast<unsigned long long>(all[0]));
      }
    }
  }
  if (rank == 0) {
    // B in {1, 2} x fractions {0, 0.5, 1} at gamma 5: six cells, M in
    // {1, 4, 6} and {2, 7, 12}, and a one-pass cell per batch size (its
    // draft depth pinned on every rank), which is not a cell of the grid.
    // Whether the one-pass phase enters the table depends on the timings
    // (a one-pass phase measured above the split's passes is left out), so
    // the one-pass cells are checked, not the table's one-pass field.
    const auto one_pass_at = [&](int b) {
      return std::any_of(result->cells.begin(), result->cells.end(), [&](const ProfileCell& c) {
        return c.batch_size == b && c.draft_depth == 1 && c.draft_passes == 1;
      });
    };
    const bool grid = result->table.has_value() && result->cells.size() == 8 &&
                      result->table->batch_sizes() == std::vector<double>{1, 2} &&
                      result->table->verify_tokens() == std::vector<double>{1, 2, 4, 6, 7, 12} &&
                      result->table->has_draft_split() && one_pass_at(1) && one_pass_at(2);
    if (!grid) {
      std::fprintf(stderr, "profile tp: rank 0's table does not hold the grid it was asked for\n");
      ok = false;
    } else if (result->table->measured_tp() != world) {
      std::fprintf(stderr, "profile tp: the table says TP %d, measured at TP %d\n",
                   result->table->measured_tp(), world);
      ok = false;
    }
    if (ok) {
      std::printf("profile tp: %d ranks ran the same %lld pinned steps\n", world,
                  static_cast<long long>(pinned));
    }
  }
  std::fflush(stdout);
  return ok ? 0 : 3;
}

}  // namespace
}  // namespace verdict

int main() { return verdict::Run(); }
