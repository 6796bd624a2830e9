#include "runtime/model/llama_model.h"

#include <algorithm>
#include <cmath>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "comm/communicator.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "runtime/model/kv_cache.h"
#include "runtime/model/random_model.h"
#include "runtime/model/weights.h"

namespace verdict {
namespace {

using ::testing::HasSubstr;

constexpr uint64_t kSeed = 1234;
// Larger than the 0.02 of real initialisations, so that a tiny model's
// logits differ by more than rounding and mistakes show.
constexpr float kStddev = 0.15f;

// ---------------------------------------------------------------------------
// An independent reference: the whole sequence at once, in double, no
// cache, written straight from the Hugging Face modeling code.

class Reference {
 public:
  explicit Reference(const ModelConfig& c) : c_(c) {
    absl::StatusOr<LlamaWeights> w =
        LoadLlamaWeights(c, *MakeDummyWeights(kSeed, kStddev), TensorParallel{});
    EXPECT_TRUE(w.ok()) << w.status();
    w_ = *std::move(w);
  }

  // Logits [tokens.size()][vocab] for positions 0..n-1.
  std::vector<std::vector<double>> Logits(const std::vector<int32_t>& tokens) const {
    const int n = static_cast<int>(tokens.size());
    const int hidden = c_.hidden_size, hd = c_.head_dim, heads = c_.num_heads,
              kv_heads = c_.num_kv_heads;
    std::vector<std::vector<double>> x(n, std::vector<double>(hidden));
    for (int t = 0; t < n; ++t) {
      for (int i = 0; i < hidden; ++i) x[t][i] = w_.embed_tokens.data[tokens[t] * hidden + i];
    }
    for (int l = 0; l < c_.num_layers; ++l) {
      const LlamaLayerWeights& lw = w_.layers[l];
      const bool sliding = c_.HasSlidingLayers() && c_.layer_uses_sliding_window[l];
      std::vector<std::vector<double>> q(n), k(n), v(n);
      for (int t = 0; t < n; ++t) {
        std::vector<double> h = Norm(x[t], lw.input_norm.data);
        q[t] = Mat(lw.q_proj, h, lw.q_bias);
        k[t] = Mat(lw.k_proj, h, lw.k_bias);
        v[t] = Mat(lw.v_proj, h, lw.v_bias);
        for (int hh = 0; hh < heads; ++hh) HeadNormRope(q[t], hh, lw.q_norm, t);
        for (int hh = 0; hh < kv_heads; ++hh) HeadNormRope(k[t], hh, lw.k_norm, t);
      }
      for (int t = 0; t < n; ++t) {
        std::vector<double> attn(heads * hd, 0.0);
        const int first = sliding ? std::max(0, t - c_.sliding_window + 1) : 0;
        for (int hh = 0; hh < heads; ++hh) {
          const int g = hh / (heads / kv_heads);
          std::vector<double> s;
          double mx = -1e300;
          for (int j = first; j <= t; ++j) {
            double dot = 0;
            for (int d = 0; d < hd; ++d) dot += q[t][hh * hd + d] * k[j][g * hd + d];
            s.push_back(dot / std::sqrt(static_cast<double>(hd)));
            mx = std::max(mx, s.back());
          }
          double sum = 0;
          for (double& e : s) sum += (e = std::exp(e - mx));
          for (int j = first; j <= t; ++j) {
            for (int d = 0; d < hd; ++d) {
              attn[hh * hd + d] += s[j - first] / sum * v[j][g * hd + d];
            }
          }
        }
        std::vector<double> o = Mat(lw.o_proj, attn, lw.o_bias);
        for (int i = 0; i < hidden; ++i) x[t][i] += o[i];
        std::vector<double> h = Norm(x[t], lw.post_attention_norm.data);
        std::vector<double> g = Mat(lw.gate_proj, h, {});
        std::vector<double> u = Mat(lw.up_proj, h, {});
        for (size_t i = 0; i < g.size(); ++i) g[i] = g[i] / (1 + std::exp(-g[i])) * u[i];
        std::vector<double> d = Mat(lw.down_proj, g, {});
        for (int i = 0; i < hidden; ++i) x[t][i] += d[i];
      }
    }
    std::vector<std::vector<double>> logits(n);
    for (int t = 0; t < n; ++t) {
      logits[t] = Mat(w_.output_embedding(), Norm(x[t], w_.final_norm.data), {});
    }
    return logits;
  }

