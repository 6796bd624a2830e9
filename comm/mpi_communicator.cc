#include "comm/mpi_communicator.h"

#include <climits>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "comm/internal/collective_util.h"
#include "comm/internal/mpi_error.h"
#include "kernels/bf16.h"

namespace verdict {
namespace {

using comm_internal::MpiCallError;
using comm_internal::RankError;

MPI_Datatype MpiType(DataType type) {
  switch (type) {
    case DataType::kFloat32:
      return MPI_FLOAT;
    case DataType::kBFloat16:
      return MPI_UINT16_T;  // moved as bits; summed by the bf16 op
    case DataType::kInt32:
      return MPI_INT32_T;
    case DataType::kInt64:
      return MPI_INT64_T;
    case DataType::kUInt8:
      return MPI_UINT8_T;
  }
  return MPI_DATATYPE_NULL;
}

void Bf16SumOp(void* in, void* inout, int* count, MPI_Datatype* /*type*/) {
  AccumulateBf16(static_cast<const uint16_t*>(in), static_cast<uint16_t*>(inout),
                 static_cast<size_t>(*count));
}

// Sums modulo 256, as NCCL does. Open MPI's MPI_SUM on 8-bit integers
// saturates instead when its AVX op component handles long buffers (Open MPI
// issue 8045, closed as won't fix).
void UInt8SumOp(void* in, void* inout, int* count, MPI_Datatype* /*type*/) {
  const auto* a = static_cast<const uint8_t*>(in);
  auto* b = static_cast<uint8_t*>(inout);
  for (int i = 0; i < *count; ++i) b[i] = static_cast<uint8_t>(a[i] + b[i]);
}

}  // namespace

absl::StatusOr<std::unique_ptr<MpiCommunicator>> MpiCommunicator::Create(const CommOptions& options,
                                                                         MPI_Comm parent) {
  absl::StatusOr<std::shared_ptr<MpiSession>> session = MpiSession::Acquire();
  if (!session.ok()) return session.status();
  std::unique_ptr<MpiCommunicator> comm(new MpiCommunicator(*std::move(session), options));
  const int world_rank = comm->session_->world_rank();
  absl::MutexLock lock(&comm->session_->call_mutex());
  int rc = MPI_Comm_dup(parent, &comm->comm_);
  if (rc != MPI_SUCCESS) return MpiCallError(rc, world_rank, "MPI_Comm_dup");
  // Errors come back as return codes (and become Status) instead of ending
  // the process.
  rc = MPI_Comm_set_errhandler(comm->comm_, MPI_ERRORS_RETURN);
  if (rc != MPI_SUCCESS) return MpiCallError(rc, world_rank, "MPI_Comm_set_errhandler");
  MPI_Comm_rank(comm->comm_, &comm->rank_);
  MPI_Comm_size(comm->comm_, &comm->world_size_);
  rc = MPI_Op_create(&Bf16SumOp, /*commute=*/1, &comm->bf16_sum_);
  if (rc != MPI_SUCCESS) return MpiCallError(rc, comm->rank_, "MPI_Op_create");
  rc = MPI_Op_create(&UInt8SumOp, /*commute=*/1, &comm->uint8_sum_);
  if (rc != MPI_SUCCESS) return MpiCallError(rc, comm->rank_, "MPI_Op_create");
  return comm;
}

MpiCommunicator::~MpiCommunicator() {
  absl::MutexLock lock(&session_->call_mutex());
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  if (bf16_sum_ != MPI_OP_NULL) MPI_Op_free(&bf16_sum_);
  if (uint8_sum_ != MPI_OP_NULL) MPI_Op_free(&uint8_sum_);
  if (comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
}

absl::Status MpiCommunicator::CheckUsable(absl::string_view call, size_t count) const {
  if (!failure_.ok()) return comm_internal::RefusedAfterFailure(rank_, call, failure_);
  if (count > static_cast<size_t>(INT_MAX)) {
    return RankError(absl::StatusCode::kInvalidArgument, rank_,
                     absl::StrCat(call, ": ", count, " elements exceed MPI's int count"));
  }
  return absl::OkStatus();
}

absl::Status MpiCommunicator::Complete(int rc, MPI_Request* request, absl::string_view call,
                                       absl::string_view mpi_call) {
  if (rc != MPI_SUCCESS) {
    failure_ = MpiCallError(rc, rank_, absl::StrCat(call, "/", mpi_call));
    return failure_;
  }
  absl::StatusOr<bool> done =
      comm_internal::PollUntilDone(options_.timeout, [&]() -> absl::StatusOr<bool> {
        int flag = 0;
        int test_rc;
        {
          absl::MutexLock lock(&session_->call_mutex());
          test_rc = MPI_Test(request, &flag, MPI_STATUS_IGNORE);
        }
        if (test_rc != MPI_SUCCESS) {
          return MpiCallError(test_rc, rank_, absl::StrCat(call, "/", mpi_call, "/MPI_Test"));
        }
        return flag != 0;
      });
  if (!done.ok()) {
    failure_ = done.status();
  } else if (!*done) {
    failure_ =
        comm_internal::TimeoutError(rank_, absl::StrCat(call, "/", mpi_call), options_.timeout);
    session_->MarkCollectivePending();
  }
  return failure_;
}

absl::Status MpiCommunicator::Broadcast(void* buffer, size_t count, DataType type, int root,
                                        void* /*stream*/) {
  absl::Status status = CheckUsable("Broadcast", count);
  if (status.ok()) {
    status = comm_internal::CheckBroadcastArgs(rank_, world_size_, buffer, count, root);
  }
  if (!status.ok() || count == 0) return status;
  MPI_Request request;
  int rc;
  {
    absl::MutexLock lock(&session_->call_mutex());
    rc = MPI_Ibcast(buffer, static_cast<int>(count), MpiType(type), root, comm_, &request);
  }
  return Complete(rc, &request, "Broadcast", "MPI_Ibcast");
}

absl::Status MpiCommunicator::AllReduceSum(const void* send, void* recv, size_t count,
                                           DataType type, void* /*stream*/) {
  absl::Status status = CheckUsable("AllReduceSum", count);
  if (status.ok()) status = comm_internal::CheckAllReduceArgs(rank_, send, recv, count, type);
  if (!status.ok() || count == 0) return status;
  MPI_Op sum = MPI_SUM;
  if (type == DataType::kBFloat16) sum = bf16_sum_;
  if (type == DataType::kUInt8) sum = uint8_sum_;
  MPI_Request request;
  int rc;
  {
    absl::MutexLock lock(&session_->call_mutex());
    rc = MPI_Iallreduce(send == recv ? MPI_IN_PLACE : send, recv, static_cast<int>(count),
                        MpiType(type), sum, comm_, &request);
  }
  return Complete(rc, &request, "AllReduceSum", "MPI_Iallreduce");
}

absl::Status MpiCommunicator::AllGather(const void* send, void* recv, size_t count, DataType type,
                                        void* /*stream*/) {
  absl::Status status = CheckUsable("AllGather", count);
  if (status.ok()) {
    status = comm_internal::CheckAllGatherArgs(rank_, world_size_, send, recv, count, type);
  }
  if (!status.ok() || count == 0) return status;
  const bool in_place = comm_internal::IsInPlaceAllGather(rank_, send, recv, count, type);
  const MPI_Datatype mpi_type = MpiType(type);
  MPI_Request request;
  int rc;
  {
    absl::MutexLock lock(&session_->call_mutex());
    rc = MPI_Iallgather(in_place ? MPI_IN_PLACE : send, static_cast<int>(count), mpi_type, recv,
                        static_cast<int>(count), mpi_type, comm_, &request);
  }
  return Complete(rc, &request, "AllGather", "MPI_Iallgather");
}

absl::Status MpiCommunicator::Barrier() {
  absl::Status status = CheckUsable("Barrier", 0);
  if (!status.ok()) return status;
  MPI_Request request;
  int rc;
  {
    absl::MutexLock lock(&session_->call_mutex());
    rc = MPI_Ibarrier(comm_, &request);
  }
  return Complete(rc, &request, "Barrier", "MPI_Ibarrier");
}

absl::StatusOr<std::unique_ptr<Communicator>> MpiCommunicator::Duplicate() {
  if (!failure_.ok()) return comm_internal::RefusedAfterFailure(rank_, "Duplicate", failure_);
  absl::StatusOr<std::unique_ptr<MpiCommunicator>> dup = Create(options_, comm_);
  if (!dup.ok()) return dup.status();
  return std::unique_ptr<Communicator>(*std::move(dup));
}

void MpiCommunicator::Abort(const absl::Status& status) {
  std::fprintf(stderr, "rank %d: aborting all ranks: %s\n", rank_,
               std::string(status.ToString()).c_str());
  std::fflush(nullptr);
  MPI_Abort(comm_, AbortExitCode(status));
  std::_Exit(AbortExitCode(status));  // MPI_Abort does not return; this is for the compiler
}

}  // namespace verdict
