// The engine across tensor-parallel ranks, under mpirun (tests/BUILD runs it
// with 2 and 4 ranks). Every rank builds the engine on an MPI communicator
// and runs the loop; rank 0 submits and collects. References are computed in
// the same process at TP 1 on a LocalCommunicator, on rank 0 only, while the
// other ranks wait on a separate communicator with a long timeout (the
// engine's own collectives keep the default 30 s, which a reference run on
// rank 0 alone could exceed).
//
//   GreedyTpTest (bundled models): at temperature 0, speculative output at
//   TP N equals the target's autoregressive output at TP 1 token for token,
//   in every verify mode, with overlap scheduling off and on (seed 000;
//   invariants 3 and 7).
//
//   SampledTpTest (bundled models): seeded sampled requests produce at TP N
//   the tokens they produce at TP 1 (invariant 7), with the draft sharded
//   and with a whole draft on every rank (--draft-tp 1).
//
//   PlanTpTest (a tiny random pair): 16 concurrent requests over 1,000+
//   decode steps with a cost table that makes the planner trim. Every rank
//   compares its plan and estimator hashes with rank 0's at every step and
//   none differs (invariant 3); every rank ends with the same counters; rank
//   0's tokens, per-request acceptance and totals equal those of a TP 1 run
//   of the same seeded workload (invariant 7), and its greedy requests equal
//   the target's autoregressive output (seed 000). With overlap on too,
//   where plans come from confidences a step or two old and requests join
//   and leave while a step is in flight.
//
//   PlanDivergenceTpTest (the tiny pair): a rank whose plans differ is caught
//   at the first step, and every request, running or waiting, ends with the
//   error naming that rank instead of hanging (invariant 3).
#include <algorithm>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "comm/communicator.h"
#include "comm/create_communicator.h"
#include "comm/local_communicator.h"
#include "comm/mpi_session.h"
#include "comm/testing/rank_failure_printer.h"
#include "gtest/gtest.h"
#include "runtime/engine/collective_timer.h"
#include "runtime/engine/engine.h"
#include "runtime/engine/engine_test_util.h"
#include "runtime/model/model_config.h"
#include "runtime/model/random_model.h"

namespace verdict {
namespace {

// Orchestration between ranks (barriers around rank 0's reference runs,
// gathering counters). Separate from the engines' communicators.
Communicator* g_control = nullptr;

int Rank() { return g_control->rank(); }
int World() { return g_control->world_size(); }

const auto& kPrompts = kBundledPrompts;
constexpr int kNumPrompts = static_cast<int>(std::size(kPrompts));

// Tests with a verify mode and overlap scheduling off or on
// (ModeAndOverlap, engine_test_util.h): tests/BUILD selects them by name
// ("compact", "compact_overlap").

// The cores are shared by every rank of the job (CI has 2).
int ThreadsPerRank(int ranks) {
  const int cores = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  return std::max(1, cores / ranks);
}

// A cost table with a fixed cost per step plus a cost per verified row, so
// that low-confidence drafts do not pay for their row: the planner trims, and
// its plans change from step to step with the confidences. `nudged` raises
// the row of 16 requests by 0.1 ms: a rank that loads that table plans
// differently from one that does not.
std::string WriteCostTable(bool nudged = false) {
  const char* dir = std::getenv("TEST_TMPDIR");
  const std::string path =
      absl::StrCat(dir != nullptr ? dir : "/tmp", "/engine_tp_cost_table_rank", Rank(),
                   nudged ? "_nudged" : "", ".json");
  std::ofstream out(path);
  // seconds = 0.010 + 0.0004 * M (+ a little per request), M = verify rows.
  out << R"({"batch_sizes": [1, 16, 64],
            "verify_tokens": [1, 16, 128, 512],
            "seconds": [[0.0104, 0.0164, 0.0612, 0.2148],
                        )"
      << (nudged ? "[0.0111, 0.0171, 0.0619, 0.2155]," : "[0.0110, 0.0170, 0.0618, 0.2154],")
      << R"(
                        [0.0130, 0.0190, 0.0638, 0.2174]]})";
  out.close();
  EXPECT_TRUE(out.good()) << path;
  return path;
}

std::unique_ptr<Engine> MakeEngine(Communicator* comm, EngineOptions options, bool speculation) {
  options.speculation = speculation;
  options.cpu_threads = ThreadsPerRank(comm->world_size());
  std::optional<ModelSource> draft;
  if (speculation) draft = ModelSource{"models/draft"};
  absl::StatusOr<std::unique_ptr<Engine>> engine =
      Engine::Create(options, ModelSource{"models/target"}, draft, comm);
  EXPECT_TRUE(engine.ok()) << engine.status();
  return engine.ok() ? *std::move(engine) : nullptr;
}

