// Times the Llama decoder's device ops on an 8B Llama-3 shape (hidden 4096,
// 32 heads, 8 KV heads, head_dim 128, MLP 14336, vocabulary 128256, 32
// layers), or with --shape=llama-3.2-1b the 1B draft's (hidden 2048, 32
// heads, 8 KV heads, head_dim 64, MLP 8192, 16 layers), with random bf16
// weights, for speculative-verify steps: every
// request brings --query_tokens tokens on top of --context cached ones.
//
// For each batch size it reports, from CUDA events (median of --reps after
// a warm-up):
//   - each op of one layer on its own (20 launches replayed as a graph);
//   - one layer run op by op, and the same layer replayed as a CUDA graph;
//   - the whole forward step (all layers, each with its own weights and KV
//     cache, then the final norm and the LM head) replayed as a CUDA graph,
//     and the estimate embedding + layers x layer graph + final norm + LM
//     head;
//   - the floor: bytes of weights read per step / measured copy bandwidth
//     (a large device-to-device cudaMemcpy, bytes read plus bytes written).
// With --tp N the shapes are one rank's shard (heads, KV heads, MLP and
// vocabulary divided by N); the all-reduces are not included.
//
// Prints a table and writes the same numbers as JSON to --out (or the first
// positional argument).
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "kernels/model/embedding.h"
#include "kernels/model/gemm.h"
#include "kernels/model/internal/random_fill.h"
#include "kernels/model/kv_cache_write.h"
#include "kernels/model/paged_attention.h"
#include "kernels/model/rms_norm.h"
#include "kernels/model/rope.h"
#include "kernels/model/silu_and_mul.h"

ABSL_FLAG(std::string, out, "", "path of the JSON report (else the first positional argument)");
ABSL_FLAG(std::string, batches, "1,8,64", "comma-separated batch sizes (requests per step)");
ABSL_FLAG(int, query_tokens, 6, "query tokens per request (1 + draft tokens)");
ABSL_FLAG(int, context, 512, "tokens already cached per request before the step");
ABSL_FLAG(int, layers, -1, "decoder layers in the full-step graph (-1: the shape's)");
ABSL_FLAG(std::string, shape, "llama-3.1-8b", "model shape: llama-3.1-8b or llama-3.2-1b");
ABSL_FLAG(bool, skinny_gemm, false,
          "products of at most 4 rows on the skinny GEMM (GemmOptions::skinny_small_m)");
ABSL_FLAG(int, tp, 1, "tensor-parallel degree: time one rank's shard");
ABSL_FLAG(int, reps, 30, "timed repetitions (median reported)");
ABSL_FLAG(int, block_size, 16, "KV cache block size");
ABSL_FLAG(int, gemm_autotune, 0,
          "GEMM algorithms timed per shape on first use (0: cuBLASLt heuristic's choice)");

namespace verdict {
namespace {

void Check(const absl::Status& s, const char* what) {
  if (!s.ok()) {
    std::fprintf(stderr, "%s: %s\n", what, s.ToString().c_str());
    std::exit(1);
  }
}
void Check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(e));
    std::exit(1);
  }
}
#define BENCH_CHECK(expr) Check((expr), #expr)

template <typename T>
T* DeviceAlloc(size_t count) {
  void* p = nullptr;
  BENCH_CHECK(cudaMalloc(&p, std::max<size_t>(count, 1) * sizeof(T)));
  return static_cast<T*>(p);
}

template <typename T>
T* Upload(const std::vector<T>& host) {
  T* d = DeviceAlloc<T>(host.size());
  BENCH_CHECK(cudaMemcpy(d, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice));
  return d;
}

struct ModelShape {
  int hidden = 4096;
  int heads = 32;
  int kv_heads = 8;
  int head_dim = 128;
  int inter = 14336;
  int vocab = 128256;
  int layers = 32;
  float eps = 1e-5f;

  int q_size() const { return heads * head_dim; }
  int kv_size() const { return kv_heads * head_dim; }
  int qkv_size() const { return q_size() + 2 * kv_size(); }
  // Bytes of weights one layer reads (projections and its two norms).
  int64_t LayerWeightBytes() const {
    const int64_t h = hidden;
    return 2 * (h * qkv_size() + static_cast<int64_t>(q_size()) * h + h * 2 * inter +
                static_cast<int64_t>(inter) * h + 2 * h);
  }
  int64_t HeadWeightBytes() const { return 2 * (static_cast<int64_t>(vocab) * hidden + hidden); }
};

