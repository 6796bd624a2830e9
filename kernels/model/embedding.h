// Token embedding over a vocab-parallel shard: this rank holds rows
// [vocab_start, vocab_end) of the (padded) embedding table. A token id inside
// the range copies its row; an id outside gives a row of zeros, so summing
// the shards' outputs (the tensor-parallel all-reduce) yields the full
// embedding. With one rank the range is the whole vocabulary.
#ifndef VERDICT_KERNELS_MODEL_EMBEDDING_H_
#define VERDICT_KERNELS_MODEL_EMBEDDING_H_

#include <cstdint>

#include "absl/status/status.h"
#include "kernels/model/cuda_stream.h"

namespace verdict {

struct EmbeddingShard {
  int vocab_start = 0;  // first token id held by this rank
  int vocab_end = 0;    // one past the last; the table has vocab_end - vocab_start rows
  int hidden = 0;
};

// CPU twin: ids [tokens], table [rows, hidden] float -> out [tokens, hidden].
void EmbeddingCpu(const int32_t* ids, int tokens, const float* table, const EmbeddingShard& shard,
                  float* out);

// CUDA launchers: table bf16; out float32 (the residual stream) or bf16.
absl::Status InvokeEmbedding(const int32_t* ids, int tokens, const uint16_t* table,
                             const EmbeddingShard& shard, float* out, cudaStream_t stream);
absl::Status InvokeEmbedding(const int32_t* ids, int tokens, const uint16_t* table,
                             const EmbeddingShard& shard, uint16_t* out, cudaStream_t stream);

}  // namespace verdict

#endif  // VERDICT_KERNELS_MODEL_EMBEDDING_H_