std::unique_ptr<Communicator> MakeMpiCommunicator() {
  absl::StatusOr<std::unique_ptr<Communicator>> comm = CreateCommunicator(Backend::kMpi);
  EXPECT_TRUE(comm.ok()) << comm.status();
  if (!comm.ok()) return nullptr;
  EXPECT_EQ((*comm)->world_size(), World());
  return *std::move(comm);
}

// Runs `compute` on rank 0 while the other ranks wait for it.
void OnRankZeroWhileOthersWait(const std::function<void()>& compute) {
  if (Rank() == 0) compute();
  const absl::Status s = g_control->Barrier();
  ASSERT_TRUE(s.ok()) << s;
}

// Every rank calls it: runs the loop through an EngineHarness until rank 0's
// requests (all submitted up front) have finished or `limit` has passed.
// Rank 0 returns the outputs in request order, the other ranks nothing.
std::vector<CollectedOutput> RunUpfront(Engine& engine,
                                        const std::vector<GenerationRequest>& requests,
                                        absl::Duration limit) {
  const absl::Time deadline = absl::Now() + limit;
  // Every request is submitted before the loop starts: they all arrive in
  // the first step's control message, so the batches (and with them the
  // plans, which decide the sampled tokens in cap-accept and compact modes)
  // do not depend on how submission interleaves with the loop thread.
  OutputCollector collector;
  if (engine.rank() == 0) {
    for (const GenerationRequest& r : requests) {
      const absl::Status s = collector.Submit(engine, r);
      EXPECT_TRUE(s.ok()) << r.id << ": " << s;
    }
  }
  std::vector<CollectedOutput> outputs;
  EngineHarness harness(&engine);
  if (engine.rank() == 0) {
    EXPECT_TRUE(collector.WaitAll(deadline)) << "the requests did not finish within " << limit;
    for (const GenerationRequest& r : requests) outputs.push_back(collector.output(r.id));
  }
  // The harness's destructor shuts the loop down (rank 0), or follows rank
  // 0's shutdown (the other ranks).
  return outputs;
}

// ------------------------------------------------------------ greedy

constexpr int kGreedyTokens = 48;

std::vector<GenerationRequest> GreedyRequests(const Engine& engine) {
  std::vector<GenerationRequest> requests;
  for (int i = 0; i < kNumPrompts; ++i) {
    requests.push_back(
        TextRequest(engine, absl::StrCat("g", i), kPrompts[i], kGreedyTokens, 0.0f, i));
    requests.back().params.ignore_eos = true;
  }
  return requests;
}

// 16 greedy requests decode together. Over these few steps the estimator is
// still on its prior, so every mode verifies the full block (less the length
// caps); PlanTpTest's greedy requests cover equality under trimmed plans.
class GreedyTpTest : public ::testing::TestWithParam<ModeAndOverlap> {
 protected:
  // The target alone, autoregressive at TP 1: rank 0's reference.
  static void SetUpTestSuite() {
    reference_ = new std::vector<CollectedOutput>();
    OnRankZeroWhileOthersWait([] {
      LocalCommunicator local;
      std::unique_ptr<Engine> engine = MakeEngine(&local, EngineOptions(), /*speculation=*/false);
      ASSERT_NE(engine, nullptr);
      EngineHarness harness(engine.get());
      *reference_ = harness.GenerateAll(GreedyRequests(*engine));
    });
  }
  static void TearDownTestSuite() { delete reference_; }

  static std::vector<CollectedOutput>* reference_;
};
std::vector<CollectedOutput>* GreedyTpTest::reference_ = nullptr;

TEST_P(GreedyTpTest, SpeculativeEqualsAutoregressiveAtTp1) {
  if (Rank() == 0) {
    ASSERT_EQ(reference_->size(), static_cast<size_t>(kNumPrompts));
    for (const CollectedOutput& out : *reference_) {
      ASSERT_EQ(out.token_ids.size(), static_cast<size_t>(kGreedyTokens)) << out.error;
    }
  }
  std::unique_ptr<Communicator> comm = MakeMpiCommunicator();
  ASSERT_NE(comm, nullptr);
  EngineOptions options;
  options.verify_mode = std::get<0>(GetParam());
  options.overlap = std::get<1>(GetParam());
  options.cost_table_path = WriteCostTable();
  options.plan_check_interval = 1;
  std::unique_ptr<Engine> engine = MakeEngine(comm.get(), options, /*speculation=*/true);
  ASSERT_NE(engine, nullptr);
  std::vector<CollectedOutput> outputs;
  {
    EngineHarness harness(engine.get());
    // Rank 0 submits and waits; the other ranks return at once and wait in
    // the harness's destructor for rank 0's shutdown.
    outputs = harness.GenerateAll(GreedyRequests(*engine));
  }
  const EngineStats stats = engine->stats();
  EXPECT_GT(stats.steps, 0);
  EXPECT_EQ(stats.plan_checks, stats.steps);
  EXPECT_EQ(stats.plan_mismatches, 0);
  if (Rank() != 0) return;
  ASSERT_EQ(outputs.size(), reference_->size());
  int64_t accepted = 0;
  for (int i = 0; i < kNumPrompts; ++i) {
    EXPECT_EQ(outputs[i].token_ids, (*reference_)[i].token_ids) << "prompt " << kPrompts[i];
    EXPECT_EQ(outputs[i].text, (*reference_)[i].text) << "prompt " << kPrompts[i];
    EXPECT_EQ(outputs[i].finish_reason, FinishReason::kLength) << outputs[i].error;
    accepted += outputs[i].usage.accepted_tokens;
  }
  // Speculation did its work: drafts were accepted, in fewer steps than tokens.
  EXPECT_GT(accepted, 0);
  EXPECT_LT(stats.steps, kGreedyTokens);
  EXPECT_EQ(stats.generated, int64_t{kNumPrompts} * kGreedyTokens);
}