struct LayerWeights {
  uint16_t* input_norm;
  uint16_t* qkv;  // [q + k + v, hidden]: q_proj, k_proj, v_proj rows stacked
  uint16_t* o;    // [hidden, q_size]
  uint16_t* post_norm;
  uint16_t* gate_up;  // [2 * inter, hidden]: gate_proj rows then up_proj rows
  uint16_t* down;     // [hidden, inter]
  uint16_t* k_cache;
  uint16_t* v_cache;
};

class EventTimer {
 public:
  explicit EventTimer(cudaStream_t stream) : stream_(stream) {
    BENCH_CHECK(cudaEventCreate(&start_));
    BENCH_CHECK(cudaEventCreate(&stop_));
  }
  ~EventTimer() {
    cudaEventDestroy(start_);
    cudaEventDestroy(stop_);
  }
  // Median over `reps` of (time of `inner` back-to-back calls) / inner, in
  // microseconds, after `inner` warm-up calls.
  double MedianUs(const std::function<void()>& body, int reps, int inner) {
    for (int i = 0; i < inner; ++i) body();
    BENCH_CHECK(cudaStreamSynchronize(stream_));
    std::vector<double> samples;
    for (int r = 0; r < reps; ++r) {
      BENCH_CHECK(cudaEventRecord(start_, stream_));
      for (int i = 0; i < inner; ++i) body();
      BENCH_CHECK(cudaEventRecord(stop_, stream_));
      BENCH_CHECK(cudaEventSynchronize(stop_));
      float ms = 0.0f;
      BENCH_CHECK(cudaEventElapsedTime(&ms, start_, stop_));
      samples.push_back(1000.0 * ms / inner);
    }
    std::sort(samples.begin(), samples.end());
    return samples[samples.size() / 2];
  }

 private:
  cudaStream_t stream_;
  cudaEvent_t start_, stop_;
};

// Device-to-device copy bandwidth, counting bytes read plus bytes written.
double MeasureCopyBandwidth(cudaStream_t stream, int reps) {
  const size_t bytes = size_t{2} << 30;
  char* a = DeviceAlloc<char>(bytes);
  char* b = DeviceAlloc<char>(bytes);
  BENCH_CHECK(cudaMemsetAsync(a, 1, bytes, stream));
  EventTimer timer(stream);
  const double us = timer.MedianUs(
      [&] { BENCH_CHECK(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, stream)); },
      std::max(5, reps / 3), 1);
  BENCH_CHECK(cudaFree(a));
  BENCH_CHECK(cudaFree(b));
  return 2.0 * bytes / (us * 1e-6);
}

struct StepBuffers {
  int batch = 0;
  int total_q = 0;
  PagedBatch paged;  // device pointers
  int32_t* positions = nullptr;
  int32_t* token_ids = nullptr;
  float* residual = nullptr;
  uint16_t* normed = nullptr;
  uint16_t* qkv = nullptr;
  uint16_t* attn = nullptr;
  uint16_t* o_out = nullptr;
  uint16_t* gate_up = nullptr;
  uint16_t* act = nullptr;
  uint16_t* mlp_out = nullptr;
  float* logits = nullptr;
  void* attn_workspace = nullptr;
  size_t attn_workspace_bytes = 0;
  std::vector<void*> owned;

  ~StepBuffers() {
    for (void* p : owned) cudaFree(p);
  }
};

struct Model {
  ModelShape shape;
  KvCacheLayout layout;
  std::vector<LayerWeights> layers;
  uint16_t* final_norm = nullptr;
  uint16_t* lm_head = nullptr;
  float* inv_freq = nullptr;
  std::unique_ptr<Gemm> gemm;
};

