// The engine: loading the models, building the engine, and its client side
// (validation, submission, cancellation, step control from rank 0). The
// loop is in engine_loop.cc, the commit in engine_commit.cc.
#include "runtime/engine/engine.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/time/clock.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "comm/create_communicator.h"
#include "comm/local_communicator.h"
#include "kernels/verify_sampler.h"
#include "runtime/engine/engine_request.h"
#include "runtime/model/generation_config.h"
#include "runtime/model/graph_shapes.h"
#include "runtime/model/cuda_llama_model.h"
#include "runtime/model/weights.h"
#include "scheduler/cost_table.h"
#include "scheduler/cost_table_catalog.h"

namespace verdict {
namespace {

// --simulate-acceptance replaces the target's accept test: only where the
// target's answers mean nothing anyway (dummy weights), and only as a
// probability.
absl::Status CheckSimulatedAcceptance(const EngineOptions& options, const ModelSource& target) {
  const double rate = options.simulate_acceptance;
  if (rate < 0) return absl::OkStatus();
  if (!(rate <= 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--simulate-acceptance must be in [0, 1] (negative: off), got ", rate));
  }
  if (!target.dummy_weights) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--simulate-acceptance ", rate, " needs dummy weights (--load-format dummy): with the ",
        "weights of ", target.dir, " the target's own accept test is the one to measure"));
  }
  return absl::OkStatus();
}

// The catalog's table of `key` (EngineOptions::cost_table_path
// kAutoCostTable). Rank 0 looks and logs; every rank plans with rank 0's
// copy (the JSON round-trips exactly), so the ranks plan from the same bits
// even where their hosts' catalogs differ. Collective.
absl::StatusOr<std::optional<CostTable>> AutoCostTable(const EngineOptions& options,
                                                       const CostTableKey& key,
                                                       Communicator& comm) {
  std::string bytes;
  if (comm.rank() == 0) {
    const CostTableSearch search = FindCostTable(options.cost_table_dirs, key);
    for (const std::string& refused : search.refused) {
      std::fprintf(stderr, "verdict: cost table auto: skipped %s\n", refused.c_str());
    }
    if (search.table.has_value() && search.other_device) {
      std::fprintf(stderr,
                   "verdict: cost table auto: none of the %d tables in [%s] was measured on %s; "
                   "planning with %s, measured on %s for the same models (plans follow the "
                   "relative costs, which another GPU's table approximates; verdict profile "
                   "measures this GPU's and writes it where this server looks)\n",
                   search.tables_seen, absl::StrJoin(options.cost_table_dirs, ", ").c_str(),
                   DescribeCostTableKey(key).c_str(), search.path->c_str(),
                   search.table->origin()->device.c_str());
      bytes = search.table->ToJson();
    } else if (search.table.has_value()) {
      std::fprintf(stderr, "verdict: cost table auto: %s (measured on %s)\n",
                   search.path->c_str(), DescribeCostTableKey(key).c_str());
      bytes = search.table->ToJson();
    } else {
      std::fprintf(stderr,
                   "verdict: cost table auto: none of the %d tables in [%s] was measured on %s; "
                   "every request drafts %d tokens each step (verdict profile measures one and "
                   "writes it where this server looks)\n",
                   search.tables_seen, absl::StrJoin(options.cost_table_dirs, ", ").c_str(),
                   DescribeCostTableKey(key).c_str(), key.gamma);
    }
  }
  if (absl::Status s = BroadcastBytes(comm, &bytes); !s.ok()) return s;
  if (bytes.empty()) return std::optional<CostTable>();
  absl::StatusOr<CostTable> table = CostTable::FromJson(bytes);
  if (!table.ok()) return table.status();
  return std::optional<CostTable>(*std::move(table));
}

}  // namespace

Engine::Engine(const EngineOptions& options, Communicator* comm)
    : options_(options),
      collective_timer_(std::make_unique<TimedCommunicator>(comm)),
      comm_(collective_timer_.get()),
      gamma_(options.num_draft_tokens),
      seed_rng_(options.seed) {}