INSTANTIATE_TEST_SUITE_P(Modes, GreedyTpTest,
                         ::testing::Combine(::testing::Values(VerifyMode::kStatic,
                                                              VerifyMode::kCapAccept,
                                                              VerifyMode::kCompact),
                                            ::testing::Bool()),
                         ModeAndOverlapTestName);

// ------------------------------------------------------------ sampled

constexpr int kSampledTokens = 40;

std::vector<GenerationRequest> SampledRequests(const Engine& engine) {
  std::vector<GenerationRequest> requests;
  for (int i = 0; i < kNumPrompts; ++i) {
    requests.push_back(TextRequest(engine, absl::StrCat("s", i), kPrompts[i], kSampledTokens,
                                   1.0f, 1000 + i));
    requests.back().params.ignore_eos = true;
  }
  return requests;
}

// One TP N run of the sampled workload; rank 0 returns its outputs. Counts
// the collectives every rank issued (through `timed`).
struct SampledRun {
  std::vector<CollectedOutput> outputs;
  int64_t steps = 0;
  int64_t collectives = 0;
};

SampledRun RunSampledAtTpN(EngineOptions options) {
  SampledRun run;
  std::unique_ptr<Communicator> comm = MakeMpiCommunicator();
  EXPECT_NE(comm, nullptr);
  if (comm == nullptr) return run;
  TimedCommunicator timed(comm.get());
  std::unique_ptr<Engine> engine = MakeEngine(&timed, options, /*speculation=*/true);
  EXPECT_NE(engine, nullptr);
  if (engine == nullptr) return run;
  run.outputs = RunUpfront(*engine, SampledRequests(*engine), absl::Seconds(60));
  const EngineStats stats = engine->stats();
  EXPECT_GT(stats.steps, 0);
  EXPECT_EQ(stats.plan_checks, stats.steps);
  EXPECT_EQ(stats.plan_mismatches, 0);
  run.steps = stats.steps;
  engine.reset();
  run.collectives = timed.calls();
  return run;
}

// Seeded sampled requests give at TP N the tokens of TP 1, with the draft
// sharded like the target and with a whole draft on every rank (draft_tp
// 1), whose passes then issue no collectives.
TEST(SampledTpTest, SameSeedsSameTokensAsTp1) {
  EngineOptions options;
  options.verify_mode = VerifyMode::kCompact;
  options.cost_table_path = WriteCostTable();
  options.plan_check_interval = 1;

  std::vector<CollectedOutput> reference;
  OnRankZeroWhileOthersWait([&] {
    LocalCommunicator local;
    std::unique_ptr<Engine> engine = MakeEngine(&local, options, /*speculation=*/true);
    ASSERT_NE(engine, nullptr);
    reference = RunUpfront(*engine, SampledRequests(*engine), absl::Seconds(60));
  });

  const SampledRun sharded = RunSampledAtTpN(options);
  options.draft_tp = 1;
  const SampledRun replicated = RunSampledAtTpN(options);
  // The same steps without the draft passes' all-reduces and gathers.
  EXPECT_EQ(replicated.steps, sharded.steps);
  EXPECT_LT(replicated.collectives, sharded.collectives);
  if (Rank() != 0) return;
  ASSERT_EQ(reference.size(), static_cast<size_t>(kNumPrompts));
  for (const SampledRun* run : {&sharded, &replicated}) {
    const char* draft = run == &sharded ? "sharded draft" : "whole draft per rank";
    ASSERT_EQ(run->outputs.size(), reference.size()) << draft;
    int64_t accepted = 0;
    for (size_t i = 0; i < reference.size(); ++i) {
      EXPECT_EQ(run->outputs[i].finish_reason, FinishReason::kLength) << run->outputs[i].error;
      EXPECT_EQ(run->outputs[i].token_ids.size(), static_cast<size_t>(kSampledTokens));
      EXPECT_EQ(run->outputs[i].token_ids, reference[i].token_ids)
          << draft << ", prompt " << kPrompts[i];
      EXPECT_EQ(run->outputs[i].usage.accepted_tokens, reference[i].usage.accepted_tokens)
          << draft;
      accepted += run->outputs[i].usage.accepted_tokens;
    }
    EXPECT_GT(accepted, 0) << draft;
  }
}

