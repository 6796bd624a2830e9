#include "runtime/model/cuda_llama_model.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <functional>
#include <iterator>
#include <map>
#include <mutex>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/cuda_check.h"
#include "kernels/model/add_bias.h"
#include "kernels/model/embedding.h"
#include "kernels/model/gemm.h"
#include "kernels/model/kv_cache_write.h"
#include "kernels/model/paged_attention.h"
#include "kernels/model/paged_kv.h"
#include "kernels/model/rms_norm.h"
#include "runtime/model/device_memory.h"
#include "runtime/model/graph_shapes.h"
#include "runtime/model/rope.h"

namespace verdict {
namespace {

struct DeviceLayer {
  bool sliding = false;
  DeviceBuffer input_norm;
  DeviceBuffer qkv;             // [q; k; v] rows of this rank, [q + 2 kv, hidden]
  DeviceBuffer qkv_bias;        // qkv_bias only
  DeviceBuffer q_norm, k_norm;  // qk_norm only
  DeviceBuffer o;               // [hidden, q]
  DeviceBuffer o_bias;          // o_bias only; added once after the all-reduce
  DeviceBuffer post_norm;
  DeviceBuffer gate_up;  // [gate; up] rows, [2 inter, hidden]
  DeviceBuffer down;     // [hidden, inter]
  DeviceBuffer k_cache, v_cache;
};

// Sizes of this rank's shard.
struct LocalShape {
  int hidden = 0;
  int heads = 0;
  int kv_heads = 0;
  int head_dim = 0;
  int inter = 0;
  int vocab_shard = 0;  // padded vocabulary / tp
  int q_size() const { return heads * head_dim; }
  int kv_size() const { return kv_heads * head_dim; }
  int qkv_size() const { return q_size() + 2 * kv_size(); }
};

int RoundUp(int n, int to) { return (n + to - 1) / to * to; }

class CudaLlamaModel : public ModelRunner {
 public:
  CudaLlamaModel(const ModelConfig& config, const KvCache* kv_cache, Communicator* comm,
                 TensorParallel tp, int device)
      : config_(config), kv_cache_(kv_cache), comm_(comm), tp_(tp), device_(device) {
    shape_.hidden = config.hidden_size;
    shape_.heads = config.num_heads / tp.size;
    shape_.kv_heads = config.num_kv_heads / tp.size;
    shape_.head_dim = config.head_dim;
    shape_.inter = config.intermediate_size / tp.size;
    shape_.vocab_shard = PaddedVocabSize(config.vocab_size, tp.size) / tp.size;
  }
  ~CudaLlamaModel() override {
    cudaSetDevice(device_);
    DropGraphs();
    if (meta_uploaded_ != nullptr) cudaEventDestroy(meta_uploaded_);
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }

  void set_cuda_graphs(bool on) { cuda_graphs_ = on; }
  void set_pad_graph_shapes(bool on) { pad_graph_shapes_ = on; }
  void set_graph_pass_tokens(int64_t tokens) { graph_pass_tokens_ = tokens; }
  void set_graph_max_context(int64_t tokens) { graph_max_context_ = tokens; }
  void set_one_shot_all_reduce(NvlinkAllReduce* all_reduce) { one_shot_ = all_reduce; }
  void set_skinny_gemm(bool on) { skinny_gemm_ = on; }

  absl::Status Init(const WeightSource& source, int load_threads);

  const ModelConfig& config() const override { return config_; }
  absl::Status Forward(const ForwardBatch& batch, float* logits) override;
  absl::StatusOr<GraphCapture> CaptureGraphs(
      const std::vector<GraphShape>& shapes,
      const std::function<void(int done)>& progress) override;
  bool logits_on_device_ok() const override { return true; }
  void* device_queue() const override { return stream_; }
  int64_t graph_replays() const override { return graph_replays_.load(std::memory_order_relaxed); }
  int64_t eager_passes(EagerReason reason) const override {
    return eager_passes_[static_cast<int>(reason)].load(std::memory_order_relaxed);
  }

 private:
  // One pass over the layers for `batch`, whose requests each bring at most
  // the sliding layers' chunk of tokens (or any number without sliding
  // layers). Logit rows go to host `logits` at row `dst_rows[i]` onwards for
  // request i.
  // A pass of phantom requests only at a shape captured ahead of serving:
  // with size_only it reserves the shape's buffers and stops there.
  struct AheadPass {
    GraphShape shape;
    bool size_only = false;
  };
  absl::Status RunPass(const ForwardBatch& batch, const std::vector<int64_t>& dst_rows,
                       float* logits, const AheadPass* ahead = nullptr);
  // What a pass launches and the step buffers it needs: its launch shape
  // (padded on the graph buffers), the logit rows the LM head computes and
  // those read out, and the offsets (in int32 elements) of each array in the
  // packed metadata, the block tables last: their rows are host_table wide
  // on the host and table_pitch apart on the device.
  struct PassLayout {
    LaunchShape shape;
    int head_rows = 0;
    int gather_rows = 0;
    size_t o_ids = 0, o_pos = 0, o_qstart = 0, o_kvlen = 0, o_rings = 0, o_tables = 0;
    size_t host_total = 0;    // entries of the host copy
    size_t device_total = 0;  // entries of the device copy
    size_t attn_workspace = 0;
  };
  // `padded`: launched at PaddedShape. The caller sets attn_workspace.
  PassLayout LayOutPass(int requests, int tokens, int out_rows, int max_query, int host_table,
                        int table_pitch, bool all_rows, bool padded,
                        const AheadPass* ahead) const;
  // Rows the graph buffers hold at least (graph_pass_tokens).
  size_t GraphFloorRows() const {
    return static_cast<size_t>(std::max<int64_t>(graph_pass_tokens_, 0));
  }
  // The buffers a captured graph reads or writes, with the bytes `pass`
  // needs of each; with `graph_floors`, as the graph buffers are sized (at
  // least GraphFloorRows rows, 4 MB of metadata).
  struct StepBuffers;
  std::vector<std::pair<DeviceBuffer*, size_t>> GraphHeldBytes(StepBuffers& buf,
                                                               const PassLayout& pass,
                                                               bool graph_floors) const;
  absl::Status LoadWeights(const WeightSource& source, int load_threads);
  // Enqueues `enqueue` on the stream: replayed from a CUDA graph of the
  // same launch shape when one was captured, captured on the shape's second
  // use (the first runs eagerly, which also prepares the GEMM plans), else
  // run eagerly. `eager` says why a pass that is not graphable runs
  // eagerly. `ahead`: a start-up pass, run eagerly once and captured at
  // once, not replayed.
  template <typename Key>
  absl::Status EnqueueMaybeGraph(const Key& key, bool graphable, EagerReason eager,
                                 const std::function<absl::Status()>& enqueue, bool ahead);
  // Destroys the captured graphs (with keep_ahead, all but those captured
  // ahead of serving).
  void DropGraphs(bool keep_ahead = false);
  absl::Status AllReduce(void* buffer, size_t count, DataType type) {
    if (tp_.size == 1) return absl::OkStatus();
    if (one_shot_ != nullptr && count * DataTypeSize(type) <= one_shot_->max_bytes()) {
      return one_shot_->AllReduceSum(buffer, buffer, count, type, stream_);
    }
    return comm_->AllReduceSum(buffer, buffer, count, type, stream_);
  }