Engine::~Engine() = default;

absl::StatusOr<Engine::Model> Engine::LoadModel(const ModelSource& source,
                                                const EngineOptions& options,
                                                int speculative_slots, Communicator* comm,
                                                Communicator* device_comm, bool is_draft,
                                                int64_t graph_context) {
  const int tp = comm->world_size();
  Model model;
  constexpr absl::string_view kBuiltin = "builtin:";
  const bool builtin = absl::StartsWith(source.dir, kBuiltin);
  if (builtin && !source.dummy_weights) {
    return absl::InvalidArgumentError(absl::StrCat(
        source.dir, " is a shape without weights: add --load-format dummy"));
  }
  absl::StatusOr<ModelConfig> config = builtin
                                           ? BuiltinModelConfig(source.dir.substr(kBuiltin.size()))
                                           : LoadModelConfig(source.dir);
  if (!config.ok()) return config.status();
  model.config = *std::move(config);
  if (!builtin) {
    // generation_config.json may list more end-of-sequence ids than
    // config.json (Llama 3.1's end of turn and of message): each one stops.
    absl::StatusOr<GenerationConfig> generation = LoadGenerationConfig(source.dir);
    if (!generation.ok()) return generation.status();
    for (int id : generation->eos_token_ids) {
      if (id >= model.config.vocab_size) {
        return absl::InvalidArgumentError(absl::StrCat(
            source.dir, "/generation_config.json: eos_token_id ", id,
            " is outside the vocabulary of ", model.config.vocab_size));
      }
      std::vector<int>& eos = model.config.eos_token_ids;
      if (std::find(eos.begin(), eos.end(), id) == eos.end()) eos.push_back(id);
    }
  }
  if (absl::Status s = ValidateTensorParallel(model.config, tp); !s.ok()) return s;
  if (source.dummy_weights) {
    model.weights = MakeDummyWeights(source.dummy_seed);
  } else {
    absl::StatusOr<std::unique_ptr<WeightSource>> weights = OpenCheckpointWeights(source.dir);
    if (!weights.ok()) return weights.status();
    model.weights = *std::move(weights);
  }
  const int block_size = 16;
  const int num_blocks =
      static_cast<int>((options.kv_cache_tokens + block_size - 1) / block_size);
  absl::StatusOr<KvCache> kv = KvCache::Create(MakeKvCacheConfig(
      model.config, tp, num_blocks, options.max_running_requests, speculative_slots, block_size));
  if (!kv.ok()) return kv.status();
  model.kv = std::make_unique<KvCache>(*std::move(kv));
  absl::StatusOr<std::unique_ptr<ModelRunner>> runner;
  if (options.backend == ModelBackend::kCuda) {
    CudaModelOptions cuda;
    cuda.cuda_graphs = options.cuda_graphs;
    cuda.pad_graph_shapes = options.pad_graph_shapes;
    // The largest graphable pass: a full verify block per running request
    // for the target, a catch-up of two tokens each for the draft.
    cuda.graph_pass_tokens =
        static_cast<int64_t>(options.max_running_requests) * (is_draft ? 2 : speculative_slots);
    cuda.skinny_gemm = is_draft;
    // Graphs serve every context the engine admits (its max_model_len, at
    // most the positions the KV cache holds) and the speculative slots past
    // it, so that their shapes do not depend on the contexts; the draft
    // serves the target's.
    int64_t context = graph_context;
    if (context <= 0) {
      context = model.config.max_position_embeddings;
      if (options.max_model_len > 0) context = std::min(context, options.max_model_len);
      context = std::min(context, options.kv_cache_tokens);
    }
    model.graph_context = std::max<int64_t>(context, 0);
    cuda.graph_max_context = model.graph_context > 0 ? model.graph_context + speculative_slots : 0;
    if (options.one_shot_all_reduce != OneShotAllReduce::kOff && device_comm != nullptr &&
        device_comm->world_size() > 1) {
      // Collective over the ranks (they load the same models in the same
      // order), and its outcome is the same on every rank, so under auto
      // they all keep NCCL together. The largest message it carries: 512
      // rows of a 4096-wide bf16 activation, or 256 rows of the float32
      // embedding sum.
      constexpr size_t kOneShotBytes = size_t{4} << 20;
      absl::StatusOr<std::unique_ptr<NvlinkAllReduce>> one_shot =
          NvlinkAllReduce::Create(*comm, kOneShotBytes, options.comm_timeout);
      if (one_shot.ok()) {
        model.one_shot_all_reduce = *std::move(one_shot);
        cuda.one_shot_all_reduce = model.one_shot_all_reduce.get();
      } else if (options.one_shot_all_reduce == OneShotAllReduce::kOn) {
        return one_shot.status();
      } else if (comm->rank() == 0) {
        std::fprintf(stderr, "verdict: %s all-reduces on NCCL: %s\n",
                     is_draft ? "draft" : "target", one_shot.status().ToString().c_str());
      }
    }
    runner = CreateCudaLlamaModel(model.config, *model.weights, model.kv.get(), device_comm, cuda);
  } else {
    CpuModelOptions cpu;
    cpu.num_threads = options.cpu_threads;
    runner = CreateCpuLlamaModel(model.config, *model.weights, model.kv.get(),
                                 tp > 1 ? comm : nullptr, cpu);
  }
  if (!runner.ok()) return runner.status();
  model.runner = *std::move(runner);
  return model;
}

