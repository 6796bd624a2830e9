// LocalCommunicator: a world of one rank, for single-process runs without
// mpirun. Collectives are copies on host memory; nothing can time out.
#ifndef VERDICT_COMM_LOCAL_COMMUNICATOR_H_
#define VERDICT_COMM_LOCAL_COMMUNICATOR_H_

#include <cstddef>
#include <memory>

#include "absl/status/status.h"
#include "comm/communicator.h"

namespace verdict {

class LocalCommunicator final : public Communicator {
 public:
  int rank() const override { return 0; }
  int world_size() const override { return 1; }

  absl::Status Broadcast(void* buffer, size_t count, DataType type, int root,
                         void* stream = nullptr) override;
  absl::Status AllReduceSum(const void* send, void* recv, size_t count, DataType type,
                            void* stream = nullptr) override;
  absl::Status AllGather(const void* send, void* recv, size_t count, DataType type,
                         void* stream = nullptr) override;
  // Another world of one.
  absl::StatusOr<std::unique_ptr<Communicator>> Duplicate() override;
};

}  // namespace verdict

#endif  // VERDICT_COMM_LOCAL_COMMUNICATOR_H_