  ModelConfig config_;
  const KvCache* kv_cache_;
  Communicator* comm_;
  TensorParallel tp_;
  int device_;
  LocalShape shape_;
  cudaStream_t stream_ = nullptr;
  std::unique_ptr<Gemm> gemm_;

  DeviceBuffer embed_;    // [vocab_shard, hidden]
  DeviceBuffer lm_head_;  // untied only
  DeviceBuffer final_norm_;
  DeviceBuffer inv_freq_;
  std::vector<DeviceLayer> layers_;

  // Per-step buffers, grown to the largest step seen. host_meta_ is free
  // again once meta_uploaded_ (recorded after its upload) has passed: a pass
  // that did not wait may still be reading it.
  PinnedBuffer host_meta_;
  cudaEvent_t meta_uploaded_ = nullptr;
  struct StepBuffers {
    DeviceBuffer meta;
    DeviceBuffer residual, normed, qkv, attn, o_out, gate_up, act, mlp_out;
    DeviceBuffer selected, local_logits, gathered, full_logits, attn_workspace;
  };
  // Graphable passes have buffers of their own, which captured graphs hold:
  // a prefill larger than any step so far grows only the eager set, and
  // the graphs stay.
  StepBuffers graph_buffers_;
  StepBuffers eager_buffers_;

  // Captured forward passes by launch shape: (requests, tokens, longest
  // query, block tables' width on the device, context bound); the last two
  // are the same for every pass within graph_max_context. Valid while no
  // step buffer moves; a reallocation drops them all.
  using GraphKey = std::tuple<int, int, int, int, int>;
  struct GraphEntry {
    int uses = 0;
    cudaGraphExec_t exec = nullptr;
    bool failed = false;  // capture refused: this shape stays eager
    bool ahead = false;   // captured ahead of serving (CaptureGraphs)
  };
  bool cuda_graphs_ = true;
  bool pad_graph_shapes_ = true;  // LaunchShape
  int64_t graph_pass_tokens_ = 0;  // CudaModelOptions::graph_pass_tokens
  int64_t graph_max_context_ = 0;  // CudaModelOptions::graph_max_context
  int served_graphs_ = 0;          // graphs captured while serving
  // CaptureGraphs reserved the graph buffers for its shapes and captured
  // them (whether or not each capture succeeded).
  bool captured_ahead_ = false;
  NvlinkAllReduce* one_shot_ = nullptr;  // CudaModelOptions::one_shot_all_reduce
  std::atomic<int64_t> graph_replays_{0};
  std::atomic<int64_t> eager_passes_[std::size(kEagerReasons)] = {};
  void CountEager(EagerReason reason) {
    eager_passes_[static_cast<int>(reason)].fetch_add(1, std::memory_order_relaxed);
  }
  bool skinny_gemm_ = false;  // before Init
  std::map<GraphKey, GraphEntry> graphs_;
};

void CudaLlamaModel::DropGraphs(bool keep_ahead) {
  for (auto it = graphs_.begin(); it != graphs_.end();) {
    if (keep_ahead && it->second.ahead) {
      ++it;
      continue;
    }
    if (it->second.exec != nullptr) cudaGraphExecDestroy(it->second.exec);
    it = graphs_.erase(it);
  }
  served_graphs_ = 0;
}

template <typename Key>
absl::Status CudaLlamaModel::EnqueueMaybeGraph(const Key& key, bool graphable,
                                               EagerReason eager,
                                               const std::function<absl::Status()>& enqueue,
                                               bool ahead) {
  if (!cuda_graphs_) return enqueue();
  if (!graphable) {
    CountEager(eager);
    return enqueue();
  }
  // Shapes come and go with batch sizes and long contexts; a bounded cache
  // starts over rather than keeping every graph a long run has seen. The
  // shapes captured ahead stay.
  constexpr int kMaxServedGraphs = 512;
  if (served_graphs_ >= kMaxServedGraphs && graphs_.find(key) == graphs_.end()) {
    DropGraphs(/*keep_ahead=*/true);
  }
  GraphEntry& entry = graphs_[key];
  if (entry.exec != nullptr) {
    if (ahead) return absl::OkStatus();  // already held
    VERDICT_CUDA_RETURN_IF_ERROR(cudaGraphLaunch(entry.exec, stream_));
    graph_replays_.fetch_add(1, std::memory_order_relaxed);
    return absl::OkStatus();
  }
  if (entry.failed) {
    if (ahead) return absl::OkStatus();
    CountEager(EagerReason::kCaptureFailed);
    return enqueue();
  }
  if (ahead) {
    // Ahead of serving, the shape runs eagerly first all the same: the
    // GEMMs time their candidate algorithms on their first eager run, which
    // a capture cannot do.
    if (absl::Status s = enqueue(); !s.ok()) return s;
  } else if (entry.uses++ == 0) {
    // While serving, a new shape's first use runs eagerly; its second is
    // captured.
    CountEager(EagerReason::kFirstUse);
    return enqueue();
  }
  VERDICT_CUDA_RETURN_IF_ERROR(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
  const absl::Status status = enqueue();
  cudaGraph_t graph = nullptr;
  const cudaError_t end = cudaStreamEndCapture(stream_, &graph);
  if (status.ok() && end == cudaSuccess &&
      cudaGraphInstantiate(&entry.exec, graph, 0) != cudaSuccess) {
    entry.exec = nullptr;
  }
  if (graph != nullptr) cudaGraphDestroy(graph);
  if (entry.exec == nullptr) {
    // Capture is an optimisation: a shape that cannot be captured runs
    // eagerly from now on (the same kernels, so the same results). At TP >
    // 1 the other ranks may replay a graph of this shape meanwhile: their
    // captured collectives still match this rank's eager ones, which work
    // on the same ordinary (unregistered) buffers. An error of NCCL itself
    // fails the communicator, and with it the eager retry.
    cudaGetLastError();
    entry.failed = true;
    if (ahead) return absl::OkStatus();
    CountEager(EagerReason::kCaptureFailed);
    return enqueue();
  }
  entry.ahead = ahead;
  if (ahead) return absl::OkStatus();
  ++served_graphs_;
  VERDICT_CUDA_RETURN_IF_ERROR(cudaGraphLaunch(entry.exec, stream_));
  graph_replays_.fetch_add(1, std::memory_order_relaxed);
  return absl::OkStatus();
}

absl::StatusOr<ModelRunner::GraphCapture> CudaLlamaModel::CaptureGraphs(
    const std::vector<GraphShape>& shapes, const std::function<void(int done)>& progress) {
  GraphCapture report;
  // Ahead-of-time shapes are padded ones of a fixed context (without one a
  // graph would serve contexts up to one bucket only), and need collectives
  // that a graph can hold.
  const bool capturable = tp_.size == 1 || comm_->CapturableInCudaGraphs();
  if (!cuda_graphs_ || !pad_graph_shapes_ || graph_max_context_ <= 0 || !capturable ||
      shapes.empty()) {
    return report;
  }
  VERDICT_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_));
  const auto free_bytes = [](int64_t* bytes) -> absl::Status {
    size_t free = 0, total = 0;
    VERDICT_CUDA_RETURN_IF_ERROR(cudaMemGetInfo(&free, &total));
    *bytes = static_cast<int64_t>(free);
    return absl::OkStatus();
  };
  int64_t free_before = 0, free_sized = 0, free_after = 0;
  if (absl::Status s = free_bytes(&free_before); !s.ok()) return s;
  // Largest first, and every shape's buffers reserved before any capture:
  // a buffer that grows afterwards would drop every graph.
  std::vector<GraphShape> order = shapes;
  std::sort(order.begin(), order.end(), [](const GraphShape& a, const GraphShape& b) {
    return std::tie(a.tokens, a.requests, a.max_query) > std::tie(b.tokens, b.requests, b.max_query);
  });
  const ForwardBatch none;
  for (const bool size_only : {true, false}) {
    int done = 0;
    for (const GraphShape& shape : order) {
      if (shape.requests < 1 || shape.max_query < 1 || shape.tokens < 1 ||
          shape.tokens > static_cast<int64_t>(shape.requests) * shape.max_query) {
        return absl::InvalidArgumentError(absl::StrCat(
            "graph shape of ", shape.requests, " requests, ", shape.tokens,
            " tokens and queries of up to ", shape.max_query, " cannot be launched"));
      }
      const AheadPass pass{shape, size_only};
      if (absl::Status s = RunPass(none, {}, nullptr, &pass); !s.ok()) return s;
      if (!size_only && progress) progress(++done);
    }
    if (size_only) {
      if (absl::Status s = free_bytes(&free_sized); !s.ok()) return s;
    }
  }
  captured_ahead_ = true;
  // Graphs held, whether captured now or before; refused shapes are
  // retried while serving.
  for (const auto& [key, entry] : graphs_) {
    if (entry.exec != nullptr) ++report.captured;
    if (entry.failed) ++report.failed;
  }
  if (absl::Status s = free_bytes(&free_after); !s.ok()) return s;
  report.buffer_bytes = free_before - free_sized;
  report.graph_bytes = free_sized - free_after;
  return report;
}

absl::Status CudaLlamaModel::Init(const WeightSource& source, int load_threads) {
  VERDICT_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_));
  VERDICT_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  VERDICT_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&meta_uploaded_, cudaEventDisableTiming));
  GemmOptions gemm_options;
  gemm_options.skinny_small_m = skinny_gemm_;
  absl::StatusOr<std::unique_ptr<Gemm>> gemm = Gemm::Create(gemm_options);
  if (!gemm.ok()) return gemm.status();
  gemm_ = *std::move(gemm);
  if (absl::Status s = LoadWeights(source, load_threads); !s.ok()) return s;

  const std::vector<float> inv_freq = RopeInvFrequencies(config_);
  if (absl::Status s = inv_freq_.Allocate(inv_freq.size() * sizeof(float)); !s.ok()) return s;
  VERDICT_CUDA_RETURN_IF_ERROR(cudaMemcpy(inv_freq_.as<float>(), inv_freq.data(),
                                          inv_freq.size() * sizeof(float), cudaMemcpyHostToDevice));

  // The device KV cache: the KvCache's slots, bf16, and after them the
  // phantom requests' scratch (a block on full layers, a ring on sliding
  // ones; LaunchShape).
  const KvCacheConfig& kv = kv_cache_->config();
  for (int l = 0; l < config_.num_layers; ++l) {
    const int64_t scratch = kv_cache_->is_sliding(l) ? kv_cache_->ring_size() : kv.block_size;
    const size_t bytes = static_cast<size_t>(kv_cache_->slots_in_layer(l) + scratch) *
                         kv.num_kv_heads * kv.head_dim * sizeof(uint16_t);
    if (absl::Status s = layers_[l].k_cache.Allocate(bytes); !s.ok()) return s;
    if (absl::Status s = layers_[l].v_cache.Allocate(bytes); !s.ok()) return s;
    layers_[l].sliding = kv_cache_->is_sliding(l);
  }
  return absl::OkStatus();
}

