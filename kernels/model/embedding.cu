#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "absl/strings/str_cat.h"
#include "kernels/cuda_check.h"
#include "kernels/model/embedding.h"
#include "kernels/model/internal/device_utils.cuh"

namespace verdict {
namespace {

using model_internal::LoadBf16x8;

constexpr int kThreads = 128;

__device__ __forceinline__ void Store8(float* dst, const float (&v)[8]) {
  model_internal::StoreF32x8(dst, v);
}
__device__ __forceinline__ void Store8(__nv_bfloat16* dst, const float (&v)[8]) {
  model_internal::StoreBf16x8(dst, v);
}
__device__ __forceinline__ void Store1(float* dst, float v) { *dst = v; }
__device__ __forceinline__ void Store1(__nv_bfloat16* dst, float v) { *dst = __float2bfloat16(v); }

// One CTA per token: copy (or zero) one row of `hidden` values.
template <typename TOut, bool kVec>
__global__ void __launch_bounds__(kThreads)
    EmbeddingKernel(const int32_t* __restrict__ ids, const __nv_bfloat16* __restrict__ table,
                    int vocab_start, int vocab_end, int hidden, TOut* __restrict__ out) {
  const int32_t id = ids[blockIdx.x];
  const bool owned = id >= vocab_start && id < vocab_end;
  const __nv_bfloat16* src =
      owned ? table + static_cast<int64_t>(id - vocab_start) * hidden : nullptr;
  TOut* dst = out + static_cast<int64_t>(blockIdx.x) * hidden;
  if constexpr (kVec) {
    for (int i = threadIdx.x * 8; i < hidden; i += kThreads * 8) {
      float v[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
      if (owned) LoadBf16x8(src + i, v);
      Store8(dst + i, v);
    }
  } else {
    for (int i = threadIdx.x; i < hidden; i += kThreads) {
      Store1(dst + i, owned ? __bfloat162float(src[i]) : 0.0f);
    }
  }
}

template <typename TOut>
absl::Status Launch(const int32_t* ids, int tokens, const uint16_t* table,
                    const EmbeddingShard& shard, TOut* out, cudaStream_t stream) {
  if (tokens < 0 || shard.hidden <= 0 || shard.vocab_end < shard.vocab_start) {
    return absl::InvalidArgumentError(absl::StrCat("embedding: bad shape tokens=", tokens,
                                                   " hidden=", shard.hidden, " vocab=[",
                                                   shard.vocab_start, ", ", shard.vocab_end, ")"));
  }
  if (tokens == 0) return absl::OkStatus();
  const auto* t = reinterpret_cast<const __nv_bfloat16*>(table);
  const bool vec = shard.hidden % 8 == 0 && model_internal::IsAligned16(table) &&
                   model_internal::IsAligned16(out);
  if (vec) {
    EmbeddingKernel<TOut, true><<<tokens, kThreads, 0, stream>>>(
        ids, t, shard.vocab_start, shard.vocab_end, shard.hidden, out);
  } else {
    EmbeddingKernel<TOut, false><<<tokens, kThreads, 0, stream>>>(
        ids, t, shard.vocab_start, shard.vocab_end, shard.hidden, out);
  }
  VERDICT_CUDA_RETURN_IF_ERROR(cudaGetLastError());
  return absl::OkStatus();
}

}  // namespace

absl::Status InvokeEmbedding(const int32_t* ids, int tokens, const uint16_t* table,
                             const EmbeddingShard& shard, float* out, cudaStream_t stream) {
  return Launch(ids, tokens, table, shard, out, stream);
}

absl::Status InvokeEmbedding(const int32_t* ids, int tokens, const uint16_t* table,
                             const EmbeddingShard& shard, uint16_t* out, cudaStream_t stream) {
  return Launch(ids, tokens, table, shard, reinterpret_cast<__nv_bfloat16*>(out), stream);
}

}  // namespace verdict
