// The CUDA backend against the CPU backend (the oracle) on the same bf16
// weights and the same KV bookkeeping: ragged prefills, verify blocks,
// rewritten (rejected) positions, decode steps with a subset of logit rows,
// sliding-window rings, and the bundled target model.
//
// The device keeps its activations and KV cache in bf16 where the CPU keeps
// float32, so logits agree to bf16 rounding, not bit for bit: each step's
// relative L2 error must stay below kRelTolerance (a few bf16 ulps, 2^-8
// each), and every row whose CPU top-1 leads its runner-up by a clear margin
// must pick the same token.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "gtest/gtest.h"
#include "runtime/model/cuda_llama_model.h"
#include "runtime/model/kv_cache.h"
#include "runtime/model/llama_model.h"
#include "runtime/model/model_config.h"
#include "runtime/model/random_model.h"
#include "runtime/model/weights.h"

namespace verdict {
namespace {

constexpr double kRelTolerance = 2e-2;

struct Pair {
  std::unique_ptr<KvCache> kv;
  std::unique_ptr<WeightSource> weights;
  std::unique_ptr<ModelRunner> cpu;
  std::unique_ptr<ModelRunner> cuda;
};

std::unique_ptr<ModelRunner> MakeCudaModel(const ModelConfig& config, const WeightSource& weights,
                                           const KvCache* kv, bool cuda_graphs = true) {
  CudaModelOptions options;
  options.cuda_graphs = cuda_graphs;
  auto model = CreateCudaLlamaModel(config, weights, kv, nullptr, options);
  EXPECT_TRUE(model.ok()) << model.status();
  return model.ok() ? *std::move(model) : nullptr;
}

std::unique_ptr<KvCache> MakeKvCache(const ModelConfig& config, int speculative_slots) {
  auto kv = KvCache::Create(MakeKvCacheConfig(config, 1, /*num_blocks=*/256, /*max_requests=*/8,
                                              speculative_slots));
  EXPECT_TRUE(kv.ok()) << kv.status();
  return kv.ok() ? std::make_unique<KvCache>(*std::move(kv)) : nullptr;
}

Pair MakePair(const ModelConfig& config, const std::string& dir, int speculative_slots) {
  Pair p;
  p.kv = MakeKvCache(config, speculative_slots);
  auto weights = OpenCheckpointWeights(dir);
  EXPECT_TRUE(weights.ok()) << weights.status();
  p.weights = *std::move(weights);
  auto cpu = CreateCpuLlamaModel(config, *p.weights, p.kv.get(), nullptr);
  EXPECT_TRUE(cpu.ok()) << cpu.status();
  p.cpu = *std::move(cpu);
  p.cuda = MakeCudaModel(config, *p.weights, p.kv.get());
  return p;
}

// Runs `batch` on both backends and compares the logits; returns the CPU's.
std::vector<float> CompareStep(Pair& p, const ForwardBatch& batch, const std::string& what) {
  const int vocab = p.cpu->config().vocab_size;
  const size_t n = static_cast<size_t>(batch.num_logit_rows()) * vocab;
  std::vector<float> cpu(n), cuda(n, NAN);
  EXPECT_TRUE(p.cpu->Forward(batch, cpu.data()).ok()) << what;
  absl::Status s = p.cuda->Forward(batch, cuda.data());
  EXPECT_TRUE(s.ok()) << what << ": " << s;
  double err = 0, norm = 0;
  for (size_t i = 0; i < n; ++i) {
    EXPECT_TRUE(std::isfinite(cuda[i])) << what << " element " << i;
    err += (cuda[i] - cpu[i]) * static_cast<double>(cuda[i] - cpu[i]);
    norm += cpu[i] * static_cast<double>(cpu[i]);
  }
  if (n > 0) {
    EXPECT_LT(std::sqrt(err / norm), kRelTolerance) << what;
  }
  for (int64_t row = 0; row < batch.num_logit_rows(); ++row) {
    const float* c = cpu.data() + row * vocab;
    const float* g = cuda.data() + row * vocab;
    std::vector<int> order(vocab);
    for (int i = 0; i < vocab; ++i) order[i] = i;
    std::partial_sort(order.begin(), order.begin() + 2, order.end(),
                      [&](int a, int b) { return c[a] > c[b]; });
    // A clear lead: more than 10x the largest per-element error seen on
    // these models' logits at bf16 precision.
    double max_abs = 0;
    for (int i = 0; i < vocab; ++i) max_abs = std::max(max_abs, std::fabs(double(c[i])));
    if (c[order[0]] - c[order[1]] > 0.05 * max_abs) {
      const int gpu_top = static_cast<int>(std::max_element(g, g + vocab) - g);
      EXPECT_EQ(gpu_top, order[0]) << what << " row " << row;
    }
  }
  return cpu;
}

std::vector<int32_t> RandomTokens(std::mt19937& rng, int n, int vocab) {
  std::vector<int32_t> ids(n);
  for (int32_t& id : ids) id = static_cast<int32_t>(rng() % vocab);
  return ids;
}

// A ragged life of three requests: prefill, a verify block, the rejected
// tail rewritten, decode steps that want only some logit rows.
void RunScenario(const ModelConfig& config, const std::string& name) {
  const std::string dir = absl::StrCat(std::getenv("TEST_TMPDIR"), "/", name);
  RandomModelOptions options;
  options.seed = 7;
  options.stddev = 0.05f;
  options.dtype = TensorDType::kBF16;  // both backends read the same bf16 values
  ASSERT_TRUE(WriteRandomModel(dir, config, options).ok());
  const int slots = 6;
  Pair p = MakePair(config, dir, slots);
  ASSERT_NE(p.cuda, nullptr);
  std::mt19937 rng(11);
  const int vocab = config.vocab_size;
  std::vector<int> handles;
  for (int i = 0; i < 3; ++i) {
    auto h = p.kv->Allocate(96);
    ASSERT_TRUE(h.ok());
    handles.push_back(*h);
  }
  const std::vector<int> prompt_lens = {29, 7, 1};
  std::vector<std::vector<int32_t>> tokens(3);
  ForwardBatch prefill;
  for (int i = 0; i < 3; ++i) {
    tokens[i] = RandomTokens(rng, prompt_lens[i], vocab);
    prefill.requests.push_back({handles[i], 0, tokens[i], -1});
  }
  CompareStep(p, prefill, name + " prefill");

  // A verify block of 6 per request, then 4 of those positions rewritten
  // with other tokens (as after a rejection at the second draft).
  std::vector<std::vector<int32_t>> block(3);
  ForwardBatch verify;
  for (int i = 0; i < 3; ++i) {
    block[i] = RandomTokens(rng, 6, vocab);
    verify.requests.push_back({handles[i], prompt_lens[i], block[i], -1});
  }
  CompareStep(p, verify, name + " verify");
  ForwardBatch rewrite;
  for (int i = 0; i < 3; ++i) {
    block[i] = RandomTokens(rng, 6, vocab);
    rewrite.requests.push_back({handles[i], prompt_lens[i] + 2, block[i], -1});
  }
  CompareStep(p, rewrite, name + " rewrite after reject");

  // Decode steps wanting 1, 0 and 1 rows, and a mixed step wanting 2.
  int64_t next = prompt_lens[0] + 8;
  for (int step = 0; step < 4; ++step) {
    ForwardBatch decode;
    std::vector<std::vector<int32_t>> one(3);
    for (int i = 0; i < 3; ++i) {
      one[i] = RandomTokens(rng, i == 1 ? 3 : 1, vocab);
      const int64_t start = prompt_lens[i] + 8 + (i == 1 ? 3 * step : step);
      decode.requests.push_back({handles[i], start, one[i], i == 1 ? (step % 2 == 0 ? 0 : 2) : 1});
    }
    CompareStep(p, decode, absl::StrCat(name, " decode ", step));
    ++next;
  }
}

// A small Llama: grouped heads, head_dim 64.
ModelConfig SmallLlamaConfig() {
  ModelConfig c = TinyModelConfig(ModelFamily::kLlama);
  c.hidden_size = 256;
  c.num_heads = 4;
  c.num_kv_heads = 2;
  c.head_dim = 64;
  c.intermediate_size = 512;
  c.vocab_size = 1000;
  return c;
}

TEST(CudaLlamaModelTest, LlamaWithSlidingLayerOBiasTiedHead) {
  ModelConfig c = SmallLlamaConfig();
  c.o_bias = true;
  c.tie_word_embeddings = true;
  c.sliding_window = 8;  // shorter than the prompts: the ring wraps
  c.layer_uses_sliding_window = {true, false};
  RunScenario(c, "llama");
}

TEST(CudaLlamaModelTest, Qwen2QkvBias) {
  ModelConfig c = TinyModelConfig(ModelFamily::kQwen2);
  c.hidden_size = 256;
  c.num_heads = 8;
  c.num_kv_heads = 2;
  c.head_dim = 128;
  c.intermediate_size = 384;
  c.vocab_size = 777;
  RunScenario(c, "qwen2");
}

TEST(CudaLlamaModelTest, Qwen3QkNorm) {
  ModelConfig c = TinyModelConfig(ModelFamily::kQwen3);
  c.hidden_size = 128;
  c.num_heads = 4;
  c.num_kv_heads = 4;
  c.head_dim = 64;
  c.intermediate_size = 256;
  c.vocab_size = 512;
  RunScenario(c, "qwen3");
}

// Graph replay against eager launches: the same logits, bit for bit, over
// repeated verify shapes (captured on their second use, replayed after) and a
// context that crosses a bucket boundary (a new shape).
TEST(CudaLlamaModelTest, GraphReplayEqualsEagerLaunches) {
  auto config = LoadModelConfig("models/target");
  ASSERT_TRUE(config.ok()) << config.status();
  auto weights = OpenCheckpointWeights("models/target");
  ASSERT_TRUE(weights.ok());
  std::vector<std::unique_ptr<KvCache>> caches;
  std::vector<std::unique_ptr<ModelRunner>> models;
  for (bool graphs : {true, false}) {
    caches.push_back(MakeKvCache(*config, 6));
    ASSERT_NE(caches.back(), nullptr);
    models.push_back(MakeCudaModel(*config, **weights, caches.back().get(), graphs));
    ASSERT_NE(models.back(), nullptr);
  }
  const int vocab = config->vocab_size;
  std::mt19937 rng(21);
  std::vector<int> handles;
  for (auto& kv : caches) {
    handles.clear();
    for (int i = 0; i < 3; ++i) handles.push_back(*kv->Allocate(400));
  }
  std::vector<std::vector<int32_t>> prompts(3);
  ForwardBatch prefill;
  for (int i = 0; i < 3; ++i) {
    prompts[i] = RandomTokens(rng, 230 + i, vocab);
    prefill.requests.push_back({handles[i], 0, prompts[i], 1});
  }
  for (auto& m : models) {
    std::vector<float> out(3 * vocab);
    ASSERT_TRUE(m->Forward(prefill, out.data()).ok());
  }
  // 12 verify steps of 6 rows per request, 3 positions apart: the contexts
  // cross 256 (a new context bucket, so a new shape) half way.
  for (int step = 0; step < 12; ++step) {
    ForwardBatch verify;
    std::vector<std::vector<int32_t>> block(3);
    for (int i = 0; i < 3; ++i) {
      block[i] = RandomTokens(rng, 6, vocab);
      verify.requests.push_back({handles[i], static_cast<int64_t>(prompts[i].size()) + 3 * step,
                                 block[i], -1});
    }
    std::vector<float> with_graphs(18 * vocab), eager(18 * vocab);
    ASSERT_TRUE(models[0]->Forward(verify, with_graphs.data()).ok()) << "step " << step;
    ASSERT_TRUE(models[1]->Forward(verify, eager.data()).ok()) << "step " << step;
    ASSERT_EQ(with_graphs, eager) << "step " << step;
  }
  // Each shape's first use runs eagerly and every later one from its graph:
  // some of the twelve steps, never all, replayed.
  EXPECT_GT(models[0]->graph_replays(), 0);
  EXPECT_LT(models[0]->graph_replays(), 12);
  EXPECT_EQ(models[1]->graph_replays(), 0);
}

// Ragged steps (per-request query lengths 1 to 6, a changing subset of the
// requests, catch-up passes that want one row of two) padded to repeating
// launch shapes: the same logits, bit for bit, as the same steps run
// eagerly. `config` with a sliding layer covers the scratch ring, without
// one the scratch block.
//
// Lazy: graphs captured on a shape's second use, against graphs of the
// exact shapes and eager launches; the phantom requests change no real
// request's keys or logits, and more passes replay than with exact shapes.
// Ahead: every shape the steps can reach captured before the first request
// (ModelRunner::CaptureGraphs, on phantoms only), with the graphs' context
// fixed (graph_max_context), against eager launches of that context: no
// step runs eagerly, every one replays.
enum class Capture { kLazy, kAhead };
void RunRaggedPadding(const ModelConfig& config, const std::string& name, Capture capture) {
  const std::string dir = absl::StrCat(std::getenv("TEST_TMPDIR"), "/", name);
  RandomModelOptions random;
  random.seed = 5;
  random.stddev = 0.05f;
  random.dtype = TensorDType::kBF16;
  ASSERT_TRUE(WriteRandomModel(dir, config, random).ok());
  auto weights = OpenCheckpointWeights(dir);
  ASSERT_TRUE(weights.ok()) << weights.status();
  constexpr int kRequests = 5;
  constexpr int kMaxQuery = 6;
  constexpr int kContext = 400;
  struct Variant {
    bool graphs;
    bool pad;
  };
  // The eager variant last.
  const std::vector<Variant> variants = capture == Capture::kLazy
                                            ? std::vector<Variant>{{true, true}, {true, false},
                                                                   {false, false}}
                                            : std::vector<Variant>{{true, true}, {false, false}};
  const size_t eager = variants.size() - 1;
  std::vector<std::unique_ptr<KvCache>> caches;
  std::vector<std::unique_ptr<ModelRunner>> models;
  for (const Variant& v : variants) {
    caches.push_back(MakeKvCache(config, kMaxQuery));
    ASSERT_NE(caches.back(), nullptr);
    CudaModelOptions options;
    options.cuda_graphs = v.graphs;
    options.pad_graph_shapes = v.pad;
    if (capture == Capture::kAhead) options.graph_max_context = kContext;
    auto model = CreateCudaLlamaModel(config, **weights, caches.back().get(), nullptr, options);
    ASSERT_TRUE(model.ok()) << model.status();
    models.push_back(*std::move(model));
  }
  if (capture == Capture::kAhead) {
    std::vector<int> queries;
    for (int q = 1; q <= kMaxQuery; ++q) queries.push_back(q);
    const std::vector<GraphShape> shapes = StartupGraphShapes(kRequests, queries, GraphTiers::kAll);
    int last = 0;
    auto captured = models[0]->CaptureGraphs(shapes, [&](int done) { last = done; });
    ASSERT_TRUE(captured.ok()) << captured.status();
    EXPECT_EQ(captured->captured, static_cast<int>(shapes.size())) << name;
    EXPECT_EQ(captured->failed, 0) << name;
    EXPECT_EQ(last, static_cast<int>(shapes.size())) << name;
    // Capturing is not serving: nothing counted as replayed or eager.
    EXPECT_EQ(models[0]->graph_replays(), 0) << name;
    EXPECT_EQ(models[0]->eager_passes(ModelRunner::EagerReason::kFirstUse), 0) << name;
    // A model without graphs captures nothing.
    auto none = models[eager]->CaptureGraphs(shapes, nullptr);
    ASSERT_TRUE(none.ok()) << none.status();
    EXPECT_EQ(none->captured, 0) << name;
  }
  const int vocab = config.vocab_size;
  std::mt19937 rng(31);
  std::vector<int> handles;
  for (auto& kv : caches) {
    handles.clear();
    for (int i = 0; i < kRequests; ++i) handles.push_back(*kv->Allocate(kContext - kMaxQuery));
  }
  std::vector<int64_t> next(kRequests);
  std::vector<std::vector<int32_t>> prompts(kRequests);
  ForwardBatch prefill;
  for (int i = 0; i < kRequests; ++i) {
    prompts[i] = RandomTokens(rng, 20 + 3 * i, vocab);
    prefill.requests.push_back({handles[i], 0, prompts[i], 1});
    next[i] = static_cast<int64_t>(prompts[i].size());
  }
  for (auto& m : models) {
    std::vector<float> out(kRequests * vocab);
    ASSERT_TRUE(m->Forward(prefill, out.data()).ok());
  }
  // The prefill wants one row per request: never captured (one pass, or one
  // per chunk of the sliding layers' ring).
  const int64_t prefill_passes =
      models[0]->eager_passes(ModelRunner::EagerReason::kPartialLogits);
  EXPECT_GE(prefill_passes, 1) << name;
  // A chunk of the sliding layers' prefill with few tokens a wanted row
  // computes every row, as a catch-up does, and is graphable.
  const auto graphed = [&] {
    return models[0]->eager_passes(ModelRunner::EagerReason::kFirstUse) +
           models[0]->graph_replays();
  };
  const int64_t prefill_graphed = graphed();
  // Runs `batch` on every model: the graphed ones give the eager one's bits.
  const auto forward_all = [&](const ForwardBatch& batch, const std::string& what) {
    const size_t n = static_cast<size_t>(batch.num_logit_rows()) * vocab;
    std::vector<std::vector<float>> out(models.size(), std::vector<float>(n, NAN));
    for (size_t m = 0; m < models.size(); ++m) {
      ASSERT_TRUE(models[m]->Forward(batch, out[m].data()).ok()) << what;
    }
    ASSERT_EQ(out[0], out[eager]) << what << ": padded graphs against eager";
    if (capture == Capture::kLazy) {
      ASSERT_EQ(out[1], out[eager]) << what << ": exact graphs against eager";
    }
  };
  const int64_t prefill_replays = models[0]->graph_replays();
  for (int step = 0; step < 40; ++step) {
    ForwardBatch verify;
    std::vector<std::vector<int32_t>> block(kRequests);
    // Every fifth step is a draft's catch-up: two tokens a request, the
    // last one's logits wanted (computed for every row, to be graphable).
    const bool catch_up = step % 5 == 4;
    for (int i = 0; i < kRequests; ++i) {
      if (step % 4 == 3 && i % 2 == 1) continue;  // some steps leave requests out
      block[i] = RandomTokens(rng, catch_up ? 2 : 1 + static_cast<int>(rng() % kMaxQuery), vocab);
      verify.requests.push_back({handles[i], next[i], block[i], catch_up ? 1 : -1});
      // Accept a random prefix: the next step rewrites the rest.
      next[i] += catch_up ? 2 : 1 + static_cast<int64_t>(rng() % block[i].size());
    }
    ASSERT_NO_FATAL_FAILURE(forward_all(verify, absl::StrCat(name, " step ", step)));
  }
  EXPECT_EQ(models[eager]->graph_replays(), 0) << name;
  // No verify or catch-up step ran eager for its partial logits.
  EXPECT_EQ(models[0]->eager_passes(ModelRunner::EagerReason::kPartialLogits), prefill_passes)
      << name;
  EXPECT_EQ(models[0]->eager_passes(ModelRunner::EagerReason::kCaptureFailed), 0) << name;
  EXPECT_EQ(graphed(), prefill_graphed + 40) << name;
  if (capture == Capture::kAhead) {
    // Every step replayed a graph captured before it.
    EXPECT_EQ(models[0]->graph_replays(), prefill_replays + 40) << name;
    // A catch-up larger than every shape captured (ten tokens a request,
    // three rows wanted: graphable) needs more than the graph buffers hold:
    // it runs on the eager buffers, and the graphs stay for the next step.
    // A model with sliding layers runs it in chunks of the speculative
    // slots instead, which fit: the first (no rows wanted) eagerly, the
    // second from its graph.
    const bool chunked = config.HasSlidingLayers();
    ForwardBatch large, decode;
    std::vector<std::vector<int32_t>> tokens(kRequests);
    for (int i = 0; i < kRequests; ++i) {
      tokens[i] = RandomTokens(rng, 10, vocab);
      large.requests.push_back({handles[i], next[i], tokens[i], 3});
      next[i] += 10;
    }
    ASSERT_NO_FATAL_FAILURE(forward_all(large, name + " large catch-up"));
    EXPECT_EQ(models[0]->eager_passes(ModelRunner::EagerReason::kOutgrewGraphBuffers),
              chunked ? 0 : 1)
        << name;
    for (int i = 0; i < kRequests; ++i) {
      decode.requests.push_back({handles[i], next[i], absl::MakeConstSpan(tokens[i]).first(1), -1});
    }
    ASSERT_NO_FATAL_FAILURE(forward_all(decode, name + " decode after it"));
    EXPECT_EQ(models[0]->graph_replays(), prefill_replays + 40 + (chunked ? 2 : 1)) << name;
    EXPECT_EQ(models[0]->eager_passes(ModelRunner::EagerReason::kFirstUse), 0) << name;
    return;
  }
  // The exact shapes rarely repeat; the padded ones do, once the step
  // buffers have grown to the largest step (which drops the graphs).
  std::printf("%s: graph replays padded %lld, exact %lld of 40 steps\n", name.c_str(),
              static_cast<long long>(models[0]->graph_replays()),
              static_cast<long long>(models[1]->graph_replays()));
  EXPECT_GT(models[0]->graph_replays(), models[1]->graph_replays()) << name;
  EXPECT_GE(models[0]->graph_replays(), 15) << name;
}

TEST(CudaLlamaModelTest, RaggedStepsPaddedToRepeatingShapes) {
  ModelConfig c = SmallLlamaConfig();
  RunRaggedPadding(c, "ragged_full", Capture::kLazy);
  c.sliding_window = 8;
  c.layer_uses_sliding_window = {true, false};
  RunRaggedPadding(c, "ragged_sliding", Capture::kLazy);
}

TEST(CudaLlamaModelTest, ShapesCapturedAheadServeEveryStep) {
  ModelConfig c = SmallLlamaConfig();
  RunRaggedPadding(c, "ahead_full", Capture::kAhead);
  c.sliding_window = 8;
  c.layer_uses_sliding_window = {true, false};
  RunRaggedPadding(c, "ahead_sliding", Capture::kAhead);
}

// The draft loop's passes: token ids read from device memory and a pass
// that returns before its logits are written give the same logits, bit for
// bit, as host token ids and a waiting pass (graph capture and replay
// included: every pass has the same shape).
TEST(CudaLlamaModelTest, DeviceTokenIdsWithoutWaitingEqualHostTokens) {
  auto config = LoadModelConfig("models/draft");
  ASSERT_TRUE(config.ok()) << config.status();
  auto weights = OpenCheckpointWeights("models/draft");
  ASSERT_TRUE(weights.ok());
  std::vector<std::unique_ptr<KvCache>> caches;
  std::vector<std::unique_ptr<ModelRunner>> models;
  for (int m = 0; m < 2; ++m) {
    caches.push_back(MakeKvCache(*config, 6));
    ASSERT_NE(caches.back(), nullptr);
    models.push_back(MakeCudaModel(*config, **weights, caches.back().get()));
    ASSERT_NE(models.back(), nullptr);
  }
  ASSERT_NE(models[1]->device_queue(), nullptr);
  const int vocab = config->vocab_size;
  const int n = 3;
  std::mt19937 rng(22);
  std::vector<int> handles;
  for (auto& kv : caches) {
    handles.clear();
    for (int i = 0; i < n; ++i) handles.push_back(*kv->Allocate(200));
  }
  std::vector<std::vector<int32_t>> prompts(n);
  ForwardBatch prefill;
  for (int i = 0; i < n; ++i) {
    prompts[i] = RandomTokens(rng, 40 + 7 * i, vocab);
    prefill.requests.push_back({handles[i], 0, prompts[i], 1});
  }
  for (auto& m : models) {
    std::vector<float> out(n * vocab);
    ASSERT_TRUE(m->Forward(prefill, out.data()).ok());
  }
  int32_t* device_ids = nullptr;
  float* device_logits = nullptr;
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&device_ids), n * sizeof(int32_t)), cudaSuccess);
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&device_logits), static_cast<size_t>(n) * vocab * sizeof(float)),
            cudaSuccess);
  const std::vector<int32_t> placeholders(n, 0);
  for (int pass = 0; pass < 6; ++pass) {
    const std::vector<int32_t> ids = RandomTokens(rng, n, vocab);
    ForwardBatch host, device;
    for (int i = 0; i < n; ++i) {
      const int64_t position = static_cast<int64_t>(prompts[i].size()) + pass;
      host.requests.push_back({handles[i], position, absl::MakeConstSpan(&ids[i], 1), 1});
      device.requests.push_back(
          {handles[i], position, absl::MakeConstSpan(&placeholders[i], 1), 1});
    }
    device.device_token_ids = device_ids;
    device.wait = false;
    ASSERT_EQ(cudaMemcpy(device_ids, ids.data(), n * sizeof(int32_t), cudaMemcpyHostToDevice),
              cudaSuccess);
    // Pageable copies may return before the DMA lands; the work below runs
    // on a non-blocking stream.
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    std::vector<float> expected(n * vocab), got(n * vocab);
    ASSERT_TRUE(models[0]->Forward(host, expected.data()).ok()) << "pass " << pass;
    ASSERT_TRUE(models[1]->Forward(device, device_logits).ok()) << "pass " << pass;
    auto* queue = static_cast<cudaStream_t>(models[1]->device_queue());
    ASSERT_EQ(cudaMemcpyAsync(got.data(), device_logits, got.size() * sizeof(float),
                              cudaMemcpyDeviceToHost, queue),
              cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(queue), cudaSuccess);
    ASSERT_EQ(got, expected) << "pass " << pass;
  }
  // More than one query token per request cannot take device ids.
  ForwardBatch two;
  const std::vector<int32_t> pair = {1, 2};
  two.requests.push_back({handles[0], static_cast<int64_t>(prompts[0].size()) + 6, pair, 1});
  two.device_token_ids = device_ids;
  std::vector<float> out(vocab);
  EXPECT_FALSE(models[1]->Forward(two, out.data()).ok());
  cudaFree(device_ids);
  cudaFree(device_logits);
}

