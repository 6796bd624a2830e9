#include "kernels/model/kv_cache_write.h"

#include <algorithm>

#include "kernels/model/rope.h"

namespace verdict {

void KvCacheWriteCpu(const float* k, int64_t k_token_stride, const float* v, int64_t v_token_stride,
                     const PagedBatch& batch, const KvCacheLayout& layout, float* k_cache,
                     float* v_cache) {
  const int64_t width = layout.slot_stride();
  for (int r = 0; r < batch.num_reqs; ++r) {
    for (int t = batch.q_start[r]; t < batch.q_start[r + 1]; ++t) {
      const int64_t slot = KvSlot(batch.block_tables, layout, r, batch.positions[t]);
      std::copy(k + t * k_token_stride, k + t * k_token_stride + width, k_cache + slot * width);
      std::copy(v + t * v_token_stride, v + t * v_token_stride + width, v_cache + slot * width);
    }
  }
}

void RopeKvCacheWriteCpu(float* q, int64_t q_token_stride, float* k, int64_t k_token_stride,
                         const float* v, int64_t v_token_stride, const float* inv_freq,
                         int num_heads, const PagedBatch& batch, const KvCacheLayout& layout,
                         float* k_cache, float* v_cache) {
  RopeShape shape;
  shape.tokens = batch.total_q;
  shape.num_heads = num_heads;
  shape.num_kv_heads = layout.num_kv_heads;
  shape.head_dim = layout.head_dim;
  shape.q_token_stride = q_token_stride;
  shape.k_token_stride = k_token_stride;
  RopeCpu(q, k, batch.positions, inv_freq, shape);
  KvCacheWriteCpu(k, k_token_stride, v, v_token_stride, batch, layout, k_cache, v_cache);
}

}  // namespace verdict