// ------------------------------------------------------------ plans

// The plan comparison needs 1,000+ decode steps, which the bundled models
// cannot run on CI's two cores in time (about 0.25 s a step at TP 2). A tiny
// random pair of one layer runs a step in about 10 ms at TP 2, most of it in
// collectives, through the same engine, planner, estimator and sharded
// model code. The draft shares the target's weights at a smaller scale:
// related distributions, so that drafts are both accepted and rejected, the
// draft's confidence predicts acceptance, and the estimator gets fitted.
constexpr int kTinyVocab = 128;
constexpr int kPlanConcurrency = 16;
constexpr int kPlanRequests = 950;
constexpr int kMinPlanSteps = 1000;
constexpr int kDraftPlanRequests = 160;  // about 190 steps of 16 requests

ModelConfig TinyConfig() {
  ModelConfig config = TinyModelConfig(ModelFamily::kLlama);
  config.num_heads = 8;  // divisible by TP 4, as are the KV heads
  config.num_kv_heads = 4;
  config.head_dim = 8;
  config.vocab_size = kTinyVocab;
  config.max_position_embeddings = 1024;
  config.num_layers = 1;
  config.layer_uses_sliding_window = {false};
  return config;
}

// Rank 0 writes the pair once into TEST_TMPDIR (every rank of the job sees
// the same directory); returns the directory holding target/ and draft/.
std::string WriteTinyPair() {
  const char* base = std::getenv("TEST_TMPDIR");
  const std::string dir =
      absl::StrCat(base != nullptr ? base : "/tmp", "/engine_tp_tiny_np", World());
  static bool written = false;
  if (Rank() == 0 && !written) {
    written = true;
    RandomModelOptions target;
    target.seed = 23;
    target.stddev = 0.6f;
    RandomModelOptions draft = target;
    draft.stddev = 0.55f;
    EXPECT_TRUE(WriteRandomModel(dir + "/target", TinyConfig(), target).ok());
    EXPECT_TRUE(WriteRandomModel(dir + "/draft", TinyConfig(), draft).ok());
    for (const char* model : {"target", "draft"}) {
      std::filesystem::copy_file("models/target/tokenizer.model",
                                 dir + "/" + model + "/tokenizer.model",
                                 std::filesystem::copy_options::overwrite_existing);
    }
  }
  const absl::Status s = g_control->Barrier();
  EXPECT_TRUE(s.ok()) << s;
  return dir;
}

// The workload: 950 short requests (20 to 60 tokens: attention over long
// contexts is what costs on the CPU) of which 16 run at once, so that
// requests finish and join throughout and the batch holds 16 for the whole
// run (about 1,100 steps). Every fourth request is greedy (its tokens must
// equal the target's autoregressive ones whatever the plans); the others
// sample at temperature 1 with their own seeds.
std::vector<GenerationRequest> PlanWorkload(int num_requests = kPlanRequests) {
  std::mt19937 rng(5);
  std::vector<GenerationRequest> requests;
  for (int i = 0; i < num_requests; ++i) {
    GenerationRequest r;
    r.id = absl::StrCat("p", i);
    const int prompt_len = 3 + static_cast<int>(rng() % 12);
    for (int k = 0; k < prompt_len; ++k) {
      r.prompt_token_ids.push_back(3 + static_cast<int32_t>(rng() % (kTinyVocab - 3)));
    }
    r.params.max_tokens = 20 + 5 * (i % 9);
    r.params.temperature = i % 4 == 0 ? 0.0f : 1.0f;
    r.params.seed = 7919u * i + 13;
    r.params.ignore_eos = true;
    requests.push_back(r);
  }
  return requests;
}

EngineOptions PlanOptions(VerifyMode mode, const std::string& cost_table, bool overlap = false) {
  EngineOptions options;
  options.verify_mode = mode;
  options.overlap = overlap;
  options.cost_table_path = cost_table;
  options.plan_check_interval = 1;
  options.max_running_requests = kPlanConcurrency;
  options.kv_cache_tokens = 16384;
  return options;
}

struct PlanRun {
  std::vector<CollectedOutput> outputs;  // rank 0, in workload order
  EngineStats stats;
  double seconds = 0;
};