// The bundled target: a prompt, then greedy decoding fed with the CPU's
// tokens; the device's greedy choice must match on every clear row.
TEST(CudaLlamaModelTest, BundledTargetGreedy) {
  auto config = LoadModelConfig("models/target");
  ASSERT_TRUE(config.ok()) << config.status();
  Pair p = MakePair(*config, "models/target", 6);
  ASSERT_NE(p.cuda, nullptr);
  auto h = p.kv->Allocate(128);
  ASSERT_TRUE(h.ok());
  std::mt19937 rng(3);
  std::vector<int32_t> seq = RandomTokens(rng, 40, config->vocab_size);
  ForwardBatch prefill;
  prefill.requests.push_back({*h, 0, seq, 1});
  std::vector<float> logits = CompareStep(p, prefill, "bundled prefill");
  for (int step = 0; step < 24; ++step) {
    const int32_t next = static_cast<int32_t>(
        std::max_element(logits.begin(), logits.end()) - logits.begin());
    seq.push_back(next);
    ForwardBatch decode;
    decode.requests.push_back(
        {*h, static_cast<int64_t>(seq.size()) - 1, absl::MakeConstSpan(&seq.back(), 1), 1});
    logits = CompareStep(p, decode, absl::StrCat("bundled decode ", step));
  }
}

}  // namespace
}  // namespace verdict