absl::StatusOr<std::unique_ptr<Engine>> Engine::Create(const EngineOptions& options,
                                                       const ModelSource& target,
                                                       std::optional<ModelSource> draft,
                                                       Communicator* comm) {
  if (comm == nullptr) return absl::InvalidArgumentError("engine: no communicator");
  if (options.num_draft_tokens < 1 || options.num_draft_tokens > 16) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--num-draft-tokens must be in [1, 16], got ", options.num_draft_tokens));
  }
  if (options.draft_tp != 0 && options.draft_tp != 1 && options.draft_tp != comm->world_size()) {
    return absl::InvalidArgumentError(absl::StrCat("--draft-tp must be 1 or the TP degree (",
                                                   comm->world_size(), "), or 0 for the TP degree; got ",
                                                   options.draft_tp));
  }
  if (options.max_running_requests < 1 || options.max_waiting_requests < 0) {
    return absl::InvalidArgumentError("engine: request limits must be positive");
  }
  if (options.speculation_max_batch < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--speculation-max-batch must be 0 (no limit) or positive, got ",
                     options.speculation_max_batch));
  }
  if (absl::Status s = CheckSimulatedAcceptance(options, target); !s.ok()) return s;
  std::unique_ptr<Engine> engine(new Engine(options, comm));
  const bool speculative = options.speculation && draft.has_value();
  if (options.simulate_acceptance >= 0 && !speculative && comm->rank() == 0) {
    std::fprintf(stderr, "verdict: --simulate-acceptance ignored: speculation is off\n");
  }
  // Every position a verify step may write past the committed tokens.
  const int slots = speculative ? options.num_draft_tokens + 1 : 1;

  // On the CUDA backend the models' collectives run over NCCL on device
  // buffers; the control messages and plans stay on `comm`. NCCL picks the
  // rank's GPU (one per rank on its host).
  if (options.backend == ModelBackend::kCuda && comm->world_size() > 1) {
    CommOptions nccl_options;
    nccl_options.timeout = options.comm_timeout;
    // Collectives are enqueued between the layers' kernels; the model waits
    // (within the timeout) once per forward, not once per collective.
    nccl_options.wait_for_completion = false;
    absl::StatusOr<std::unique_ptr<Communicator>> nccl =
        CreateCommunicator(Backend::kNccl, nccl_options);
    if (!nccl.ok()) return nccl.status();
    engine->device_comm_ = *std::move(nccl);
  }
  // The CPU models' collectives go through the engine's timer too (TP
  // metrics). Under overlap the executor's thread runs the models while this
  // thread broadcasts control messages and plans, so the models get a
  // duplicate of `comm` (timed apart): two threads' collectives never
  // interleave on one communicator.
  Communicator* model_comm = engine->comm_;
  if (options.overlap && options.backend == ModelBackend::kCpu && comm->world_size() > 1) {
    absl::StatusOr<std::unique_ptr<Communicator>> dup = comm->Duplicate();
    if (!dup.ok()) return dup.status();
    engine->executor_comm_ = *std::move(dup);
    engine->executor_timer_ = std::make_unique<TimedCommunicator>(engine->executor_comm_.get());
    model_comm = engine->executor_timer_.get();
  }
  absl::StatusOr<Model> target_model =
      LoadModel(target, options, slots, model_comm, engine->device_comm_.get(), /*is_draft=*/false);
  if (!target_model.ok()) return target_model.status();
  engine->target_model_ = *std::move(target_model);
  engine->target_ = engine->target_model_.runner.get();
  const ModelConfig& tc = engine->target_model_.config;
  if (speculative) {
    Communicator* draft_comm = model_comm;
    Communicator* draft_device_comm = engine->device_comm_.get();
    if (options.draft_tp == 1 && comm->world_size() > 1) {
      // A whole draft on this rank: on the rank's GPU (already selected by
      // the NCCL communicator) or its CPU threads, with no peer to wait for.
      engine->draft_comm_ = std::make_unique<LocalCommunicator>();
      draft_comm = engine->draft_comm_.get();
      draft_device_comm = nullptr;
    }
    absl::StatusOr<Model> draft_model =
        LoadModel(*draft, options, slots, draft_comm, draft_device_comm, /*is_draft=*/true,
                  engine->target_model_.graph_context);
    if (!draft_model.ok()) return draft_model.status();
    if (draft_model->config.vocab_size != tc.vocab_size) {
      return absl::InvalidArgumentError(absl::StrCat(
          "draft vocabulary (", draft_model->config.vocab_size, ", ", draft->dir,
          ") differs from the target's (", tc.vocab_size, ", ", target.dir, ")"));
    }
    engine->draft_model_ = *std::move(draft_model);
  }
  if (comm->rank() == 0) {
    // Which way tokens are made is the first thing to know about a server's
    // speed, and a model served without a draft is easy to start by mistake.
    if (speculative) {
      std::fprintf(stderr,
                   "verdict: speculative decoding: the draft %s proposes up to %d tokens a step\n",
                   draft->dir.c_str(), options.num_draft_tokens);
    } else {
      std::fprintf(stderr,
                   "verdict: decoding autoregressively (%s): one target pass per token\n",
                   draft.has_value() ? "--speculation off" : "no draft model");
    }
  }

  engine->tokenizer_ = target.tokenizer;
  if (engine->tokenizer_ == nullptr) {
    absl::StatusOr<std::unique_ptr<Tokenizer>> tokenizer =
        LoadTokenizer(target.tokenizer_dir.empty() ? target.dir : target.tokenizer_dir);
    if (!tokenizer.ok()) return tokenizer.status();
    engine->tokenizer_ = *std::move(tokenizer);
  }

  engine->max_model_len_ = tc.max_position_embeddings;
  if (options.max_model_len > 0) {
    engine->max_model_len_ = std::min(engine->max_model_len_, options.max_model_len);
  }

  AcceptanceEstimatorOptions estimator;
  estimator.gamma = options.num_draft_tokens;
  absl::StatusOr<OnlineAcceptanceEstimator> est = OnlineAcceptanceEstimator::Create(estimator);
  if (!est.ok()) return est.status();
  engine->estimator_ = std::make_unique<OnlineAcceptanceEstimator>(*std::move(est));

  if (engine->draft_model_.has_value()) {
    // The models have selected the rank's GPU on this thread.
    absl::StatusOr<std::string> device =
        options.backend == ModelBackend::kCuda ? CudaDeviceName() : std::string("cpu");
    if (!device.ok()) return device.status();
    CostTableKey key;
    key.origin = {*device, ModelShapeName(tc), ModelShapeName(engine->draft_model_->config)};
    key.tp = comm->world_size();
    key.gamma = options.num_draft_tokens;
    engine->cost_table_key_ = std::move(key);
  }
  std::optional<CostTable> table;
  if (options.cost_table_path == kAutoCostTable) {
    if (engine->cost_table_key_.has_value()) {
      absl::StatusOr<std::optional<CostTable>> found =
          AutoCostTable(options, *engine->cost_table_key_, *comm);
      if (!found.ok()) return found.status();
      table = *std::move(found);
    }
  } else if (!options.cost_table_path.empty()) {
    absl::StatusOr<CostTable> loaded = CostTable::Load(options.cost_table_path);
    if (!loaded.ok()) return loaded.status();
    if (loaded->measured_tp() > 0 && loaded->measured_tp() != comm->world_size() &&
        comm->rank() == 0) {
      // Usable, but its costs are another degree's: the step times (and so
      // the budgets that pay off) change with TP.
      std::fprintf(stderr,
                   "verdict: the cost table %s was measured at TP %d, this job runs TP %d; "
                   "plans use its costs as they are (measure one with verdict profile --tp %d)\n",
                   options.cost_table_path.c_str(), loaded->measured_tp(), comm->world_size(),
                   comm->world_size());
    }
    table = *std::move(loaded);
  }
  PlannerOptions planner;
  planner.mode = options.verify_mode;
  planner.gamma = options.num_draft_tokens;
  if (options.backend == ModelBackend::kCuda && options.cuda_graphs && options.pad_graph_shapes) {
    // Packed steps run padded to a graph's token tier: price what runs.
    planner.launch_tokens = LaunchedTokens;
  }
  const bool log_notices = comm->rank() == 0;
  planner.log = [log_notices](std::string_view message) {
    if (log_notices) std::fprintf(stderr, "verdict: %.*s\n", static_cast<int>(message.size()),
                                  message.data());
  };
  DraftPlannerOptions draft_planner;
  draft_planner.gamma = options.num_draft_tokens;
  absl::StatusOr<DraftPlanner> dp = DraftPlanner::Create(draft_planner, table);
  if (!dp.ok()) return dp.status();
  engine->draft_planner_ = std::make_unique<DraftPlanner>(*std::move(dp));
  if (table.has_value() && !table->has_draft_split() && comm->rank() == 0 &&
      engine->draft_model_.has_value()) {
    std::fprintf(stderr,
                 "verdict: the cost table %s has no draft split (draft_pass_seconds): every "
                 "request drafts %d tokens each step (measure one with verdict profile)\n",
                 options.cost_table_path.c_str(), options.num_draft_tokens);
  }
  absl::StatusOr<VerifyPlanner> vp = VerifyPlanner::Create(planner, std::move(table));
  if (!vp.ok()) return vp.status();
  engine->planner_ = std::make_unique<VerifyPlanner>(*std::move(vp));

  if (absl::Status s = engine->CaptureGraphsAhead(options); !s.ok()) return s;

  StepExecutor::Options executor;
  executor.gamma = options.num_draft_tokens;
  executor.vocab_size = tc.vocab_size;
  executor.sampler.penalty = options.draft_prob_penalty;
  executor.sampler.simulated_acceptance = static_cast<float>(options.simulate_acceptance);
  executor.fused_prefill = options.fused_prefill;
  if (options.backend == ModelBackend::kCuda) {
    // The models have selected the rank's GPU on this thread.
    absl::StatusOr<std::unique_ptr<DeviceSampling>> sampling =
        DeviceSampling::Create(tc.vocab_size, options.num_draft_tokens);
    if (!sampling.ok()) return sampling.status();
    engine->device_sampling_ = *std::move(sampling);
    executor.device_sampling = engine->device_sampling_.get();
  }
  engine->executor_ = std::make_unique<StepExecutor>(
      executor, engine->target_,
      engine->draft_model_.has_value() ? engine->draft_model_->runner.get() : nullptr,
      engine->executor_timer_.get());
  return engine;
}

