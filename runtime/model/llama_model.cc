#include "runtime/model/llama_model.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <set>
#include <thread>

#include "absl/strings/str_cat.h"
#include "kernels/model/add_bias.h"
#include "kernels/model/embedding.h"
#include "kernels/model/gemm.h"
#include "kernels/model/rms_norm.h"
#include "kernels/model/rope.h"
#include "kernels/model/silu_and_mul.h"
#include "runtime/model/parallel_for.h"
#include "runtime/model/rope.h"

namespace verdict {

const char* ModelRunner::EagerReasonName(EagerReason reason) {
  switch (reason) {
    case EagerReason::kFirstUse:
      return "first_use";
    case EagerReason::kPartialLogits:
      return "partial_logits";
    case EagerReason::kUncapturable:
      return "uncapturable";
    case EagerReason::kCaptureFailed:
      return "capture_failed";
    case EagerReason::kOutgrewGraphBuffers:
      return "outgrew_graph_buffers";
  }
  return "unknown";
}

int64_t ForwardBatch::num_tokens() const {
  int64_t n = 0;
  for (const ForwardRequest& r : requests) n += static_cast<int64_t>(r.token_ids.size());
  return n;
}

int64_t ForwardBatch::num_logit_rows() const {
  int64_t n = 0;
  for (const ForwardRequest& r : requests) n += r.logit_rows();
  return n;
}

absl::Status ValidateForwardBatch(const ForwardBatch& batch, const ModelConfig& config,
                                  const KvCache& kv_cache) {
  std::set<int> handles;
  for (size_t i = 0; i < batch.requests.size(); ++i) {
    const ForwardRequest& r = batch.requests[i];
    const int64_t n = static_cast<int64_t>(r.token_ids.size());
    auto error = [&](const std::string& reason) {
      return absl::InvalidArgumentError(absl::StrCat("forward batch request ", i, " (kv handle ",
                                                     r.kv_handle, "): ", reason));
    };
    if (!kv_cache.is_active(r.kv_handle)) return error("kv handle is not allocated");
    if (!handles.insert(r.kv_handle).second) return error("kv handle appears twice in the batch");
    if (n == 0) return error("no query tokens");
    if (r.start_position < 0) return error(absl::StrCat("start position ", r.start_position));
    if (r.start_position + n > kv_cache.capacity(r.kv_handle)) {
      return error(absl::StrCat("positions ", r.start_position, "..", r.start_position + n - 1,
                                " exceed the reservation of ", kv_cache.capacity(r.kv_handle),
                                " positions"));
    }
    if (r.logit_rows() > n) {
      return error(absl::StrCat(r.num_logits, " logit rows for ", n, " query tokens"));
    }
    for (int32_t id : r.token_ids) {
      if (id < 0 || id >= config.vocab_size) {
        return error(absl::StrCat("token id ", id, " outside the vocabulary (", config.vocab_size,
                                  ")"));
      }
    }
  }
  return absl::OkStatus();
}

namespace {

// gate_proj's rows, then up_proj's, in one [2 * inter, hidden] weight: one
// GEMM then writes the fused gate_up rows that SiluAndMulCpu reads. The two
// originals are freed.
HostTensor StackGateUp(LlamaLayerWeights& layer) {
  HostTensor stacked;
  stacked.shape = {layer.gate_proj.shape[0] + layer.up_proj.shape[0], layer.gate_proj.shape[1]};
  stacked.data.reserve(layer.gate_proj.data.size() + layer.up_proj.data.size());
  stacked.data.insert(stacked.data.end(), layer.gate_proj.data.begin(), layer.gate_proj.data.end());
  stacked.data.insert(stacked.data.end(), layer.up_proj.data.begin(), layer.up_proj.data.end());
  layer.gate_proj = HostTensor();
  layer.up_proj = HostTensor();
  return stacked;
}

class CpuLlamaModel : public ModelRunner {
 public:
  CpuLlamaModel(const ModelConfig& config, LlamaWeights weights, const KvCache* kv_cache,
                Communicator* comm, int threads)
      : config_(config),
        weights_(std::move(weights)),
        kv_cache_(kv_cache),
        storage_(*kv_cache),
        comm_(comm),
        threads_(threads),
        inv_freq_(RopeInvFrequencies(config)) {
    gate_up_.reserve(weights_.layers.size());
    for (LlamaLayerWeights& layer : weights_.layers) gate_up_.push_back(StackGateUp(layer));
  }

  const ModelConfig& config() const override { return config_; }

  absl::Status Forward(const ForwardBatch& batch, float* logits) override;

