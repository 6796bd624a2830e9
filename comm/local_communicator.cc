#include "comm/local_communicator.h"

#include <cstring>

#include "comm/internal/collective_util.h"

namespace verdict {

absl::Status LocalCommunicator::Broadcast(void* buffer, size_t count, DataType /*type*/, int root,
                                          void* /*stream*/) {
  // The only rank is the root: its buffer already holds the result.
  return comm_internal::CheckBroadcastArgs(rank(), world_size(), buffer, count, root);
}

absl::Status LocalCommunicator::AllReduceSum(const void* send, void* recv, size_t count,
                                             DataType type, void* /*stream*/) {
  absl::Status status = comm_internal::CheckAllReduceArgs(rank(), send, recv, count, type);
  if (!status.ok()) return status;
  if (count > 0 && send != recv) std::memcpy(recv, send, count * DataTypeSize(type));
  return absl::OkStatus();
}

absl::Status LocalCommunicator::AllGather(const void* send, void* recv, size_t count, DataType type,
                                          void* /*stream*/) {
  absl::Status status =
      comm_internal::CheckAllGatherArgs(rank(), world_size(), send, recv, count, type);
  if (!status.ok()) return status;
  if (count > 0 && send != recv) std::memcpy(recv, send, count * DataTypeSize(type));
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Communicator>> LocalCommunicator::Duplicate() {
  return std::unique_ptr<Communicator>(std::make_unique<LocalCommunicator>());
}

}  // namespace verdict