absl::Status Engine::CaptureGraphsAhead(const EngineOptions& options) {
  if (options.backend != ModelBackend::kCuda || options.graph_capture == GraphCaptureTiers::kOff) {
    return absl::OkStatus();
  }
  if (!options.cuda_graphs || !options.pad_graph_shapes) {
    // The start-up shapes are padded ones.
    if (comm_->rank() == 0) {
      std::fprintf(stderr, "verdict: no CUDA graphs captured at start: --cuda-graphs is %s\n",
                   options.cuda_graphs ? "exact" : "off");
    }
    return absl::OkStatus();
  }
  const int batch = options.graph_capture_batch > 0 ? options.graph_capture_batch
                                                    : options.max_running_requests;
  const GraphTiers tiers =
      options.graph_capture == GraphCaptureTiers::kAll ? GraphTiers::kAll : GraphTiers::kBlocks;
  // The target's longest queries: one token (plain decode) up to a full
  // verify block. The draft's: one token a pass, two when it catches up.
  std::vector<int> target_queries = {1};
  if (draft_model_.has_value()) {
    for (int q = 2; q <= options.num_draft_tokens + 1; ++q) target_queries.push_back(q);
  }
  struct Job {
    const char* name;
    ModelRunner* runner;
    std::vector<GraphShape> shapes;
  };
  std::vector<Job> jobs = {
      {"target", target_model_.runner.get(), StartupGraphShapes(batch, target_queries, tiers)}};
  if (draft_model_.has_value()) {
    jobs.push_back({"draft", draft_model_->runner.get(), StartupGraphShapes(batch, {1, 2}, tiers)});
  }
  const bool log = comm_->rank() == 0;
  for (const Job& job : jobs) {
    const int total = static_cast<int>(job.shapes.size());
    if (log) {
      std::fprintf(stderr,
                   "verdict: capturing %d CUDA graphs of the %s (steps of up to %d requests)\n",
                   total, job.name, batch);
    }
    const absl::Time start = absl::Now();
    int reported = 0;
    const auto progress = [&](int done) {
      // A line at every quarter, so that a slow start shows where it is.
      if (!log || done * 4 < (reported + 1) * total) return;
      reported = done * 4 / total;
      if (done == total) return;
      std::fprintf(stderr, "verdict: %s: %d of %d graphs captured (%.1f s)\n", job.name, done,
                   total, absl::ToDoubleSeconds(absl::Now() - start));
    };
    absl::StatusOr<ModelRunner::GraphCapture> captured =
        job.runner->CaptureGraphs(job.shapes, progress);
    if (!captured.ok()) {
      return absl::Status(captured.status().code(),
                          absl::StrCat("capturing the ", job.name, "'s CUDA graphs: ",
                                       captured.status().message()));
    }
    if (log) {
      std::fprintf(stderr,
                   "verdict: %s: %d CUDA graphs captured in %.1f s, %.1f MiB of device memory "
                   "for their step buffers and %.1f MiB for the graphs%s\n",
                   job.name, captured->captured, absl::ToDoubleSeconds(absl::Now() - start),
                   static_cast<double>(captured->buffer_bytes) / (1 << 20),
                   static_cast<double>(captured->graph_bytes) / (1 << 20),
                   captured->failed > 0
                       ? absl::StrCat(" (", captured->failed, " refused: they run eagerly)").c_str()
                       : "");
    }
  }
  return absl::OkStatus();
}