 private:
  std::vector<double> Norm(const std::vector<double>& x, const std::vector<float>& w) const {
    double ms = 0;
    for (double e : x) ms += e * e;
    ms /= x.size();
    std::vector<double> y(x.size());
    for (size_t i = 0; i < x.size(); ++i) y[i] = x[i] / std::sqrt(ms + c_.rms_norm_eps) * w[i];
    return y;
  }

  static std::vector<double> Mat(const HostTensor& w, const std::vector<double>& x,
                                 const HostTensor& bias) {
    const size_t out = w.shape[0], in = w.shape[1];
    std::vector<double> y(out);
    for (size_t o = 0; o < out; ++o) {
      double s = bias.empty() ? 0.0 : bias.data[o];
      for (size_t i = 0; i < in; ++i) s += w.data[o * in + i] * x[i];
      y[o] = s;
    }
    return y;
  }

  double InvFreq(int i) const {
    double f = std::pow(c_.rope_theta, -2.0 * i / c_.head_dim);
    const RopeScaling& s = c_.rope_scaling;
    if (s.type == RopeScaling::Type::kLlama3) {
      const double wavelen = 2 * M_PI / f;
      const double old = static_cast<double>(s.original_max_position_embeddings);
      if (wavelen > old / s.low_freq_factor) {
        f /= s.factor;
      } else if (wavelen >= old / s.high_freq_factor) {
        const double smooth =
            (old / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
        f = (1 - smooth) * f / s.factor + smooth * f;
      }
    }
    return f;
  }

  // Qwen3's per-head RMSNorm (when present), then rotate_half RoPE.
  void HeadNormRope(std::vector<double>& vec, int head, const HostTensor& norm, int pos) const {
    const int hd = c_.head_dim, half = hd / 2;
    double* x = vec.data() + head * hd;
    if (!norm.empty()) {
      double ms = 0;
      for (int d = 0; d < hd; ++d) ms += x[d] * x[d];
      ms /= hd;
      for (int d = 0; d < hd; ++d) x[d] = x[d] / std::sqrt(ms + c_.rms_norm_eps) * norm.data[d];
    }
    for (int i = 0; i < half; ++i) {
      const double a = pos * InvFreq(i);
      const double x0 = x[i], x1 = x[i + half];
      x[i] = x0 * std::cos(a) - x1 * std::sin(a);
      x[i + half] = x1 * std::cos(a) + x0 * std::sin(a);
    }
  }

  ModelConfig c_;
  LlamaWeights w_;
};

// ---------------------------------------------------------------------------
// A model with its own cache, for one rank.

struct Engine {
  std::unique_ptr<KvCache> cache;
  std::unique_ptr<ModelRunner> model;

  static Engine Make(const ModelConfig& c, Communicator* comm = nullptr, int spec_slots = 6,
                     int threads = 1) {
    const int tp = comm == nullptr ? 1 : comm->world_size();
    Engine e;
    absl::StatusOr<KvCache> cache = KvCache::Create(
        MakeKvCacheConfig(c, tp, /*num_blocks=*/64, /*max_requests=*/8, spec_slots));
    EXPECT_TRUE(cache.ok()) << cache.status();
    e.cache = std::make_unique<KvCache>(*std::move(cache));
    absl::StatusOr<std::unique_ptr<ModelRunner>> model = CreateCpuLlamaModel(
        c, *MakeDummyWeights(kSeed, kStddev), e.cache.get(), comm, CpuModelOptions{threads});
    EXPECT_TRUE(model.ok()) << model.status();
    if (model.ok()) e.model = *std::move(model);
    return e;
  }

  int Allocate(int64_t positions = 256) { return *cache->Allocate(positions); }

  // Logits for each query token of one request.
  std::vector<std::vector<float>> Run(int handle, int64_t start, const std::vector<int32_t>& ids,
                                      int num_logits = -1) {
    ForwardBatch batch;
    batch.requests.push_back(ForwardRequest{handle, start, ids, num_logits});
    return Split(RunBatch(batch), model->config().vocab_size);
  }

