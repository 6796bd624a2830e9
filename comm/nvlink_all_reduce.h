// NvlinkAllReduce: the one-shot all-reduce of comm/one_shot_all_reduce.h
// between the ranks of one host, one GPU each, over memory every peer maps
// (CUDA IPC). For messages up to max_bytes(); larger ones belong to NCCL.
//
// Create is collective over the host communicator: each rank allocates its
// exchange buffer and signal block on its current device, the ranks share
// their IPC handles, and each maps every peer's. If any rank cannot, every
// rank returns the error. AllReduceSum only enqueues (a copy of the input
// into the exchange buffer and the kernel), so it can be captured in a CUDA
// graph; every rank must call it with the same count and type, in the same
// order, as with any collective, and all of one instance's calls on one
// stream.
#ifndef VERDICT_COMM_NVLINK_ALL_REDUCE_H_
#define VERDICT_COMM_NVLINK_ALL_REDUCE_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "comm/communicator.h"
#include "comm/one_shot_all_reduce.h"

namespace verdict {

class NvlinkAllReduce {
 public:
  // `timeout`: how long a kernel waits for a missing peer before it traps
  // (the launch then fails instead of spinning).
  static absl::StatusOr<std::unique_ptr<NvlinkAllReduce>> Create(
      Communicator& host, size_t max_bytes, absl::Duration timeout = absl::Seconds(60));
  NvlinkAllReduce(const NvlinkAllReduce&) = delete;
  NvlinkAllReduce& operator=(const NvlinkAllReduce&) = delete;
  ~NvlinkAllReduce();

  int rank() const { return args_.rank; }
  int world_size() const { return args_.world; }
  size_t max_bytes() const { return max_bytes_; }
  // AllReduceSum calls enqueued so far.
  int64_t calls() const { return calls_.load(std::memory_order_relaxed); }

  // recv[i] = sum over ranks of send[i], summed in rank order in float (bf16
  // rounded once), the same bits on every rank. send may equal recv. Device
  // pointers; `stream` is a cudaStream_t. float32 or bfloat16, at most
  // max_bytes() of them.
  absl::Status AllReduceSum(const void* send, void* recv, size_t count, DataType type,
                            void* stream);

 private:
  NvlinkAllReduce() = default;
  absl::Status Init(Communicator& host);

  size_t max_bytes_ = 0;
  int device_ = 0;                       // where the memory lives
  std::atomic<int64_t> calls_{0};
  void* buffer_ = nullptr;               // this rank's exchange buffer
  OneShotSignals* signals_ = nullptr;    // this rank's signal block
  std::vector<void*> mapped_;            // peers' IPC mappings, to close
  OneShotAllReduceArgs args_;            // pointers filled; count/type/out per call
};

}  // namespace verdict

#endif  // VERDICT_COMM_NVLINK_ALL_REDUCE_H_