// ------------------------------------------------------------ client side

absl::Status Engine::ValidateRequest(const GenerationRequest& request) const {
  const SamplingParams& p = request.params;
  const int vocab = target_model_.config.vocab_size;
  if (request.prompt_token_ids.empty()) {
    return absl::InvalidArgumentError("prompt: must contain at least one token");
  }
  for (int32_t id : request.prompt_token_ids) {
    if (id < 0 || id >= vocab) {
      return absl::InvalidArgumentError(
          absl::StrCat("prompt: token id ", id, " is outside the vocabulary [0, ", vocab, ")"));
    }
  }
  for (int32_t id : p.stop_token_ids) {
    if (id < 0 || id >= vocab) {
      return absl::InvalidArgumentError(absl::StrCat(
          "stop_token_ids: token id ", id, " is outside the vocabulary [0, ", vocab, ")"));
    }
  }
  if (!(p.temperature >= 0.0f) || !std::isfinite(p.temperature)) {
    return absl::InvalidArgumentError("temperature: must be finite and >= 0");
  }
  if (p.temperature > 0.0f && p.temperature < kMinTemperature) {
    return absl::InvalidArgumentError(
        absl::StrCat("temperature: must be 0 (greedy) or at least ", kMinTemperature, ", got ",
                     p.temperature));
  }
  if (!(p.top_p > 0.0f && p.top_p <= 1.0f)) {
    return absl::InvalidArgumentError("top_p: must be in (0, 1]");
  }
  if (!(p.min_p >= 0.0f && p.min_p <= 1.0f)) {
    return absl::InvalidArgumentError("min_p: must be in [0, 1]");
  }
  if (p.top_k < 0) return absl::InvalidArgumentError("top_k: must be >= 0");
  if (p.max_tokens < 1) return absl::InvalidArgumentError("max_tokens: must be >= 1");
  const int64_t total = static_cast<int64_t>(request.prompt_token_ids.size()) + p.max_tokens;
  if (total > max_model_len_) {
    return absl::OutOfRangeError(absl::StrCat(
        "prompt (", request.prompt_token_ids.size(), " tokens) plus max_tokens (", p.max_tokens,
        ") exceeds the context of ", max_model_len_, " tokens"));
  }
  const KvCache& kv = *target_model_.kv;
  const int64_t reserve = kv.PositionsToReserve(request.prompt_token_ids.size(), p.max_tokens);
  if (kv.BlocksNeeded(reserve) > kv.config().num_blocks) {
    return absl::OutOfRangeError(absl::StrCat("prompt plus max_tokens needs ", reserve,
                                              " KV positions; the cache holds ",
                                              kv.config().num_blocks * kv.config().block_size));
  }
  return absl::OkStatus();
}

