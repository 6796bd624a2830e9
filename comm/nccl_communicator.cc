#include "comm/nccl_communicator.h"

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "comm/internal/collective_util.h"
#include "comm/local_communicator.h"
#include "comm/mpi_communicator.h"
#include "comm/mpi_session.h"
#include "kernels/cuda_check.h"

namespace verdict {
namespace {

using comm_internal::RankError;

ncclDataType_t NcclType(DataType type) {
  switch (type) {
    case DataType::kFloat32:
      return ncclFloat32;
    case DataType::kBFloat16:
      return ncclBfloat16;
    case DataType::kInt32:
      return ncclInt32;
    case DataType::kInt64:
      return ncclInt64;
    case DataType::kUInt8:
      return ncclUint8;
  }
  return ncclUint8;
}

absl::Status NcclCallError(ncclResult_t result, int rank, absl::string_view call, ncclComm_t comm) {
  const char* detail = comm != nullptr ? ncclGetLastError(comm) : nullptr;
  return RankError(absl::StatusCode::kInternal, rank,
                   absl::StrCat(call, " failed: ", ncclGetErrorString(result),
                                detail != nullptr && detail[0] != '\0' ? ": " : "",
                                detail != nullptr ? detail : ""));
}

absl::Status CudaCallError(cudaError_t error, int rank, absl::string_view call) {
  return RankError(absl::StatusCode::kInternal, rank,
                   CudaStatus(error, std::string(call).c_str()).message());
}

// NVLink multicast must stay off on these machines (a launcher sets this
// too; a rank started another way must not turn it on by default). Runs
// before MPI starts its threads: setenv is not safe beside a concurrent
// getenv. Returns the value that was already set, or null.
const char* KeepNvlsOff() {
  const char* value = std::getenv("NCCL_NVLS_ENABLE");
  if (value == nullptr) setenv("NCCL_NVLS_ENABLE", "0", /*overwrite=*/0);
  return value;
}

}  // namespace

absl::StatusOr<std::unique_ptr<NcclCommunicator>> NcclCommunicator::Create(
    const CommOptions& options) {
  const char* nvls = KeepNvlsOff();
  std::unique_ptr<Communicator> host;
  int local_rank = 0;
  if (MpiSession::LaunchedByLauncher()) {
    absl::StatusOr<std::unique_ptr<MpiCommunicator>> mpi = MpiCommunicator::Create(options);
    if (!mpi.ok()) return mpi.status();
    local_rank = (*mpi)->local_rank();
    host = *std::move(mpi);
  } else {
    host = std::make_unique<LocalCommunicator>();
  }
  if (nvls != nullptr && std::strcmp(nvls, "0") != 0) {
    std::fprintf(stderr,
                 "rank %d: warning: NCCL_NVLS_ENABLE=%s; NVLink multicast should stay off\n",
                 host->rank(), nvls);
  }
  std::unique_ptr<NcclCommunicator> comm(new NcclCommunicator(std::move(host), options));
  absl::Status status = comm->Bootstrap(local_rank);
  if (!status.ok()) return status;
  return comm;
}

absl::Status NcclCommunicator::SelectDevice(int local_rank) {
  int count = 0;
  cudaError_t error = cudaGetDeviceCount(&count);
  if (error != cudaSuccess) return CudaCallError(error, rank(), "cudaGetDeviceCount");
  device_ = options_.device >= 0 ? options_.device : local_rank;
  if (device_ >= count) {
    return RankError(absl::StatusCode::kFailedPrecondition, rank(),
                     absl::StrCat("needs GPU ", device_, " (local rank ", local_rank,
                                  ", one rank per GPU) but ", count, " are visible"));
  }
  error = cudaSetDevice(device_);
  if (error != cudaSuccess) return CudaCallError(error, rank(), "cudaSetDevice");
  return absl::OkStatus();
}

absl::Status NcclCommunicator::Bootstrap(int local_rank) {
  // Every rank reports whether it took its GPU (and rank 0 whether it made
  // the NCCL id) before any rank enters NCCL init, where the others would
  // wait for a missing rank until init_timeout.
  absl::Status local = SelectDevice(local_rank);
  ncclUniqueId id;
  std::memset(&id, 0, sizeof(id));
  if (local.ok() && rank() == 0) {
    ncclResult_t result = ncclGetUniqueId(&id);
    if (result != ncclSuccess) local = NcclCallError(result, rank(), "ncclGetUniqueId", nullptr);
  }
  int32_t failed_ranks = local.ok() ? 0 : 1;
  absl::Status status = host_->AllReduceSum(&failed_ranks, &failed_ranks, 1, DataType::kInt32);
  if (!status.ok()) return status;
  if (!local.ok()) return local;
  if (failed_ranks > 0) {
    return RankError(absl::StatusCode::kFailedPrecondition, rank(),
                     absl::StrCat("NCCL bootstrap: ", failed_ranks,
                                  " other rank(s) could not set up; see their errors"));
  }
  status = host_->Broadcast(&id, sizeof(id), DataType::kUInt8, /*root=*/0);
  if (!status.ok()) return status;

  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;  // every NCCL call returns at once; this class polls it
  const absl::Time deadline = absl::Now() + options_.init_timeout;
  ncclResult_t result = ncclCommInitRankConfig(&comm_, world_size(), id, rank(), &config);
  if (result != ncclSuccess && result != ncclInProgress) {
    return Fail(NcclCallError(result, rank(), "ncclCommInitRankConfig", comm_));
  }
  status = AwaitNccl("ncclCommInitRankConfig", deadline, options_.init_timeout);
  if (!status.ok()) return status;
  cudaError_t error = cudaEventCreateWithFlags(&drained_, cudaEventDisableTiming);
  if (error != cudaSuccess) return Fail(CudaCallError(error, rank(), "cudaEventCreateWithFlags"));
  return absl::OkStatus();
}

NcclCommunicator::~NcclCommunicator() {
  if (comm_ != nullptr) {
    // Finalize waits for the peers to quiesce too; one that is gone turns it
    // into a timeout, and Fail() aborts instead.
    const absl::Time deadline = absl::Now() + options_.timeout;
    ncclResult_t result = ncclCommFinalize(comm_);
    if (result != ncclSuccess && result != ncclInProgress) {
      Fail(NcclCallError(result, rank(), "ncclCommFinalize", comm_)).IgnoreError();
    } else {
      AwaitNccl("ncclCommFinalize", deadline, options_.timeout).IgnoreError();
    }
    if (comm_ != nullptr) ncclCommDestroy(comm_);
  }
  if (drained_ != nullptr) cudaEventDestroy(drained_);
}

absl::Status NcclCommunicator::Fail(absl::Status status) {
  failure_ = status;
  if (comm_ != nullptr) {
    ncclCommAbort(comm_);
    comm_ = nullptr;
  }
  return status;
}

absl::StatusOr<bool> NcclCommunicator::NcclBusy(absl::string_view what) {
  ncclResult_t state = ncclSuccess;
  ncclResult_t result = ncclCommGetAsyncError(comm_, &state);
  if (result != ncclSuccess) {
    return NcclCallError(result, rank(), absl::StrCat(what, "/ncclCommGetAsyncError"), comm_);
  }
  if (state != ncclSuccess && state != ncclInProgress) {
    return NcclCallError(state, rank(), what, comm_);
  }
  return state == ncclInProgress;
}

absl::Status NcclCommunicator::Await(absl::string_view what, absl::Time deadline,
                                     absl::Duration timeout,
                                     absl::FunctionRef<absl::StatusOr<bool>()> done) {
  absl::StatusOr<bool> finished = comm_internal::PollUntilDone(deadline - absl::Now(), done);
  if (!finished.ok()) return Fail(finished.status());
  if (!*finished) return Fail(comm_internal::TimeoutError(rank(), what, timeout));
  return absl::OkStatus();
}

absl::Status NcclCommunicator::AwaitNccl(absl::string_view what, absl::Time deadline,
                                         absl::Duration timeout) {
  return Await(what, deadline, timeout, [&]() -> absl::StatusOr<bool> {
    absl::StatusOr<bool> busy = NcclBusy(what);
    if (!busy.ok()) return busy.status();
    return !*busy;
  });
}

absl::Status NcclCommunicator::AwaitStream(absl::string_view what, cudaStream_t stream,
                                           absl::Time deadline) {
  // An event rather than cudaStreamQuery: work that other threads enqueue on
  // the stream later does not extend the wait.
  cudaError_t error = cudaEventRecord(drained_, stream);
  if (error != cudaSuccess) {
    return Fail(CudaCallError(error, rank(), absl::StrCat(what, "/cudaEventRecord")));
  }
  return Await(what, deadline, options_.timeout, [&]() -> absl::StatusOr<bool> {
    // A peer's failure shows here first, while the stream still waits for it.
    absl::StatusOr<bool> busy = NcclBusy(what);
    if (!busy.ok()) return busy.status();
    cudaError_t query = cudaEventQuery(drained_);
    if (query == cudaSuccess) return true;
    if (query == cudaErrorNotReady) return false;
    return CudaCallError(query, rank(), absl::StrCat(what, "/cudaEventQuery"));
  });
}

absl::Status NcclCommunicator::Run(absl::string_view call, absl::string_view nccl_call,
                                   size_t count, void* stream,
                                   absl::FunctionRef<ncclResult_t(cudaStream_t)> enqueue) {
  if (!failure_.ok()) return comm_internal::RefusedAfterFailure(rank(), call, failure_);
  if (count == 0) return absl::OkStatus();
  const absl::Time deadline = absl::Now() + options_.timeout;
  const std::string what = absl::StrCat(call, "/", nccl_call);
  cudaStream_t cuda_stream = static_cast<cudaStream_t>(stream);
  ncclResult_t result = enqueue(cuda_stream);
  if (result == ncclInProgress) {
    absl::Status status = AwaitNccl(what, deadline, options_.timeout);
    if (!status.ok()) return status;
  } else if (result != ncclSuccess) {
    return Fail(NcclCallError(result, rank(), what, comm_));
  }
  if (!options_.wait_for_completion) return absl::OkStatus();
  return AwaitStream(what, cuda_stream, deadline);
}

absl::Status NcclCommunicator::Broadcast(void* buffer, size_t count, DataType type, int root,
                                         void* stream) {
  absl::Status status =
      comm_internal::CheckBroadcastArgs(rank(), world_size(), buffer, count, root);
  if (!status.ok()) return status;
  return Run("Broadcast", "ncclBroadcast", count, stream, [&](cudaStream_t s) {
    return ncclBroadcast(buffer, buffer, count, NcclType(type), root, comm_, s);
  });
}

absl::Status NcclCommunicator::AllReduceSum(const void* send, void* recv, size_t count,
                                            DataType type, void* stream) {
  absl::Status status = comm_internal::CheckAllReduceArgs(rank(), send, recv, count, type);
  if (!status.ok()) return status;
  return Run("AllReduceSum", "ncclAllReduce", count, stream, [&](cudaStream_t s) {
    return ncclAllReduce(send, recv, count, NcclType(type), ncclSum, comm_, s);
  });
}

absl::Status NcclCommunicator::AllGather(const void* send, void* recv, size_t count, DataType type,
                                         void* stream) {
  absl::Status status =
      comm_internal::CheckAllGatherArgs(rank(), world_size(), send, recv, count, type);
  if (!status.ok()) return status;
  // NCCL's in-place all-gather is the same convention: send is this rank's
  // block of recv.
  return Run("AllGather", "ncclAllGather", count, stream, [&](cudaStream_t s) {
    return ncclAllGather(send, recv, count, NcclType(type), comm_, s);
  });
}

absl::Status NcclCommunicator::Barrier() { return host_->Barrier(); }

absl::Status NcclCommunicator::Synchronize(void* stream) {
  if (!failure_.ok()) return comm_internal::RefusedAfterFailure(rank(), "Synchronize", failure_);
  return AwaitStream("Synchronize", static_cast<cudaStream_t>(stream),
                     absl::Now() + options_.timeout);
}

void NcclCommunicator::Abort(const absl::Status& status) {
  host_->Abort(status);
  std::_Exit(AbortExitCode(status));  // Abort does not return; this is for the compiler
}

}  // namespace verdict
