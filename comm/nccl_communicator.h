// NcclCommunicator: the device backend. Collectives take device pointers and
// run on the caller's CUDA stream over NCCL; one rank per GPU, the GPU picked
// by the rank's index on its host. MPI carries the bootstrap (the NCCL unique
// id), Barrier and Abort; a process started without a launcher is a world of
// one rank and needs no MPI.
//
// The NCCL communicator is non-blocking (ncclConfig_t.blocking = 0), so no
// NCCL call can hang the host: every call is polled against the deadline
// (ncclCommGetAsyncError, cudaEventQuery). On a timeout or an NCCL error the
// NCCL communicator is aborted (ncclCommAbort), the call returns an error
// naming the rank and the call, and every later collective is refused. The
// peers see their own timeouts; the caller's way on is Abort().
#ifndef VERDICT_COMM_NCCL_COMMUNICATOR_H_
#define VERDICT_COMM_NCCL_COMMUNICATOR_H_

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <cstddef>
#include <memory>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "comm/communicator.h"

namespace verdict {

class NcclCommunicator final : public Communicator {
 public:
  // Sets NCCL_NVLS_ENABLE=0 unless it is set (NVLink multicast stays off),
  // selects this rank's GPU (cudaSetDevice) and creates the NCCL
  // communicator of all ranks, within options.init_timeout. Collective over
  // all ranks: if any rank cannot take its GPU, every rank returns an error.
  static absl::StatusOr<std::unique_ptr<NcclCommunicator>> Create(const CommOptions& options);

  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;
  ~NcclCommunicator() override;

  int rank() const override { return host_->rank(); }
  int world_size() const override { return host_->world_size(); }
  // The CUDA device this rank runs on.
  int device() const { return device_; }

  absl::Status Broadcast(void* buffer, size_t count, DataType type, int root,
                         void* stream = nullptr) override;
  absl::Status AllReduceSum(const void* send, void* recv, size_t count, DataType type,
                            void* stream = nullptr) override;
  absl::Status AllGather(const void* send, void* recv, size_t count, DataType type,
                         void* stream = nullptr) override;
  // A host barrier over MPI; it does not wait for the device.
  absl::Status Barrier() override;
  // Waits for everything enqueued on `stream` so far, within the timeout.
  absl::Status Synchronize(void* stream = nullptr) override;
  // Only without wait_for_completion: its host wait cannot run in a capture.
  bool CapturableInCudaGraphs() const override { return !options_.wait_for_completion; }
  // Ends every rank through the host communicator (MPI_Abort under a
  // launcher). The NCCL communicator is not aborted first: ncclCommAbort may
  // wait for the device, and the process ending releases the GPU anyway.
  [[noreturn]] void Abort(const absl::Status& status) override;

 private:
  NcclCommunicator(std::unique_ptr<Communicator> host, const CommOptions& options)
      : host_(std::move(host)), options_(options) {}

  absl::Status SelectDevice(int local_rank);
  absl::Status Bootstrap(int local_rank);
  // Enqueues a collective of `count` elements with `enqueue` and waits for it
  // as the options say.
  absl::Status Run(absl::string_view call, absl::string_view nccl_call, size_t count, void* stream,
                   absl::FunctionRef<ncclResult_t(cudaStream_t)> enqueue);
  // True while the NCCL communicator is ncclInProgress, false once it is
  // ncclSuccess; an asynchronous NCCL error becomes a Status naming `what`.
  absl::StatusOr<bool> NcclBusy(absl::string_view what);
  // Polls `done` until it reports completion, an error or `deadline`; an
  // error or a timeout (reported as `timeout`) fails the communicator.
  absl::Status Await(absl::string_view what, absl::Time deadline, absl::Duration timeout,
                     absl::FunctionRef<absl::StatusOr<bool>()> done);
  // Awaits the NCCL communicator leaving ncclInProgress.
  absl::Status AwaitNccl(absl::string_view what, absl::Time deadline, absl::Duration timeout);
  // Awaits an event recorded on `stream`: everything enqueued there so far.
  absl::Status AwaitStream(absl::string_view what, cudaStream_t stream, absl::Time deadline);
  // Records `status` as this communicator's failure and aborts NCCL.
  absl::Status Fail(absl::Status status);

  std::unique_ptr<Communicator> host_;  // MPI under a launcher, else local
  CommOptions options_;
  int device_ = -1;
  ncclComm_t comm_ = nullptr;
  cudaEvent_t drained_ = nullptr;
  absl::Status failure_;
};

}  // namespace verdict

#endif  // VERDICT_COMM_NCCL_COMMUNICATOR_H_
