// One-shot all-reduce over peer-mapped GPU memory (NVLink or PCIe P2P, the
// ranks of one host): for the small messages of tensor-parallel decode
// (rows x hidden), where a ring all-reduce costs more in latency than the
// bytes do.
//
// Every rank has an exchange buffer and a signal block that every peer maps
// (comm/nvlink_all_reduce.h sets them up). Each block of the kernel:
//   1. tells every peer that its slice of this rank's buffer is ready
//      (a release store of the block's next epoch into the peer's signals)
//      and waits for every peer's word (acquire loads);
//   2. sums its slice of every rank's buffer, in rank order, accumulating in
//      float and rounding once, and writes it to this rank's output;
//   3. tells every peer it has finished reading and waits for theirs, so no
//      rank overwrites its buffer (the next call's input) while a peer still
//      reads it.
// Block b of every rank covers the same slice, so block b waits only for
// block b of its peers. The epochs live in device memory and each block
// advances its own, so a launch captured in a CUDA graph replays correctly.
// Every rank sums in the same order and so holds the same bits. One
// instance's calls go on one stream: its buffer and signals serve one call
// at a time.
//
// OneShotAllReduceCpu is the CPU twin: the same sums, the same roundings
// (float32 NaN payloads aside: the device returns the canonical NaN).
#ifndef VERDICT_COMM_ONE_SHOT_ALL_REDUCE_H_
#define VERDICT_COMM_ONE_SHOT_ALL_REDUCE_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "comm/communicator.h"

namespace verdict {

inline constexpr int kOneShotMaxRanks = 8;
// Fixed, so that every rank launches the same blocks over the same slices.
inline constexpr int kOneShotBlocks = 32;
inline constexpr int kOneShotThreads = 512;

// One rank's signal words, zeroed once before first use.
struct OneShotSignals {
  uint32_t start[kOneShotBlocks][kOneShotMaxRanks];  // [block][from rank]
  uint32_t end[kOneShotBlocks][kOneShotMaxRanks];
  uint32_t epoch[kOneShotBlocks];  // the block's last completed call
};

struct OneShotAllReduceArgs {
  // Every rank's exchange buffer and signals, as this rank maps them
  // (entry `rank` is this rank's own).
  const void* buffers[kOneShotMaxRanks] = {};
  OneShotSignals* signals[kOneShotMaxRanks] = {};
  int rank = 0;
  int world = 1;
  int64_t count = 0;
  DataType type = DataType::kFloat32;  // kFloat32 or kBFloat16
  void* out = nullptr;                 // device memory, `count` elements
  // A peer missing at a barrier for this long traps the kernel.
  uint64_t timeout_ns = 60ull * 1000 * 1000 * 1000;
};

// Enqueues the kernel on `stream` (a cudaStream_t). The input must already
// be in this rank's exchange buffer (buffers[rank]), enqueued before.
absl::Status LaunchOneShotAllReduce(const OneShotAllReduceArgs& args, void* stream);

// out[i] = (inputs[0][i] + inputs[1][i]) + ... in rank order, in float,
// starting from rank 0's value; a bf16 result is rounded once (to nearest,
// ties to even). `inputs` holds
// one host array per rank of `count` elements of `type` (kFloat32 or
// kBFloat16); `out` may be one of them.
void OneShotAllReduceCpu(const std::vector<const void*>& inputs, int64_t count, DataType type,
                         void* out);

}  // namespace verdict

#endif  // VERDICT_COMM_ONE_SHOT_ALL_REDUCE_H_
