// A rank killed in the middle of generation: under mpirun with the bundled
// models, every rank runs the engine on an MPI communicator and rank 0
// submits a batch of long requests. Once its engine has run
// --kill_after_steps decode steps, rank --kill_rank raises SIGKILL on itself,
// as the OOM killer or a crashing driver would. The survivors are then in the
// engine's collectives, whose timeout (30 s) is far longer than a client
// should wait: mpirun must end the whole job within seconds, with the dead
// rank's status (137) and a line naming it. tests/BUILD asserts the status,
// the lines and the time.
//
// If the job is not ended for it, a surviving rank reports how its loop or
// its requests ended and exits 1, which fails the expected status. With
// --overlap the same holds while each survivor waits in two collectives at
// once (its scheduling thread's and its step executor's).
#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "comm/communicator.h"
#include "comm/testing/mpi_world.h"
#include "runtime/engine/engine.h"
#include "runtime/engine/engine_test_util.h"

ABSL_FLAG(int, kill_rank, 1, "the rank that kills itself");
ABSL_FLAG(int, kill_after_steps, 4, "decode steps the killed rank runs first");
ABSL_FLAG(bool, overlap, false,
          "overlap scheduling: the survivors are then in collectives on two threads");

namespace verdict {
namespace {

constexpr int kRequests = 8;
constexpr int kMaxTokens = 400;  // far more than the run lasts

int Run() {
  absl::StatusOr<MpiWorld> mpi = JoinMpiWorld();
  if (!mpi.ok()) {
    std::fprintf(stderr, "%s\n", mpi.status().ToString().c_str());
    return 2;
  }
  std::unique_ptr<Communicator>& comm = mpi->comm;
  const int rank = comm->rank();
  const int world = comm->world_size();
  const int kill_rank = absl::GetFlag(FLAGS_kill_rank);
  const int kill_after = absl::GetFlag(FLAGS_kill_after_steps);
  if (world < 2 || kill_rank < 1 || kill_rank >= world) {
    std::fprintf(stderr, "engine dead rank check: needs 2+ ranks and 0 < --kill_rank < %d\n",
                 world);
    return 2;
  }

  EngineOptions options;
  options.verify_mode = VerifyMode::kCompact;
  options.overlap = absl::GetFlag(FLAGS_overlap);
  options.cpu_threads =
      std::max(1, static_cast<int>(std::thread::hardware_concurrency()) / world);
  absl::StatusOr<std::unique_ptr<Engine>> engine = Engine::Create(
      options, ModelSource{"models/target"}, ModelSource{"models/draft"}, comm.get());
  if (!engine.ok()) {
    std::fprintf(stderr, "rank %d: %s\n", rank, engine.status().ToString().c_str());
    return 2;
  }

  std::atomic<bool> loop_done{false};
  std::thread killer;
  if (rank == kill_rank) {
    // The loop runs on the harness's thread; this one watches its progress.
    killer = std::thread([&] {
      while (!loop_done.load()) {
        const int64_t steps = (*engine)->stats().steps;
        if (steps >= kill_after) {
          std::fprintf(stderr, "rank %d: raising SIGKILL after %lld decode steps\n", rank,
                       static_cast<long long>(steps));
          std::fflush(stderr);
          std::raise(SIGKILL);
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
      }
    });
  }

  int status = 0;
  {
    EngineHarness harness(engine->get());
    if (rank == 0) {
      for (int i = 0; i < kRequests; ++i) {
        GenerationRequest request = TextRequest(**engine, absl::StrCat("r", i),
                                                "It is a truth universally acknowledged",
                                                kMaxTokens, 1.0f, 100 + i);
        request.params.ignore_eos = true;
        if (absl::Status s = harness.Submit(request); !s.ok()) {
          std::fprintf(stderr, "rank 0: submit failed: %s\n", s.ToString().c_str());
          status = 2;
        }
      }
      std::fprintf(stderr, "rank 0: submitted %d requests of %d tokens\n", kRequests,
                   kMaxTokens);
      // Returns only if the requests ended, which they must not before the
      // job is ended: the killed rank stops the loop long before their end.
      harness.WaitAll();
      for (int i = 0; i < kRequests; ++i) {
        const CollectedOutput out = harness.output(absl::StrCat("r", i));
        std::fprintf(stderr, "rank 0: still running after rank %d died; request r%d ended (%s) %s\n",
                     kill_rank, i, FinishReasonName(out.finish_reason), out.error.c_str());
      }
      status = 1;
    }
  }
  loop_done.store(true);
  if (killer.joinable()) killer.join();
  if (rank != 0) {
    std::fprintf(stderr, "rank %d: still running after rank %d died; the loop ended after %lld steps\n",
                 rank, kill_rank, static_cast<long long>((*engine)->stats().steps));
    status = 1;
  }
  return status;
}

}  // namespace
}  // namespace verdict

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return verdict::Run();
}
