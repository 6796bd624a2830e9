// Writes this step's keys and values into the paged KV cache (paged_kv.h):
// token t of request r goes to the slot of (r, positions[t]). Runs before
// attention in the same step, so a query block attends causally to its own
// tokens through the cache. k and v are [total_q, num_kv_heads, head_dim]
// with their own distance between tokens (in elements), so they can be read
// straight out of the fused qkv projection output.
#ifndef VERDICT_KERNELS_MODEL_KV_CACHE_WRITE_H_
#define VERDICT_KERNELS_MODEL_KV_CACHE_WRITE_H_

#include <cstdint>

#include "absl/status/status.h"
#include "kernels/model/cuda_stream.h"
#include "kernels/model/paged_kv.h"

namespace verdict {

// CPU twin (float cache).
void KvCacheWriteCpu(const float* k, int64_t k_token_stride, const float* v, int64_t v_token_stride,
                     const PagedBatch& batch, const KvCacheLayout& layout, float* k_cache,
                     float* v_cache);

// CUDA launcher (bf16, device pointers; batch.total_q is read on the host).
absl::Status InvokeKvCacheWrite(const uint16_t* k, int64_t k_token_stride, const uint16_t* v,
                                int64_t v_token_stride, const PagedBatch& batch,
                                const KvCacheLayout& layout, uint16_t* k_cache, uint16_t* v_cache,
                                cudaStream_t stream);

// ---- RoPE fused with the write ----
//
// A decoder layer rotates q and k (InvokeRope) and then copies k and v into
// the cache (InvokeKvCacheWrite); in a decode pass both are launches of a
// few microseconds over a few tokens, so the launch gap costs as much as the
// work. RopeKvCacheWrite does both in one launch and equals, bit for bit,
// InvokeRope(q, k, batch.positions, inv_freq, {batch.total_q, num_heads,
// layout.num_kv_heads, layout.head_dim, q_token_stride, k_token_stride})
// followed by InvokeKvCacheWrite(k, k_token_stride, v, v_token_stride,
// batch, layout, k_cache, v_cache): q and k are rotated in place, as
// InvokeRope leaves them, and the rotated k and the v land in the cache
// slots of (request, position).
// inv_freq holds ComputeRopeInvFreq's layout.head_dim / 2 floats (rope.h).

// CPU twin: RopeCpu then KvCacheWriteCpu (float buffers, host pointers).
void RopeKvCacheWriteCpu(float* q, int64_t q_token_stride, float* k, int64_t k_token_stride,
                         const float* v, int64_t v_token_stride, const float* inv_freq,
                         int num_heads, const PagedBatch& batch, const KvCacheLayout& layout,
                         float* k_cache, float* v_cache);

// CUDA launcher (bf16, device pointers; batch.total_q and batch.num_reqs
// are read on the host).
absl::Status InvokeRopeKvCacheWrite(uint16_t* q, int64_t q_token_stride, uint16_t* k,
                                    int64_t k_token_stride, const uint16_t* v,
                                    int64_t v_token_stride, const float* inv_freq, int num_heads,
                                    const PagedBatch& batch, const KvCacheLayout& layout,
                                    uint16_t* k_cache, uint16_t* v_cache, cudaStream_t stream);

}  // namespace verdict

#endif  // VERDICT_KERNELS_MODEL_KV_CACHE_WRITE_H_