// Runs `requests` on the tiny pair in `dir` over `comm`; rank 0 submits
// and collects.
PlanRun RunPlanWorkload(Communicator* comm, EngineOptions options, const std::string& dir,
                        bool speculation,
                        const std::vector<GenerationRequest>& requests = PlanWorkload(),
                        absl::Duration limit = absl::Seconds(120)) {
  PlanRun run;
  options.speculation = speculation;
  options.cpu_threads = 1;  // tiny matrices: threads cost more than they save
  std::optional<ModelSource> draft;
  if (speculation) draft = ModelSource{dir + "/draft"};
  absl::StatusOr<std::unique_ptr<Engine>> engine =
      Engine::Create(options, ModelSource{dir + "/target"}, draft, comm);
  EXPECT_TRUE(engine.ok()) << engine.status();
  if (!engine.ok()) return run;
  const absl::Time start = absl::Now();
  run.outputs = RunUpfront(**engine, requests, limit);
  run.seconds = absl::ToDoubleSeconds(absl::Now() - start);
  run.stats = (*engine)->stats();
  return run;
}

class PlanTpTest : public ::testing::TestWithParam<ModeAndOverlap> {};

TEST_P(PlanTpTest, EveryRankPlansTheSameAndMatchesTp1) {
  const std::string dir = WriteTinyPair();
  const EngineOptions options =
      PlanOptions(std::get<0>(GetParam()), WriteCostTable(), std::get<1>(GetParam()));
  const std::vector<GenerationRequest> requests = PlanWorkload();

  PlanRun reference, autoregressive;
  OnRankZeroWhileOthersWait([&] {
    LocalCommunicator local;
    reference = RunPlanWorkload(&local, options, dir, /*speculation=*/true);
    autoregressive = RunPlanWorkload(&local, options, dir, /*speculation=*/false);
    std::fprintf(stderr, "TP 1: %lld steps in %.1fs; autoregressive %lld steps in %.1fs\n",
                 static_cast<long long>(reference.stats.steps), reference.seconds,
                 static_cast<long long>(autoregressive.stats.steps), autoregressive.seconds);
  });

  std::unique_ptr<Communicator> comm = MakeMpiCommunicator();
  ASSERT_NE(comm, nullptr);
  const PlanRun run = RunPlanWorkload(comm.get(), options, dir, /*speculation=*/true);
  if (Rank() == 0) {
    std::fprintf(stderr,
                 "TP %d: %lld steps in %.1fs, %lld plan checks; drafted %lld, verified %lld, "
                 "accepted %lld\n",
                 World(), static_cast<long long>(run.stats.steps), run.seconds,
                 static_cast<long long>(run.stats.plan_checks),
                 static_cast<long long>(run.stats.drafted),
                 static_cast<long long>(run.stats.verified),
                 static_cast<long long>(run.stats.accepted));
  }

  // Every rank: the loop ran over enough steps, comparing its plan and
  // estimator state with rank 0's at every step, without a mismatch.
  EXPECT_GE(run.stats.steps, kMinPlanSteps);
  EXPECT_GE(run.stats.plan_checks, kMinPlanSteps);
  EXPECT_EQ(run.stats.plan_checks, run.stats.steps);
  EXPECT_EQ(run.stats.plan_mismatches, 0);
  // The planner trimmed, so the compared plans varied with the confidences
  // rather than being the full block every step; it still verified drafts,
  // and the target accepted some and rejected others.
  EXPECT_LT(run.stats.verified, run.stats.drafted * 9 / 10);
  EXPECT_GT(run.stats.verified, run.stats.drafted / 10);
  EXPECT_GT(run.stats.accepted, run.stats.verified / 10);
  EXPECT_LT(run.stats.accepted, run.stats.verified * 9 / 10);

  // Every rank committed the same tokens through the same plans.
  const int64_t mine[] = {run.stats.steps, run.stats.drafted, run.stats.verified,
                          run.stats.accepted, run.stats.generated};
  constexpr int kFields = static_cast<int>(std::size(mine));
  std::vector<int64_t> all(static_cast<size_t>(kFields) * World());
  const absl::Status gathered = g_control->AllGather(mine, all.data(), kFields, DataType::kInt64);
  ASSERT_TRUE(gathered.ok()) << gathered;
  for (int r = 1; r < World(); ++r) {
    EXPECT_EQ(std::vector<int64_t>(all.begin() + r * kFields, all.begin() + (r + 1) * kFields),
              std::vector<int64_t>(all.begin(), all.begin() + kFields))
        << "rank " << r << " (steps, drafted, verified, accepted, generated) differ from rank 0's";
  }

  if (Rank() != 0) return;
  // Same seeds, same output at any TP degree, through the same plans; the
  // greedy requests equal the target's autoregressive output.
  ASSERT_EQ(run.outputs.size(), requests.size());
  ASSERT_EQ(reference.outputs.size(), requests.size());
  ASSERT_EQ(autoregressive.outputs.size(), requests.size());
  for (size_t i = 0; i < requests.size(); ++i) {
    const CollectedOutput& got = run.outputs[i];
    const CollectedOutput& want = reference.outputs[i];
    EXPECT_EQ(got.finish_reason, FinishReason::kLength) << got.error;
    EXPECT_EQ(got.token_ids.size(), static_cast<size_t>(requests[i].params.max_tokens))
        << "request " << i;
    EXPECT_EQ(got.token_ids, want.token_ids) << "request " << i;
    EXPECT_EQ(got.usage.accepted_tokens, want.usage.accepted_tokens) << "request " << i;
    EXPECT_EQ(got.usage.verify_steps, want.usage.verify_steps) << "request " << i;
    if (requests[i].params.temperature == 0.0f) {
      EXPECT_EQ(got.token_ids, autoregressive.outputs[i].token_ids) << "greedy request " << i;
    }
  }
  EXPECT_EQ(run.stats.steps, reference.stats.steps);
  EXPECT_EQ(run.stats.verified, reference.stats.verified);
  EXPECT_EQ(run.stats.accepted, reference.stats.accepted);
}

