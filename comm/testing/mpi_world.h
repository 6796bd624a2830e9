// The MPI world of a test program started by mpirun: the session (MPI stays
// up while it is held) and a host communicator over every rank.
#ifndef VERDICT_COMM_TESTING_MPI_WORLD_H_
#define VERDICT_COMM_TESTING_MPI_WORLD_H_

#include <memory>

#include "absl/status/statusor.h"
#include "comm/communicator.h"
#include "comm/create_communicator.h"
#include "comm/mpi_session.h"

namespace verdict {

struct MpiWorld {
  std::shared_ptr<MpiSession> session;
  std::unique_ptr<Communicator> comm;
};

inline absl::StatusOr<MpiWorld> JoinMpiWorld() {
  MpiWorld world;
  absl::StatusOr<std::shared_ptr<MpiSession>> session = MpiSession::Acquire();
  if (!session.ok()) return session.status();
  world.session = *std::move(session);
  absl::StatusOr<std::unique_ptr<Communicator>> comm = CreateCommunicator(Backend::kMpi);
  if (!comm.ok()) return comm.status();
  world.comm = *std::move(comm);
  return world;
}

}  // namespace verdict

#endif  // VERDICT_COMM_TESTING_MPI_WORLD_H_