absl::Status Engine::Submit(GenerationRequest request, GenerationCallback on_event) {
  if (comm_->rank() != 0) return absl::FailedPreconditionError("requests go to rank 0");
  if (absl::Status s = ValidateRequest(request); !s.ok()) return s;
  std::lock_guard<std::mutex> lock(mu_);
  if (loop_failed_.load()) {
    return absl::UnavailableError("the engine stopped on an error; see the server log");
  }
  if (draining_) return absl::UnavailableError("the server is shutting down");
  if (callbacks_.count(request.id)) {
    return absl::InvalidArgumentError(absl::StrCat("request id ", request.id, " is in use"));
  }
  if (in_flight_ >= options_.max_waiting_requests + options_.max_running_requests) {
    if (metrics_ != nullptr) metrics_->RecordRequestRejected();  // queue saturation
    return absl::ResourceExhaustedError("the request queue is full");
  }
  if (!request.params.seed.has_value()) request.params.seed = seed_rng_();
  callbacks_[request.id] = std::move(on_event);
  ++in_flight_;
  pending_.arrived.push_back(ArrivedRequest{std::move(request)});
  cv_.notify_all();
  return absl::OkStatus();
}

void Engine::Cancel(const std::string& request_id) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!callbacks_.count(request_id)) return;
  pending_.cancelled.push_back(request_id);
  cv_.notify_all();
}