void RunLayer(Model& m, const LayerWeights& w, StepBuffers& s, cudaStream_t stream) {
  const ModelShape& sh = m.shape;
  const int t = s.total_q;
  BENCH_CHECK(InvokeAddRmsNorm(s.mlp_out, s.residual, w.input_norm, s.normed, t, sh.hidden, sh.eps,
                               stream));
  BENCH_CHECK(m.gemm->Run(s.normed, w.qkv, nullptr, s.qkv, t, sh.qkv_size(), sh.hidden, stream));
  BENCH_CHECK(InvokeRopeKvCacheWrite(s.qkv, sh.qkv_size(), s.qkv + sh.q_size(), sh.qkv_size(),
                                     s.qkv + sh.q_size() + sh.kv_size(), sh.qkv_size(), m.inv_freq,
                                     sh.heads, s.paged, m.layout, w.k_cache, w.v_cache, stream));
  AttentionConfig attn;
  attn.num_heads = sh.heads;
  BENCH_CHECK(InvokePagedAttention(s.qkv, sh.qkv_size(), w.k_cache, w.v_cache, s.paged, m.layout,
                                   attn, s.attn, sh.q_size(), s.attn_workspace,
                                   s.attn_workspace_bytes, stream));
  BENCH_CHECK(m.gemm->Run(s.attn, w.o, nullptr, s.o_out, t, sh.hidden, sh.q_size(), stream));
  BENCH_CHECK(
      InvokeAddRmsNorm(s.o_out, s.residual, w.post_norm, s.normed, t, sh.hidden, sh.eps, stream));
  BENCH_CHECK(
      m.gemm->RunGateUpSilu(s.normed, w.gate_up, s.gate_up, s.act, t, sh.inter, sh.hidden, stream));
  BENCH_CHECK(m.gemm->Run(s.act, w.down, nullptr, s.mlp_out, t, sh.hidden, sh.inter, stream));
}

void RunHead(Model& m, StepBuffers& s, cudaStream_t stream) {
  const ModelShape& sh = m.shape;
  BENCH_CHECK(InvokeAddRmsNorm(s.mlp_out, s.residual, m.final_norm, s.normed, s.total_q, sh.hidden,
                               sh.eps, stream));
  BENCH_CHECK(
      m.gemm->Run(s.normed, m.lm_head, nullptr, s.logits, s.total_q, sh.vocab, sh.hidden, stream));
}

std::unique_ptr<StepBuffers> MakeStep(const Model& m, int batch, int query_tokens, int context,
                                      uint64_t seed, cudaStream_t stream) {
  const ModelShape& sh = m.shape;
  auto s = std::make_unique<StepBuffers>();
  s->batch = batch;
  s->total_q = batch * query_tokens;
  const int kv_len = context + query_tokens;
  const int blocks_per_req = m.layout.max_blocks_per_req;
  std::vector<int32_t> q_start(batch + 1), kv(batch, kv_len), positions, tables;
  for (int r = 0; r <= batch; ++r) q_start[r] = r * query_tokens;
  for (int r = 0; r < batch; ++r) {
    for (int i = 0; i < query_tokens; ++i) positions.push_back(context + i);
  }
  // Requests own shuffled, non-contiguous blocks, as after a while of serving.
  std::vector<int32_t> physical(m.layout.num_blocks);
  std::iota(physical.begin(), physical.end(), 0);
  std::shuffle(physical.begin(), physical.end(), std::mt19937_64(seed));
  tables.assign(physical.begin(), physical.begin() + static_cast<size_t>(batch) * blocks_per_req);

  auto own = [&](auto* p) {
    s->owned.push_back(p);
    return p;
  };
  s->paged.num_reqs = batch;
  s->paged.total_q = s->total_q;
  s->paged.q_start = own(Upload(q_start));
  s->paged.kv_len = own(Upload(kv));
  s->positions = own(Upload(positions));
  s->paged.positions = s->positions;
  s->paged.block_tables = own(Upload(tables));
  std::vector<int32_t> ids(s->total_q);
  std::mt19937 id_rng(static_cast<uint32_t>(seed));
  for (auto& id : ids) id = static_cast<int32_t>(id_rng() % m.shape.vocab);
  s->token_ids = own(Upload(ids));
  s->paged.max_query_len = query_tokens;
  s->paged.max_kv_len = kv_len;

  const int t = s->total_q;
  s->residual = own(DeviceAlloc<float>(static_cast<size_t>(t) * sh.hidden));
  s->normed = own(DeviceAlloc<uint16_t>(static_cast<size_t>(t) * sh.hidden));
  s->qkv = own(DeviceAlloc<uint16_t>(static_cast<size_t>(t) * sh.qkv_size()));
  s->attn = own(DeviceAlloc<uint16_t>(static_cast<size_t>(t) * sh.q_size()));
  s->o_out = own(DeviceAlloc<uint16_t>(static_cast<size_t>(t) * sh.hidden));
  s->gate_up = own(DeviceAlloc<uint16_t>(static_cast<size_t>(t) * 2 * sh.inter));
  s->act = own(DeviceAlloc<uint16_t>(static_cast<size_t>(t) * sh.inter));
  s->mlp_out = own(DeviceAlloc<uint16_t>(static_cast<size_t>(t) * sh.hidden));
  s->logits = own(DeviceAlloc<float>(static_cast<size_t>(t) * sh.vocab));
  AttentionConfig attn;
  attn.num_heads = sh.heads;
  s->attn_workspace_bytes = PagedAttentionWorkspaceBytes(s->paged, m.layout, attn);
  s->attn_workspace = own(DeviceAlloc<char>(s->attn_workspace_bytes));

  // The step's input: token embeddings would land in the residual; random
  // values stand in for them and for the previous layer's output.
  using model_internal::InvokeRandomBf16Fill;
  BENCH_CHECK(model_internal::InvokeRandomF32Fill(s->residual, static_cast<size_t>(t) * sh.hidden,
                                                  seed + 1, 1.0f, stream));
  BENCH_CHECK(
      InvokeRandomBf16Fill(s->mlp_out, static_cast<size_t>(t) * sh.hidden, seed + 2, 0.5f, stream));
  BENCH_CHECK(
      InvokeRandomBf16Fill(s->qkv, static_cast<size_t>(t) * sh.qkv_size(), seed + 3, 1.0f, stream));
  return s;
}