  std::vector<float> RunBatch(const ForwardBatch& batch) {
    std::vector<float> logits(batch.num_logit_rows() * model->config().vocab_size, NAN);
    absl::Status s = model->Forward(batch, logits.data());
    EXPECT_TRUE(s.ok()) << s;
    return logits;
  }

  static std::vector<std::vector<float>> Split(const std::vector<float>& flat, int vocab) {
    std::vector<std::vector<float>> rows;
    for (size_t i = 0; i < flat.size(); i += vocab) {
      rows.emplace_back(flat.begin() + i, flat.begin() + i + vocab);
    }
    return rows;
  }
};

std::vector<int32_t> RandomTokens(int n, int vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> t(n);
  for (int32_t& x : t) x = static_cast<int32_t>(rng() % vocab);
  return t;
}

int Argmax(const std::vector<float>& v) {
  return static_cast<int>(std::max_element(v.begin(), v.end()) - v.begin());
}

void ExpectNear(const std::vector<float>& got, const std::vector<double>& want, double tol,
                const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_NEAR(got[i], want[i], tol * (1 + std::abs(want[i]))) << what << " logit " << i;
  }
}

void ExpectNear(const std::vector<float>& got, const std::vector<float>& want, double tol,
                const std::string& what) {
  ExpectNear(got, std::vector<double>(want.begin(), want.end()), tol, what);
}

// ---------------------------------------------------------------------------

struct Variant {
  const char* name;
  ModelConfig config;
};

void PrintTo(const Variant& v, std::ostream* os) { *os << v.name; }

std::vector<Variant> Variants() {
  std::vector<Variant> v;
  v.push_back({"llama", TinyModelConfig(ModelFamily::kLlama)});
  v.push_back({"qwen2_bias", TinyModelConfig(ModelFamily::kQwen2)});
  ModelConfig qwen3 = TinyModelConfig(ModelFamily::kQwen3);
  qwen3.head_dim = 32;  // Qwen3 decouples head_dim from hidden / heads
  v.push_back({"qwen3_qk_norm", qwen3});
  ModelConfig tied = TinyModelConfig(ModelFamily::kLlama);
  tied.tie_word_embeddings = true;
  tied.qkv_bias = tied.o_bias = true;  // Llama with attention_bias
  v.push_back({"llama_tied_attention_bias", tied});
  ModelConfig llama3 = TinyModelConfig(ModelFamily::kLlama);
  llama3.rope_theta = 500000.0;
  llama3.rope_scaling.type = RopeScaling::Type::kLlama3;
  llama3.rope_scaling.factor = 8;
  llama3.rope_scaling.low_freq_factor = 1;
  llama3.rope_scaling.high_freq_factor = 4;
  llama3.rope_scaling.original_max_position_embeddings = 64;  // all three bands at head_dim 16
  v.push_back({"llama3_rope_scaling", llama3});
  ModelConfig mha = TinyModelConfig(ModelFamily::kLlama);
  mha.num_kv_heads = 4;
  v.push_back({"llama_mha", mha});
  ModelConfig sliding = TinyModelConfig(ModelFamily::kQwen2);
  sliding.sliding_window = 5;
  sliding.layer_uses_sliding_window = {true, false};
  v.push_back({"qwen2_sliding_window", sliding});
  return v;
}

class ModelVariantTest : public ::testing::TestWithParam<Variant> {};

TEST_P(ModelVariantTest, PrefillMatchesReference) {
  const ModelConfig& c = GetParam().config;
  Engine e = Engine::Make(c);
  const std::vector<int32_t> tokens = RandomTokens(23, c.vocab_size, 1);
  std::vector<std::vector<float>> got = e.Run(e.Allocate(), 0, tokens);
  std::vector<std::vector<double>> want = Reference(c).Logits(tokens);
  ASSERT_EQ(got.size(), tokens.size());
  double spread = 0;
  for (size_t t = 0; t < tokens.size(); ++t) {
    ExpectNear(got[t], want[t], 1e-4, absl::StrCat("row ", t));
    spread = std::max(spread, *std::max_element(want[t].begin(), want[t].end()) -
                                  *std::min_element(want[t].begin(), want[t].end()));
  }
  EXPECT_GT(spread, 0.5);  // the logits are far from uniform: the check has teeth
}

TEST_P(ModelVariantTest, IncrementalDecodingEqualsPrefill) {
  const ModelConfig& c = GetParam().config;
  const std::vector<int32_t> tokens = RandomTokens(20, c.vocab_size, 2);
  Engine one_shot = Engine::Make(c);
  std::vector<std::vector<float>> full = one_shot.Run(one_shot.Allocate(), 0, tokens);

  Engine e = Engine::Make(c);
  const int h = e.Allocate();
  std::vector<std::vector<float>> rows =
      e.Run(h, 0, std::vector<int32_t>(tokens.begin(), tokens.begin() + 6));
  for (size_t t = 6; t < tokens.size(); ++t) {
    std::vector<std::vector<float>> one = e.Run(h, t, {tokens[t]});
    rows.push_back(one[0]);
  }
  for (size_t t = 0; t < tokens.size(); ++t) {
    ExpectNear(rows[t], full[t], 1e-5, absl::StrCat("position ", t));
  }
}

TEST_P(ModelVariantTest, RaggedBatchEqualsEachRequestAlone) {
  const ModelConfig& c = GetParam().config;
  // A: prefill of 9. B: 7 already cached, then a verify of 6. C: 12 cached,
  // then a single draft token. D: prefill of 3, only the last logit row.
  const std::vector<int32_t> a = RandomTokens(9, c.vocab_size, 3);
  const std::vector<int32_t> b = RandomTokens(13, c.vocab_size, 4);
  const std::vector<int32_t> cc = RandomTokens(13, c.vocab_size, 5);
  const std::vector<int32_t> d = RandomTokens(3, c.vocab_size, 6);
  auto head = [](const std::vector<int32_t>& v, int n) {
    return std::vector<int32_t>(v.begin(), v.begin() + n);
  };
  auto tail = [](const std::vector<int32_t>& v, int n) {
    return std::vector<int32_t>(v.begin() + n, v.end());
  };

  // Alone: each request in its own engine.
  std::vector<std::vector<float>> alone;
  {
    Engine e = Engine::Make(c);
    for (auto& r : e.Run(e.Allocate(), 0, a)) alone.push_back(r);
  }
  {
    Engine e = Engine::Make(c);
    const int h = e.Allocate();
    e.Run(h, 0, head(b, 7));
    for (auto& r : e.Run(h, 7, tail(b, 7))) alone.push_back(r);
  }
  {
    Engine e = Engine::Make(c);
    const int h = e.Allocate();
    e.Run(h, 0, head(cc, 12));
    for (auto& r : e.Run(h, 12, tail(cc, 12))) alone.push_back(r);
  }
  {
    Engine e = Engine::Make(c);
    for (auto& r : e.Run(e.Allocate(), 0, d, /*num_logits=*/1)) alone.push_back(r);
  }

  // Together: one engine, the histories first, then one ragged batch.
  Engine e = Engine::Make(c, nullptr, 6, /*threads=*/2);
  const int ha = e.Allocate(), hb = e.Allocate(), hc = e.Allocate(), hd = e.Allocate();
  e.Run(hb, 0, head(b, 7));
  e.Run(hc, 0, head(cc, 12));
  const std::vector<int32_t> b_tail = tail(b, 7), c_tail = tail(cc, 12);
  ForwardBatch batch;
  batch.requests = {ForwardRequest{ha, 0, a}, ForwardRequest{hb, 7, b_tail},
                    ForwardRequest{hc, 12, c_tail}, ForwardRequest{hd, 0, d, 1}};
  EXPECT_EQ(batch.num_tokens(), 9 + 6 + 1 + 3);
  EXPECT_EQ(batch.num_logit_rows(), 9 + 6 + 1 + 1);
  std::vector<std::vector<float>> together = Engine::Split(e.RunBatch(batch), c.vocab_size);
  ASSERT_EQ(together.size(), alone.size());
  for (size_t i = 0; i < alone.size(); ++i) {
    // Every row is computed by the same operations in the same order.
    EXPECT_EQ(together[i], alone[i]) << "row " << i;
  }
}

TEST_P(ModelVariantTest, RejectedDraftsLeaveNoTrace) {
  // Speculative steps: each writes the next true token plus 5 drafts, of
  // which a random prefix is "accepted" (true tokens) and the rest are
  // garbage. The next step starts right after the accepted ones, so the
  // garbage keys are overwritten before anything reads them: every
  // accepted row's logits equal those of a clean one-shot prefill.
  const ModelConfig& c = GetParam().config;
  const std::vector<int32_t> truth = RandomTokens(60, c.vocab_size, 7);
  Engine clean = Engine::Make(c);
  std::vector<std::vector<float>> want = clean.Run(clean.Allocate(), 0, truth);

  Engine e = Engine::Make(c, nullptr, /*spec_slots=*/6);
  const int h = e.Allocate(128);
  std::vector<std::vector<float>> prefill =
      e.Run(h, 0, std::vector<int32_t>(truth.begin(), truth.begin() + 10));
  for (int t = 0; t < 10; ++t) ExpectNear(prefill[t], want[t], 1e-5, "prefill");
  std::mt19937 rng(8);
  int64_t position = 10;
  int steps = 0;
  while (position + 6 <= static_cast<int64_t>(truth.size())) {
    const int accepted = 1 + static_cast<int>(rng() % 6);  // rows that count
    std::vector<int32_t> step(truth.begin() + position, truth.begin() + position + 6);
    for (int i = accepted; i < 6; ++i) step[i] = (step[i] + 1 + rng() % 50) % c.vocab_size;
    std::vector<std::vector<float>> got = e.Run(h, position, step);
    for (int i = 0; i < accepted; ++i) {
      ExpectNear(got[i], want[position + i], 1e-5,
                 absl::StrCat("step ", steps, " position ", position + i));
    }
    position += accepted;
    ++steps;
  }
  EXPECT_GT(steps, 8);
}

INSTANTIATE_TEST_SUITE_P(Variants, ModelVariantTest, ::testing::ValuesIn(Variants()),
                         [](const ::testing::TestParamInfo<Variant>& info) {
                           return std::string(info.param.name);
                         });

TEST(LlamaModelTest, SlidingWindowLongPrefillUsesChunks) {
  // A prefill longer than the ring (window 4 + 3 slots): attention runs in
  // chunks of 3 so that no write evicts a key a query still needs.
  ModelConfig c = TinyModelConfig(ModelFamily::kLlama);
  c.sliding_window = 4;
  c.layer_uses_sliding_window = {true, true};
  Engine e = Engine::Make(c, nullptr, /*spec_slots=*/3);
  EXPECT_EQ(e.cache->ring_size(), 7);
  const std::vector<int32_t> tokens = RandomTokens(30, c.vocab_size, 9);
  std::vector<std::vector<float>> got = e.Run(e.Allocate(), 0, tokens);
  std::vector<std::vector<double>> want = Reference(c).Logits(tokens);
  for (size_t t = 0; t < tokens.size(); ++t) ExpectNear(got[t], want[t], 1e-4, "row");
}

TEST(LlamaModelTest, ThreadsDoNotChangeResults) {
  ModelConfig c = TinyModelConfig();
  c.hidden_size = 256;  // large enough for the products to use threads
  c.intermediate_size = 512;
  c.head_dim = 64;
  const std::vector<int32_t> tokens = RandomTokens(40, c.vocab_size, 10);
  Engine one = Engine::Make(c, nullptr, 6, 1);
  Engine two = Engine::Make(c, nullptr, 6, 2);
  EXPECT_EQ(one.Run(one.Allocate(), 0, tokens), two.Run(two.Allocate(), 0, tokens));
}

TEST(LlamaModelTest, RefusesBadBatches) {
  ModelConfig c = TinyModelConfig();
  Engine e = Engine::Make(c);
  const int h = e.Allocate(16);
  std::vector<float> logits(64 * c.vocab_size);
  auto run = [&](ForwardRequest r) {
    ForwardBatch b;
    b.requests = {r};
    return e.model->Forward(b, logits.data());
  };
  const std::vector<int32_t> ok = {1, 2, 3};
  const std::vector<int32_t> bad_token = {1, 100};
  const std::vector<int32_t> empty;
  EXPECT_THAT(std::string(run({99, 0, ok}).message()), HasSubstr("not allocated"));
  EXPECT_THAT(std::string(run({h, 14, ok}).message()), HasSubstr("exceed the reservation of 16"));
  EXPECT_THAT(std::string(run({h, 0, bad_token}).message()), HasSubstr("token id 100"));
  EXPECT_THAT(std::string(run({h, 0, empty}).message()), HasSubstr("no query tokens"));
  EXPECT_THAT(std::string(run({h, 0, ok, 4}).message()), HasSubstr("4 logit rows for 3"));
  EXPECT_THAT(std::string(run({h, -1, ok}).message()), HasSubstr("start position -1"));
  ForwardBatch twice;
  twice.requests = {ForwardRequest{h, 0, ok}, ForwardRequest{h, 3, ok}};
  EXPECT_THAT(std::string(e.model->Forward(twice, logits.data()).message()),
              HasSubstr("appears twice"));
  // Token ids in device memory are for backends with a device queue.
  EXPECT_EQ(e.model->device_queue(), nullptr);
  const int32_t device_ids[1] = {1};
  ForwardBatch on_device;
  on_device.requests = {ForwardRequest{h, 0, absl::MakeConstSpan(ok.data(), 1)}};
  on_device.device_token_ids = device_ids;
  EXPECT_THAT(std::string(e.model->Forward(on_device, logits.data()).message()),
              HasSubstr("no device token ids"));
  EXPECT_TRUE(run({h, 13, ok}).ok());
}

TEST(LlamaModelTest, RefusesMismatchedCache) {
  ModelConfig c = TinyModelConfig();
  KvCache cache = *KvCache::Create(MakeKvCacheConfig(c, /*tp=*/2, 8, 2, 6));  // 1 kv head
  absl::StatusOr<std::unique_ptr<ModelRunner>> m =
      CreateCpuLlamaModel(c, *MakeDummyWeights(1), &cache, nullptr);
  ASSERT_FALSE(m.ok());
  EXPECT_THAT(std::string(m.status().message()), HasSubstr("KV cache geometry"));
}

// ---------------------------------------------------------------------------
// Tensor parallelism inside one process: each rank is a thread, and the
// collectives meet in shared memory, summing in rank order.

class ThreadWorld {
 public:
  explicit ThreadWorld(int size) : size_(size), staging_(size) {}
  int size() const { return size_; }

