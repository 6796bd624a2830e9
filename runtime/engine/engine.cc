#include "runtime/engine/engine.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "comm/create_communicator.h"
#include "comm/local_communicator.h"
#include "kernels/verify_sampler.h"
#include "runtime/model/cuda_llama_model.h"
#include "runtime/model/weights.h"
#include "scheduler/cost_table.h"

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

FinishReason ToFinishReason(StopReason reason) {
  return reason == StopReason::kLength ? FinishReason::kLength : FinishReason::kStop;
}

}  // namespace

struct Engine::Request {
  GenerationRequest req;
  int64_t order = 0;  // admission order: the estimator's request id
  std::vector<int32_t> tokens;  // prompt, then every committed token
  int prompt_len = 0;
  uint64_t seed = 0;
  bool speculative = false;  // drafts for this request
  int target_kv = -1;
  int draft_kv = -1;
  // Cache positions, step inputs and drafts are the executor's (the
  // device's view, a step ahead of `tokens` under overlap). The caches are
  // freed once the latest step whose job names the request is done.
  int64_t last_step = 0;
  bool on_device = false;  // registered with the executor, not yet released
  // Overlap: the confidence signals of the drafts of the latest step whose
  // results reached the CPU; they plan the request's next step. Empty
  // before the first.
  std::vector<float> lagged_signals;
  std::unique_ptr<StopChecker> stop;
  std::unique_ptr<IncrementalDetokenizer> detokenizer;
  GenerationUsage usage;
  absl::Time arrival;        // rank 0's clock, for latency metrics
  absl::Time last_emit;      // the previous event with tokens
  bool first_token_sent = false;
  // Tokens of the finishing step, sent with the final event.
  std::vector<int32_t> unsent_tokens;
  std::vector<float> unsent_logprobs;

