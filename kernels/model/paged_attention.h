// Attention of a ragged batch of query tokens over the paged KV cache
// (paged_kv.h), for decode, speculative verify (a few tokens per request)
// and prefill alike.
//
// Query token t of request r, at position p = positions[t], attends to the
// cached keys of r at positions max(0, p - window + 1) .. min(p, kv_len[r] -
// 1) (window = sliding_window, 0 = unbounded): causal within the step's own
// tokens once KvCacheWrite has stored them. Head h reads kv head
// h / (num_heads / num_kv_heads) (grouped-query attention). Scores are
// scaled by `scale` (1/sqrt(head_dim) when 0), softmax in float.
//
// q is [total_q, num_heads, head_dim] with a distance of q_token_stride
// elements between tokens (so it can be read from the fused qkv output);
// out is [total_q, num_heads, head_dim] with out_token_stride.
#ifndef VERDICT_KERNELS_MODEL_PAGED_ATTENTION_H_
#define VERDICT_KERNELS_MODEL_PAGED_ATTENTION_H_

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "kernels/model/cuda_stream.h"
#include "kernels/model/paged_kv.h"

namespace verdict {

struct AttentionConfig {
  int num_heads = 0;       // query heads (a multiple of layout.num_kv_heads)
  int sliding_window = 0;  // 0: none
  float scale = 0.0f;      // 0: 1 / sqrt(head_dim)
};

// CPU twin (float cache and activations; host pointers in batch).
void PagedAttentionCpu(const float* q, int64_t q_token_stride, const float* k_cache,
                       const float* v_cache, const PagedBatch& batch, const KvCacheLayout& layout,
                       const AttentionConfig& config, float* out, int64_t out_token_stride);

// Device scratch the launcher can use to split long contexts across more
// CTAs (flash-decoding): an exact figure for this batch shape. With less
// (even 0) the launcher splits less; results are the same up to rounding.
size_t PagedAttentionWorkspaceBytes(const PagedBatch& batch, const KvCacheLayout& layout,
                                    const AttentionConfig& config);

// CUDA launcher: bf16 q, caches and out (device pointers). head_dim 64 or
// 128; q, out and the caches 16-byte aligned, token strides multiples of 8.
// batch.max_query_len and batch.max_kv_len must bound the device arrays.
absl::Status InvokePagedAttention(const uint16_t* q, int64_t q_token_stride,
                                  const uint16_t* k_cache, const uint16_t* v_cache,
                                  const PagedBatch& batch, const KvCacheLayout& layout,
                                  const AttentionConfig& config, uint16_t* out,
                                  int64_t out_token_stride, void* workspace, size_t workspace_bytes,
                                  cudaStream_t stream);

}  // namespace verdict

#endif  // VERDICT_KERNELS_MODEL_PAGED_ATTENTION_H_