absl::Status CudaLlamaModel::LoadWeights(const WeightSource& source, int load_threads) {
  const LocalShape& s = shape_;
  const int64_t hidden = s.hidden;
  layers_ = std::vector<DeviceLayer>(config_.num_layers);
  auto alloc = [](DeviceBuffer& b, int64_t elements) {
    return b.Allocate(static_cast<size_t>(elements) * sizeof(uint16_t));
  };
  std::vector<absl::Status> allocs = {
      alloc(embed_, static_cast<int64_t>(s.vocab_shard) * hidden),
      alloc(final_norm_, hidden),
  };
  if (!config_.tie_word_embeddings) {
    allocs.push_back(alloc(lm_head_, static_cast<int64_t>(s.vocab_shard) * hidden));
  }
  for (DeviceLayer& l : layers_) {
    allocs.push_back(alloc(l.input_norm, hidden));
    allocs.push_back(alloc(l.qkv, s.qkv_size() * hidden));
    if (config_.qkv_bias) allocs.push_back(alloc(l.qkv_bias, s.qkv_size()));
    if (config_.qk_norm) {
      allocs.push_back(alloc(l.q_norm, s.head_dim));
      allocs.push_back(alloc(l.k_norm, s.head_dim));
    }
    allocs.push_back(alloc(l.o, hidden * s.q_size()));
    if (config_.o_bias) allocs.push_back(alloc(l.o_bias, hidden));
    allocs.push_back(alloc(l.post_norm, hidden));
    allocs.push_back(alloc(l.gate_up, 2 * static_cast<int64_t>(s.inter) * hidden));
    allocs.push_back(alloc(l.down, hidden * s.inter));
  }
  for (const absl::Status& st : allocs) {
    if (!st.ok()) return st;
  }

  // Where each tensor's shard goes: the field of a scratch LlamaWeights that
  // ForEachLlamaWeight pairs it with names it; q/k/v and gate/up are stacked.
  LlamaWeights scratch;
  std::map<const HostTensor*, uint16_t*> destination;
  std::vector<WeightSpec> specs;
  std::vector<const HostTensor*> fields;
  ForEachLlamaWeight(config_, &scratch, [&](WeightSpec spec, HostTensor* field) {
    specs.push_back(std::move(spec));
    fields.push_back(field);
  });
  destination[&scratch.embed_tokens] = embed_.as<uint16_t>();
  destination[&scratch.final_norm] = final_norm_.as<uint16_t>();
  destination[&scratch.lm_head] = lm_head_.as<uint16_t>();
  for (int i = 0; i < config_.num_layers; ++i) {
    const LlamaLayerWeights& w = scratch.layers[i];
    DeviceLayer& d = layers_[i];
    uint16_t* qkv = d.qkv.as<uint16_t>();
    destination[&w.input_norm] = d.input_norm.as<uint16_t>();
    destination[&w.q_proj] = qkv;
    destination[&w.k_proj] = qkv + static_cast<int64_t>(s.q_size()) * hidden;
    destination[&w.v_proj] = qkv + static_cast<int64_t>(s.q_size() + s.kv_size()) * hidden;
    uint16_t* bias = d.qkv_bias.as<uint16_t>();
    destination[&w.q_bias] = bias;
    destination[&w.k_bias] = bias + s.q_size();
    destination[&w.v_bias] = bias + s.q_size() + s.kv_size();
    destination[&w.q_norm] = d.q_norm.as<uint16_t>();
    destination[&w.k_norm] = d.k_norm.as<uint16_t>();
    destination[&w.o_proj] = d.o.as<uint16_t>();
    destination[&w.o_bias] = d.o_bias.as<uint16_t>();
    destination[&w.post_attention_norm] = d.post_norm.as<uint16_t>();
    destination[&w.gate_proj] = d.gate_up.as<uint16_t>();
    destination[&w.up_proj] = d.gate_up.as<uint16_t>() + static_cast<int64_t>(s.inter) * hidden;
    destination[&w.down_proj] = d.down.as<uint16_t>();
  }

  // A bad checkpoint fails before any large read.
  for (const WeightSpec& spec : specs) {
    if (absl::Status st = source.Check(spec); !st.ok()) return st;
  }
  // Shards are read (and dummy values generated) on several threads; each
  // copies its own tensor to the device.
  int threads = load_threads > 0
                    ? load_threads
                    : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  threads = std::max(1, std::min<int>(threads, static_cast<int>(specs.size())));
  std::atomic<size_t> next{0};
  std::mutex error_mu;
  absl::Status error;
  auto worker = [&] {
    if (cudaSetDevice(device_) != cudaSuccess) {
      std::lock_guard<std::mutex> lock(error_mu);
      error.Update(absl::InternalError("cudaSetDevice failed in a weight loading thread"));
      return;
    }
    std::vector<uint16_t> staging;
    for (size_t i = next++; i < specs.size(); i = next++) {
      {
        std::lock_guard<std::mutex> lock(error_mu);
        if (!error.ok()) return;
      }
      const WeightSpec& spec = specs[i];
      const int64_t n = ShardElements(spec, tp_);
      staging.resize(static_cast<size_t>(n));
      absl::Status st = source.ReadShard(spec, tp_, TensorDType::kBF16, staging.data());
      if (st.ok()) {
        st = CudaStatus(
            cudaMemcpy(destination.at(fields[i]), staging.data(),
                       static_cast<size_t>(n) * sizeof(uint16_t), cudaMemcpyHostToDevice),
            "cudaMemcpy (weights)");
      }
      if (!st.ok()) {
        std::lock_guard<std::mutex> lock(error_mu);
        error.Update(st);
        return;
      }
    }
  };
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) pool.emplace_back(worker);
  for (std::thread& t : pool) t.join();
  return error;
}