INSTANTIATE_TEST_SUITE_P(Modes, PlanTpTest,
                         ::testing::Combine(::testing::Values(VerifyMode::kCapAccept,
                                                              VerifyMode::kCompact),
                                            ::testing::Bool()),
                         ModeAndOverlapTestName);

// --speculation-max-batch across ranks: 16 requests of 20 to 60 tokens run
// at once, so the batch shrinks from 16 to 1; steps above 8 requests draft
// nothing. Every rank decides alike (plans compared every step), and the
// tokens, acceptance and step count equal TP 1's, with overlap off and on.
class SpeculationMaxBatchTpTest : public ::testing::TestWithParam<bool> {};

TEST_P(SpeculationMaxBatchTpTest, EveryRankSkipsTheSameStepsAndMatchesTp1) {
  const std::string dir = WriteTinyPair();
  EngineOptions options = PlanOptions(VerifyMode::kCompact, WriteCostTable(), GetParam());
  options.speculation_max_batch = kPlanConcurrency / 2;
  const std::vector<GenerationRequest> requests = PlanWorkload(kPlanConcurrency);

  PlanRun reference, unlimited;
  OnRankZeroWhileOthersWait([&] {
    LocalCommunicator local;
    reference = RunPlanWorkload(&local, options, dir, /*speculation=*/true, requests);
    EngineOptions no_limit = options;
    no_limit.speculation_max_batch = 0;
    unlimited = RunPlanWorkload(&local, no_limit, dir, /*speculation=*/true, requests);
  });
  std::unique_ptr<Communicator> comm = MakeMpiCommunicator();
  ASSERT_NE(comm, nullptr);
  const PlanRun run = RunPlanWorkload(comm.get(), options, dir, /*speculation=*/true, requests);
  EXPECT_EQ(run.stats.plan_checks, run.stats.steps);
  EXPECT_EQ(run.stats.plan_mismatches, 0);
  if (Rank() != 0) return;
  // The limit took drafts away: fewer drafted request-steps than without it,
  // but not none (the batch ends below the limit).
  EXPECT_GT(reference.stats.spec_steps, 0);
  EXPECT_LT(reference.stats.spec_steps, unlimited.stats.spec_steps);
  ASSERT_EQ(run.outputs.size(), requests.size());
  ASSERT_EQ(reference.outputs.size(), requests.size());
  for (size_t i = 0; i < requests.size(); ++i) {
    EXPECT_EQ(run.outputs[i].token_ids, reference.outputs[i].token_ids) << "request " << i;
    EXPECT_EQ(run.outputs[i].usage.draft_tokens, reference.outputs[i].usage.draft_tokens) << i;
    EXPECT_EQ(run.outputs[i].usage.accepted_tokens, reference.outputs[i].usage.accepted_tokens)
        << i;
  }
  EXPECT_EQ(run.stats.steps, reference.stats.steps);
  EXPECT_EQ(run.stats.spec_steps, reference.stats.spec_steps);
}

INSTANTIATE_TEST_SUITE_P(Overlap, SpeculationMaxBatchTpTest, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "overlap" : "plain"; });

// ------------------------------------------------------------ draft plans

// A cost table with the draft split (scheduler/cost_table.h): steps cost
// `fixed` + `row` per verify row + five draft passes of `pass` seconds.
std::string WriteDraftSplitTable(const std::string& name, double fixed, double row, double pass) {
  const char* dir = std::getenv("TEST_TMPDIR");
  const std::string path = absl::StrCat(dir != nullptr ? dir : "/tmp", "/engine_tp_", name,
                                        "_rank", Rank(), ".json");
  const auto cell = [&](double batch, int m) { return fixed + 1e-5 * batch + row * m + 5 * pass; };
  std::ofstream out(path);
  out << "{\"batch_sizes\": [1, 16, 64], \"verify_tokens\": [1, 16, 128, 512], \"seconds\": [";
  const double batches[] = {1, 16, 64};
  for (int b = 0; b < 3; ++b) {
    out << (b > 0 ? ", [" : "[") << cell(batches[b], 1) << ", " << cell(batches[b], 16) << ", "
        << cell(batches[b], 128) << ", " << cell(batches[b], 512) << "]";
  }
  out << "], \"draft_passes\": 5, \"draft_pass_seconds\": [" << pass << ", " << pass << ", "
      << pass << "]}";
  out.close();
  EXPECT_TRUE(out.good()) << path;
  return path;
}

