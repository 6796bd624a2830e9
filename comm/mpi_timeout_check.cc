// A stuck peer under mpirun: the last rank skips an all-reduce and hangs;
// every other rank must get DeadlineExceeded naming itself and the call,
// no sooner than the 2 s timeout and no later than 2 s after it, and the
// failed communicator must refuse the next call. The running ranks agree on
// that over a communicator without the stuck rank, and rank 0 prints the
// verdict. Then the job must end, the stuck rank included:
//   --end=abort (default): rank 0 calls Abort() with the timeout status.
//   --end=return: the running ranks return from main; the MPI session sees
//     the pending collective and calls MPI_Abort instead of MPI_Finalize.
//
// Expected (tests/BUILD asserts it): mpirun exits with AbortExitCode of
// DEADLINE_EXCEEDED (4) when every running rank saw the timeout, with 13
// (INTERNAL) when one did not; the job ends within seconds; the log holds
// "timeout check: all N running ranks got DEADLINE_EXCEEDED".
#include <mpi.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "comm/mpi_communicator.h"

namespace verdict {
namespace {

constexpr absl::Duration kTimeout = absl::Seconds(2);
// Past the deadline, a rank notices within one poll pause (at most 1 ms);
// the rest is room for a loaded machine.
constexpr absl::Duration kSlack = absl::Seconds(2);

int Fail(const std::string& message) {
  std::fprintf(stderr, "timeout check: %s\n", message.c_str());
  return 1;
}

// Waits to be ended by another rank's Abort(); returning is a failure.
int AwaitAbort(int rank) {
  std::this_thread::sleep_for(std::chrono::seconds(60));
  return Fail(absl::StrCat("rank ", rank, " was not ended by the abort"));
}

int Run(bool end_by_return) {
  CommOptions options;
  options.timeout = kTimeout;
  absl::StatusOr<std::unique_ptr<MpiCommunicator>> world = MpiCommunicator::Create(options);
  if (!world.ok()) return Fail(std::string(world.status().message()));
  const int rank = (*world)->rank();
  const int stuck = (*world)->world_size() - 1;
  if (stuck == 0) return Fail("needs at least 2 ranks");

  // The running ranks' own communicator: the stuck rank takes no part.
  MPI_Comm running_comm;
  MPI_Comm_split((*world)->comm(), rank == stuck ? MPI_UNDEFINED : 0, rank, &running_comm);
  std::unique_ptr<MpiCommunicator> running;
  if (rank != stuck) {
    absl::StatusOr<std::unique_ptr<MpiCommunicator>> comm =
        MpiCommunicator::Create(options, running_comm);
    MPI_Comm_free(&running_comm);
    if (!comm.ok()) return Fail(std::string(comm.status().message()));
    running = *std::move(comm);
  }
  absl::Status status = (*world)->Barrier();  // every rank starts the clock together
  if (!status.ok()) return Fail(std::string(status.message()));

  if (rank == stuck) {
    std::fprintf(stderr, "rank %d: skipping AllReduceSum and hanging\n", rank);
    return AwaitAbort(rank);
  }

  int32_t value = rank;
  const absl::Time start = absl::Now();
  status = (*world)->AllReduceSum(&value, &value, 1, DataType::kInt32);
  const absl::Duration waited = absl::Now() - start;
  const std::string expected_prefix = absl::StrCat("rank ", rank, ": AllReduceSum");
  bool saw_timeout = status.code() == absl::StatusCode::kDeadlineExceeded &&
                     absl::StartsWith(status.message(), expected_prefix) &&
                     absl::StrContains(status.message(), "timed out after 2s") &&
                     waited >= kTimeout && waited <= kTimeout + kSlack;
  std::fprintf(stderr, "rank %d: AllReduceSum returned after %s: %s\n", rank,
               absl::FormatDuration(waited).c_str(), status.ToString().c_str());
  // A failed communicator refuses the next call instead of entering it.
  absl::Status refused = (*world)->Broadcast(&value, 1, DataType::kInt32, 0);
  saw_timeout = saw_timeout && refused.code() == absl::StatusCode::kFailedPrecondition &&
                absl::StrContains(refused.message(), "timed out");

  int32_t agreeing = saw_timeout ? 1 : 0;
  absl::Status agreed = running->AllReduceSum(&agreeing, &agreeing, 1, DataType::kInt32);
  const bool passed = agreed.ok() && agreeing == running->world_size();
  if (rank == 0) {
    if (passed) {
      std::fprintf(stderr, "timeout check: all %d running ranks got DEADLINE_EXCEEDED\n",
                   running->world_size());
    } else {
      std::fprintf(stderr, "timeout check: only %d of %d running ranks got the timeout (%s)\n",
                   agreeing, running->world_size(), agreed.ToString().c_str());
    }
    std::fflush(stderr);
  }
  // No rank ends the job before rank 0 has printed the verdict.
  absl::Status printed = running->Barrier();
  if (!passed || !printed.ok()) {
    if (rank != 0) return AwaitAbort(rank);
    (*world)->Abort(absl::InternalError("timeout check failed"));
  }
  // The communicators, and with the last of them the session, go here.
  if (end_by_return) return 0;
  if (rank != 0) return AwaitAbort(rank);
  (*world)->Abort(status);
}

}  // namespace
}  // namespace verdict

int main(int argc, char** argv) {
  const bool end_by_return = argc > 1 && std::strcmp(argv[1], "--end=return") == 0;
  if (argc > 1 && !end_by_return && std::strcmp(argv[1], "--end=abort") != 0) {
    std::fprintf(stderr, "usage: %s [--end=abort|--end=return]\n", argv[0]);
    return 2;
  }
  return verdict::Run(end_by_return);
}