absl::Status CudaLlamaModel::Forward(const ForwardBatch& batch, float* logits) {
  if (absl::Status s = ValidateForwardBatch(batch, config_, *kv_cache_); !s.ok()) return s;
  if (batch.device_token_ids != nullptr) {
    for (const ForwardRequest& r : batch.requests) {
      if (r.token_ids.size() != 1) {
        return absl::InvalidArgumentError(
            "device token ids need exactly one query token per request");
      }
    }
  }
  VERDICT_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_));
  const size_t n = batch.requests.size();
  std::vector<int64_t> dst_rows(n);
  int64_t rows = 0;
  for (size_t i = 0; i < n; ++i) {
    dst_rows[i] = rows;
    rows += batch.requests[i].logit_rows();
  }
  // On sliding layers a pass may write at most the ring's speculative slots
  // per request (the extra slots beyond the window): more would evict keys
  // that the pass's own queries read. Long prefills take several passes, in
  // position order; a pass's logit rows are the part of the request's
  // wanted rows (a suffix) that falls inside it.
  int64_t chunk = INT64_MAX;
  if (config_.HasSlidingLayers()) {
    chunk = std::max<int64_t>(1, kv_cache_->config().speculative_slots);
  }
  int64_t longest = 0;
  for (const ForwardRequest& r : batch.requests) {
    longest = std::max<int64_t>(longest, static_cast<int64_t>(r.token_ids.size()));
  }
  if (longest <= chunk) return RunPass(batch, dst_rows, logits);
  for (int64_t begin = 0; begin < longest; begin += chunk) {
    ForwardBatch pass;
    std::vector<int64_t> pass_dst;
    for (size_t i = 0; i < n; ++i) {
      const ForwardRequest& r = batch.requests[i];
      const int64_t len = static_cast<int64_t>(r.token_ids.size());
      if (begin >= len) continue;
      const int64_t end = std::min(len, begin + chunk);
      const int64_t first_wanted = len - r.logit_rows();
      ForwardRequest p;
      p.kv_handle = r.kv_handle;
      p.start_position = r.start_position + begin;
      p.token_ids = r.token_ids.subspan(begin, end - begin);
      p.num_logits = static_cast<int>(std::clamp<int64_t>(end - first_wanted, 0, end - begin));
      pass_dst.push_back(dst_rows[i] + std::max<int64_t>(0, begin - first_wanted));
      pass.requests.push_back(p);
    }
    if (absl::Status s = RunPass(pass, pass_dst, logits); !s.ok()) return s;
  }
  return absl::OkStatus();
}

CudaLlamaModel::PassLayout CudaLlamaModel::LayOutPass(int requests, int tokens, int out_rows,
                                                      int max_query, int host_table,
                                                      int table_pitch, bool all_rows,
                                                      bool padded,
                                                      const AheadPass* ahead) const {
  PassLayout l;
  l.shape = LaunchShape{requests, tokens, 0, 0, max_query};
  if (ahead != nullptr) {
    // Phantoms only.
    l.shape = LaunchShape{ahead->shape.requests, ahead->shape.tokens, ahead->shape.requests,
                          ahead->shape.tokens, max_query};
  } else if (padded) {
    l.shape = PaddedShape(requests, tokens, max_query);
  }
  const size_t nb = static_cast<size_t>(l.shape.requests);
  const size_t t = static_cast<size_t>(l.shape.tokens);
  // Every row of a padded or all-rows pass (phantoms included), else the
  // wanted ones. A pass that wants only some rows but computed all of them
  // reads them all out; a padded pass's wanted rows are its first ones.
  l.head_rows = l.shape.phantoms > 0 || all_rows ? l.shape.tokens : out_rows;
  l.gather_rows = all_rows ? l.shape.tokens : out_rows;
  l.o_ids = 0;
  l.o_pos = l.o_ids + t;
  l.o_qstart = l.o_pos + t;
  l.o_kvlen = l.o_qstart + nb + 1;
  l.o_rings = l.o_kvlen + nb;
  l.o_tables = l.o_rings + nb;
  l.host_total = l.o_tables + nb * host_table;
  l.device_total = l.o_tables + nb * table_pitch;
  return l;
}

