#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "absl/strings/str_cat.h"
#include "kernels/cuda_check.h"
#include "kernels/model/internal/device_utils.cuh"
#include "kernels/model/internal/rope_pair.cuh"
#include "kernels/model/kv_cache_write.h"

namespace verdict {
namespace {

constexpr int kThreads = 128;

// The request that owns query row t: the last r with q_start[r] <= t.
__device__ __forceinline__ int RequestOfToken(const int32_t* q_start, int num_reqs, int t) {
  int lo = 0, hi = num_reqs - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (q_start[mid] <= t) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  return lo;
}

// One CTA per token: copies its kv_heads * head_dim keys and values, in
// 16-byte pieces (kVec) or single values.
template <bool kVec>
__global__ void __launch_bounds__(kThreads)
    KvCacheWriteKernel(const __nv_bfloat16* __restrict__ k, int64_t k_token_stride,
                       const __nv_bfloat16* __restrict__ v, int64_t v_token_stride,
                       const int32_t* __restrict__ q_start, const int32_t* __restrict__ positions,
                       const int32_t* __restrict__ block_tables, int num_reqs, KvCacheLayout layout,
                       __nv_bfloat16* __restrict__ k_cache, __nv_bfloat16* __restrict__ v_cache) {
  model_internal::WaitForPredecessor();  // LaunchDependent's contract
  model_internal::AllowDependents();
  const int t = blockIdx.x;
  const int req = RequestOfToken(q_start, num_reqs, t);
  const int64_t width = layout.slot_stride();
  const int64_t slot = KvSlot(block_tables, layout, req, positions[t]);
  const __nv_bfloat16* k_src = k + t * k_token_stride;
  const __nv_bfloat16* v_src = v + t * v_token_stride;
  __nv_bfloat16* k_dst = k_cache + slot * width;
  __nv_bfloat16* v_dst = v_cache + slot * width;
  if constexpr (kVec) {
    using model_internal::Bf16x8;
    for (int64_t i = threadIdx.x * 8; i < width; i += kThreads * 8) {
      *reinterpret_cast<Bf16x8*>(k_dst + i) = *reinterpret_cast<const Bf16x8*>(k_src + i);
      *reinterpret_cast<Bf16x8*>(v_dst + i) = *reinterpret_cast<const Bf16x8*>(v_src + i);
    }
  } else {
    for (int64_t i = threadIdx.x; i < width; i += kThreads) {
      k_dst[i] = k_src[i];
      v_dst[i] = v_src[i];
    }
  }
}

// RopeKernel's block size (rope.cu): the fused kernel keeps its grid.
constexpr int kRopeThreads = 256;

// RoPE and the KV-cache write in one launch. Grid (thread blocks, tokens)
// as RopeKernel's, one thread per rotated pair (q heads, then k heads) of a
// token, each rotating its pair with the same RotateRopePair as RopeKernel
// so that q and k come out with RopeKernel's bits. A k pair's thread also
// stores the rotated pair to the token's cache slot, so the rotated keys
// never make a round trip through memory before the write. Thread x of a
// token also copies value x of its kv_heads * head_dim values (the grid's
// x extent covers both counts). first_token offsets blockIdx.y for batches
// beyond grid.y's limit: the slot lookup needs the token's index in the
// whole batch.
__global__ void __launch_bounds__(kRopeThreads) RopeKvCacheWriteKernel(
    __nv_bfloat16* __restrict__ q, int64_t q_token_stride, __nv_bfloat16* __restrict__ k,
    int64_t k_token_stride, const __nv_bfloat16* __restrict__ v, int64_t v_token_stride,
    const float* __restrict__ inv_freq, int num_heads, const int32_t* __restrict__ q_start,
    const int32_t* __restrict__ positions, const int32_t* __restrict__ block_tables, int num_reqs,
    KvCacheLayout layout, __nv_bfloat16* __restrict__ k_cache, __nv_bfloat16* __restrict__ v_cache,
    int first_token) {
  model_internal::WaitForPredecessor();  // LaunchDependent's contract
  model_internal::AllowDependents();
  const int head_dim = layout.head_dim;
  const int half = head_dim / 2;
  const int q_pairs = num_heads * half;
  const int pairs = q_pairs + layout.num_kv_heads * half;
  const int width = layout.num_kv_heads * head_dim;  // the launcher bounds it
  const int x = blockIdx.x * kRopeThreads + threadIdx.x;
  const bool rotates = x < pairs;
  const bool stores_k = rotates && x >= q_pairs;
  const bool copies_v = x < width;
  if (!rotates && !copies_v) return;
  const int token = first_token + static_cast<int>(blockIdx.y);
  const int32_t position = positions[token];
  // Only the threads that store to the cache look up the slot (q pairs of
  // the later heads skip the binary search).
  int64_t slot_offset = 0;
  if (stores_k || copies_v) {
    const int req = RequestOfToken(q_start, num_reqs, token);
    slot_offset = KvSlot(block_tables, layout, req, position) * width;
  }
  if (rotates) {
    const model_internal::RopePairSlot slot = model_internal::LocateRopePair(
        q, q_token_stride, k, k_token_stride, num_heads, head_dim, token, x);
    const int i = slot.i;
    const model_internal::RopePair r =
        model_internal::RotateRopePair(slot.base[i], slot.base[i + half], position, inv_freq[i]);
    slot.base[i] = r.lo;
    slot.base[i + half] = r.hi;
    if (stores_k) {
      __nv_bfloat16* dst =
          k_cache + slot_offset + static_cast<int64_t>(slot.head - num_heads) * head_dim;
      dst[i] = r.lo;
      dst[i + half] = r.hi;
    }
  }
  if (copies_v) v_cache[slot_offset + x] = v[token * v_token_stride + x];
}

}  // namespace

absl::Status InvokeKvCacheWrite(const uint16_t* k, int64_t k_token_stride, const uint16_t* v,
                                int64_t v_token_stride, const PagedBatch& batch,
                                const KvCacheLayout& layout, uint16_t* k_cache, uint16_t* v_cache,
                                cudaStream_t stream) {
  if (batch.total_q < 0 || batch.num_reqs < 0 || layout.block_size <= 0 ||
      layout.num_kv_heads <= 0 || layout.head_dim <= 0 || layout.max_blocks_per_req <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("kv_cache_write: bad shape total_q=", batch.total_q,
                     " num_reqs=", batch.num_reqs, " block_size=", layout.block_size,
                     " kv_heads=", layout.num_kv_heads, " head_dim=", layout.head_dim));
  }
  if (batch.total_q == 0 || batch.num_reqs == 0) return absl::OkStatus();
  const bool vec = layout.slot_stride() % 8 == 0 && k_token_stride % 8 == 0 &&
                   v_token_stride % 8 == 0 && model_internal::IsAligned16(k) &&
                   model_internal::IsAligned16(v) && model_internal::IsAligned16(k_cache) &&
                   model_internal::IsAligned16(v_cache);
  const auto* kb = reinterpret_cast<const __nv_bfloat16*>(k);
  const auto* vb = reinterpret_cast<const __nv_bfloat16*>(v);
  auto* kc = reinterpret_cast<__nv_bfloat16*>(k_cache);
  auto* vc = reinterpret_cast<__nv_bfloat16*>(v_cache);
  if (vec) {
    VERDICT_CUDA_RETURN_IF_ERROR(model_internal::LaunchDependent(
        KvCacheWriteKernel<true>, batch.total_q, kThreads, 0, stream, kb, k_token_stride, vb,
        v_token_stride, batch.q_start, batch.positions, batch.block_tables, batch.num_reqs, layout,
        kc, vc));
  } else {
    VERDICT_CUDA_RETURN_IF_ERROR(model_internal::LaunchDependent(
        KvCacheWriteKernel<false>, batch.total_q, kThreads, 0, stream, kb, k_token_stride, vb,
        v_token_stride, batch.q_start, batch.positions, batch.block_tables, batch.num_reqs, layout,
        kc, vc));
  }
  VERDICT_CUDA_RETURN_IF_ERROR(cudaGetLastError());
  return absl::OkStatus();
}

