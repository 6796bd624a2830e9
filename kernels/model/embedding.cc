#include "kernels/model/embedding.h"

#include <algorithm>

namespace verdict {

void EmbeddingCpu(const int32_t* ids, int tokens, const float* table, const EmbeddingShard& shard,
                  float* out) {
  for (int t = 0; t < tokens; ++t) {
    float* row = out + static_cast<int64_t>(t) * shard.hidden;
    const int32_t id = ids[t];
    if (id >= shard.vocab_start && id < shard.vocab_end) {
      const float* src = table + static_cast<int64_t>(id - shard.vocab_start) * shard.hidden;
      std::copy(src, src + shard.hidden, row);
    } else {
      std::fill(row, row + shard.hidden, 0.0f);
    }
  }
}

}  // namespace verdict