std::vector<std::pair<DeviceBuffer*, size_t>> CudaLlamaModel::GraphHeldBytes(
    StepBuffers& buf, const PassLayout& pass, bool graph_floors) const {
  const LocalShape& sh = shape_;
  // The graphs' metadata grows with the launched requests (and, past the
  // graphs' context, with the block tables): it starts at 4 MB (a million
  // entries), so that it seldom moves. Their activations start at the
  // largest graphable pass expected.
  constexpr size_t kGraphMetaFloor = size_t{1} << 20;
  const size_t meta = graph_floors ? std::max(pass.device_total, kGraphMetaFloor)
                                   : pass.device_total;
  const size_t floor = graph_floors ? GraphFloorRows() : 0;
  const size_t t = std::max(static_cast<size_t>(pass.shape.tokens), floor);
  const size_t head = std::max(static_cast<size_t>(pass.head_rows), floor);
  return {{&buf.meta, meta * sizeof(int32_t)},
          {&buf.residual, t * sh.hidden * 4},
          {&buf.normed, t * sh.hidden * 2},
          {&buf.qkv, t * sh.qkv_size() * 2},
          {&buf.attn, t * sh.q_size() * 2},
          {&buf.o_out, t * sh.hidden * 2},
          {&buf.gate_up, t * 2 * sh.inter * 2},
          {&buf.act, t * sh.inter * 2},
          {&buf.mlp_out, t * sh.hidden * 2},
          {&buf.local_logits, head * sh.vocab_shard * 4},
          {&buf.attn_workspace, pass.attn_workspace}};
}