absl::Status InvokeRopeKvCacheWrite(uint16_t* q, int64_t q_token_stride, uint16_t* k,
                                    int64_t k_token_stride, const uint16_t* v,
                                    int64_t v_token_stride, const float* inv_freq, int num_heads,
                                    const PagedBatch& batch, const KvCacheLayout& layout,
                                    uint16_t* k_cache, uint16_t* v_cache, cudaStream_t stream) {
  // InvokeRope's checks and InvokeKvCacheWrite's, plus: a batch with tokens
  // has requests (total_q is q_start[num_reqs]), and a token's q, k and v
  // values stay far enough below INT_MAX for the kernel's int thread index.
  constexpr int64_t kMaxRowValues = int64_t{1} << 30;
  const bool bad =
      batch.total_q < 0 || batch.num_reqs < 0 || (batch.num_reqs == 0 && batch.total_q > 0) ||
      num_heads < 0 || layout.block_size <= 0 || layout.num_kv_heads <= 0 || layout.head_dim <= 0 ||
      layout.head_dim % 2 != 0 || layout.max_blocks_per_req <= 0 ||
      (static_cast<int64_t>(num_heads) + layout.num_kv_heads) * layout.head_dim > kMaxRowValues;
  if (bad) {
    return absl::InvalidArgumentError(absl::StrCat(
        "rope_kv_cache_write: bad shape total_q=", batch.total_q, " num_reqs=", batch.num_reqs,
        " heads=", num_heads, " kv_heads=", layout.num_kv_heads, " head_dim=", layout.head_dim,
        " block_size=", layout.block_size, " max_blocks_per_req=", layout.max_blocks_per_req));
  }
  if (batch.total_q == 0) return absl::OkStatus();
  const int half = layout.head_dim / 2;
  const int pairs = (num_heads + layout.num_kv_heads) * half;
  const int width = layout.num_kv_heads * layout.head_dim;
  const int x_threads = std::max(pairs, width);
  // Tokens beyond grid.y's limit (65535) go in further launches, as in
  // InvokeRope.
  for (int first = 0; first < batch.total_q; first += 65535) {
    const int count = std::min(65535, batch.total_q - first);
    const dim3 grid((x_threads + kRopeThreads - 1) / kRopeThreads, count);
    VERDICT_CUDA_RETURN_IF_ERROR(model_internal::LaunchDependent(
        RopeKvCacheWriteKernel, grid, kRopeThreads, 0, stream, reinterpret_cast<__nv_bfloat16*>(q),
        q_token_stride, reinterpret_cast<__nv_bfloat16*>(k), k_token_stride,
        reinterpret_cast<const __nv_bfloat16*>(v), v_token_stride, inv_freq, num_heads,
        batch.q_start, batch.positions, batch.block_tables, batch.num_reqs, layout,
        reinterpret_cast<__nv_bfloat16*>(k_cache), reinterpret_cast<__nv_bfloat16*>(v_cache),
        first));
  }
  VERDICT_CUDA_RETURN_IF_ERROR(cudaGetLastError());
  return absl::OkStatus();
}

}  // namespace verdict
