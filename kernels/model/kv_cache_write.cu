#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "absl/strings/str_cat.h"
#include "kernels/cuda_check.h"
#include "kernels/model/internal/device_utils.cuh"
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
    KvCacheWriteKernel<true><<<batch.total_q, kThreads, 0, stream>>>(
        kb, k_token_stride, vb, v_token_stride, batch.q_start, batch.positions, batch.block_tables,
        batch.num_reqs, layout, kc, vc);
  } else {
    KvCacheWriteKernel<false><<<batch.total_q, kThreads, 0, stream>>>(
        kb, k_token_stride, vb, v_token_stride, batch.q_start, batch.positions, batch.block_tables,
        batch.num_reqs, layout, kc, vc);
  }
  VERDICT_CUDA_RETURN_IF_ERROR(cudaGetLastError());
  return absl::OkStatus();
}

}  // namespace verdict
