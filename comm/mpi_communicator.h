// MpiCommunicator: the host backend. Collectives run on host buffers over a
// duplicate of an MPI communicator (MPI_COMM_WORLD by default) as
// non-blocking MPI calls polled against a deadline, so a stuck peer becomes
// DeadlineExceeded instead of a hang. bf16 sums use a user-defined MPI op
// that adds in float and rounds to nearest even (kernels/bf16.h); uint8 sums
// wrap modulo 256 as NCCL's do.
//
// One collective at a time per communicator, called in the same order on
// every rank. Two threads may use two communicators at once (Duplicate):
// each MPI call holds the session's call lock (MPI_THREAD_SERIALIZED). After a timeout the communicator is failed: MPI cannot cancel
// a collective, so the request stays pending and keeps its buffers (keep
// them alive), and every later call is refused. Call Abort().
#ifndef VERDICT_COMM_MPI_COMMUNICATOR_H_
#define VERDICT_COMM_MPI_COMMUNICATOR_H_

#include <mpi.h>

#include <cstddef>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "comm/communicator.h"
#include "comm/mpi_session.h"

namespace verdict {

class MpiCommunicator final : public Communicator {
 public:
  // Starts MPI if needed (MpiSession) and duplicates `parent`, which must be
  // a valid communicator once MPI runs; collective over `parent`.
  static absl::StatusOr<std::unique_ptr<MpiCommunicator>> Create(const CommOptions& options,
                                                                 MPI_Comm parent = MPI_COMM_WORLD);

  MpiCommunicator(const MpiCommunicator&) = delete;
  MpiCommunicator& operator=(const MpiCommunicator&) = delete;
  ~MpiCommunicator() override;

  int rank() const override { return rank_; }
  int world_size() const override { return world_size_; }
  // This rank's index among the ranks on its host (over MPI_COMM_WORLD).
  int local_rank() const { return session_->local_rank(); }
  MPI_Comm comm() const { return comm_; }

  absl::Status Broadcast(void* buffer, size_t count, DataType type, int root,
                         void* stream = nullptr) override;
  absl::Status AllReduceSum(const void* send, void* recv, size_t count, DataType type,
                            void* stream = nullptr) override;
  absl::Status AllGather(const void* send, void* recv, size_t count, DataType type,
                         void* stream = nullptr) override;
  absl::Status Barrier() override;
  // MPI_Comm_dup of this communicator, with the same options. Blocking.
  absl::StatusOr<std::unique_ptr<Communicator>> Duplicate() override;
  // MPI_Abort: Open MPI's mpirun then ends every rank of the job, and itself
  // exits with AbortExitCode(status).
  [[noreturn]] void Abort(const absl::Status& status) override;

 private:
  MpiCommunicator(std::shared_ptr<MpiSession> session, const CommOptions& options)
      : session_(std::move(session)), options_(options) {}

  // Refuses a call once the communicator has failed, or a count MPI cannot
  // take (int).
  absl::Status CheckUsable(absl::string_view call, size_t count) const;
  // Waits for `request`, started by `mpi_call` (its return code `rc`), within
  // the deadline.
  absl::Status Complete(int rc, MPI_Request* request, absl::string_view call,
                        absl::string_view mpi_call);

  std::shared_ptr<MpiSession> session_;
  CommOptions options_;
  MPI_Comm comm_ = MPI_COMM_NULL;
  MPI_Op bf16_sum_ = MPI_OP_NULL;
  MPI_Op uint8_sum_ = MPI_OP_NULL;
  int rank_ = 0;
  int world_size_ = 1;
  absl::Status failure_;  // the error that left this communicator failed
};

}  // namespace verdict

#endif  // VERDICT_COMM_MPI_COMMUNICATOR_H_