absl::Status CudaLlamaModel::RunPass(const ForwardBatch& batch,
                                     const std::vector<int64_t>& dst_rows, float* logits,
                                     const AheadPass* ahead) {
  const LocalShape& sh = shape_;
  const int b = static_cast<int>(batch.requests.size());
  const int real_tokens = static_cast<int>(batch.num_tokens());
  const int out_rows = static_cast<int>(batch.num_logit_rows());
  const KvCacheConfig& kvc = kv_cache_->config();
  const float eps = config_.rms_norm_eps;
  if (ahead == nullptr && (b == 0 || real_tokens == 0)) return absl::OkStatus();

  // ---- The step's metadata, packed into one upload. ----
  int max_table = 1;
  int max_query = ahead != nullptr ? ahead->shape.max_query : 0;
  int max_kv = 1;
  for (const ForwardRequest& r : batch.requests) {
    max_table =
        std::max<int>(max_table, static_cast<int>(kv_cache_->block_table(r.kv_handle).size()));
    max_query = std::max<int>(max_query, static_cast<int>(r.token_ids.size()));
    max_kv = std::max<int>(max_kv, static_cast<int>(r.start_position + r.token_ids.size()));
  }
  // Block tables are written on the host to a multiple of the context
  // bucket's blocks. The attention's launch (its KV splits) follows a
  // bound on the context, not the exact length, so that eager and replayed
  // passes compute the same bits: for passes within the graphs' context
  // (graph_max_context), that bound and the tables' width on the device are
  // the same for every pass, so a graph does not depend on how long the
  // requests' contexts are; longer passes round up to the context bucket.
  constexpr int kContextBucket = 256;
  const int table_step = std::max(1, kContextBucket / kvc.block_size);
  const int host_table = RoundUp(max_table, table_step);
  const int graph_table =
      graph_max_context_ > 0
          ? RoundUp(static_cast<int>((graph_max_context_ + kvc.block_size - 1) / kvc.block_size),
                    table_step)
          : 0;
  const bool context_free = graph_table > 0 && host_table <= graph_table;
  const int table_pitch = context_free ? graph_table : host_table;
  const int kv_bound =
      context_free ? graph_table * kvc.block_size : RoundUp(max_kv, kContextBucket);
  // Graphs replay the layers, their all-reduces included where the
  // communicator only enqueues (NCCL captures into the graph), and the LM
  // head; the logits' all-gather stays eager.
  const bool capturable = tp_.size == 1 || comm_->CapturableInCudaGraphs();
  // A pass that wants the logits of some rows only, but of not many fewer
  // than it has tokens (the draft catching up on the tokens it missed),
  // computes them all, so that it can replay a graph too; a prefill keeps
  // its per-request row copies, which stay eager.
  constexpr int kAllRowsFactor = 4;
  const bool all_rows = cuda_graphs_ && capturable && out_rows > 0 && out_rows < real_tokens &&
                        real_tokens <= kAllRowsFactor * out_rows;
  bool graphable = capturable && (out_rows == real_tokens || all_rows);
  KvCacheLayout full_layout;
  full_layout.num_blocks = kvc.num_blocks + 1;  // the scratch block last
  full_layout.block_size = kvc.block_size;
  full_layout.num_kv_heads = sh.kv_heads;
  full_layout.head_dim = sh.head_dim;
  full_layout.max_blocks_per_req = table_pitch;
  // A ring per request: slot = ring * ring_size + position % ring_size.
  KvCacheLayout ring_layout = full_layout;
  ring_layout.num_blocks = kvc.max_requests + 1;  // the scratch ring last
  ring_layout.block_size = kv_cache_->ring_size();
  ring_layout.max_blocks_per_req = 1;
  ring_layout.ring_blocks = 1;
  AttentionConfig attn_full;
  attn_full.num_heads = sh.heads;
  AttentionConfig attn_sliding = attn_full;
  attn_sliding.sliding_window = config_.sliding_window;

  // Passes that may replay use the graph buffers (and may drop the graphs
  // when those move); the others the eager ones.
  bool on_graph_buffers = graphable && cuda_graphs_;
  EagerReason eager = out_rows != real_tokens && !all_rows ? EagerReason::kPartialLogits
                                                           : EagerReason::kUncapturable;
  PassLayout pass = LayOutPass(b, real_tokens, out_rows, max_query, host_table, table_pitch,
                               all_rows, on_graph_buffers && pad_graph_shapes_, ahead);
  {
    PagedBatch full{}, ring{};
    full.num_reqs = ring.num_reqs = pass.shape.requests;
    full.total_q = ring.total_q = pass.shape.tokens;
    full.max_query_len = ring.max_query_len = max_query;
    full.max_kv_len = ring.max_kv_len = kv_bound;
    for (const DeviceLayer& layer : layers_) {
      pass.attn_workspace = std::max(
          pass.attn_workspace, layer.sliding
                                   ? PagedAttentionWorkspaceBytes(ring, ring_layout, attn_sliding)
                                   : PagedAttentionWorkspaceBytes(full, full_layout, attn_full));
    }
  }
  // The graphs captured ahead hold the graph buffers at the sizes their
  // shapes need. A pass that needs more (a draft catching up on many
  // tokens, a batch above the captured ones) runs eagerly on the eager
  // buffers rather than growing them, which would drop every graph. It
  // keeps its padded shape, so that it computes what its graph would, and
  // every rank launches the same shape: the decision reads only state the
  // ranks share (the buffers' sizes follow the same passes everywhere, and
  // captured_ahead_ does not depend on which captures succeeded).
  if (on_graph_buffers && ahead == nullptr && captured_ahead_) {
    const auto held = GraphHeldBytes(graph_buffers_, pass, /*graph_floors=*/true);
    if (std::any_of(held.begin(), held.end(),
                    [](const auto& need) { return need.first->bytes() < need.second; })) {
      on_graph_buffers = false;
      graphable = false;
      eager = EagerReason::kOutgrewGraphBuffers;
    }
  }
  StepBuffers& buf = on_graph_buffers ? graph_buffers_ : eager_buffers_;
  const LaunchShape& shape = pass.shape;
  const int nb = shape.requests;  // launched requests, phantoms included
  const int t = shape.tokens;     // launched tokens
  const int head_rows = pass.head_rows;
  const int gather_rows = pass.gather_rows;
  const size_t o_ids = pass.o_ids, o_pos = pass.o_pos, o_qstart = pass.o_qstart,
               o_kvlen = pass.o_kvlen, o_rings = pass.o_rings, o_tables = pass.o_tables,
               host_total = pass.host_total;
  int moved = 0;  // step buffers reallocated by this pass
  // A captured graph holds the graph buffers' addresses: once any of them
  // moves (even if a later reservation fails), every graph goes.
  struct DropGraphsIfMoved {
    CudaLlamaModel* model;
    const int& moved;
    bool holds_graphs;
    ~DropGraphsIfMoved() {
      if (moved > 0 && holds_graphs) model->DropGraphs();
    }
  } drop_graphs_if_moved{this, moved, on_graph_buffers};
  // The previous pass may not have waited: its metadata upload must be done
  // before the host buffer is rewritten (or reallocated).
  VERDICT_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(meta_uploaded_));
  // The host copy is uploaded outside the graphs, so it may move freely.
  if (absl::Status s = host_meta_.Reserve(host_total * sizeof(int32_t)); !s.ok()) return s;
  // The metadata, the activations and the attention's workspace.
  for (const auto& [buffer, bytes] : GraphHeldBytes(buf, pass, on_graph_buffers)) {
    if (absl::Status s = buffer->Reserve(bytes, &moved); !s.ok()) return s;
  }
  int32_t* h = host_meta_.as<int32_t>();
  {
    int row = 0;
    for (int i = 0; i < b; ++i) {
      const ForwardRequest& r = batch.requests[i];
      h[o_qstart + i] = row;
      for (size_t k = 0; k < r.token_ids.size(); ++k, ++row) {
        h[o_ids + row] = r.token_ids[k];
        h[o_pos + row] = static_cast<int32_t>(r.start_position + static_cast<int64_t>(k));
      }
      h[o_kvlen + i] = static_cast<int32_t>(r.start_position + r.token_ids.size());
      absl::Span<const int32_t> table = kv_cache_->block_table(r.kv_handle);
      int32_t* dst = h + o_tables + static_cast<size_t>(i) * host_table;
      std::fill(dst, dst + host_table, 0);
      std::copy(table.begin(), table.end(), dst);
      h[o_rings + i] = std::max(0, kv_cache_->ring(r.kv_handle));
    }
    // The phantoms: token 0 at position 0, one key, the scratch block and
    // ring (past the KvCache's own).
    int pad_left = shape.pad_tokens;
    for (int i = b; i < nb; ++i) {
      h[o_qstart + i] = row;
      const int len = std::min(pad_left, max_query);
      for (int k = 0; k < len; ++k, ++row) {
        h[o_ids + row] = 0;
        h[o_pos + row] = 0;
      }
      pad_left -= len;
      h[o_kvlen + i] = 1;
      int32_t* dst = h + o_tables + static_cast<size_t>(i) * host_table;
      std::fill(dst, dst + host_table, kvc.num_blocks);
      h[o_rings + i] = kvc.max_requests;
    }
    h[o_qstart + nb] = row;
    if (pad_left != 0 || row != t) {
      return absl::InternalError(absl::StrCat("launch shape of ", b, " requests and ",
                                              real_tokens, " tokens: ", pad_left,
                                              " pad tokens without a phantom"));
    }
  }
  const int32_t* d = buf.meta.as<int32_t>();
  PagedBatch full_batch;
  full_batch.num_reqs = nb;
  full_batch.total_q = t;
  full_batch.q_start = d + o_qstart;
  full_batch.kv_len = d + o_kvlen;
  full_batch.positions = d + o_pos;
  full_batch.block_tables = d + o_tables;
  full_batch.max_query_len = max_query;
  full_batch.max_kv_len = kv_bound;
  PagedBatch ring_batch = full_batch;
  ring_batch.block_tables = d + o_rings;

  // ---- Activations. ----
  const size_t T = static_cast<size_t>(t);
  const size_t local_elems = static_cast<size_t>(gather_rows) * sh.vocab_shard;
  // Read only outside the graphs, so their growth keeps the graphs: the
  // rows a pass picks out (only passes that never replay: a graph pass
  // computes every row's logits), and, grown here before the step's
  // collectives are queued (cudaFree waits for the whole device, without
  // the NCCL timeout), the logits' all-gather.
  const size_t gathered_rows =
      std::max<size_t>(gather_rows, on_graph_buffers ? GraphFloorRows() : 0);
  for (absl::Status s :
       {buf.selected.Reserve(head_rows != t ? static_cast<size_t>(out_rows) * sh.hidden * 2 : 0),
        buf.gathered.Reserve(tp_.size > 1 ? gathered_rows * sh.vocab_shard * tp_.size * 4 : 0),
        buf.full_logits.Reserve(tp_.size > 1 ? gathered_rows * config_.vocab_size * 4 : 0)}) {
    if (!s.ok()) return s;
  }
  if (moved > 0) {
    if (on_graph_buffers) DropGraphs();
    moved = 0;
  }
  if (ahead != nullptr && ahead->size_only) return absl::OkStatus();

  float* residual = buf.residual.as<float>();
  uint16_t* normed = buf.normed.as<uint16_t>();
  uint16_t* qkv = buf.qkv.as<uint16_t>();
  uint16_t* attn = buf.attn.as<uint16_t>();
  uint16_t* o_out = buf.o_out.as<uint16_t>();
  uint16_t* gate_up = buf.gate_up.as<uint16_t>();
  uint16_t* act = buf.act.as<uint16_t>();
  uint16_t* mlp_out = buf.mlp_out.as<uint16_t>();
  const int qkv_stride = sh.qkv_size();

  // The metadata goes up first; device-resident token ids then overwrite
  // the (placeholder) ids the host wrote.
  // Each device row's entries past host_table are not uploaded and keep
  // what an earlier pass left there: a request reads the entries of its own
  // context only.
  if (host_table == table_pitch) {
    VERDICT_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(buf.meta.as<int32_t>(), h,
                                                 host_total * sizeof(int32_t),
                                                 cudaMemcpyHostToDevice, stream_));
  } else {
    VERDICT_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(buf.meta.as<int32_t>(), h,
                                                 o_tables * sizeof(int32_t),
                                                 cudaMemcpyHostToDevice, stream_));
    VERDICT_CUDA_RETURN_IF_ERROR(cudaMemcpy2DAsync(
        buf.meta.as<int32_t>() + o_tables, table_pitch * sizeof(int32_t), h + o_tables,
        host_table * sizeof(int32_t), host_table * sizeof(int32_t), nb, cudaMemcpyHostToDevice,
        stream_));
  }
  VERDICT_CUDA_RETURN_IF_ERROR(cudaEventRecord(meta_uploaded_, stream_));
  if (batch.device_token_ids != nullptr) {
    VERDICT_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(buf.meta.as<int32_t>() + o_ids,
                                                 batch.device_token_ids,
                                                 real_tokens * sizeof(int32_t),
                                                 cudaMemcpyDeviceToDevice, stream_));
  }

  // Everything from the embedding to the LM head's logits in
  // buf.local_logits: the part a CUDA graph replays.
  auto enqueue = [&]() -> absl::Status {
    // ---- Embedding (vocab-parallel: zeros outside this rank's rows). ----
    const EmbeddingShard shard{tp_.rank * sh.vocab_shard, (tp_.rank + 1) * sh.vocab_shard,
                               sh.hidden};
    if (absl::Status s =
            InvokeEmbedding(d + o_ids, t, embed_.as<uint16_t>(), shard, residual, stream_);
        !s.ok()) {
      return s;
    }
    if (absl::Status s = AllReduce(residual, T * sh.hidden, DataType::kFloat32); !s.ok()) return s;

    // ---- Decoder layers. ----
    for (int li = 0; li < config_.num_layers; ++li) {
      const DeviceLayer& w = layers_[li];
      absl::Status s = li == 0 ? InvokeRmsNorm(residual, w.input_norm.as<uint16_t>(), normed, t,
                                               sh.hidden, eps, stream_)
                               : InvokeAddRmsNorm(mlp_out, residual, w.input_norm.as<uint16_t>(),
                                                  normed, t, sh.hidden, eps, stream_);
      if (!s.ok()) return s;
      s = gemm_->Run(normed, w.qkv.as<uint16_t>(), w.qkv_bias.as<uint16_t>(), qkv, t, sh.qkv_size(),
                     sh.hidden, stream_);
      if (!s.ok()) return s;
      if (config_.qk_norm) {
        s = InvokeHeadRmsNorm(qkv, t, sh.heads, sh.head_dim, qkv_stride, w.q_norm.as<uint16_t>(),
                              eps, stream_);
        if (!s.ok()) return s;
        s = InvokeHeadRmsNorm(qkv + sh.q_size(), t, sh.kv_heads, sh.head_dim, qkv_stride,
                              w.k_norm.as<uint16_t>(), eps, stream_);
        if (!s.ok()) return s;
      }
      const PagedBatch& pb = w.sliding ? ring_batch : full_batch;
      const KvCacheLayout& layout = w.sliding ? ring_layout : full_layout;
      uint16_t* k_cache = w.k_cache.as<uint16_t>();
      uint16_t* v_cache = w.v_cache.as<uint16_t>();
      // RoPE on q and k and the KV-cache write in one launch (pb.positions
      // is d + o_pos, the tokens' positions); the same bits as InvokeRope
      // then InvokeKvCacheWrite.
      s = InvokeRopeKvCacheWrite(
          qkv, qkv_stride, qkv + sh.q_size(), qkv_stride, qkv + sh.q_size() + sh.kv_size(),
          qkv_stride, inv_freq_.as<float>(), sh.heads, pb, layout, k_cache, v_cache, stream_);
      if (!s.ok()) return s;
      s = InvokePagedAttention(qkv, qkv_stride, k_cache, v_cache, pb, layout,
                               w.sliding ? attn_sliding : attn_full, attn, sh.q_size(),
                               buf.attn_workspace.as<void>(), buf.attn_workspace.bytes(), stream_);
      if (!s.ok()) return s;
      // Row-parallel output projection: partial sums, the all-reduce, then the
      // bias once.
      s = gemm_->Run(attn, w.o.as<uint16_t>(), nullptr, o_out, t, sh.hidden, sh.q_size(), stream_);
      if (!s.ok()) return s;
      if (s = AllReduce(o_out, T * sh.hidden, DataType::kBFloat16); !s.ok()) return s;
      if (config_.o_bias) {
        s = InvokeAddBias(o_out, w.o_bias.as<uint16_t>(), t, sh.hidden, stream_);
        if (!s.ok()) return s;
      }
      s = InvokeAddRmsNorm(o_out, residual, w.post_norm.as<uint16_t>(), normed, t, sh.hidden, eps,
                           stream_);
      if (!s.ok()) return s;
      // gate_up and SiLU-and-mul: one fused kernel for a draft's few decode
      // rows (skinny GEMM on), the GEMM into gate_up then the activation
      // otherwise; the same bits either way.
      s = gemm_->RunGateUpSilu(normed, w.gate_up.as<uint16_t>(), gate_up, act, t, sh.inter,
                               sh.hidden, stream_);
      if (!s.ok()) return s;
      s = gemm_->Run(act, w.down.as<uint16_t>(), nullptr, mlp_out, t, sh.hidden, sh.inter, stream_);
      if (!s.ok()) return s;
      if (s = AllReduce(mlp_out, T * sh.hidden, DataType::kBFloat16); !s.ok()) return s;
    }
    // (A pass captured ahead wants no rows, but its graph must hold the
    // head that later passes of its shape need.)
    if (head_rows == 0) return absl::OkStatus();

    // ---- Final norm and the LM head on the wanted rows. ----
    absl::Status s = InvokeAddRmsNorm(mlp_out, residual, final_norm_.as<uint16_t>(), normed, t,
                                      sh.hidden, eps, stream_);
    if (!s.ok()) return s;
    const uint16_t* head_in = normed;
    if (head_rows != t) {
      // Each request's wanted rows are its last ones: one copy per request.
      int src_row = 0;
      int dst_row = 0;
      for (const ForwardRequest& r : batch.requests) {
        const int len = static_cast<int>(r.token_ids.size());
        const int want = r.logit_rows();
        if (want > 0) {
          VERDICT_CUDA_RETURN_IF_ERROR(
              cudaMemcpyAsync(buf.selected.as<uint16_t>() + static_cast<size_t>(dst_row) * sh.hidden,
                              normed + static_cast<size_t>(src_row + len - want) * sh.hidden,
                              static_cast<size_t>(want) * sh.hidden * sizeof(uint16_t),
                              cudaMemcpyDeviceToDevice, stream_));
        }
        src_row += len;
        dst_row += want;
      }
      head_in = buf.selected.as<uint16_t>();
    }
    const uint16_t* head =
        config_.tie_word_embeddings ? embed_.as<uint16_t>() : lm_head_.as<uint16_t>();
    return gemm_->Run(head_in, head, nullptr, buf.local_logits.as<float>(), head_rows,
                      sh.vocab_shard, sh.hidden, stream_);
  };

  // A pass that does not wait leaves its collectives queued, and a dead
  // peer's never complete: at TP > 1 every pass takes the communicator's
  // timed wait, which turns that into an error (the next pass's wait for
  // its metadata upload has no timeout).
  const bool wait = batch.wait || tp_.size > 1;
  absl::Status s = EnqueueMaybeGraph(GraphKey{nb, t, max_query, table_pitch, kv_bound}, graphable,
                                     eager, enqueue, ahead != nullptr);
  if (!s.ok()) return s;
  if (out_rows == 0) {
    if (!wait) return absl::OkStatus();
    // The timed wait first: a dead peer's collective never completes, and
    // only the communicator's wait turns that into an error.
    if (tp_.size > 1) {
      if (s = comm_->Synchronize(stream_); !s.ok()) return s;
    }
    VERDICT_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));
    return absl::OkStatus();
  }

  // Rows of [vocab] floats on the device: this rank's slice is the whole
  // vocabulary at tp 1; otherwise gather the slices and lay them side by
  // side, dropping the padding.
  const int vocab = config_.vocab_size;
  const float* rows_on_device = buf.local_logits.as<float>();
  if (tp_.size > 1) {
    s = comm_->AllGather(buf.local_logits.as<float>(), buf.gathered.as<float>(), local_elems,
                         DataType::kFloat32, stream_);
    if (!s.ok()) return s;
    for (int r = 0; r < tp_.size; ++r) {
      const int64_t first = static_cast<int64_t>(r) * sh.vocab_shard;
      const int64_t count = std::clamp<int64_t>(vocab - first, 0, sh.vocab_shard);
      if (count == 0) continue;
      VERDICT_CUDA_RETURN_IF_ERROR(cudaMemcpy2DAsync(
          buf.full_logits.as<float>() + first, static_cast<size_t>(vocab) * sizeof(float),
          buf.gathered.as<float>() + r * local_elems,
          static_cast<size_t>(sh.vocab_shard) * sizeof(float),
          static_cast<size_t>(count) * sizeof(float), gather_rows, cudaMemcpyDeviceToDevice,
          stream_));
    }
    rows_on_device = buf.full_logits.as<float>();
  }
  // To the caller's rows (host or device memory: the copy's direction
  // follows the pointers), contiguous unless this is one pass of several.
  const size_t row_bytes = static_cast<size_t>(vocab) * sizeof(float);
  const size_t src_pitch =
      tp_.size > 1 ? row_bytes : static_cast<size_t>(sh.vocab_shard) * sizeof(float);
  // A request's wanted rows are its last ones: with every row computed they
  // sit at the end of its tokens, else they follow the previous request's.
  int src_row = 0;
  for (int i = 0; i < b; ++i) {
    const int len = static_cast<int>(batch.requests[i].token_ids.size());
    const int want = batch.requests[i].logit_rows();
    const int first = all_rows ? src_row + len - want : src_row;
    src_row += all_rows ? len : want;
    if (want == 0) continue;
    VERDICT_CUDA_RETURN_IF_ERROR(
        cudaMemcpy2DAsync(logits + dst_rows[i] * vocab, row_bytes,
                          reinterpret_cast<const char*>(rows_on_device) + first * src_pitch,
                          src_pitch, row_bytes, want, cudaMemcpyDefault, stream_));
  }
  if (!wait) return absl::OkStatus();
  if (tp_.size > 1) {
    if (s = comm_->Synchronize(stream_); !s.ok()) return s;
  }
  VERDICT_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::string> CudaDeviceName() {
  int device = 0;
  cudaDeviceProp prop;
  if (cudaError_t e = cudaGetDevice(&device); e != cudaSuccess) {
    return absl::InternalError(absl::StrCat("cudaGetDevice: ", cudaGetErrorString(e)));
  }
  if (cudaError_t e = cudaGetDeviceProperties(&prop, device); e != cudaSuccess) {
    return absl::InternalError(absl::StrCat("cudaGetDeviceProperties: ", cudaGetErrorString(e)));
  }
  return std::string(prop.name);
}