absl::Status Engine::PinVerifyBudget(std::optional<double> fraction) {
  if (comm_->rank() != 0) return absl::FailedPreconditionError("budget pins go to rank 0");
  if (fraction.has_value()) {
    const double rate = options_.simulate_acceptance;
    if (rate >= 0 && rate != 1.0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "cannot pin the verify budget under --simulate-acceptance ", rate,
          " (only 1.0 or off; seeds/002_d567d7ab3f14fa00.txt, \"Cost table\")"));
    }
    if (options_.verify_mode == VerifyMode::kStatic) {
      return absl::InvalidArgumentError(
          "cannot pin the verify budget in static mode (it verifies every draft); use "
          "--verify-mode compact or cap-accept");
    }
    if (!(*fraction >= 0.0 && *fraction <= 1.0)) {
      return absl::InvalidArgumentError(
          absl::StrCat("pinned budget fraction ", *fraction, " is outside [0, 1]"));
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  pending_.budget_pin = BudgetPinChange{fraction};
  cv_.notify_all();
  return absl::OkStatus();
}

absl::Status Engine::PinDraftDepth(std::optional<int> depth) {
  if (comm_->rank() != 0) return absl::FailedPreconditionError("draft depth pins go to rank 0");
  if (!draft_model_.has_value()) {
    return absl::FailedPreconditionError("the engine has no draft model to pin the depth of");
  }
  if (depth.has_value() && (*depth < 0 || *depth > gamma_)) {
    return absl::InvalidArgumentError(
        absl::StrCat("pinned draft depth ", *depth, " is outside [0, ", gamma_, "]"));
  }
  std::lock_guard<std::mutex> lock(mu_);
  pending_.draft_pin = DraftPinChange{depth};
  cv_.notify_all();
  return absl::OkStatus();
}