// The draft plan across ranks (scheduler/draft_planner.h): every rank plans
// the same depths (compared every step with the verify plan and the
// estimator), runs rank 0's, and commits TP 1's tokens; the greedy requests
// equal the target's autoregressive ones. With costly draft passes the
// engine decodes plainly once the estimator has its fit; with passes at a
// fifth of the step's fixed cost it drafts for some requests and steps.
class DraftPlanTpTest
    : public ::testing::TestWithParam<std::tuple<VerifyMode, bool, bool>> {};

TEST_P(DraftPlanTpTest, EveryRankDraftsTheSameAndMatchesTp1) {
  const auto [mode, overlap, costly] = GetParam();
  const std::string dir = WriteTinyPair();
  const std::string table = costly ? WriteDraftSplitTable("costly_drafts", 1e-4, 1e-3, 1e-2)
                                   : WriteDraftSplitTable("paying_drafts", 1e-2, 4e-4, 2e-3);
  const EngineOptions options = PlanOptions(mode, table, overlap);
  const std::vector<GenerationRequest> requests = PlanWorkload(kDraftPlanRequests);

  PlanRun reference, autoregressive;
  OnRankZeroWhileOthersWait([&] {
    LocalCommunicator local;
    reference = RunPlanWorkload(&local, options, dir, /*speculation=*/true, requests);
    autoregressive = RunPlanWorkload(&local, options, dir, /*speculation=*/false, requests);
  });
  std::unique_ptr<Communicator> comm = MakeMpiCommunicator();
  ASSERT_NE(comm, nullptr);
  const PlanRun run = RunPlanWorkload(comm.get(), options, dir, /*speculation=*/true, requests);
  EXPECT_EQ(run.stats.plan_checks, run.stats.steps);
  EXPECT_EQ(run.stats.plan_mismatches, 0);
  if (Rank() != 0) return;
  std::fprintf(stderr,
               "TP %d: %lld steps, %lld plain, %lld draft passes, drafted %lld, accepted %lld\n",
               World(), static_cast<long long>(run.stats.steps),
               static_cast<long long>(run.stats.plain_steps),
               static_cast<long long>(run.stats.draft_passes),
               static_cast<long long>(run.stats.drafted),
               static_cast<long long>(run.stats.accepted));
  // Drafting on the estimator's prior, then by the plan.
  EXPECT_GT(run.stats.draft_passes, 0);
  if (costly) {
    EXPECT_GT(run.stats.plain_steps, run.stats.steps / 2);
  } else {
    EXPECT_LT(run.stats.plain_steps, run.stats.steps);
    EXPECT_LT(run.stats.drafted, 5 * run.stats.spec_steps) << "every draft at full depth";
  }
  ASSERT_EQ(run.outputs.size(), requests.size());
  ASSERT_EQ(reference.outputs.size(), requests.size());
  ASSERT_EQ(autoregressive.outputs.size(), requests.size());
  for (size_t i = 0; i < requests.size(); ++i) {
    EXPECT_EQ(run.outputs[i].token_ids, reference.outputs[i].token_ids) << "request " << i;
    EXPECT_EQ(run.outputs[i].usage.draft_tokens, reference.outputs[i].usage.draft_tokens) << i;
    if (requests[i].params.temperature == 0.0f) {
      EXPECT_EQ(run.outputs[i].token_ids, autoregressive.outputs[i].token_ids)
          << "greedy request " << i;
    }
  }
  EXPECT_EQ(run.stats.steps, reference.stats.steps);
  EXPECT_EQ(run.stats.plain_steps, reference.stats.plain_steps);
  EXPECT_EQ(run.stats.draft_passes, reference.stats.draft_passes);
}

INSTANTIATE_TEST_SUITE_P(
    Modes, DraftPlanTpTest,
    ::testing::Combine(::testing::Values(VerifyMode::kStatic, VerifyMode::kCapAccept,
                                         VerifyMode::kCompact),
                       ::testing::Bool(), ::testing::Bool()),
    [](const auto& info) {
      return VerifyModeTestName(std::get<0>(info.param)) +
             (std::get<1>(info.param) ? "_overlap" : "") +
             (std::get<2>(info.param) ? "_costly" : "_paying");
    });

// ------------------------------------------------------------ divergence