struct OpTime {
  std::string name;
  double us;
  int64_t weight_bytes;  // 0 for ops without weights
};

struct BatchResult {
  int batch = 0;
  int tokens = 0;
  std::vector<OpTime> ops;
  double layer_eager_us = 0;
  double layer_graph_us = 0;
  double head_us = 0;  // final norm + LM head, eager
  double forward_estimate_ms = 0;
  double forward_graph_ms = 0;
};

BatchResult RunBatch(Model& m, int batch, int query_tokens, int context, int reps,
                     cudaStream_t stream) {
  const ModelShape& sh = m.shape;
  std::unique_ptr<StepBuffers> step =
      MakeStep(m, batch, query_tokens, context, 1234 + batch, stream);
  StepBuffers& s = *step;
  const LayerWeights& w = m.layers[0];
  const int t = s.total_q;
  EventTimer timer(stream);
  BatchResult result;
  result.batch = batch;
  result.tokens = t;

  // Warm up every launcher (cuBLASLt plans, kernel attributes) before any
  // timing or capture.
  RunLayer(m, w, s, stream);
  RunHead(m, s, stream);
  BENCH_CHECK(cudaStreamSynchronize(stream));

  const int64_t h = sh.hidden;
  AttentionConfig attn;
  attn.num_heads = sh.heads;
  const RopeShape rope{t, sh.heads, sh.kv_heads, sh.head_dim, sh.qkv_size(), sh.qkv_size()};
  const EmbeddingShard shard{0, sh.vocab, sh.hidden};
  const std::vector<std::pair<OpTime, std::function<void()>>> ops = {
      // The LM head's rows stand in for the embedding table (same shape).
      {{"embedding", 0, 0},
       [&] { BENCH_CHECK(InvokeEmbedding(s.token_ids, t, m.lm_head, shard, s.residual, stream)); }},
      {{"input_rms_norm", 0, 2 * h},
       [&] {
         BENCH_CHECK(InvokeAddRmsNorm(s.mlp_out, s.residual, w.input_norm, s.normed, t, sh.hidden,
                                      sh.eps, stream));
       }},
      {{"qkv_gemm", 0, 2 * h * sh.qkv_size()},
       [&] {
         BENCH_CHECK(
             m.gemm->Run(s.normed, w.qkv, nullptr, s.qkv, t, sh.qkv_size(), sh.hidden, stream));
       }},
      {{"rope", 0, 0},
       [&] {
         BENCH_CHECK(InvokeRope(s.qkv, s.qkv + sh.q_size(), s.positions, m.inv_freq, rope, stream));
       }},
      {{"kv_cache_write", 0, 0},
       [&] {
         BENCH_CHECK(InvokeKvCacheWrite(s.qkv + sh.q_size(), sh.qkv_size(),
                                        s.qkv + sh.q_size() + sh.kv_size(), sh.qkv_size(), s.paged,
                                        m.layout, w.k_cache, w.v_cache, stream));
       }},
      // The layer's launch: the two above in one kernel.
      {{"rope_kv_cache_write", 0, 0},
       [&] {
         BENCH_CHECK(InvokeRopeKvCacheWrite(s.qkv, sh.qkv_size(), s.qkv + sh.q_size(),
                                            sh.qkv_size(), s.qkv + sh.q_size() + sh.kv_size(),
                                            sh.qkv_size(), m.inv_freq, sh.heads, s.paged, m.layout,
                                            w.k_cache, w.v_cache, stream));
       }},
      {{"attention", 0, 0},
       [&] {
         BENCH_CHECK(InvokePagedAttention(s.qkv, sh.qkv_size(), w.k_cache, w.v_cache, s.paged,
                                          m.layout, attn, s.attn, sh.q_size(), s.attn_workspace,
                                          s.attn_workspace_bytes, stream));
       }},
      // The same attention with the split-KV workspace capped at 3 splits and
      // with none, to show what splitting buys at this batch size.
      {{"attention_3_splits", 0, 0},
       [&] {
         const size_t per_split = static_cast<size_t>(t) * sh.heads * (sh.head_dim * 4 + 8);
         BENCH_CHECK(InvokePagedAttention(s.qkv, sh.qkv_size(), w.k_cache, w.v_cache, s.paged,
                                          m.layout, attn, s.attn, sh.q_size(), s.attn_workspace,
                                          std::min(s.attn_workspace_bytes, 3 * per_split), stream));
       }},
      {{"attention_no_split", 0, 0},
       [&] {
         BENCH_CHECK(InvokePagedAttention(s.qkv, sh.qkv_size(), w.k_cache, w.v_cache, s.paged,
                                          m.layout, attn, s.attn, sh.q_size(), nullptr, 0, stream));
       }},
      {{"o_gemm", 0, 2 * h * sh.q_size()},
       [&] {
         BENCH_CHECK(m.gemm->Run(s.attn, w.o, nullptr, s.o_out, t, sh.hidden, sh.q_size(), stream));
       }},
      {{"post_rms_norm", 0, 2 * h},
       [&] {
         BENCH_CHECK(InvokeAddRmsNorm(s.o_out, s.residual, w.post_norm, s.normed, t, sh.hidden,
                                      sh.eps, stream));
       }},
      {{"gate_up_gemm", 0, 2 * h * 2 * sh.inter},
       [&] {
         BENCH_CHECK(m.gemm->Run(s.normed, w.gate_up, nullptr, s.gate_up, t, 2 * sh.inter,
                                 sh.hidden, stream));
       }},
      {{"silu_and_mul", 0, 0},
       [&] { BENCH_CHECK(InvokeSiluAndMul(s.gate_up, s.act, t, sh.inter, stream)); }},
      // The layer's launch: the two above fused where the GEMM is skinny.
      {{"gate_up_silu", 0, 2 * h * 2 * sh.inter},
       [&] {
         BENCH_CHECK(m.gemm->RunGateUpSilu(s.normed, w.gate_up, s.gate_up, s.act, t, sh.inter,
                                           sh.hidden, stream));
       }},
      {{"down_gemm", 0, 2 * h * sh.inter},
       [&] {
         BENCH_CHECK(
             m.gemm->Run(s.act, w.down, nullptr, s.mlp_out, t, sh.hidden, sh.inter, stream));
       }},
      {{"final_rms_norm", 0, 2 * h},
       [&] {
         BENCH_CHECK(InvokeAddRmsNorm(s.mlp_out, s.residual, m.final_norm, s.normed, t, sh.hidden,
                                      sh.eps, stream));
       }},
      {{"lm_head_gemm", 0, 2 * h * sh.vocab},
       [&] {
         BENCH_CHECK(
             m.gemm->Run(s.normed, m.lm_head, nullptr, s.logits, t, sh.vocab, sh.hidden, stream));
       }},
  };
  auto capture = [&](const std::function<void()>& body) {
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    BENCH_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
    body();
    BENCH_CHECK(cudaStreamEndCapture(stream, &graph));
    BENCH_CHECK(cudaGraphInstantiate(&exec, graph, 0));
    BENCH_CHECK(cudaGraphDestroy(graph));
    return exec;
  };
  // Each op alone: kOpRepeats launches captured in one graph, so the time is
  // the GPU's (as inside the step's graph), not the host's launch rate. A
  // GEMM reads more than the L2 holds, so repeats do not warm it.
  constexpr int kOpRepeats = 20;
  for (const auto& [info, body] : ops) {
    OpTime op = info;
    cudaGraphExec_t graph = capture([&] {
      for (int i = 0; i < kOpRepeats; ++i) body();
    });
    op.us =
        timer.MedianUs([&] { BENCH_CHECK(cudaGraphLaunch(graph, stream)); }, reps, 1) / kOpRepeats;
    BENCH_CHECK(cudaGraphExecDestroy(graph));
    result.ops.push_back(op);
  }

  result.layer_eager_us = timer.MedianUs([&] { RunLayer(m, w, s, stream); }, reps, 5);
  result.head_us = timer.MedianUs([&] { RunHead(m, s, stream); }, reps, 5);

  cudaGraphExec_t layer_graph = capture([&] { RunLayer(m, w, s, stream); });
  result.layer_graph_us =
      timer.MedianUs([&] { BENCH_CHECK(cudaGraphLaunch(layer_graph, stream)); }, reps, 5);
  BENCH_CHECK(cudaGraphExecDestroy(layer_graph));

  // Every layer once more with its own weights, to warm their plans (same
  // shapes, so nothing new) before the whole step is captured.
  cudaGraphExec_t step_graph = capture([&] {
    for (const LayerWeights& lw : m.layers) RunLayer(m, lw, s, stream);
    RunHead(m, s, stream);
  });
  result.forward_graph_ms =
      timer.MedianUs([&] { BENCH_CHECK(cudaGraphLaunch(step_graph, stream)); },
                     std::max(5, reps / 2), 1) /
      1000.0;
  BENCH_CHECK(cudaGraphExecDestroy(step_graph));
  auto op_us = [&](const std::string& name) {
    for (const OpTime& op : result.ops) {
      if (op.name == name) return op.us;
    }
    return 0.0;
  };
  result.forward_estimate_ms = (sh.layers * result.layer_graph_us + op_us("embedding") +
                                op_us("final_rms_norm") + op_us("lm_head_gemm")) /
                               1000.0;
  return result;
}

