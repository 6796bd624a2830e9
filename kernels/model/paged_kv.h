// The paged KV cache as the attention ops see it, and the ragged batch of
// query tokens that reads and writes it.
//
// Per layer, k_cache and v_cache are each [num_blocks, block_size,
// num_kv_heads, head_dim]. Request r owns the physical blocks listed in row
// r of block_tables [num_reqs, max_blocks_per_req]; the key of position p
// lives in slot block_tables[r][p / block_size] * block_size + p % block_size.
// With ring_blocks > 0 the first ring_blocks entries of the row form a ring
// (a sliding-window layer's cache): position p uses entry
// (p / block_size) % ring_blocks, so the ring must hold the window plus the
// step's query tokens. A per-request ring of R slots (slot = ring * R +
// p % R) is block_size = R, ring_blocks = 1 and a one-entry table row
// holding the ring's index.
//
// The batch is ragged: request r's query tokens are rows q_start[r] ..
// q_start[r + 1] - 1 of q (q_start is cu_seqlens_q), positions[t] is token
// t's position, and kv_len[r] is the request's context length once this
// step's tokens are written (its last query normally sits at kv_len - 1).
#ifndef VERDICT_KERNELS_MODEL_PAGED_KV_H_
#define VERDICT_KERNELS_MODEL_PAGED_KV_H_

#include <cstdint>

#ifdef __CUDACC__
#define VERDICT_MODEL_HD __host__ __device__ __forceinline__
#else
#define VERDICT_MODEL_HD inline
#endif

namespace verdict {

struct KvCacheLayout {
  int num_blocks = 0;
  int block_size = 16;
  int num_kv_heads = 0;
  int head_dim = 0;
  int max_blocks_per_req = 0;  // row length of block_tables
  int ring_blocks = 0;         // 0: linear; > 0: ring of this many table entries

  VERDICT_MODEL_HD int64_t slot_stride() const {
    return static_cast<int64_t>(num_kv_heads) * head_dim;
  }
};

// Host pointers for the CPU twins, device pointers for the launchers.
struct PagedBatch {
  int num_reqs = 0;
  int total_q = 0;                        // q_start[num_reqs]
  const int32_t* q_start = nullptr;       // [num_reqs + 1]
  const int32_t* kv_len = nullptr;        // [num_reqs]
  const int32_t* positions = nullptr;     // [total_q]
  const int32_t* block_tables = nullptr;  // [num_reqs, max_blocks_per_req]
  // Host-side bounds the launchers size their grids with (the arrays above
  // live on the device); the CPU twins ignore them. Every request must have
  // q_start[r + 1] - q_start[r] <= max_query_len and kv_len[r] <= max_kv_len.
  int max_query_len = 0;
  int max_kv_len = 0;
};

// The slot (row of the [num_blocks * block_size, kv_heads, head_dim] view)
// that holds request `req`'s position `pos`.
VERDICT_MODEL_HD int64_t KvSlot(const int32_t* block_tables, const KvCacheLayout& layout, int req,
                                int pos) {
  int logical_block = pos / layout.block_size;
  if (layout.ring_blocks > 0) logical_block %= layout.ring_blocks;
  const int32_t physical =
      block_tables[static_cast<int64_t>(req) * layout.max_blocks_per_req + logical_block];
  return static_cast<int64_t>(physical) * layout.block_size + pos % layout.block_size;
}

}  // namespace verdict

#endif  // VERDICT_KERNELS_MODEL_PAGED_KV_H_