  int64_t num_generated() const { return static_cast<int64_t>(tokens.size()) - prompt_len; }
};

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
                                                Communicator* device_comm, bool is_draft) {
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
    cuda.skinny_gemm = is_draft;
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
        LoadModel(*draft, options, slots, draft_comm, draft_device_comm, /*is_draft=*/true);
    if (!draft_model.ok()) return draft_model.status();
    if (draft_model->config.vocab_size != tc.vocab_size) {
      return absl::InvalidArgumentError(absl::StrCat(
          "draft vocabulary (", draft_model->config.vocab_size, ", ", draft->dir,
          ") differs from the target's (", tc.vocab_size, ", ", target.dir, ")"));
    }
    engine->draft_model_ = *std::move(draft_model);
  }

  absl::StatusOr<std::unique_ptr<Tokenizer>> tokenizer =
      LoadTokenizer(target.tokenizer_dir.empty() ? target.dir : target.tokenizer_dir);
  if (!tokenizer.ok()) return tokenizer.status();
  engine->tokenizer_ = *std::move(tokenizer);

  engine->max_model_len_ = tc.max_position_embeddings;
  if (options.max_model_len > 0) {
    engine->max_model_len_ = std::min(engine->max_model_len_, options.max_model_len);
  }

  AcceptanceEstimatorOptions estimator;
  estimator.gamma = options.num_draft_tokens;
  absl::StatusOr<OnlineAcceptanceEstimator> est = OnlineAcceptanceEstimator::Create(estimator);
  if (!est.ok()) return est.status();
  engine->estimator_ = std::make_unique<OnlineAcceptanceEstimator>(*std::move(est));

  std::optional<CostTable> table;
  if (!options.cost_table_path.empty()) {
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
  const bool log_notices = comm->rank() == 0;
  planner.log = [log_notices](std::string_view message) {
    if (log_notices) std::fprintf(stderr, "verdict: %.*s\n", static_cast<int>(message.size()),
                                  message.data());
  };
  absl::StatusOr<VerifyPlanner> vp = VerifyPlanner::Create(planner, std::move(table));
  if (!vp.ok()) return vp.status();
  engine->planner_ = std::make_unique<VerifyPlanner>(*std::move(vp));

  StepExecutor::Options executor;
  executor.gamma = options.num_draft_tokens;
  executor.vocab_size = tc.vocab_size;
  executor.sampler.penalty = options.draft_prob_penalty;
  executor.sampler.simulated_acceptance = static_cast<float>(options.simulate_acceptance);
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
  if (!(p.top_p > 0.0f && p.top_p <= 1.0f)) {
    return absl::InvalidArgumentError("top_p: must be in (0, 1]");
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

// ------------------------------------------------------------ the loop

absl::Status Engine::Run() {
  // An error ends the loop for good. Every request still held (running,
  // waiting, or submitted and not yet broadcast) ends with the error and
  // rank 0 refuses new ones: otherwise their clients would wait forever for
  // tokens no loop will produce.
  auto fail = [this](const absl::Status& error) {
    loop_failed_.store(true);
    DrainSteps();
    StepControl late;
    {
      std::lock_guard<std::mutex> lock(mu_);
      draining_ = true;
      late = std::move(pending_);
      pending_ = StepControl();
    }
    ApplyControl(std::move(late));
    while (!running_.empty()) Finish(*running_.front(), FinishReason::kError, error.ToString());
    while (!waiting_.empty()) Finish(*waiting_.front(), FinishReason::kError, error.ToString());
    return error;
  };
  if (options_.overlap) executor_->Start();
  while (true) {
    if (comm_->world_size() > 1) {
      int32_t drain = drain_requested_local_.load() ? 1 : 0;
      if (absl::Status s = comm_->AllReduceSum(&drain, &drain, 1, DataType::kInt32); !s.ok()) {
        return fail(s);
      }
      if (drain > 0) drain_requested_any_.store(true);
    } else if (drain_requested_local_.load()) {
      drain_requested_any_.store(true);
    }
    StepControl control;
    if (comm_->rank() == 0) control = CollectControl();
    if (absl::Status s = BroadcastStepControl(*comm_, &control); !s.ok()) return fail(s);
    if (control.budget_pin.has_value()) {
      absl::Status s = planner_->SetPinnedBudgetFraction(control.budget_pin->fraction);
      if (!s.ok()) return fail(s);
    }
    const bool shutdown = control.shutdown;
    ApplyControl(std::move(control));
    if (shutdown) {
      // The steps still in flight name finished requests only: their
      // commit drops the tokens and keeps the counters and metrics whole.
      while (!steps_in_flight_.empty()) {
        absl::StatusOr<StepOutcome> outcome = executor_->Await();
        PlannedStep step = std::move(steps_in_flight_.front());
        steps_in_flight_.pop_front();
        absl::Status s = outcome.ok() ? CommitStep(step, *outcome) : outcome.status();
        if (!s.ok()) return fail(s);
      }
      DrainSteps();
      while (!running_.empty()) Finish(*running_.front(), FinishReason::kCancelled);
      while (!waiting_.empty()) Finish(*waiting_.front(), FinishReason::kCancelled);
      return absl::OkStatus();
    }
    Admit();
    absl::Status step = absl::OkStatus();
    if (options_.overlap) {
      step = StepOverlapped();
    } else if (!running_.empty()) {
      step = Step();
    }
    // A failed step leaves the batch in an unknown state: fail its requests.
    if (!step.ok()) return fail(step);
    UpdateGauges();
  }
}

void Engine::ApplyControl(StepControl control) {
  for (ArrivedRequest& a : control.arrived) {
    auto request = std::make_unique<Request>();
    request->req = std::move(a.request);
    request->tokens = request->req.prompt_token_ids;
    request->prompt_len = static_cast<int>(request->tokens.size());
    request->seed = request->req.params.seed.value_or(0);
    request->speculative = draft_model_.has_value() && request->req.params.speculation &&
                           request->req.params.max_draft_tokens != 0;
    StopConditions stop;
    if (!request->req.params.ignore_eos) {
      stop.eos_token_ids = target_model_.config.eos_token_ids;
      if (stop.eos_token_ids.empty() && tokenizer_->eos_id() >= 0) {
        stop.eos_token_ids.push_back(tokenizer_->eos_id());
      }
    }
    stop.stop_token_ids = request->req.params.stop_token_ids;
    stop.stop_strings = request->req.params.stop;
    stop.max_tokens = request->req.params.max_tokens;
    request->stop = std::make_unique<StopChecker>(std::move(stop));
    request->detokenizer =
        std::make_unique<IncrementalDetokenizer>(tokenizer_.get(), request->tokens);
    request->usage.prompt_tokens = request->prompt_len;
    request->arrival = absl::Now();
    waiting_.push_back(std::move(request));
  }
  for (const std::string& id : control.cancelled) {
    auto match = [&](const std::unique_ptr<Request>& r) { return r->req.id == id; };
    if (auto it = std::find_if(running_.begin(), running_.end(), match); it != running_.end()) {
      Finish(**it, FinishReason::kCancelled);
    } else if (auto wt = std::find_if(waiting_.begin(), waiting_.end(), match);
               wt != waiting_.end()) {
      Finish(**wt, FinishReason::kCancelled);
    }
  }
}

void Engine::Admit() {
  std::vector<Request*> admitted;
  KvCache& tkv = *target_model_.kv;
  // First come, first served: a request that does not fit waits, and so do
  // the ones behind it (no starvation of long prompts).
  while (!waiting_.empty() &&
         static_cast<int>(running_.size()) < options_.max_running_requests) {
    Request& r = *waiting_.front();
    const int64_t reserve = tkv.PositionsToReserve(r.prompt_len, r.req.params.max_tokens);
    const bool needs_draft = r.speculative;
    if (!tkv.CanAdmit(reserve) ||
        (needs_draft && !draft_model_->kv->CanAdmit(reserve))) {
      break;
    }
    r.target_kv = *tkv.Allocate(reserve);
    if (needs_draft) r.draft_kv = *draft_model_->kv->Allocate(reserve);
    r.order = next_order_++;
    running_.push_back(std::move(waiting_.front()));
    waiting_.pop_front();
    admitted.push_back(running_.back().get());
  }
  if (admitted.empty()) return;
  std::vector<ExecutorRequest> on_device;
  for (Request* r : admitted) on_device.push_back(ToExecutorRequest(*r));
  if (options_.overlap) {
    // The executor prefills them first thing in the next step's job, on
    // its thread; a prefill error there fails that step, and the loop.
    for (Request* r : admitted) r->on_device = true;
    pending_admitted_.insert(pending_admitted_.end(), std::make_move_iterator(on_device.begin()),
                             std::make_move_iterator(on_device.end()));
    return;
  }
  if (absl::Status s = executor_->Admit(on_device); !s.ok()) {
    for (Request* r : admitted) Finish(*r, FinishReason::kError, s.ToString());
    return;
  }
  for (Request* r : admitted) r->on_device = true;
}

absl::Status Engine::CheckPlanAcrossRanks(const VerifyPlan& plan) {
  const int world = comm_->world_size();
  if (world == 1) return absl::OkStatus();
  {
    std::lock_guard<std::mutex> lock(mu_);  // stats() reads from other threads
    ++stats_.plan_checks;
  }
  // Words 0-1 are the hashes the check compares. Words 2-4 carry this rank's
  // cumulative figures for the TP metrics (decode steps completed before
  // this one, verify and in-step collective nanoseconds), so that rank 0
  // reports every rank without a collective of their own.
  constexpr int kWords = 5;
  const int64_t mine[kWords] = {static_cast<int64_t>(PlanHash(plan)),
                                static_cast<int64_t>(estimator_->StateHash()),
                                stats_.steps - 1, verify_nanoseconds_,
                                step_collective_nanoseconds_};
  std::vector<int64_t> all(kWords * world);
  if (absl::Status s = comm_->AllGather(mine, all.data(), kWords, DataType::kInt64); !s.ok()) {
    return s;
  }
  if (metrics_ != nullptr) {
    for (int r = 0; r < world; ++r) {
      const int64_t* figures = all.data() + kWords * r;
      metrics_->RecordRankFigures(
          r, RankFigures{figures[2], figures[3] * 1e-9, figures[4] * 1e-9});
    }
  }
  for (int r = 1; r < world; ++r) {
    if (all[kWords * r] != all[0] || all[kWords * r + 1] != all[1]) {
      {
        std::lock_guard<std::mutex> lock(mu_);
        ++stats_.plan_mismatches;
      }
      if (metrics_ != nullptr) metrics_->RecordPlanCheck(/*mismatch=*/true);
      return absl::InternalError(absl::StrCat(
          "step ", stats_.steps, ": rank ", r, " planned differently from rank 0 (plan hash ",
          all[kWords * r], " vs ", all[0], ", estimator hash ", all[kWords * r + 1], " vs ",
          all[1], "); this rank's verify lengths: [", absl::StrJoin(plan.verify_lens, ","),
          "]"));
    }
  }
  if (metrics_ != nullptr) metrics_->RecordPlanCheck(/*mismatch=*/false);
  return absl::OkStatus();
}

std::vector<Engine::Request*> Engine::RunningBatch() {
  std::vector<Request*> batch;
  for (auto& r : running_) batch.push_back(r.get());
  return batch;
}

Engine::Request* Engine::FindRunning(int64_t order) {
  for (auto& r : running_) {
    if (r->order == order) return r.get();
  }
  return nullptr;
}

ExecutorRequest Engine::ToExecutorRequest(const Request& r) const {
  ExecutorRequest e;
  const SamplingParams& p = r.req.params;
  e.id = r.order;
  e.prompt_token_ids = r.tokens;
  e.target_kv = r.target_kv;
  e.draft_kv = r.draft_kv;
  e.speculative = r.speculative;
  e.max_draft_tokens = p.max_draft_tokens;
  e.max_tokens = p.max_tokens;
  e.temperature = p.temperature;
  e.top_k = p.top_k;
  e.top_p = p.top_p;
  e.seed = r.seed;
  // The sampler flags a request whose emitted tokens hold one of these
  // (emitted_stop_token), so the step after it drafts nothing for it.
  e.stop_token_ids = r.stop->conditions().eos_token_ids;
  e.stop_token_ids.insert(e.stop_token_ids.end(), p.stop_token_ids.begin(),
                          p.stop_token_ids.end());
  return e;
}

StepJob Engine::NewJob(const std::vector<Request*>& batch) {
  StepJob job;
  job.step = stats_.steps;
  job.released = std::move(pending_released_);
  pending_released_.clear();
  for (Request* r : batch) {
    job.batch.push_back(r->order);
    r->last_step = job.step;
  }
  job.verify_lens.assign(batch.size(), 1);
  job.draft = DraftsAtBatch(static_cast<int>(batch.size()));
  return job;
}

bool Engine::DraftsAtBatch(int batch_size) const {
  // The batch size is the same on every rank, so is the answer.
  return options_.speculation_max_batch == 0 || batch_size <= options_.speculation_max_batch;
}

absl::Status Engine::PlanStep(const std::vector<Request*>& batch,
                              absl::Span<const double> confidences, PlannedStep* step) {
  const int b = static_cast<int>(batch.size());
  const int g = gamma_;
  const bool drafts = DraftsAtBatch(b);  // what NewJob tells the executor
  std::vector<int32_t> max_verify_lens(b);
  std::vector<uint8_t> flags(b, 0);
  for (int i = 0; i < b; ++i) {
    const SamplingParams& p = batch[i]->req.params;
    // Under overlap the CPU's count may be a step behind the device's; the
    // executor caps the plan again with its own.
    const int64_t left = p.max_tokens - batch[i]->num_generated();
    int cap = p.max_draft_tokens >= 0 ? std::min(g, p.max_draft_tokens) : g;
    max_verify_lens[i] = static_cast<int32_t>(std::max<int64_t>(1, std::min<int64_t>(cap + 1, left)));
    if (!batch[i]->speculative) flags[i] = kSpeculationDisabled;
  }
  PlannerInput input;
  input.confidences = confidences;
  input.max_verify_lens = max_verify_lens;
  input.flags = flags;
  input.confidence_ready = estimator_->ready();
  input.drafts = drafts;
  if (absl::Status s = planner_->Plan(input, &plan_); !s.ok()) return s;
  if (options_.plan_check_interval > 0 && stats_.steps % options_.plan_check_interval == 0) {
    if (absl::Status s = CheckPlanAcrossRanks(plan_); !s.ok()) return s;
  }
  // Rank 0's lengths and layout go out on the host communicator even on the
  // CUDA backend: under overlap this thread plans step N+1 while the
  // executor's stream runs step N's NCCL collectives, and one NCCL
  // communicator used from two threads could order its collectives
  // differently on each rank. The layout travels with the lengths so that
  // every rank runs the same rows whatever its own plan said.
  std::vector<int32_t> verify_lens = plan_.verify_lens;
  verify_lens.push_back(plan_.packed ? 1 : 0);
  if (comm_->world_size() > 1) {
    if (absl::Status s = comm_->Broadcast(verify_lens.data(), b + 1, DataType::kInt32, 0);
        !s.ok()) {
      return s;
    }
  }
  const bool packed = verify_lens.back() != 0;
  verify_lens.pop_back();
  step->batch.clear();
  for (Request* r : batch) step->batch.push_back(r->order);
  step->reason = plan_.reason;
  step->packed = packed;
  step->budget = plan_.budget;
  step->predicted_seconds = plan_.predicted_step_seconds;
  step->pinned_budget_fraction = planner_->options().pinned_budget_fraction;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stats_.last_verify_lens = verify_lens;
  }
  step->verify_lens = std::move(verify_lens);
  return absl::OkStatus();
}

int64_t Engine::BeginStep() {
  {
    // Only this thread writes stats_; stats() copies it from other threads
    // under mu_, so every write holds mu_ (reads here need not).
    std::lock_guard<std::mutex> lock(mu_);
    ++stats_.steps;
  }
  return collective_timer_->nanoseconds();
}

absl::Status Engine::Step() {
  std::vector<Request*> batch = RunningBatch();
  const int b = static_cast<int>(batch.size());
  const int g = gamma_;
  const int64_t collective_start = BeginStep();

  // 1. Drafts, their distributions and confidence signals.
  StepJob job = NewJob(batch);
  StepOutcome outcome;
  if (absl::Status s = executor_->ProposeDrafts(job, &outcome); !s.ok()) return s;

  // 2. The fresh drafts' confidences and the plan, on every rank; rank 0's
  //    lengths are used.
  std::vector<double> confidences(static_cast<size_t>(b) * g, 0.0);
  if (absl::Status s = estimator_->Score(outcome.signals, absl::MakeSpan(confidences)); !s.ok()) {
    return s;
  }
  PlannedStep step;
  if (absl::Status s = PlanStep(batch, confidences, &step); !s.ok()) return s;
  job.verify_lens = step.verify_lens;
  job.packed = step.packed;

  // 3. The target verifies the planned rows; the fused sampler accepts.
  if (absl::Status s = executor_->Verify(job, &outcome); !s.ok()) return s;
  step.collective_nanoseconds = collective_timer_->nanoseconds() - collective_start;

  // 4. Commit, observe, finish.
  return CommitStep(step, outcome);
}

absl::Status Engine::StepOverlapped() {
  const bool plan = !running_.empty();
  if (plan) {
    std::vector<Request*> batch = RunningBatch();
    const int b = static_cast<int>(batch.size());
    const int g = gamma_;
    const int64_t collective_start = BeginStep();
    // This step's drafts do not exist yet (the executor proposes them when
    // it runs the step), so each request is planned from its latest drafts
    // whose results have reached the CPU: one or two steps old. A request
    // without any yet counts its drafts as sure, as the estimator's prior
    // does (it verifies them all).
    std::vector<float> signals(static_cast<size_t>(b) * g, 0.0f);
    for (int i = 0; i < b; ++i) {
      const std::vector<float>& lagged = batch[i]->lagged_signals;
      std::copy(lagged.begin(), lagged.end(), signals.begin() + static_cast<int64_t>(i) * g);
    }
    std::vector<double> confidences(signals.size(), 0.0);
    if (absl::Status s = estimator_->Score(signals, absl::MakeSpan(confidences)); !s.ok()) {
      return s;
    }
    for (int i = 0; i < b; ++i) {
      if (batch[i]->lagged_signals.empty()) {
        std::fill_n(confidences.begin() + static_cast<int64_t>(i) * g, g, 1.0);
      }
    }
    PlannedStep step;
    if (absl::Status s = PlanStep(batch, confidences, &step); !s.ok()) return s;
    StepJob job = NewJob(batch);
    job.admitted = std::move(pending_admitted_);
    pending_admitted_.clear();
    job.verify_lens = step.verify_lens;
    job.packed = step.packed;
    step.collective_nanoseconds = collective_timer_->nanoseconds() - collective_start;
    executor_->Enqueue(std::move(job));
    steps_in_flight_.push_back(std::move(step));
  }
  // The previous step's tokens reach the CPU now, while the device runs the
  // step just enqueued.
  if (steps_in_flight_.size() > (plan ? 1u : 0u)) {
    absl::StatusOr<StepOutcome> outcome = executor_->Await();
    PlannedStep step = std::move(steps_in_flight_.front());
    steps_in_flight_.pop_front();
    if (!outcome.ok()) return outcome.status();
    return CommitStep(step, *outcome);
  }
  return absl::OkStatus();
}

absl::Status Engine::CommitStep(const PlannedStep& step, const StepOutcome& outcome) {
  // The executor is done with this step's job: caches of requests that no
  // later job names go back.
  completed_step_ = outcome.step;
  FreeRetiredKv();
  const int b = static_cast<int>(step.batch.size());
  const int g = gamma_;
  // Metrics: the drafts' confidences as the estimator scores them before it
  // folds this step (with overlap off, the ones the plan used).
  std::vector<double> confidences;
  if (metrics_ != nullptr) {
    confidences.assign(static_cast<size_t>(b) * g, 0.0);
    if (absl::Status s = estimator_->Score(outcome.signals, absl::MakeSpan(confidences));
        !s.ok()) {
      return s;
    }
  }
  std::vector<VerifyObservation> observations;
  std::vector<Request*> finished;
  std::vector<uint8_t> committed(b, 0);
  CountStopSkipped(outcome);
  for (int i = 0; i < b; ++i) {
    Request* r = FindRunning(step.batch[i]);
    // Finished after this step was planned (overlap): the device ran it
    // past its end, and those tokens are dropped.
    if (r == nullptr) continue;
    committed[i] = 1;
    const int accepted = outcome.accepted[i];
    const auto first = outcome.token_offsets[i], end = outcome.token_offsets[i + 1];
    const std::vector<int32_t> tokens(outcome.tokens.begin() + first, outcome.tokens.begin() + end);
    const std::vector<float> logprobs(outcome.logprobs.begin() + first,
                                      outcome.logprobs.begin() + end);
    if (outcome.drafted[i]) {
      const int drafts_verified = outcome.verify_lens[i] - 1;
      r->usage.draft_tokens += g;
      r->usage.accepted_tokens += accepted;
      ++r->usage.verify_steps;
      {
        std::lock_guard<std::mutex> lock(mu_);
        stats_.drafted += g;
        stats_.verified += drafts_verified;
        stats_.accepted += accepted;
        if (accepted < drafts_verified) ++stats_.rejected;
        ++stats_.spec_steps;
      }
      const absl::Span<const float> signals(outcome.signals.data() + static_cast<int64_t>(i) * g,
                                            g);
      VerifyObservation o;
      o.request_id = r->order;
      o.draft_signals = signals;
      o.num_verified_drafts = drafts_verified;
      o.accepted_drafts = accepted;
      observations.push_back(o);
      if (options_.overlap) r->lagged_signals.assign(signals.begin(), signals.end());
    } else if (r->speculative) {
      // A step without drafts (--speculation-max-batch): the latest signals
      // grow older with every such step, so the next overlapped plan counts
      // the request's drafts as sure, as for a request that never drafted.
      r->lagged_signals.clear();
    }
    if (Commit(*r, tokens, logprobs)) finished.push_back(r);
  }
  // Metrics: this rank's running figures (every rank; sent with the plan
  // check), then rank 0's report of the step. Under overlap the models'
  // collectives run on the executor's communicator, timed apart.
  const int64_t step_collective_ns = step.collective_nanoseconds + outcome.collective_nanoseconds;
  verify_nanoseconds_ += outcome.verify_nanoseconds;
  step_collective_nanoseconds_ += step_collective_ns;
  if (metrics_ != nullptr) {
    RecordStepMetrics(step, outcome, committed, confidences, step_collective_ns * 1e-9);
  }
  if (step_observer_) {
    step_observer_(StepTiming{outcome.step, b, outcome.verify_tokens, step.budget, step.reason,
                              step.pinned_budget_fraction, outcome.draft_nanoseconds * 1e-9,
                              outcome.verify_nanoseconds * 1e-9});
  }
  if (!observations.empty()) {
    if (absl::Status s = estimator_->Observe(observations); !s.ok()) return s;
  }
  for (Request* r : finished) Finish(*r, ToFinishReason(r->stop->reason()));
  return absl::OkStatus();
}

void Engine::CountStopSkipped(const StepOutcome& outcome) {
  const int64_t skipped = std::count(outcome.stop_skipped.begin(), outcome.stop_skipped.end(), 1);
  if (skipped == 0) return;
  std::lock_guard<std::mutex> lock(mu_);
  stats_.stop_skipped_steps += skipped;
}

void Engine::DrainSteps() {
  // Every rank runs the steps it enqueued to the end, so that the models'
  // collectives match across ranks; an executor that failed ends the rest
  // at once. Their tokens are dropped (the loop is ending); what the device
  // did is still counted.
  while (!steps_in_flight_.empty()) {
    absl::StatusOr<StepOutcome> outcome = executor_->Await();
    steps_in_flight_.pop_front();
    if (outcome.ok()) CountStopSkipped(*outcome);
  }
  executor_->Stop();
  completed_step_ = stats_.steps;
  FreeRetiredKv();
}

void Engine::FreeRetiredKv() {
  auto done = [this](const RetiredKv& kv) { return kv.last_step <= completed_step_; };
  for (const RetiredKv& kv : retired_kv_) {
    if (!done(kv)) continue;
    if (kv.target_kv >= 0) (void)target_model_.kv->Free(kv.target_kv);
    if (kv.draft_kv >= 0) (void)draft_model_->kv->Free(kv.draft_kv);
  }
  retired_kv_.erase(std::remove_if(retired_kv_.begin(), retired_kv_.end(), done),
                    retired_kv_.end());
}

void Engine::UpdateGauges() {
  if (metrics_ == nullptr) return;
  metrics_->SetQueueDepth(static_cast<int>(running_.size()), static_cast<int>(waiting_.size()));
  const KvCache& kv = *target_model_.kv;
  metrics_->SetKvCacheUsage(1.0 - static_cast<double>(kv.free_blocks()) /
                                      std::max(1, kv.config().num_blocks));
  // Every rank took part in this iteration's collectives (the drain
  // all-reduce), so every rank is up.
  metrics_->SetRanksUp(comm_->world_size());
  std::vector<EstimatorPositionState> positions(gamma_);
  for (int k = 0; k < gamma_; ++k) {
    const OnlineAcceptanceEstimator::Position& p = estimator_->position(k);
    positions[k] = EstimatorPositionState{p.fitted, p.slope, p.intercept, p.observations,
                                          p.refits};
  }
  metrics_->RecordEstimator(estimator_->ready(), positions);
}

void Engine::set_metrics(ServingMetrics* metrics) {
  metrics_ = metrics;
  if (metrics_ == nullptr) return;
  EngineInfo info;
  info.verify_mode = std::string(VerifyModeName(options_.verify_mode));
  info.num_draft_tokens = gamma_;
  info.world_size = comm_->world_size();
  info.max_running_requests = options_.max_running_requests;
  info.max_waiting_requests = options_.max_waiting_requests;
  for (PlanReason reason :
       {PlanReason::kPlanned, PlanReason::kPinnedBudget, PlanReason::kStaticMode,
        PlanReason::kNoCostTable, PlanReason::kConfidencePrior, PlanReason::kSmallBatch,
        PlanReason::kEmptyBatch, PlanReason::kNoDrafts}) {
    info.plan_reasons.emplace_back(PlanReasonName(reason));
  }
  metrics_->Configure(info);
}

void Engine::RecordStepMetrics(const PlannedStep& step, const StepOutcome& outcome,
                               const std::vector<uint8_t>& committed,
                               const std::vector<double>& confidences,
                               double collective_seconds) {
  const int g = gamma_;
  std::vector<DraftOutcome> drafts;
  for (size_t i = 0; i < step.batch.size(); ++i) {
    if (!committed[i] || !outcome.drafted[i]) continue;
    const int verified = outcome.verify_lens[i] - 1;
    const int accepted = outcome.accepted[i];
    drafts.push_back(DraftOutcome{g, verified, accepted});
    // Draft j's confidence is the chance of its acceptance given drafts
    // 0..j-1 accepted, so its outcomes are the accepted prefix and the first
    // rejected draft; later drafts say nothing about theirs. Only fitted
    // positions count: an unfitted one scores its prior, not a prediction.
    for (int j = 0; j < verified && j <= accepted; ++j) {
      if (!estimator_->position(j).fitted) continue;
      metrics_->RecordCalibration(j, confidences[i * g + j], j < accepted);
    }
  }
  StepRecord record;
  record.plan_reason = PlanReasonName(step.reason);
  record.planned_budget = step.budget;
  record.full_block_drafts = static_cast<int64_t>(drafts.size()) * g;
  record.verify_tokens = outcome.verify_tokens;
  record.draft_seconds = outcome.draft_nanoseconds * 1e-9;
  record.verify_seconds = outcome.verify_nanoseconds * 1e-9;
  record.predicted_seconds = step.predicted_seconds;
  record.collective_seconds = collective_seconds;
  record.drafts = drafts;
  metrics_->RecordStep(record);
  metrics_->RecordGraphReplays(target_model_.runner->graph_replays(),
                               draft_model_ ? draft_model_->runner->graph_replays() : 0);
  if (comm_->world_size() == 1) {
    // No plan check gathers figures in a world of one: report them directly.
    metrics_->RecordRankFigures(0, RankFigures{stats_.steps, verify_nanoseconds_ * 1e-9,
                                               step_collective_nanoseconds_ * 1e-9});
  }
}

bool Engine::Commit(Request& r, const std::vector<int32_t>& tokens,
                    const std::vector<float>& logprobs) {
  std::vector<int32_t> emitted;
  std::vector<float> emitted_logprobs;
  StopReason reason = StopReason::kNone;
  for (size_t k = 0; k < tokens.size() && reason == StopReason::kNone; ++k) {
    r.tokens.push_back(tokens[k]);
    {
      std::lock_guard<std::mutex> lock(mu_);
      ++stats_.generated;
    }
    ++r.usage.completion_tokens;
    absl::StatusOr<std::string> text = r.detokenizer->Append(tokens[k]);
    reason = r.stop->Append(tokens[k], text.ok() ? *text : std::string());
    // A stop token or EOS ends the output without being part of it.
    if (reason != StopReason::kEos && reason != StopReason::kStopToken) {
      emitted.push_back(tokens[k]);
      if (r.req.params.logprobs > 0) emitted_logprobs.push_back(logprobs[k]);
    }
  }
  // Tokens after a stop are dropped (seed 000): the loop ended there.
  if (reason == StopReason::kNone) {
    Emit(r, std::move(emitted), std::move(emitted_logprobs), false, FinishReason::kNone, "");
    return false;
  }
  // Carry the finishing tokens in the final event (Finish emits it).
  r.usage.completion_tokens = static_cast<int>(r.num_generated());
  r.unsent_tokens = std::move(emitted);
  r.unsent_logprobs = std::move(emitted_logprobs);
  return true;
}

void Engine::Emit(Request& r, std::vector<int32_t> tokens, std::vector<float> logprobs,
                  bool finished, FinishReason reason, const std::string& error) {
  if (comm_->rank() != 0) return;
  GenerationEvent event;
  event.request_id = r.req.id;
  event.token_ids = std::move(tokens);
  event.logprobs = std::move(logprobs);
  event.text = r.stop->TakeEmittableText();
  event.finished = finished;
  event.finish_reason = reason;
  event.error = error;
  event.usage = r.usage;
  if (metrics_ != nullptr) {
    const absl::Time now = absl::Now();
    if (!event.token_ids.empty()) {
      if (!r.first_token_sent) {
        metrics_->RecordTimeToFirstToken(absl::ToDoubleSeconds(now - r.arrival));
      } else {
        // Tokens of one step arrive together: spread the gap over them.
        const double gap = absl::ToDoubleSeconds(now - r.last_emit) / event.token_ids.size();
        for (size_t k = 0; k < event.token_ids.size(); ++k) metrics_->RecordInterTokenLatency(gap);
      }
      r.first_token_sent = true;
      r.last_emit = now;
    }
    if (finished) {
      RequestOutcome outcome = RequestOutcome::kError;
      if (reason == FinishReason::kStop) outcome = RequestOutcome::kStop;
      if (reason == FinishReason::kLength) outcome = RequestOutcome::kLength;
      if (reason == FinishReason::kCancelled) outcome = RequestOutcome::kCancelled;
      metrics_->RecordRequestFinished(outcome, r.usage.prompt_tokens, r.usage.completion_tokens,
                                      absl::ToDoubleSeconds(now - r.arrival));
      if (r.usage.verify_steps > 0) {
        metrics_->RecordRequestAcceptanceLength(
            static_cast<double>(r.usage.accepted_tokens + r.usage.verify_steps) /
            r.usage.verify_steps);
      }
    }
  }
  GenerationCallback callback;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = callbacks_.find(r.req.id);
    if (it == callbacks_.end()) return;
    callback = it->second;
    if (finished) {
      callbacks_.erase(it);
      --in_flight_;
    }
  }
  if (!event.token_ids.empty() || !event.text.empty() || finished) callback(event);
}

void Engine::Finish(Request& r, FinishReason reason, const std::string& error) {
  Emit(r, std::move(r.unsent_tokens), std::move(r.unsent_logprobs), true, reason, error);
  if (r.on_device) pending_released_.push_back(r.order);
  // The caches go back once no step that names the request can still run
  // (under overlap, the step planned before this one's results arrived).
  retired_kv_.push_back(RetiredKv{r.last_step, r.target_kv, r.draft_kv});
  FreeRetiredKv();
  auto match = [&](const std::unique_ptr<Request>& p) { return p.get() == &r; };
  if (auto it = std::find_if(running_.begin(), running_.end(), match); it != running_.end()) {
    running_.erase(it);
  } else if (auto wt = std::find_if(waiting_.begin(), waiting_.end(), match);
             wt != waiting_.end()) {
    waiting_.erase(wt);
  }
}

}  // namespace verdict
