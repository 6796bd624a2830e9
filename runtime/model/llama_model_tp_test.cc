// Tensor parallelism over MPI: run under mpirun with 2 or 4 ranks (see
// runtime/BUILD). Rank 0 writes a random checkpoint (BF16, two files);
// every rank loads its shard from it and also loads the whole model as a
// single rank. Both run the same speculative schedule: a ragged batch of a
// prefill and verification steps whose drafts are partly wrong. The test
// checks, at every step, that the sharded logits equal the single-rank
// logits within float tolerance, that greedy tokens are identical, and that
// every rank holds bit-identical logits (rank 0 broadcasts its own).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "comm/communicator.h"
#include "comm/mpi_communicator.h"
#include "comm/mpi_session.h"
#include "comm/testing/rank_failure_printer.h"
#include "gtest/gtest.h"
#include "runtime/model/kv_cache.h"
#include "runtime/model/llama_model.h"
#include "runtime/model/model_config.h"
#include "runtime/model/random_model.h"
#include "runtime/model/weights.h"

namespace verdict {
namespace {

MpiCommunicator* g_comm = nullptr;

std::string SharedDir(const std::string& name) {
  const char* base = std::getenv("TEST_TMPDIR");
  if (base == nullptr) base = std::getenv("TMPDIR");
  if (base == nullptr) base = "/tmp";
  return absl::StrCat(base, "/llama_model_tp_test_", name, "_np", g_comm->world_size());
}

// A model on this rank with its own cache.
struct Replica {
  std::unique_ptr<KvCache> cache;
  std::unique_ptr<ModelRunner> model;

  static Replica Make(const ModelConfig& c, const WeightSource& weights, Communicator* comm) {
    const int tp = comm == nullptr ? 1 : comm->world_size();
    Replica r;
    absl::StatusOr<KvCache> cache = KvCache::Create(
        MakeKvCacheConfig(c, tp, /*num_blocks=*/32, /*max_requests=*/4, /*speculative_slots=*/6));
    EXPECT_TRUE(cache.ok()) << cache.status();
    r.cache = std::make_unique<KvCache>(*std::move(cache));
    absl::StatusOr<std::unique_ptr<ModelRunner>> model =
        CreateCpuLlamaModel(c, weights, r.cache.get(), comm, CpuModelOptions{1});
    EXPECT_TRUE(model.ok()) << model.status();
    if (model.ok()) r.model = *std::move(model);
    return r;
  }

