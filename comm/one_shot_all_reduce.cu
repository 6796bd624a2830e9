#include <cuda_runtime.h>

#include <cstdint>

#include "absl/strings/str_cat.h"
#include "comm/one_shot_all_reduce.h"
#include "kernels/cuda_check.h"

namespace verdict {
namespace {

// System scope: the words are written by other GPUs over NVLink.
__device__ __forceinline__ void StoreRelease(uint32_t* address, uint32_t value) {
  asm volatile("st.release.sys.global.u32 [%0], %1;" ::"l"(address), "r"(value) : "memory");
}

__device__ __forceinline__ uint32_t LoadAcquire(const uint32_t* address) {
  uint32_t value;
  asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(value) : "l"(address) : "memory");
  return value;
}

__device__ __forceinline__ uint64_t GlobalNanoseconds() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// The bit-level conversions of kernels/bf16.h, so that device sums round
// exactly as the CPU twin's.
__device__ __forceinline__ float Bf16Bits(uint32_t bits) { return __uint_as_float(bits << 16); }

__device__ __forceinline__ uint32_t ToBf16Bits(float value) {
  const uint32_t bits = __float_as_uint(value);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return 0x7fffu;
  return (bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16;
}

// Block b tells every peer it has reached `which` of call `epoch`, then
// waits until every peer's block b has told it the same. Thread p speaks to
// peer p.
__device__ __forceinline__ void BlockBarrier(const OneShotAllReduceArgs& args, bool at_end,
                                             uint32_t epoch) {
  const int b = blockIdx.x;
  const int p = threadIdx.x;
  if (p < args.world) {
    OneShotSignals* peer = args.signals[p];
    OneShotSignals* mine = args.signals[args.rank];
    StoreRelease(at_end ? &peer->end[b][args.rank] : &peer->start[b][args.rank], epoch);
    const uint32_t* word = at_end ? &mine->end[b][p] : &mine->start[b][p];
    // A peer is at this call or the one before: it cannot start the next
    // call's barrier before this block has passed its end barrier. A peer
    // that never arrives traps the kernel after the timeout: the launch
    // fails, and with it this rank's next CUDA call, instead of spinning
    // until the process is killed.
    const uint64_t since = GlobalNanoseconds();
    while (LoadAcquire(word) != epoch) {
      if (GlobalNanoseconds() - since > args.timeout_ns) __trap();
    }
  }
  __syncthreads();
}

// 16 bytes of each rank's buffer per step: 4 floats or 8 bf16.
template <bool kBf16>
__device__ __forceinline__ void SumPack(const OneShotAllReduceArgs& args, int64_t pack) {
  // Rank 0's values, then each further rank's added in order (so one rank
  // is its input, and two ranks are one addition, as with NCCL).
  float acc[8];
  for (int r = 0; r < args.world; ++r) {
    const uint4 v = reinterpret_cast<const uint4*>(args.buffers[r])[pack];
    const uint32_t words[4] = {v.x, v.y, v.z, v.w};
    for (int j = 0; j < 4; ++j) {
      if constexpr (kBf16) {
        const float lo = Bf16Bits(words[j] & 0xffffu), hi = Bf16Bits(words[j] >> 16);
        acc[2 * j] = r == 0 ? lo : acc[2 * j] + lo;
        acc[2 * j + 1] = r == 0 ? hi : acc[2 * j + 1] + hi;
      } else {
        const float x = __uint_as_float(words[j]);
        acc[j] = r == 0 ? x : acc[j] + x;
      }
    }
  }
  uint32_t w[4];
  for (int j = 0; j < 4; ++j) {
    w[j] = kBf16 ? (ToBf16Bits(acc[2 * j]) | (ToBf16Bits(acc[2 * j + 1]) << 16))
                 : __float_as_uint(acc[j]);
  }
  reinterpret_cast<uint4*>(args.out)[pack] = make_uint4(w[0], w[1], w[2], w[3]);
}

template <bool kBf16>
__device__ __forceinline__ void SumElement(const OneShotAllReduceArgs& args, int64_t i) {
  float acc = 0.0f;
  for (int r = 0; r < args.world; ++r) {
    const float x = kBf16 ? Bf16Bits(static_cast<const uint16_t*>(args.buffers[r])[i])
                          : static_cast<const float*>(args.buffers[r])[i];
    acc = r == 0 ? x : acc + x;
  }
  if (kBf16) {
    static_cast<uint16_t*>(args.out)[i] = static_cast<uint16_t>(ToBf16Bits(acc));
  } else {
    static_cast<float*>(args.out)[i] = acc;
  }
}

template <bool kBf16>
__global__ void __launch_bounds__(kOneShotThreads) OneShotAllReduceKernel(OneShotAllReduceArgs args) {
  __shared__ uint32_t epoch;
  if (threadIdx.x == 0) epoch = args.signals[args.rank]->epoch[blockIdx.x] + 1;
  __syncthreads();
  const uint32_t call = epoch;

  BlockBarrier(args, /*at_end=*/false, call);

  constexpr int kPerPack = kBf16 ? 8 : 4;
  const bool packed = (reinterpret_cast<uintptr_t>(args.out) % 16) == 0;
  const int64_t packs = packed ? args.count / kPerPack : 0;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  for (int64_t pack = first; pack < packs; pack += stride) SumPack<kBf16>(args, pack);
  for (int64_t i = packs * kPerPack + first; i < args.count; i += stride) {
    SumElement<kBf16>(args, i);
  }
  __syncthreads();

  BlockBarrier(args, /*at_end=*/true, call);
  if (threadIdx.x == 0) args.signals[args.rank]->epoch[blockIdx.x] = call;
}

}  // namespace

absl::Status LaunchOneShotAllReduce(const OneShotAllReduceArgs& args, void* stream) {
  if (args.world < 1 || args.world > kOneShotMaxRanks || args.rank < 0 ||
      args.rank >= args.world) {
    return absl::InvalidArgumentError(
        absl::StrCat("one-shot all-reduce: rank ", args.rank, " of ", args.world));
  }
  if (args.type != DataType::kFloat32 && args.type != DataType::kBFloat16) {
    return absl::InvalidArgumentError("one-shot all-reduce: float32 or bfloat16 only");
  }
  if (args.count <= 0) return absl::OkStatus();
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  // Every rank launches every block, also for a short message: block b of
  // each rank waits for block b of its peers.
  if (args.type == DataType::kBFloat16) {
    OneShotAllReduceKernel<true><<<kOneShotBlocks, kOneShotThreads, 0, s>>>(args);
  } else {
    OneShotAllReduceKernel<false><<<kOneShotBlocks, kOneShotThreads, 0, s>>>(args);
  }
  VERDICT_CUDA_RETURN_IF_ERROR(cudaGetLastError());
  return absl::OkStatus();
}

}  // namespace verdict