  void Barrier() {
    std::unique_lock<std::mutex> lock(mu_);
    const int generation = generation_;
    if (++arrived_ == size_) {
      arrived_ = 0;
      ++generation_;
      cv_.notify_all();
    } else {
      cv_.wait(lock, [&] { return generation_ != generation; });
    }
  }
  std::vector<uint8_t>& staging(int rank) { return staging_[rank]; }

 private:
  int size_;
  std::mutex mu_;
  std::condition_variable cv_;
  int arrived_ = 0;
  int generation_ = 0;
  std::vector<std::vector<uint8_t>> staging_;
};

class ThreadCommunicator : public Communicator {
 public:
  ThreadCommunicator(ThreadWorld* world, int rank) : world_(world), rank_(rank) {}
  int rank() const override { return rank_; }
  int world_size() const override { return world_->size(); }

  absl::Status Broadcast(void* buffer, size_t count, DataType type, int root, void*) override {
    const size_t bytes = count * DataTypeSize(type);
    if (rank_ == root) Stage(buffer, bytes);
    world_->Barrier();
    if (rank_ != root) std::memcpy(buffer, world_->staging(root).data(), bytes);
    world_->Barrier();
    return absl::OkStatus();
  }
  absl::Status AllReduceSum(const void* send, void* recv, size_t count, DataType type,
                            void*) override {
    if (type != DataType::kFloat32) return absl::UnimplementedError("float32 only");
    Stage(send, count * sizeof(float));
    world_->Barrier();
    std::vector<float> sum(count, 0.0f);
    for (int r = 0; r < world_size(); ++r) {
      const float* part = reinterpret_cast<const float*>(world_->staging(r).data());
      for (size_t i = 0; i < count; ++i) sum[i] += part[i];
    }
    world_->Barrier();
    std::memcpy(recv, sum.data(), count * sizeof(float));
    return absl::OkStatus();
  }
  absl::Status AllGather(const void* send, void* recv, size_t count, DataType type,
                         void*) override {
    const size_t bytes = count * DataTypeSize(type);
    Stage(send, bytes);
    world_->Barrier();
    for (int r = 0; r < world_size(); ++r) {
      std::memcpy(static_cast<uint8_t*>(recv) + r * bytes, world_->staging(r).data(), bytes);
    }
    world_->Barrier();
    return absl::OkStatus();
  }

