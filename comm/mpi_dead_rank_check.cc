// A dead peer under mpirun: rank 1 ends itself (exit(3), or SIGKILL with
// --how=kill) just before an all-reduce that the other ranks enter. Their
// collective timeout is 60 s, so only the launcher can end them in time:
// Open MPI's mpirun ends the whole job when a rank dies, and exits with the
// dead rank's code (3, or 137 for SIGKILL). tests/BUILD asserts that code
// and that the job ends within 20 s.
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "comm/mpi_communicator.h"

namespace verdict {
namespace {

int Run(bool kill) {
  CommOptions options;
  options.timeout = absl::Seconds(60);
  absl::StatusOr<std::unique_ptr<MpiCommunicator>> comm = MpiCommunicator::Create(options);
  if (!comm.ok()) {
    std::fprintf(stderr, "%s\n", std::string(comm.status().message()).c_str());
    return 1;
  }
  const int rank = (*comm)->rank();
  if ((*comm)->world_size() < 2) {
    std::fprintf(stderr, "dead rank check: needs at least 2 ranks\n");
    return 1;
  }
  absl::Status status = (*comm)->Barrier();
  if (!status.ok()) {
    std::fprintf(stderr, "%s\n", std::string(status.message()).c_str());
    return 1;
  }
  if (rank == 1) {
    std::fprintf(stderr, "rank 1: dying (%s) before AllReduceSum\n", kill ? "SIGKILL" : "exit 3");
    std::fflush(stderr);
    if (kill) std::raise(SIGKILL);
    std::exit(3);  // no MPI_Finalize: the communicator and its session are never destroyed
  }
  int32_t value = rank;
  status = (*comm)->AllReduceSum(&value, &value, 1, DataType::kInt32);
  // Reached only if mpirun failed to end this rank within the 60 s timeout.
  std::fprintf(stderr, "rank %d: still running after the peer died: %s\n", rank,
               status.ToString().c_str());
  return 1;
}

}  // namespace
}  // namespace verdict

int main(int argc, char** argv) {
  const bool kill = argc > 1 && std::strcmp(argv[1], "--how=kill") == 0;
  if (argc > 1 && !kill && std::strcmp(argv[1], "--how=exit") != 0) {
    std::fprintf(stderr, "usage: %s [--how=exit|--how=kill]\n", argv[0]);
    return 2;
  }
  return verdict::Run(kill);
}