// Invariant 3's other half: ranks that plan differently are caught at the
// first compared step and reported with the rank; every request, running or
// waiting, ends with that error, and every rank's loop returns (never a
// hang). The last rank prices steps with a table whose row of 16 requests
// is a little dearer at every verify token count (a step's rows include the
// joining prompts, so the first step reads that row far from M = 16), so
// its plan hash differs from the first step.
TEST(PlanDivergenceTpTest, MismatchEndsEveryRequestWithTheError) {
  const std::string dir = WriteTinyPair();
  const int odd_rank = World() - 1;
  const EngineOptions options =
      PlanOptions(VerifyMode::kCompact, WriteCostTable(/*nudged=*/Rank() == odd_rank));
  std::unique_ptr<Communicator> comm = MakeMpiCommunicator();
  ASSERT_NE(comm, nullptr);
  // More requests than run at once: some are still waiting when it fails.
  const std::vector<GenerationRequest> requests = PlanWorkload(2 * kPlanConcurrency);
  const PlanRun run = RunPlanWorkload(comm.get(), options, dir, /*speculation=*/true, requests,
                                      absl::Seconds(30));
  // Every rank saw the mismatch at the first step and stopped there.
  EXPECT_EQ(run.stats.steps, 1);
  EXPECT_EQ(run.stats.plan_checks, 1);
  EXPECT_EQ(run.stats.plan_mismatches, 1);
  if (Rank() != 0) return;
  ASSERT_EQ(run.outputs.size(), requests.size());
  for (const CollectedOutput& out : run.outputs) {
    EXPECT_EQ(out.finish_reason, FinishReason::kError);
    EXPECT_EQ(out.finished_events, 1);
    EXPECT_FALSE(out.engine_ready_at_finish);
    EXPECT_NE(out.error.find(absl::StrCat("rank ", odd_rank, " planned differently from rank 0")),
              std::string::npos)
        << out.error;
  }
}

// The same under overlap scheduling, with a step in flight when the
// mismatch is found: plans are compared every second step, so step 1 runs
// unchecked on the executor while step 2 is planned and caught. Every rank
// still runs step 1 to its end (the models' collectives match), then every
// request ends with the error and every loop returns.
TEST(PlanDivergenceTpTest, MismatchWithAStepInFlightEndsEveryRequest) {
  const std::string dir = WriteTinyPair();
  const int odd_rank = World() - 1;
  EngineOptions options = PlanOptions(
      VerifyMode::kCompact, WriteCostTable(/*nudged=*/Rank() == odd_rank), /*overlap=*/true);
  options.plan_check_interval = 2;
  std::unique_ptr<Communicator> comm = MakeMpiCommunicator();
  ASSERT_NE(comm, nullptr);
  const std::vector<GenerationRequest> requests = PlanWorkload(2 * kPlanConcurrency);
  const PlanRun run = RunPlanWorkload(comm.get(), options, dir, /*speculation=*/true, requests,
                                      absl::Seconds(30));
  EXPECT_EQ(run.stats.steps, 2);
  EXPECT_EQ(run.stats.plan_checks, 1);
  EXPECT_EQ(run.stats.plan_mismatches, 1);
  // Step 1's tokens never reached the CPU: the loop failed before it
  // committed them.
  EXPECT_EQ(run.stats.generated, 0);
  if (Rank() != 0) return;
  ASSERT_EQ(run.outputs.size(), requests.size());
  for (const CollectedOutput& out : run.outputs) {
    EXPECT_EQ(out.finish_reason, FinishReason::kError);
    EXPECT_EQ(out.finished_events, 1);
    EXPECT_FALSE(out.engine_ready_at_finish);
    EXPECT_TRUE(out.token_ids.empty());
    EXPECT_NE(out.error.find(absl::StrCat("rank ", odd_rank, " planned differently from rank 0")),
              std::string::npos)
        << out.error;
  }
}

}  // namespace
}  // namespace verdict

int main(int argc, char** argv) {
  testing::InitGoogleTest(&argc, argv);
  // MPI stays up across the communicators the tests create and drop.
  absl::StatusOr<std::shared_ptr<verdict::MpiSession>> session = verdict::MpiSession::Acquire();
  if (!session.ok()) {
    std::fprintf(stderr, "%s\n", std::string(session.status().message()).c_str());
    return 2;
  }
  // Long enough for rank 0's TP 1 reference runs, during which the other
  // ranks wait in a barrier on this communicator.
  verdict::CommOptions control_options;
  control_options.timeout = absl::Seconds(240);
  absl::StatusOr<std::unique_ptr<verdict::Communicator>> control =
      verdict::CreateCommunicator(verdict::Backend::kMpi, control_options);
  if (!control.ok()) {
    std::fprintf(stderr, "%s\n", std::string(control.status().message()).c_str());
    return 2;
  }
  verdict::g_control = control->get();
  return verdict::RunAllTestsOnEveryRank(**control, "engine tp test");
}