absl::StatusOr<std::unique_ptr<ModelRunner>> CreateCudaLlamaModel(const ModelConfig& config,
                                                                  const WeightSource& source,
                                                                  const KvCache* kv_cache,
                                                                  Communicator* device_comm,
                                                                  CudaModelOptions options) {
  if (kv_cache == nullptr) return absl::InvalidArgumentError("CreateCudaLlamaModel: no KV cache");
  const TensorParallel tp{device_comm != nullptr ? device_comm->rank() : 0,
                          device_comm != nullptr ? device_comm->world_size() : 1};
  if (absl::Status s = ValidateTensorParallel(config, tp.size); !s.ok()) return s;
  if (config.head_dim != 64 && config.head_dim != 128) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the CUDA backend's attention supports head_dim 64 and 128, not ", config.head_dim));
  }
  const KvCacheConfig& kv = kv_cache->config();
  if (kv.num_layers != config.num_layers || kv.num_kv_heads != config.num_kv_heads / tp.size ||
      kv.head_dim != config.head_dim) {
    return absl::InvalidArgumentError(absl::StrCat(
        "KV cache geometry (", kv.num_layers, " layers, ", kv.num_kv_heads, " kv heads, head_dim ",
        kv.head_dim, ") does not match the model at tp ", tp.size));
  }
  int devices = 0;
  if (const cudaError_t e = cudaGetDeviceCount(&devices); e != cudaSuccess || devices == 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("the CUDA backend needs a GPU, and none is usable here (",
                     e != cudaSuccess ? cudaGetErrorString(e) : "no CUDA device",
                     "); --backend cpu runs without one"));
  }
  int device = options.device;
  if (device < 0) VERDICT_CUDA_RETURN_IF_ERROR(cudaGetDevice(&device));
  auto model = std::make_unique<CudaLlamaModel>(config, kv_cache, device_comm, tp, device);
  model->set_cuda_graphs(options.cuda_graphs);
  model->set_pad_graph_shapes(options.pad_graph_shapes);
  model->set_graph_pass_tokens(options.graph_pass_tokens);
  model->set_graph_max_context(options.graph_max_context);
  if (tp.size > 1 && options.one_shot_all_reduce != nullptr) {
    if (options.one_shot_all_reduce->world_size() != tp.size ||
        options.one_shot_all_reduce->rank() != tp.rank) {
      return absl::InvalidArgumentError("the one-shot all-reduce spans other ranks than the model");
    }
    model->set_one_shot_all_reduce(options.one_shot_all_reduce);
  }
  model->set_skinny_gemm(options.skinny_gemm);
  if (absl::Status s = model->Init(source, options.load_threads); !s.ok()) return s;
  return std::unique_ptr<ModelRunner>(std::move(model));
}

}  // namespace verdict
