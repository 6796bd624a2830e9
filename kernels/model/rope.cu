#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "kernels/cuda_check.h"
#include "kernels/model/internal/device_utils.cuh"
#include "kernels/model/internal/rope_pair.cuh"
#include "kernels/model/rope.h"

namespace verdict {
namespace {

constexpr int kThreads = 256;

// Grid (pair blocks, tokens): one thread per rotated pair (head, i) of a
// token, so a small verify batch still spreads over many CTAs and every
// thread issues its two loads at once. Each thread computes its own angle
// (RotateRopePair, shared with the fused RoPE + KV-cache write kernel).
__global__ void __launch_bounds__(kThreads)
    RopeKernel(__nv_bfloat16* __restrict__ q, __nv_bfloat16* __restrict__ k,
               const int32_t* __restrict__ positions, const float* __restrict__ inv_freq,
               int num_heads, int num_kv_heads, int head_dim, int64_t q_token_stride,
               int64_t k_token_stride) {
  model_internal::WaitForPredecessor();  // LaunchDependent's contract
  model_internal::AllowDependents();
  const int half = head_dim / 2;
  const int pair = blockIdx.x * kThreads + threadIdx.x;
  if (pair >= (num_heads + num_kv_heads) * half) return;
  const int token = blockIdx.y;
  const model_internal::RopePairSlot slot = model_internal::LocateRopePair(
      q, q_token_stride, k, k_token_stride, num_heads, head_dim, token, pair);
  const int i = slot.i;
  const model_internal::RopePair r = model_internal::RotateRopePair(
      slot.base[i], slot.base[i + half], positions[token], inv_freq[i]);
  slot.base[i] = r.lo;
  slot.base[i + half] = r.hi;
}

}  // namespace

absl::Status InvokeRope(uint16_t* q, uint16_t* k, const int32_t* positions, const float* inv_freq,
                        const RopeShape& shape, cudaStream_t stream) {
  if (shape.tokens < 0 || shape.head_dim <= 0 || shape.head_dim % 2 != 0 || shape.num_heads < 0 ||
      shape.num_kv_heads < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("rope: bad shape tokens=", shape.tokens, " head_dim=", shape.head_dim));
  }
  const int pairs = (shape.num_heads + shape.num_kv_heads) * (shape.head_dim / 2);
  if (shape.tokens == 0 || pairs == 0) return absl::OkStatus();
  // Tokens beyond grid.y's limit (65535) go in further launches.
  for (int first = 0; first < shape.tokens; first += 65535) {
    const int count = std::min(65535, shape.tokens - first);
    const dim3 grid((pairs + kThreads - 1) / kThreads, count);
    VERDICT_CUDA_RETURN_IF_ERROR(model_internal::LaunchDependent(
        RopeKernel, grid, kThreads, 0, stream,
        reinterpret_cast<__nv_bfloat16*>(q) + first * shape.q_token_stride,
        reinterpret_cast<__nv_bfloat16*>(k) + first * shape.k_token_stride, positions + first,
        inv_freq, shape.num_heads, shape.num_kv_heads, shape.head_dim, shape.q_token_stride,
        shape.k_token_stride));
  }
  VERDICT_CUDA_RETURN_IF_ERROR(cudaGetLastError());
  return absl::OkStatus();
}

}  // namespace verdict