int Main(int argc, char** argv) {
  std::vector<char*> positional = absl::ParseCommandLine(argc, argv);
  std::string out_path = absl::GetFlag(FLAGS_out);
  if (out_path.empty() && positional.size() > 1) out_path = positional[1];
  std::vector<int> batches;
  for (absl::string_view part : absl::StrSplit(absl::GetFlag(FLAGS_batches), ',')) {
    int b = 0;
    if (!absl::SimpleAtoi(part, &b) || b <= 0) {
      std::fprintf(stderr, "bad --batches entry '%s'\n", std::string(part).c_str());
      return 2;
    }
    batches.push_back(b);
  }
  const int query_tokens = absl::GetFlag(FLAGS_query_tokens);
  const int context = absl::GetFlag(FLAGS_context);
  const int reps = std::max(3, absl::GetFlag(FLAGS_reps));
  const int tp = absl::GetFlag(FLAGS_tp);

  Model m;
  const std::string shape_name = absl::GetFlag(FLAGS_shape);
  if (shape_name == "llama-3.2-1b") {
    m.shape.hidden = 2048;
    m.shape.head_dim = 64;
    m.shape.inter = 8192;
    m.shape.layers = 16;
  } else if (shape_name != "llama-3.1-8b") {
    std::fprintf(stderr, "--shape must be llama-3.1-8b or llama-3.2-1b, not %s\n",
                 shape_name.c_str());
    return 2;
  }
  if (absl::GetFlag(FLAGS_layers) > 0) m.shape.layers = absl::GetFlag(FLAGS_layers);
  if (tp < 1 || m.shape.heads % tp || m.shape.kv_heads % tp || m.shape.inter % tp) {
    std::fprintf(stderr, "--tp must divide heads, KV heads and the MLP width\n");
    return 2;
  }
  m.shape.heads /= tp;
  m.shape.kv_heads /= tp;
  m.shape.inter /= tp;
  m.shape.vocab = (m.shape.vocab + tp - 1) / tp;
  const ModelShape& sh = m.shape;
  const int max_batch = *std::max_element(batches.begin(), batches.end());
  const int block_size = absl::GetFlag(FLAGS_block_size);
  m.layout.block_size = block_size;
  m.layout.num_kv_heads = sh.kv_heads;
  m.layout.head_dim = sh.head_dim;
  m.layout.max_blocks_per_req = (context + query_tokens + block_size - 1) / block_size;
  m.layout.num_blocks = max_batch * m.layout.max_blocks_per_req;

  cudaStream_t stream;
  BENCH_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cudaDeviceProp prop;
  BENCH_CHECK(cudaGetDeviceProperties(&prop, 0));
  GemmOptions gemm_options;
  gemm_options.autotune_candidates = absl::GetFlag(FLAGS_gemm_autotune);
  gemm_options.skinny_small_m = absl::GetFlag(FLAGS_skinny_gemm);
  absl::StatusOr<std::unique_ptr<Gemm>> gemm = Gemm::Create(gemm_options);
  BENCH_CHECK(gemm.status());
  m.gemm = *std::move(gemm);

  // Weights: random, never zero; norms near 1. Scales keep activations O(1).
  using model_internal::InvokeRandomBf16Fill;
  uint64_t seed = 1;
  auto weight = [&](size_t count, float scale) {
    uint16_t* p = DeviceAlloc<uint16_t>(count);
    BENCH_CHECK(InvokeRandomBf16Fill(p, count, seed++, scale, stream));
    return p;
  };
  const size_t h = sh.hidden;
  const size_t cache_elems = static_cast<size_t>(m.layout.num_blocks) * block_size * sh.kv_size();
  for (int l = 0; l < sh.layers; ++l) {
    LayerWeights w;
    w.input_norm = weight(h, 1.0f);
    w.qkv = weight(h * sh.qkv_size(), 0.02f);
    w.o = weight(static_cast<size_t>(sh.q_size()) * h, 0.02f);
    w.post_norm = weight(h, 1.0f);
    w.gate_up = weight(h * 2 * sh.inter, 0.02f);
    w.down = weight(static_cast<size_t>(sh.inter) * h, 0.01f);
    w.k_cache = weight(cache_elems, 1.0f);  // the context's keys and values
    w.v_cache = weight(cache_elems, 1.0f);
    m.layers.push_back(w);
  }
  m.final_norm = weight(h, 1.0f);
  m.lm_head = weight(static_cast<size_t>(sh.vocab) * h, 0.02f);
  RopeFrequencyConfig rope;
  rope.head_dim = sh.head_dim;
  rope.theta = 500000.0;
  rope.scaling = RopeFrequencyConfig::Scaling::kLlama3;
  rope.factor = 8.0;
  m.inv_freq = Upload(ComputeRopeInvFreq(rope));
  BENCH_CHECK(cudaStreamSynchronize(stream));

  const double copy_bw = MeasureCopyBandwidth(stream, reps);
  const int64_t weight_bytes = sh.layers * sh.LayerWeightBytes() + sh.HeadWeightBytes();
  const double floor_ms = 1000.0 * weight_bytes / copy_bw;

  std::printf("device: %s (%d SMs)\n", prop.name, prop.multiProcessorCount);
  std::printf(
      "shape: hidden %d, heads %d, kv heads %d, head_dim %d, mlp %d, vocab %d, layers %d (tp %d "
      "shard)\n",
      sh.hidden, sh.heads, sh.kv_heads, sh.head_dim, sh.inter, sh.vocab, sh.layers, tp);
  std::printf("step: %d query tokens per request, context %d, kv block %d; GEMMs of <= 4 rows on %s\n",
              query_tokens, context, block_size,
              gemm_options.skinny_small_m ? "the skinny kernel" : "cuBLASLt");
  std::printf("copy bandwidth %.0f GB/s (read + write); weights %.2f GB; floor %.3f ms\n",
              copy_bw / 1e9, weight_bytes / 1e9, floor_ms);

  std::vector<BatchResult> results;
  for (int batch : batches) {
    results.push_back(RunBatch(m, batch, query_tokens, context, reps, stream));
    const BatchResult& r = results.back();
    std::printf("\nbatch %d (%d tokens)\n", r.batch, r.tokens);
    std::printf("  %-16s %10s %12s\n", "op", "us", "weight GB/s");
    for (const OpTime& op : r.ops) {
      if (op.weight_bytes > 0) {
        std::printf("  %-16s %10.2f %12.0f\n", op.name.c_str(), op.us,
                    op.weight_bytes / (op.us * 1e3));
      } else {
        std::printf("  %-16s %10.2f %12s\n", op.name.c_str(), op.us, "-");
      }
    }
    std::printf("  layer eager %.1f us, layer graph %.1f us, final norm + LM head %.1f us\n",
                r.layer_eager_us, r.layer_graph_us, r.head_us);
    std::printf(
        "  forward step: graph %.3f ms, estimate %.3f ms; floor %.3f ms; graph / floor %.2fx\n",
        r.forward_graph_ms, r.forward_estimate_ms, floor_ms, r.forward_graph_ms / floor_ms);
  }

  if (!out_path.empty()) {
    std::string json = absl::StrFormat(
        "{\n  \"device\": \"%s\",\n  \"sms\": %d,\n  \"copy_bandwidth_gbps\": %.1f,\n"
        "  \"shape\": {\"hidden\": %d, \"heads\": %d, \"kv_heads\": %d, \"head_dim\": %d, "
        "\"intermediate\": %d, \"vocab\": %d, \"layers\": %d, \"tp\": %d},\n"
        "  \"skinny_gemm\": %s,\n"
        "  \"query_tokens\": %d,\n  \"context\": %d,\n  \"kv_block_size\": %d,\n"
        "  \"weight_bytes\": %d,\n  \"floor_ms\": %.4f,\n  \"batches\": [",
        prop.name, prop.multiProcessorCount, copy_bw / 1e9, sh.hidden, sh.heads, sh.kv_heads,
        sh.head_dim, sh.inter, sh.vocab, sh.layers, tp,
        gemm_options.skinny_small_m ? "true" : "false", query_tokens, context, block_size,
        weight_bytes, floor_ms);
    for (size_t i = 0; i < results.size(); ++i) {
      const BatchResult& r = results[i];
      std::vector<std::string> ops;
      for (const OpTime& op : r.ops) ops.push_back(absl::StrFormat("\"%s\": %.3f", op.name, op.us));
      absl::StrAppendFormat(
          &json,
          "%s\n    {\"batch\": %d, \"tokens\": %d, \"ops_us\": {%s},\n"
          "     \"layer_eager_us\": %.3f, \"layer_graph_us\": %.3f, \"head_us\": %.3f,\n"
          "     \"forward_estimate_ms\": %.4f, \"forward_graph_ms\": %.4f, "
          "\"forward_graph_over_floor\": %.3f}",
          i ? "," : "", r.batch, r.tokens, absl::StrJoin(ops, ", "), r.layer_eager_us,
          r.layer_graph_us, r.head_us, r.forward_estimate_ms, r.forward_graph_ms,
          r.forward_graph_ms / floor_ms);
    }
    json += "\n  ]\n}\n";
    std::ofstream f(out_path);
    f << json;
    if (!f) {
      std::fprintf(stderr, "could not write %s\n", out_path.c_str());
      return 1;
    }
    std::printf("\nwrote %s\n", out_path.c_str());
  }
  return 0;
}

}  // namespace
}  // namespace verdict

int main(int argc, char** argv) { return verdict::Main(argc, argv); }
