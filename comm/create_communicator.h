// CreateCommunicator: builds the communicator a run asks for.
//
//   kLocal  LocalCommunicator: one process, host buffers.
//   kMpi    MpiCommunicator over MPI_COMM_WORLD: host buffers. Without a
//           launcher, MPI runs as a singleton world of one rank.
//   kNccl   NcclCommunicator: device buffers and streams, one rank per GPU.
#ifndef VERDICT_COMM_CREATE_COMMUNICATOR_H_
#define VERDICT_COMM_CREATE_COMMUNICATOR_H_

#include <memory>

#include "absl/status/statusor.h"
#include "comm/communicator.h"

namespace verdict {

absl::StatusOr<std::unique_ptr<Communicator>> CreateCommunicator(
    Backend kind, const CommOptions& options = CommOptions());

}  // namespace verdict

#endif  // VERDICT_COMM_CREATE_COMMUNICATOR_H_