 private:
  // Sums a partial result over the ranks (row-parallel projections and the
  // vocab-parallel embedding).
  absl::Status AllReduce(std::vector<float>& buffer) {
    if (tp() == 1) return absl::OkStatus();
    return comm_->AllReduceSum(buffer.data(), buffer.data(), buffer.size(), DataType::kFloat32);
  }

  int tp() const { return weights_.tp.size; }

  // One query row against the keys at positions [first, last] of `handle`.
  void AttendRow(int layer, int handle, int64_t first, int64_t last, const float* q_row,
                 float* out_row, std::vector<float>& scores) const;

  void Attention(int layer, const ForwardBatch& batch, const std::vector<int64_t>& row_offset,
                 const std::vector<float>& k, const std::vector<float>& v,
                 const std::vector<float>& q, std::vector<float>& out);

  ModelConfig config_;
  LlamaWeights weights_;
  const KvCache* kv_cache_;
  HostKvStorage storage_;
  Communicator* comm_;
  int threads_;
  std::vector<float> inv_freq_;
  std::vector<HostTensor> gate_up_;  // per layer, StackGateUp
};

void CpuLlamaModel::AttendRow(int layer, int handle, int64_t first, int64_t last,
                              const float* q_row, float* out_row,
                              std::vector<float>& scores) const {
  const int hd = config_.head_dim;
  const int heads = config_.num_heads / tp();
  const int kv_heads = config_.num_kv_heads / tp();
  const int group = heads / kv_heads;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  const int64_t count = last - first + 1;
  scores.resize(count);
  for (int h = 0; h < heads; ++h) {
    const int g = h / group;
    const float* qh = q_row + h * hd;
    float max_score = -INFINITY;
    for (int64_t j = 0; j < count; ++j) {
      const float* key = storage_.key(layer, kv_cache_->Slot(layer, handle, first + j)) + g * hd;
      float dot = 0;
      for (int d = 0; d < hd; ++d) dot += qh[d] * key[d];
      scores[j] = dot * scale;
      max_score = std::max(max_score, scores[j]);
    }
    float sum = 0;
    for (int64_t j = 0; j < count; ++j) {
      scores[j] = std::exp(scores[j] - max_score);
      sum += scores[j];
    }
    float* oh = out_row + h * hd;
    std::fill(oh, oh + hd, 0.0f);
    for (int64_t j = 0; j < count; ++j) {
      const float w = scores[j] / sum;
      const float* value =
          storage_.value(layer, kv_cache_->Slot(layer, handle, first + j)) + g * hd;
      for (int d = 0; d < hd; ++d) oh[d] += w * value[d];
    }
  }
}

void CpuLlamaModel::Attention(int layer, const ForwardBatch& batch,
                              const std::vector<int64_t>& row_offset,
                              const std::vector<float>& k, const std::vector<float>& v,
                              const std::vector<float>& q, std::vector<float>& out) {
  const bool sliding = kv_cache_->is_sliding(layer);
  const int64_t kv_row = storage_.row_size();
  const int64_t q_row = static_cast<int64_t>(config_.num_heads / tp()) * config_.head_dim;
  const int window = config_.sliding_window;
  for (size_t i = 0; i < batch.requests.size(); ++i) {
    const ForwardRequest& r = batch.requests[i];
    const int64_t n = static_cast<int64_t>(r.token_ids.size());
    // Write-then-read in chunks. On full layers one chunk holds the whole
    // step. On a sliding layer a chunk holds at most speculative_slots
    // tokens: the ring has that many slots beyond the window, so writing a
    // chunk never evicts a key that one of its queries reads (seed 000).
    // A decode or verify step is one chunk; a long prefill takes several.
    const int64_t chunk =
        sliding ? std::max<int64_t>(1, kv_cache_->config().speculative_slots) : n;
    for (int64_t begin = 0; begin < n; begin += chunk) {
      const int64_t end = std::min(n, begin + chunk);
      for (int64_t t = begin; t < end; ++t) {
        const int64_t row = row_offset[i] + t;
        const int64_t slot = kv_cache_->Slot(layer, r.kv_handle, r.start_position + t);
        std::memcpy(storage_.key(layer, slot), &k[row * kv_row], kv_row * sizeof(float));
        std::memcpy(storage_.value(layer, slot), &v[row * kv_row], kv_row * sizeof(float));
      }
      ParallelFor(end - begin, (end - begin) >= 4 ? threads_ : 1, [&](int64_t b, int64_t e) {
        std::vector<float> scores;
        for (int64_t t = begin + b; t < begin + e; ++t) {
          const int64_t position = r.start_position + t;
          const int64_t first = sliding ? std::max<int64_t>(0, position - window + 1) : 0;
          const int64_t row = row_offset[i] + t;
          AttendRow(layer, r.kv_handle, first, position, &q[row * q_row], &out[row * q_row],
                    scores);
        }
      });
    }
  }
}

absl::Status CpuLlamaModel::Forward(const ForwardBatch& batch, float* logits) {
  if (batch.device_token_ids != nullptr) {
    return absl::InvalidArgumentError("the CPU backend takes no device token ids");
  }
  if (absl::Status s = ValidateForwardBatch(batch, config_, *kv_cache_); !s.ok()) return s;
  const int64_t tokens = batch.num_tokens();
  const int hidden = config_.hidden_size;
  const int hd = config_.head_dim;
  const int q_dim = config_.num_heads / tp() * hd;
  const int kv_dim = config_.num_kv_heads / tp() * hd;
  const int inter = config_.intermediate_size / tp();
  const float eps = config_.rms_norm_eps;

  // The packed rows' token ids and positions, as the ops take them.
  std::vector<int64_t> row_offset(batch.requests.size());
  std::vector<int32_t> row_ids(tokens), row_positions(tokens);
  {
    int64_t row = 0;
    for (size_t i = 0; i < batch.requests.size(); ++i) {
      const ForwardRequest& r = batch.requests[i];
      row_offset[i] = row;
      for (size_t t = 0; t < r.token_ids.size(); ++t, ++row) {
        row_ids[row] = r.token_ids[t];
        row_positions[row] = static_cast<int32_t>(r.start_position + static_cast<int64_t>(t));
      }
    }
  }
  const int rows = static_cast<int>(tokens);

  // Vocab-parallel embedding: each rank fills the rows it owns, zeros
  // elsewhere, and the all-reduce assembles the full rows.
  std::vector<float> x(tokens * hidden);
  const int vocab_shard = weights_.padded_vocab / tp();
  const EmbeddingShard shard{weights_.tp.rank * vocab_shard, (weights_.tp.rank + 1) * vocab_shard,
                             hidden};
  EmbeddingCpu(row_ids.data(), rows, weights_.embed_tokens.ptr(), shard, x.data());
  if (absl::Status s = AllReduce(x); !s.ok()) return s;

  std::vector<float> h(tokens * hidden), q(tokens * q_dim), k(tokens * kv_dim), v(tokens * kv_dim),
      attn(tokens * q_dim), proj(tokens * hidden), gate_up(tokens * 2 * inter), act(tokens * inter);
  auto bias = [](const HostTensor& t) { return t.empty() ? nullptr : t.ptr(); };
  const RopeShape rope{rows, q_dim / hd, kv_dim / hd, hd, q_dim, kv_dim};

  for (int l = 0; l < config_.num_layers; ++l) {
    const LlamaLayerWeights& w = weights_.layers[l];
    RmsNormCpu(x.data(), w.input_norm.ptr(), h.data(), rows, hidden, eps);
    GemmCpu(h.data(), w.q_proj.ptr(), bias(w.q_bias), q.data(), rows, q_dim, hidden, threads_);
    GemmCpu(h.data(), w.k_proj.ptr(), bias(w.k_bias), k.data(), rows, kv_dim, hidden, threads_);
    GemmCpu(h.data(), w.v_proj.ptr(), bias(w.v_bias), v.data(), rows, kv_dim, hidden, threads_);
    if (config_.qk_norm) {
      // Qwen3: RMSNorm over each head, before RoPE.
      HeadRmsNormCpu(q.data(), rows, rope.num_heads, hd, q_dim, w.q_norm.ptr(), eps);
      HeadRmsNormCpu(k.data(), rows, rope.num_kv_heads, hd, kv_dim, w.k_norm.ptr(), eps);
    }
    RopeCpu(q.data(), k.data(), row_positions.data(), inv_freq_.data(), rope);
    Attention(l, batch, row_offset, k, v, q, attn);

    // Row-parallel output projection: partial sums, then the all-reduce;
    // the bias is added once, after it.
    GemmCpu(attn.data(), w.o_proj.ptr(), nullptr, proj.data(), rows, hidden, q_dim, threads_);
    if (absl::Status s = AllReduce(proj); !s.ok()) return s;
    if (!w.o_bias.empty()) AddBiasCpu(proj.data(), w.o_bias.ptr(), rows, hidden);
    AddRmsNormCpu(proj.data(), x.data(), w.post_attention_norm.ptr(), h.data(), rows, hidden, eps);

    GemmCpu(h.data(), gate_up_[l].ptr(), nullptr, gate_up.data(), rows, 2 * inter, hidden,
            threads_);
    SiluAndMulCpu(gate_up.data(), act.data(), rows, inter);
    GemmCpu(act.data(), w.down_proj.ptr(), nullptr, proj.data(), rows, hidden, inter, threads_);
    if (absl::Status s = AllReduce(proj); !s.ok()) return s;
    for (int64_t i = 0; i < tokens * hidden; ++i) x[i] += proj[i];
  }

  // Final norm and LM head on the requested rows only.
  const int64_t out_rows = batch.num_logit_rows();
  if (out_rows == 0) return absl::OkStatus();
  std::vector<float> selected(out_rows * hidden);
  {
    int64_t dst = 0;
    for (size_t i = 0; i < batch.requests.size(); ++i) {
      const ForwardRequest& r = batch.requests[i];
      const int64_t n = static_cast<int64_t>(r.token_ids.size());
      for (int64_t t = n - r.logit_rows(); t < n; ++t, ++dst) {
        std::memcpy(&selected[dst * hidden], &x[(row_offset[i] + t) * hidden],
                    hidden * sizeof(float));
      }
    }
  }
  RmsNormCpu(selected.data(), weights_.final_norm.ptr(), selected.data(),
             static_cast<int>(out_rows), hidden, eps);
  std::vector<float> local(out_rows * vocab_shard);
  GemmCpu(selected.data(), weights_.output_embedding().ptr(), nullptr, local.data(),
          static_cast<int>(out_rows), vocab_shard, hidden, threads_);

  // Vocab-parallel LM head: gather every rank's slice, drop the padding.
  const int64_t vocab = config_.vocab_size;
  std::vector<float> gathered;
  const float* blocks = local.data();
  if (tp() > 1) {
    gathered.resize(static_cast<size_t>(tp()) * local.size());
    if (absl::Status s = comm_->AllGather(local.data(), gathered.data(), local.size(),
                                          DataType::kFloat32);
        !s.ok()) {
      return s;
    }
    blocks = gathered.data();
  }
  for (int r = 0; r < tp(); ++r) {
    const float* block = blocks + static_cast<int64_t>(r) * out_rows * vocab_shard;
    const int64_t first = r * vocab_shard;
    const int64_t count = std::clamp<int64_t>(vocab - first, 0, vocab_shard);
    for (int64_t row = 0; row < out_rows; ++row) {
      std::memcpy(logits + row * vocab + first, block + row * vocab_shard, count * sizeof(float));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<ModelRunner>> CreateCpuLlamaModel(const ModelConfig& config,
                                                                 const WeightSource& source,
                                                                 const KvCache* kv_cache,
                                                                 Communicator* comm,
                                                                 CpuModelOptions options) {
  if (kv_cache == nullptr) return absl::InvalidArgumentError("CreateCpuLlamaModel: no KV cache");
  const TensorParallel tp{comm != nullptr ? comm->rank() : 0,
                          comm != nullptr ? comm->world_size() : 1};
  if (absl::Status s = ValidateTensorParallel(config, tp.size); !s.ok()) return s;
  const KvCacheConfig& kv = kv_cache->config();
  if (kv.num_layers != config.num_layers || kv.num_kv_heads != config.num_kv_heads / tp.size ||
      kv.head_dim != config.head_dim) {
    return absl::InvalidArgumentError(absl::StrCat(
        "KV cache geometry (", kv.num_layers, " layers, ", kv.num_kv_heads, " kv heads, head_dim ",
        kv.head_dim, ") does not match the model at tp ", tp.size, " (", config.num_layers, ", ",
        config.num_kv_heads / tp.size, ", ", config.head_dim, ")"));
  }
  for (int l = 0; l < config.num_layers; ++l) {
    const bool model_sliding = config.HasSlidingLayers() && config.layer_uses_sliding_window[l];
    if (kv_cache->is_sliding(l) != model_sliding ||
        (model_sliding && kv.sliding_window != config.sliding_window)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "KV cache sliding-window layout differs from the model at layer ", l));
    }
  }
  absl::StatusOr<LlamaWeights> weights = LoadLlamaWeights(config, source, tp);
  if (!weights.ok()) return weights.status();
  int threads = options.num_threads;
  if (threads <= 0) threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  return std::unique_ptr<ModelRunner>(
      new CpuLlamaModel(config, *std::move(weights), kv_cache, comm, threads));
}

}  // namespace verdict
