#include "runtime/model/kv_cache.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace verdict {

KvCacheConfig MakeKvCacheConfig(const ModelConfig& model, int tp, int num_blocks,
                                int max_requests, int speculative_slots, int block_size) {
  KvCacheConfig c;
  c.num_layers = model.num_layers;
  c.num_kv_heads = model.num_kv_heads / std::max(tp, 1);
  c.head_dim = model.head_dim;
  c.block_size = block_size;
  c.num_blocks = num_blocks;
  c.max_requests = max_requests;
  c.speculative_slots = speculative_slots;
  if (model.HasSlidingLayers()) {
    c.sliding_window = model.sliding_window;
    c.layer_uses_sliding_window = model.layer_uses_sliding_window;
  }
  return c;
}

int64_t KvCacheBytes(const KvCacheConfig& config, int element_bytes) {
  const int64_t row = static_cast<int64_t>(config.num_kv_heads) * config.head_dim * element_bytes;
  int64_t slots = 0;
  for (int l = 0; l < config.num_layers; ++l) {
    const bool sliding =
        !config.layer_uses_sliding_window.empty() && config.layer_uses_sliding_window[l];
    slots += sliding ? static_cast<int64_t>(config.max_requests) *
                           (config.sliding_window + config.speculative_slots)
                     : static_cast<int64_t>(config.num_blocks) * config.block_size;
  }
  return 2 * slots * row;  // keys and values
}

absl::StatusOr<KvCache> KvCache::Create(KvCacheConfig config) {
  if (config.num_layers < 1 || config.num_kv_heads < 1 || config.head_dim < 1) {
    return absl::InvalidArgumentError("KvCache: layers, kv heads and head_dim must be positive");
  }
  if (config.block_size < 1) return absl::InvalidArgumentError("KvCache: block_size < 1");
  if (config.num_blocks < 0) return absl::InvalidArgumentError("KvCache: num_blocks < 0");
  if (config.max_requests < 1) return absl::InvalidArgumentError("KvCache: max_requests < 1");
  if (config.speculative_slots < 0) {
    return absl::InvalidArgumentError("KvCache: speculative_slots < 0");
  }
  if (!config.layer_uses_sliding_window.empty() &&
      static_cast<int>(config.layer_uses_sliding_window.size()) != config.num_layers) {
    return absl::InvalidArgumentError(
        absl::StrCat("KvCache: layer_uses_sliding_window has ",
                     config.layer_uses_sliding_window.size(), " entries for ", config.num_layers,
                     " layers"));
  }
  const bool any_sliding = std::find(config.layer_uses_sliding_window.begin(),
                                     config.layer_uses_sliding_window.end(),
                                     true) != config.layer_uses_sliding_window.end();
  if (any_sliding && config.sliding_window < 1) {
    return absl::InvalidArgumentError("KvCache: sliding layers need sliding_window >= 1");
  }
  return KvCache(std::move(config));
}

KvCache::KvCache(KvCacheConfig config) : config_(std::move(config)) {
  for (int l = 0; l < config_.num_layers; ++l) {
    if (is_sliding(l)) {
      has_sliding_layers_ = true;
    } else {
      has_full_layers_ = true;
    }
  }
  if (has_sliding_layers_) {
    ring_size_ = config_.sliding_window + config_.speculative_slots;
    for (int r = config_.max_requests - 1; r >= 0; --r) free_rings_.push_back(r);
  }
  if (has_full_layers_) {
    for (int b = config_.num_blocks - 1; b >= 0; --b) free_blocks_.push_back(b);
  }
  requests_.resize(config_.max_requests);
  for (int h = config_.max_requests - 1; h >= 0; --h) free_handles_.push_back(h);
}

bool KvCache::is_sliding(int layer) const {
  return !config_.layer_uses_sliding_window.empty() && config_.layer_uses_sliding_window[layer];
}

int64_t KvCache::slots_in_layer(int layer) const {
  if (is_sliding(layer)) return static_cast<int64_t>(config_.max_requests) * ring_size_;
  return static_cast<int64_t>(config_.num_blocks) * config_.block_size;
}

int KvCache::BlocksNeeded(int64_t num_positions) const {
  if (!has_full_layers_ || num_positions <= 0) return 0;
  return static_cast<int>((num_positions + config_.block_size - 1) / config_.block_size);
}

bool KvCache::CanAdmit(int64_t num_positions) const {
  if (num_positions < 1 || free_handles_.empty()) return false;
  if (has_sliding_layers_ && free_rings_.empty()) return false;
  return BlocksNeeded(num_positions) <= free_blocks();
}

absl::StatusOr<int> KvCache::Allocate(int64_t num_positions) {
  if (num_positions < 1) {
    return absl::InvalidArgumentError(absl::StrCat("KvCache: cannot allocate ", num_positions,
                                                   " positions"));
  }
  if (!CanAdmit(num_positions)) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "KvCache: ", num_positions, " positions need ", BlocksNeeded(num_positions),
        " blocks; free: ", free_blocks(), " blocks, ", free_handles_.size(), " request slots",
        has_sliding_layers_ ? absl::StrCat(", ", free_rings(), " rings") : ""));
  }
  const int handle = free_handles_.back();
  free_handles_.pop_back();
  Request& r = requests_[handle];
  r.active = true;
  r.capacity = num_positions;
  r.blocks.clear();
  for (int i = BlocksNeeded(num_positions); i > 0; --i) {
    r.blocks.push_back(free_blocks_.back());
    free_blocks_.pop_back();
  }
  if (has_sliding_layers_) {
    r.ring = free_rings_.back();
    free_rings_.pop_back();
  }
  ++num_active_;
  return handle;
}

absl::Status KvCache::Free(int handle) {
  if (!is_active(handle)) {
    return absl::InvalidArgumentError(absl::StrCat("KvCache: handle ", handle, " is not active"));
  }
  Request& r = requests_[handle];
  for (auto it = r.blocks.rbegin(); it != r.blocks.rend(); ++it) free_blocks_.push_back(*it);
  if (r.ring >= 0) free_rings_.push_back(r.ring);
  r = Request{};
  free_handles_.push_back(handle);
  --num_active_;
  return absl::OkStatus();
}

bool KvCache::is_active(int handle) const {
  return handle >= 0 && handle < static_cast<int>(requests_.size()) && requests_[handle].active;
}

int64_t KvCache::capacity(int handle) const {
  return is_active(handle) ? requests_[handle].capacity : 0;
}

absl::Span<const int32_t> KvCache::block_table(int handle) const {
  return requests_[handle].blocks;
}

int KvCache::ring(int handle) const { return requests_[handle].ring; }

int64_t KvCache::Slot(int layer, int handle, int64_t position) const {
  const Request& r = requests_[handle];
  if (is_sliding(layer)) {
    return static_cast<int64_t>(r.ring) * ring_size_ + position % ring_size_;
  }
  return static_cast<int64_t>(r.blocks[position / config_.block_size]) * config_.block_size +
         position % config_.block_size;
}

HostKvStorage::HostKvStorage(const KvCache& cache)
    : row_size_(static_cast<int64_t>(cache.config().num_kv_heads) * cache.config().head_dim) {
  const int layers = cache.config().num_layers;
  keys_.resize(layers);
  values_.resize(layers);
  for (int l = 0; l < layers; ++l) {
    keys_[l].assign(cache.slots_in_layer(l) * row_size_, 0.0f);
    values_[l].assign(cache.slots_in_layer(l) * row_size_, 0.0f);
  }
}

}  // namespace verdict