void Engine::Shutdown(absl::Time deadline) {
  std::lock_guard<std::mutex> lock(mu_);
  draining_ = true;
  drain_deadline_ = deadline;
  cv_.notify_all();
}

EngineStats Engine::stats() const {
  EngineStats stats;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stats = stats_;
  }
  auto one_shot_calls = [](const Model& m) -> int64_t {
    return m.one_shot_all_reduce != nullptr ? m.one_shot_all_reduce->calls() : 0;
  };
  stats.target_graph_replays = target_model_.runner->graph_replays();
  stats.one_shot_all_reduces = one_shot_calls(target_model_);
  if (draft_model_.has_value()) {
    stats.draft_graph_replays = draft_model_->runner->graph_replays();
    stats.one_shot_all_reduces += one_shot_calls(*draft_model_);
  }
  return stats;
}

StepControl Engine::CollectControl() {
  std::unique_lock<std::mutex> lock(mu_);
  const bool idle = running_.empty() && waiting_.empty() && steps_in_flight_.empty();
  if (idle && pending_.empty() && !draining_) {
    // Wake at least every 100 ms so the other ranks, blocked in the
    // broadcast, hear from rank 0 well inside the collective deadline.
    cv_.wait_for(lock, std::chrono::milliseconds(100));
  }
  StepControl control = std::move(pending_);
  pending_ = StepControl();
  if (draining_) {
    if (absl::Now() >= drain_deadline_) {
      for (const auto& r : running_) control.cancelled.push_back(r->req.id);
      for (const auto& r : waiting_) control.cancelled.push_back(r->req.id);
    }
    const bool nothing_left = in_flight_ == 0 && control.arrived.empty();
    if (nothing_left) control.shutdown = true;
  }
  return control;
}

}  // namespace verdict
