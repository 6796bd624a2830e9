// KvCache: where each request's keys and values live, for one rank.
//
// Full-attention layers use paged blocks of `block_size` positions: a
// request's block table maps position p to block table[p / block_size].
// Sliding-window layers use one ring per request of
// window + speculative_slots positions, indexed by p % ring_size: a step
// writes its query tokens before its attention reads them, and the extra
// slots keep those writes from evicting a key that a query of the same step
// still needs (seed 000: 128 + 6 = 134 for nextn 5). Rejected draft entries
// stay where they are; the next step writes the same positions again before
// any query reads them, so nothing is copied back after a reject.
//
// Admission never over-commits: Allocate reserves, up front, every block a
// request can ever write, so a running request never runs out of cache.
// This class owns the bookkeeping only; HostKvStorage holds the CPU
// backend's tensors, and a device backend mirrors the same slot layout.
#ifndef VERDICT_RUNTIME_MODEL_KV_CACHE_H_
#define VERDICT_RUNTIME_MODEL_KV_CACHE_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "runtime/model/model_config.h"

namespace verdict {

struct KvCacheConfig {
  int num_layers = 0;
  int num_kv_heads = 0;  // on this rank
  int head_dim = 0;
  int block_size = 16;
  int num_blocks = 0;    // paged blocks shared by all full-attention layers
  int max_requests = 0;  // requests resident at once (one ring each)
  int sliding_window = 0;
  std::vector<bool> layer_uses_sliding_window;  // empty: no sliding layers
  // Positions one step may write for a request past its accepted tokens:
  // the verify rows, nextn + 1.
  int speculative_slots = 0;
};

// The rank-local cache geometry for `model` at tensor-parallel degree tp.
KvCacheConfig MakeKvCacheConfig(const ModelConfig& model, int tp, int num_blocks,
                                int max_requests, int speculative_slots, int block_size = 16);

// Bytes of K and V storage the configuration needs with elements of
// `element_bytes` (4 on the CPU backend, 2 for BF16), for sizing num_blocks
// from a memory budget.
int64_t KvCacheBytes(const KvCacheConfig& config, int element_bytes);

class KvCache {
 public:
  static absl::StatusOr<KvCache> Create(KvCacheConfig config);

  const KvCacheConfig& config() const { return config_; }
  bool is_sliding(int layer) const;
  int ring_size() const { return ring_size_; }  // window + speculative_slots, 0 without sliding layers
  // Storage rows (positions) a layer holds across all requests.
  int64_t slots_in_layer(int layer) const;

  // Blocks a request needs to write positions 0 .. num_positions - 1.
  // Callers pass every position a request can ever write: prompt, the
  // maximum new tokens, and the speculative slots of its last step.
  int BlocksNeeded(int64_t num_positions) const;
  // The reservation for a request: its prompt, every token it may
  // generate, and the speculative slots its last step may write beyond.
  int64_t PositionsToReserve(int64_t prompt_tokens, int64_t max_new_tokens) const {
    return prompt_tokens + max_new_tokens + config_.speculative_slots;
  }
  bool CanAdmit(int64_t num_positions) const;
  // Reserves blocks (and a ring) for positions < num_positions; returns the
  // request's handle. ResourceExhausted when CanAdmit is false.
  absl::StatusOr<int> Allocate(int64_t num_positions);
  absl::Status Free(int handle);

  bool is_active(int handle) const;
  int64_t capacity(int handle) const;  // positions the request may write
  absl::Span<const int32_t> block_table(int handle) const;
  int ring(int handle) const;  // ring index, -1 without sliding layers

  // The storage row of `position` for request `handle` in `layer`.
  // Requires is_active(handle) and 0 <= position < capacity(handle).
  int64_t Slot(int layer, int handle, int64_t position) const;

  int free_blocks() const { return static_cast<int>(free_blocks_.size()); }
  int free_rings() const { return static_cast<int>(free_rings_.size()); }
  int num_active() const { return num_active_; }

 private:
  explicit KvCache(KvCacheConfig config);

  struct Request {
    bool active = false;
    int64_t capacity = 0;
    int ring = -1;
    std::vector<int32_t> blocks;
  };

  KvCacheConfig config_;
  bool has_full_layers_ = false;
  bool has_sliding_layers_ = false;
  int ring_size_ = 0;
  std::vector<int32_t> free_blocks_;  // stack: most recently freed first
  std::vector<int32_t> free_rings_;
  std::vector<int> free_handles_;
  std::vector<Request> requests_;  // indexed by handle
  int num_active_ = 0;
};

// Float32 keys and values for the CPU backend: per layer, one
// [slots_in_layer, num_kv_heads, head_dim] array each for K and V.
class HostKvStorage {
 public:
  explicit HostKvStorage(const KvCache& cache);

  int64_t row_size() const { return row_size_; }  // num_kv_heads * head_dim
  float* key(int layer, int64_t slot) { return keys_[layer].data() + slot * row_size_; }
  float* value(int layer, int64_t slot) { return values_[layer].data() + slot * row_size_; }
  const float* key(int layer, int64_t slot) const { return keys_[layer].data() + slot * row_size_; }
  const float* value(int layer, int64_t slot) const {
    return values_[layer].data() + slot * row_size_;
  }

 private:
  int64_t row_size_;
  std::vector<std::vector<float>> keys_;
  std::vector<std::vector<float>> values_;
};

}  // namespace verdict

#endif  // VERDICT_RUNTIME_MODEL_KV_CACHE_H_
