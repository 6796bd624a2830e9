#include "kernels/model/kv_cache_write.h"

#include <algorithm>

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

}  // namespace verdict