 private:
  void Stage(const void* data, size_t bytes) {
    std::vector<uint8_t>& s = world_->staging(rank_);
    s.resize(bytes);
    std::memcpy(s.data(), data, bytes);
  }

  ThreadWorld* world_;
  int rank_;
};

// Greedy generation: prefill, then one token per step; logits of every step.
struct Generation {
  std::vector<int32_t> tokens;
  std::vector<std::vector<float>> logits;
};

Generation Greedy(Engine& e, const std::vector<int32_t>& prompt, int steps) {
  Generation g;
  const int h = e.Allocate();
  std::vector<std::vector<float>> rows = e.Run(h, 0, prompt, /*num_logits=*/1);
  int64_t position = static_cast<int64_t>(prompt.size());
  for (int s = 0; s < steps; ++s) {
    g.logits.push_back(rows[0]);
    g.tokens.push_back(Argmax(rows[0]));
    rows = e.Run(h, position++, {g.tokens.back()});
  }
  return g;
}

class TensorParallelTest : public ::testing::TestWithParam<int> {};

TEST_P(TensorParallelTest, MatchesSingleRank) {
  const int tp = GetParam();
  ModelConfig c = TinyModelConfig(ModelFamily::kQwen3);
  c.num_heads = 8;
  c.num_kv_heads = 4;
  c.head_dim = 8;
  c.vocab_size = 102;  // padded to 104 at tp 4
  c.sliding_window = 6;
  c.layer_uses_sliding_window = {false, true};
  const std::vector<int32_t> prompt = RandomTokens(11, c.vocab_size, 11);
  Engine single = Engine::Make(c);
  const Generation want = Greedy(single, prompt, 12);

  ThreadWorld world(tp);
  std::vector<Generation> got(tp);
  std::vector<std::thread> ranks;
  for (int r = 0; r < tp; ++r) {
    ranks.emplace_back([&, r] {
      ThreadCommunicator comm(&world, r);
      Engine e = Engine::Make(c, &comm);
      got[r] = Greedy(e, prompt, 12);
    });
  }
  for (std::thread& t : ranks) t.join();
  for (int r = 0; r < tp; ++r) {
    EXPECT_EQ(got[r].tokens, want.tokens) << "rank " << r;
    EXPECT_EQ(got[r].logits, got[0].logits) << "ranks agree bit for bit";
    for (size_t s = 0; s < want.logits.size(); ++s) {
      ExpectNear(got[r].logits[s], want.logits[s], 1e-5, absl::StrCat("step ", s));
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Degrees, TensorParallelTest, ::testing::Values(2, 4));

TEST(TensorParallelTest, DegreeMustDivideHeads) {
  ModelConfig c = TinyModelConfig();  // 4 heads, 2 KV heads
  ThreadWorld world(4);
  ThreadCommunicator comm(&world, 0);
  KvCache cache = *KvCache::Create(MakeKvCacheConfig(c, 2, 8, 2, 6));
  absl::StatusOr<std::unique_ptr<ModelRunner>> m =
      CreateCpuLlamaModel(c, *MakeDummyWeights(1), &cache, &comm);
  ASSERT_FALSE(m.ok());
  EXPECT_THAT(std::string(m.status().message()),
              HasSubstr("tensor parallel degree 4 does not divide num_key_value_heads (2)"));
}

}  // namespace
}  // namespace verdict
