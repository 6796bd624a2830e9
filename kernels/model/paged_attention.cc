#include "kernels/model/paged_attention.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace verdict {

void PagedAttentionCpu(const float* q, int64_t q_token_stride, const float* k_cache,
                       const float* v_cache, const PagedBatch& batch, const KvCacheLayout& layout,
                       const AttentionConfig& config, float* out, int64_t out_token_stride) {
  const int head_dim = layout.head_dim;
  const int group = config.num_heads / layout.num_kv_heads;
  const double scale = config.scale > 0.0f ? config.scale : 1.0 / std::sqrt(double(head_dim));
  const int64_t slot_stride = layout.slot_stride();
  std::vector<double> scores;
  std::vector<double> acc(head_dim);
  for (int r = 0; r < batch.num_reqs; ++r) {
    const int kv_len = batch.kv_len[r];
    for (int t = batch.q_start[r]; t < batch.q_start[r + 1]; ++t) {
      const int pos = batch.positions[t];
      const int hi = std::min(pos, kv_len - 1);
      const int lo = config.sliding_window > 0 ? std::max(0, pos - config.sliding_window + 1) : 0;
      for (int h = 0; h < config.num_heads; ++h) {
        const float* q_head = q + t * q_token_stride + static_cast<int64_t>(h) * head_dim;
        const int64_t kv_offset = static_cast<int64_t>(h / group) * head_dim;
        float* out_head = out + t * out_token_stride + static_cast<int64_t>(h) * head_dim;
        if (hi < lo) {  // nothing to attend to
          std::fill(out_head, out_head + head_dim, 0.0f);
          continue;
        }
        scores.assign(hi - lo + 1, 0.0);
        double max_score = -std::numeric_limits<double>::infinity();
        for (int kp = lo; kp <= hi; ++kp) {
          const float* key =
              k_cache + KvSlot(batch.block_tables, layout, r, kp) * slot_stride + kv_offset;
          double dot = 0.0;
          for (int d = 0; d < head_dim; ++d) dot += static_cast<double>(q_head[d]) * key[d];
          scores[kp - lo] = dot * scale;
          max_score = std::max(max_score, scores[kp - lo]);
        }
        double denom = 0.0;
        std::fill(acc.begin(), acc.end(), 0.0);
        for (int kp = lo; kp <= hi; ++kp) {
          const double w = std::exp(scores[kp - lo] - max_score);
          denom += w;
          const float* value =
              v_cache + KvSlot(batch.block_tables, layout, r, kp) * slot_stride + kv_offset;
          for (int d = 0; d < head_dim; ++d) acc[d] += w * value[d];
        }
        for (int d = 0; d < head_dim; ++d) out_head[d] = static_cast<float>(acc[d] / denom);
      }
    }
  }
}

}  // namespace verdict