  std::vector<float> Forward(const ForwardBatch& batch) {
    std::vector<float> logits(batch.num_logit_rows() * model->config().vocab_size, NAN);
    absl::Status s = model->Forward(batch, logits.data());
    EXPECT_TRUE(s.ok()) << s;
    return logits;
  }
};

int Argmax(const float* row, int vocab) {
  return static_cast<int>(std::max_element(row, row + vocab) - row);
}

struct Case {
  const char* name;
  ModelConfig config;
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

std::vector<Case> Cases() {
  ModelConfig llama = TinyModelConfig(ModelFamily::kLlama);
  llama.num_heads = 8;
  llama.num_kv_heads = 4;
  llama.head_dim = 8;
  llama.vocab_size = 103;  // padded to 104 at tp 2 and 4
  ModelConfig qwen3 = TinyModelConfig(ModelFamily::kQwen3);
  qwen3.num_heads = 8;
  qwen3.num_kv_heads = 4;
  qwen3.head_dim = 16;
  qwen3.tie_word_embeddings = true;
  qwen3.sliding_window = 7;
  qwen3.layer_uses_sliding_window = {true, false};
  ModelConfig qwen2 = TinyModelConfig(ModelFamily::kQwen2);
  qwen2.num_heads = 4;
  qwen2.num_kv_heads = 4;
  return {{"llama_padded_vocab", llama}, {"qwen3_tied_sliding", qwen3}, {"qwen2_bias", qwen2}};
}

class TensorParallelMpiTest : public ::testing::TestWithParam<Case> {};

TEST_P(TensorParallelMpiTest, MatchesSingleRank) {
  const ModelConfig& config = GetParam().config;
  const int vocab = config.vocab_size;
  const std::string dir = SharedDir(GetParam().name);
  if (g_comm->rank() == 0) {
    std::filesystem::remove_all(dir);
    ASSERT_TRUE(WriteRandomModel(dir, config,
                                 RandomModelOptions{.seed = 99, .stddev = 0.15f,
                                                    .dtype = TensorDType::kBF16, .num_files = 2})
                    .ok());
  }
  ASSERT_TRUE(g_comm->Barrier().ok());
  absl::StatusOr<ModelConfig> read = LoadModelConfig(dir);
  ASSERT_TRUE(read.ok()) << read.status();
  absl::StatusOr<std::unique_ptr<WeightSource>> weights = OpenCheckpointWeights(dir);
  ASSERT_TRUE(weights.ok()) << weights.status();

  Replica sharded = Replica::Make(*read, **weights, g_comm);
  Replica single = Replica::Make(*read, **weights, nullptr);
  ASSERT_TRUE(sharded.model && single.model);

  const std::vector<std::vector<int32_t>> prompts = {{5, 17, 42, 8, 99, 3, 61},
                                                     {11, 12, 13, 14, 15, 16, 17, 18, 19, 20}};
  const int kNewTokens = 24;

  // Plain greedy decoding on one rank, one token per step: the tokens the
  // speculative run must reproduce.
  std::vector<std::vector<int32_t>> golden(prompts.size());
  {
    Replica plain = Replica::Make(*read, **weights, nullptr);
    for (size_t r = 0; r < prompts.size(); ++r) {
      const int h = *plain.cache->Allocate(96);
      std::vector<int32_t> query = prompts[r];
      int64_t position = 0;
      for (int i = 0; i < kNewTokens; ++i) {
        ForwardBatch batch;
        batch.requests.push_back(ForwardRequest{h, position, query, /*num_logits=*/1});
        std::vector<float> logits = plain.Forward(batch);
        position += static_cast<int64_t>(query.size());
        golden[r].push_back(Argmax(logits.data(), vocab));
        query = {golden[r].back()};
      }
    }
  }

  // Speculative decoding of both requests in one ragged batch, on the
  // sharded model and on the single-rank model side by side. Drafts are
  // the golden continuation with a random tail made wrong, so each step
  // accepts a prefix and overwrites the rest in the next step.
  std::mt19937 rng(17);
  std::vector<int> handles_sharded, handles_single;
  for (size_t r = 0; r < prompts.size(); ++r) {
    handles_sharded.push_back(*sharded.cache->Allocate(96));
    handles_single.push_back(*single.cache->Allocate(96));
  }
  std::vector<std::vector<int32_t>> generated(prompts.size());
  std::vector<std::vector<int32_t>> step_tokens = prompts;  // the first step is the prefill
  std::vector<int64_t> position(prompts.size(), 0);
  int steps = 0, rejected_drafts = 0;
  auto done = [&] {
    for (const auto& g : generated) {
      if (static_cast<int>(g.size()) < kNewTokens) return false;
    }
    return true;
  };
  while (!done() && steps < 3 * kNewTokens) {
    ForwardBatch a, b;
    for (size_t r = 0; r < prompts.size(); ++r) {
      a.requests.push_back(ForwardRequest{handles_sharded[r], position[r], step_tokens[r]});
      b.requests.push_back(ForwardRequest{handles_single[r], position[r], step_tokens[r]});
    }
    const std::vector<float> got = sharded.Forward(a);
    const std::vector<float> want = single.Forward(b);
    ASSERT_EQ(got.size(), want.size());
    // Non-fatal checks from here on: every rank must keep making the same
    // collective calls.
    size_t bad = got.size();
    for (size_t i = 0; i < got.size() && bad == got.size(); ++i) {
      if (!(std::abs(got[i] - want[i]) <= 1e-4f * (1 + std::abs(want[i])))) bad = i;
    }
    EXPECT_EQ(bad, got.size()) << "step " << steps << ": logit " << bad << " is "
                               << (bad < got.size() ? got[bad] : 0) << " sharded, "
                               << (bad < got.size() ? want[bad] : 0) << " on one rank";
    std::vector<float> from_root = got;
    EXPECT_TRUE(
        g_comm->Broadcast(from_root.data(), from_root.size(), DataType::kFloat32, 0).ok());
    EXPECT_TRUE(from_root == got) << "rank " << g_comm->rank() << " differs from rank 0";

    int64_t row = 0;
    for (size_t r = 0; r < prompts.size(); ++r) {
      const std::vector<int32_t>& q = step_tokens[r];
      const int64_t n = static_cast<int64_t>(q.size());
      // Row i's logits choose the token after q[i]. The prefill's query
      // tokens are all given; a verify step's drafts q[1..] count while
      // they equal the greedy choice of the row before.
      int64_t last_row = n - 1;
      if (steps > 0) {
        last_row = 0;
        while (last_row + 1 < n && q[last_row + 1] == Argmax(&got[(row + last_row) * vocab], vocab)) {
          generated[r].push_back(q[last_row + 1]);
          ++last_row;
        }
        rejected_drafts += static_cast<int>(n - 1 - last_row);
      }
      const int next = Argmax(&got[(row + last_row) * vocab], vocab);
      EXPECT_EQ(next, Argmax(&want[(row + last_row) * vocab], vocab))
          << "greedy token differs at step " << steps << " request " << r;
      generated[r].push_back(next);
      position[r] += last_row + 1;
      // The next step: the new token plus up to 5 drafts from the golden
      // continuation, of which a random tail is made wrong.
      std::vector<int32_t> next_step = {next};
      const size_t have = generated[r].size();
      const int drafts = static_cast<int>(rng() % 6);
      const int right = static_cast<int>(rng() % (drafts + 1));
      for (int d = 0; d < drafts; ++d) {
        const size_t g = have + static_cast<size_t>(d);
        int32_t token = g < golden[r].size() ? golden[r][g] : 0;
        if (d >= right) token = (token + 1 + static_cast<int32_t>(rng() % (vocab - 1))) % vocab;
        next_step.push_back(token);
      }
      step_tokens[r] = next_step;
      row += n;
    }
    ++steps;
  }
  for (size_t r = 0; r < prompts.size(); ++r) {
    ASSERT_GE(generated[r].size(), static_cast<size_t>(kNewTokens));
    generated[r].resize(kNewTokens);
    EXPECT_EQ(generated[r], golden[r]) << "request " << r;
  }
  EXPECT_LT(steps, 2 * kNewTokens);  // drafts were accepted
  EXPECT_GT(rejected_drafts, 5);     // and rejected
}

INSTANTIATE_TEST_SUITE_P(Models, TensorParallelMpiTest, ::testing::ValuesIn(Cases()),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           return std::string(info.param.name);
                         });

}  // namespace
}  // namespace verdict

int main(int argc, char** argv) {
  testing::InitGoogleTest(&argc, argv);
  absl::StatusOr<std::shared_ptr<verdict::MpiSession>> session = verdict::MpiSession::Acquire();
  if (!session.ok()) {
    std::fprintf(stderr, "%s\n", std::string(session.status().message()).c_str());
    return 2;
  }
  verdict::CommOptions options;
  options.timeout = absl::Seconds(60);
  absl::StatusOr<std::unique_ptr<verdict::MpiCommunicator>> comm =
      verdict::MpiCommunicator::Create(options);
  if (!comm.ok()) {
    std::fprintf(stderr, "%s\n", std::string(comm.status().message()).c_str());
    return 2;
  }
  verdict::g_comm = comm->get();
  return verdict::RunAllTestsOnEveryRank(**comm, "tensor parallel test");
}
