#include "runtime/engine.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "kernels/draft_sampler.h"
#include "kernels/verify_sampler.h"
#include "kernels/verify_step.h"
#include "runtime/weights.h"
#include "scheduler/cost_table.h"

namespace verdict {
namespace {

// The draft proposes with its own random numbers: a seed derived from the
// request's, so no draw is shared with the target's accept test, residual or
// bonus at the same position (sharing would correlate proposal and
// correction and bias the output).
uint64_t DraftSeed(uint64_t seed) { return seed ^ 0x9E3779B97F4A7C15ull; }

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
  // Positions whose keys and values are valid in each cache. The target's
  // is always tokens.size() - 1: the last committed token is the input of
  // the next step's first row.
  int64_t target_valid = 0;
  int64_t draft_valid = 0;
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
                                                int speculative_slots, Communicator* comm) {
  const int tp = comm->world_size();
  Model model;
  absl::StatusOr<ModelConfig> config = LoadModelConfig(source.dir);
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
  CpuModelOptions cpu;
  cpu.num_threads = options.cpu_threads;
  absl::StatusOr<std::unique_ptr<ModelRunner>> runner = CreateCpuLlamaModel(
      model.config, *model.weights, model.kv.get(), tp > 1 ? comm : nullptr, cpu);
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
  if (options.max_running_requests < 1 || options.max_waiting_requests < 0) {
    return absl::InvalidArgumentError("engine: request limits must be positive");
  }
  std::unique_ptr<Engine> engine(new Engine(options, comm));
  const bool speculative = options.speculation && draft.has_value();
  // Every position a verify step may write past the committed tokens.
  const int slots = speculative ? options.num_draft_tokens + 1 : 1;

  // The models' collectives go through the engine's timer too (TP metrics).
  absl::StatusOr<Model> target_model = LoadModel(target, options, slots, engine->comm_);
  if (!target_model.ok()) return target_model.status();
  engine->target_model_ = *std::move(target_model);
  engine->target_ = engine->target_model_.runner.get();
  const ModelConfig& tc = engine->target_model_.config;
  if (speculative) {
    absl::StatusOr<Model> draft_model = LoadModel(*draft, options, slots, engine->comm_);
    if (!draft_model.ok()) return draft_model.status();
    if (draft_model->config.vocab_size != tc.vocab_size) {
      return absl::InvalidArgumentError(absl::StrCat(
          "draft vocabulary (", draft_model->config.vocab_size, ", ", draft->dir,
          ") differs from the target's (", tc.vocab_size, ", ", target.dir, ")"));
    }
    engine->draft_model_ = *std::move(draft_model);
  }

  absl::StatusOr<std::unique_ptr<Tokenizer>> tokenizer = LoadTokenizer(target.dir);
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

void Engine::Shutdown(absl::Time deadline) {
  std::lock_guard<std::mutex> lock(mu_);
  draining_ = true;
  drain_deadline_ = deadline;
  cv_.notify_all();
}

EngineStats Engine::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

StepControl Engine::CollectControl() {
  std::unique_lock<std::mutex> lock(mu_);
  const bool idle = running_.empty() && waiting_.empty();
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
    const bool shutdown = control.shutdown;
    ApplyControl(std::move(control));
    if (shutdown) {
      while (!running_.empty()) Finish(*running_.front(), FinishReason::kCancelled);
      while (!waiting_.empty()) Finish(*waiting_.front(), FinishReason::kCancelled);
      return absl::OkStatus();
    }
    Admit();
    absl::Status step = running_.empty() ? absl::OkStatus() : Step();
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
  if (!admitted.empty()) {
    if (absl::Status s = Prefill(admitted); !s.ok()) {
      for (Request* r : admitted) Finish(*r, FinishReason::kError, s.ToString());
    }
  }
}

absl::Status Engine::Prefill(const std::vector<Request*>& admitted) {
  // Every prompt token but the last: the last is the first row of the
  // request's first decode step.
  ForwardBatch target_batch, draft_batch;
  for (Request* r : admitted) {
    if (r->prompt_len < 2) continue;
    ForwardRequest fr;
    fr.start_position = 0;
    fr.token_ids = absl::MakeConstSpan(r->tokens.data(), r->prompt_len - 1);
    fr.num_logits = 0;
    fr.kv_handle = r->target_kv;
    target_batch.requests.push_back(fr);
    if (r->speculative) {
      fr.kv_handle = r->draft_kv;
      draft_batch.requests.push_back(fr);
    }
  }
  if (!target_batch.requests.empty()) {
    if (absl::Status s = target_->Forward(target_batch, nullptr); !s.ok()) return s;
  }
  if (!draft_batch.requests.empty()) {
    if (absl::Status s = draft_model_->runner->Forward(draft_batch, nullptr); !s.ok()) return s;
  }
  for (Request* r : admitted) {
    r->target_valid = r->prompt_len - 1;
    if (r->speculative) r->draft_valid = r->prompt_len - 1;
  }
  return absl::OkStatus();
}

absl::Status Engine::ProposeDrafts(const std::vector<Request*>& batch,
                                   const std::vector<bool>& spec, std::vector<int32_t>* drafts,
                                   std::vector<float>* probs, std::vector<float>* signals) {
  const int vocab = target_model_.config.vocab_size;
  const int g = gamma_;
  std::vector<int> rows;  // batch index of each speculative request
  for (size_t i = 0; i < batch.size(); ++i) {
    if (spec[i]) rows.push_back(static_cast<int>(i));
  }
  const int n = static_cast<int>(rows.size());
  std::vector<float> logits(static_cast<size_t>(n) * vocab);
  std::vector<float> temperatures(n), top_ps(n), step_probs(static_cast<size_t>(n) * vocab),
      step_signals(n);
  std::vector<int32_t> top_ks(n), step_tokens(n);
  std::vector<uint64_t> seeds(n);
  std::vector<int64_t> positions(n);
  for (int s = 0; s < n; ++s) {
    const SamplingParams& p = batch[rows[s]]->req.params;
    temperatures[s] = p.temperature;
    top_ks[s] = p.top_k;
    top_ps[s] = p.top_p;
    seeds[s] = DraftSeed(batch[rows[s]]->seed);
  }
  for (int j = 0; j < g; ++j) {
    ForwardBatch fb;
    for (int s = 0; s < n; ++s) {
      Request& r = *batch[rows[s]];
      const int64_t last = static_cast<int64_t>(r.tokens.size()) - 1;
      ForwardRequest fr;
      fr.kv_handle = r.draft_kv;
      fr.num_logits = 1;
      if (j == 0) {
        // Catch up on every committed token the draft has not seen: after a
        // fully accepted step that is the last draft and the bonus token.
        fr.start_position = r.draft_valid;
        fr.token_ids = absl::MakeConstSpan(r.tokens.data() + r.draft_valid,
                                           r.tokens.size() - r.draft_valid);
      } else {
        fr.start_position = last + j;
        fr.token_ids = absl::MakeConstSpan(drafts->data() + rows[s] * g + j - 1, 1);
      }
      positions[s] = last + j;  // the position of the row's input token
      fb.requests.push_back(fr);
    }
    if (absl::Status st = draft_model_->runner->Forward(fb, logits.data()); !st.ok()) return st;
    DraftSampleInputs in;
    in.num_rows = n;
    in.vocab_size = vocab;
    in.logits = logits.data();
    in.temperatures = temperatures.data();
    in.top_ks = top_ks.data();
    in.top_ps = top_ps.data();
    in.seeds = seeds.data();
    in.positions = positions.data();
    DraftSampleOutputs out{step_tokens.data(), step_probs.data(), step_signals.data()};
    if (absl::Status st = DraftSampleCpu(in, &out); !st.ok()) return st;
    for (int s = 0; s < n; ++s) {
      const int64_t slot = static_cast<int64_t>(rows[s]) * g + j;
      (*drafts)[slot] = step_tokens[s];
      (*signals)[slot] = step_signals[s];
      std::copy_n(step_probs.data() + static_cast<int64_t>(s) * vocab, vocab,
                  probs->data() + slot * vocab);
    }
  }
  for (int s = 0; s < n; ++s) {
    Request& r = *batch[rows[s]];
    // Written through the input of draft g - 1; trimmed after the verify.
    r.draft_valid = static_cast<int64_t>(r.tokens.size()) - 1 + g;
  }
  return absl::OkStatus();
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

absl::Status Engine::Step() {
  std::vector<Request*> batch;
  for (auto& r : running_) batch.push_back(r.get());
  const int b = static_cast<int>(batch.size());
  const int g = gamma_;
  const int vocab = target_model_.config.vocab_size;
  {
    // Only this thread writes stats_; stats() copies it from other threads
    // under mu_, so every write holds mu_ (reads here need not).
    std::lock_guard<std::mutex> lock(mu_);
    ++stats_.steps;
  }
  const int64_t collective_start = collective_timer_->nanoseconds();  // metrics

  std::vector<bool> spec(b);
  bool any_spec = false;
  for (int i = 0; i < b; ++i) {
    spec[i] = batch[i]->speculative;
    any_spec = any_spec || spec[i];
  }

  // 1. Drafts, their distributions and confidence signals.
  std::vector<int32_t> drafts(static_cast<size_t>(b) * g, 0);
  std::vector<float> signals(static_cast<size_t>(b) * g, 0.0f);
  std::vector<float> draft_probs;
  if (any_spec) {
    draft_probs.assign(static_cast<size_t>(b) * g * vocab, 0.0f);
    if (absl::Status s = ProposeDrafts(batch, spec, &drafts, &draft_probs, &signals); !s.ok()) {
      return s;
    }
  }

  // 2. Confidences and the plan, on every rank; rank 0's lengths are used.
  std::vector<double> confidences(static_cast<size_t>(b) * g, 0.0);
  if (absl::Status s = estimator_->Score(signals, absl::MakeSpan(confidences)); !s.ok()) return s;
  std::vector<int32_t> max_verify_lens(b);
  std::vector<uint8_t> flags(b, 0);
  for (int i = 0; i < b; ++i) {
    const SamplingParams& p = batch[i]->req.params;
    const int64_t left = p.max_tokens - batch[i]->num_generated();
    int cap = p.max_draft_tokens >= 0 ? std::min(g, p.max_draft_tokens) : g;
    max_verify_lens[i] = static_cast<int32_t>(std::max<int64_t>(1, std::min<int64_t>(cap + 1, left)));
    if (!spec[i]) flags[i] = kSpeculationDisabled;
  }
  PlannerInput input;
  input.confidences = confidences;
  input.max_verify_lens = max_verify_lens;
  input.flags = flags;
  input.confidence_ready = estimator_->ready();
  if (absl::Status s = planner_->Plan(input, &plan_); !s.ok()) return s;
  if (options_.plan_check_interval > 0 && stats_.steps % options_.plan_check_interval == 0) {
    if (absl::Status s = CheckPlanAcrossRanks(plan_); !s.ok()) return s;
  }
  std::vector<int32_t> verify_lens = plan_.verify_lens;
  if (comm_->world_size() > 1) {
    if (absl::Status s = comm_->Broadcast(verify_lens.data(), b, DataType::kInt32, 0); !s.ok()) {
      return s;
    }
  }

  // 3. The target verifies: static and cap-accept run the full block,
  //    compact only the planned rows.
  const bool packed = options_.verify_mode == VerifyMode::kCompact;
  std::vector<int32_t> ftp(b), seqlen(b), sampler_cutoff(b), top_ks(b), stop_offsets(b + 1, 0);
  std::vector<int64_t> positions(b);
  std::vector<float> temperatures(b), top_ps(b);
  std::vector<uint64_t> seeds(b);
  std::vector<int32_t> verify_tokens, verify_drafts, stop_ids;
  std::vector<float> verify_probs;
  ForwardBatch fb;
  int32_t total_q = 0;
  for (int i = 0; i < b; ++i) {
    Request& r = *batch[i];
    const int64_t last = static_cast<int64_t>(r.tokens.size()) - 1;
    const int rows = !spec[i] ? 1 : (packed ? verify_lens[i] : g + 1);
    ftp[i] = total_q;
    seqlen[i] = rows;
    total_q += rows;
    sampler_cutoff[i] = spec[i] ? verify_lens[i] - 1 : 0;
    positions[i] = last;
    temperatures[i] = r.req.params.temperature;
    top_ks[i] = r.req.params.top_k;
    top_ps[i] = r.req.params.top_p;
    seeds[i] = r.seed;
    // The sampler flags a request whose emitted tokens hold one of these
    // (emitted_stop_token), so the step after it drafts nothing for it.
    for (int32_t id : r.stop->conditions().eos_token_ids) stop_ids.push_back(id);
    for (int32_t id : r.req.params.stop_token_ids) stop_ids.push_back(id);
    stop_offsets[i + 1] = static_cast<int32_t>(stop_ids.size());
    verify_tokens.push_back(r.tokens.back());
    for (int k = 0; k + 1 < rows; ++k) {
      const int64_t slot = static_cast<int64_t>(i) * g + k;
      verify_tokens.push_back(drafts[slot]);
      verify_drafts.push_back(drafts[slot]);
      verify_probs.insert(verify_probs.end(), draft_probs.begin() + slot * vocab,
                          draft_probs.begin() + (slot + 1) * vocab);
    }
  }
  int32_t offset = 0;
  for (int i = 0; i < b; ++i) {
    ForwardRequest fr;
    fr.kv_handle = batch[i]->target_kv;
    fr.start_position = positions[i];
    fr.token_ids = absl::MakeConstSpan(verify_tokens.data() + offset, seqlen[i]);
    fr.num_logits = seqlen[i];
    fb.requests.push_back(fr);
    offset += seqlen[i];
  }
  std::vector<float> logits(static_cast<size_t>(total_q) * vocab);
  // Metrics: the measured verify time (target forward + sampler), what the
  // cost table predicts.
  const absl::Time verify_start = absl::Now();
  if (absl::Status s = target_->Forward(fb, logits.data()); !s.ok()) return s;

  // 4. The fused sampler: acceptance, residual or bonus, accepted prefix.
  VerifyInputs in;
  in.num_requests = b;
  in.total_q = total_q;
  in.vocab_size = vocab;
  in.logits = logits.data();
  in.first_token_positions = ftp.data();
  in.seqlen_q = seqlen.data();
  in.positions = positions.data();
  in.verify_lens = sampler_cutoff.data();
  in.draft_token_ids = verify_drafts.data();
  in.draft_probs = verify_probs.data();
  in.draft_vocab_size = vocab;
  in.temperatures = temperatures.data();
  in.top_ks = top_ks.data();
  in.top_ps = top_ps.data();
  in.seeds = seeds.data();
  in.stop_token_offsets = stop_offsets.data();
  in.stop_token_ids = stop_ids.data();
  in.config.penalty = options_.draft_prob_penalty;
  in.config.nextn = g;
  HostVerifyOutputs sampled_step(in);
  VerifyOutputs out = sampled_step.View();
  if (absl::Status s = VerifySampleCpu(in, &out); !s.ok()) return s;
  const int64_t verify_ns = absl::ToInt64Nanoseconds(absl::Now() - verify_start);  // metrics

  // 5. Commit, observe, finish.
  std::vector<VerifyObservation> observations;
  std::vector<Request*> finished;
  for (int i = 0; i < b; ++i) {
    Request& r = *batch[i];
    const int accepted = sampled_step.last_valid_offset[i];
    const int64_t n_before = static_cast<int64_t>(r.tokens.size());
    std::vector<int32_t> tokens;
    std::vector<float> logprobs;
    for (int k = 0; k < accepted; ++k) {
      tokens.push_back(sampled_step.verified_token_ids[ftp[i] + k]);
      logprobs.push_back(sampled_step.token_logprobs[ftp[i] + k]);
    }
    tokens.push_back(sampled_step.sampled_token_ids[i]);
    logprobs.push_back(sampled_step.token_logprobs[ftp[i] + accepted]);
    if (spec[i]) {
      const int drafts_verified = verify_lens[i] - 1;
      r.usage.draft_tokens += g;
      r.usage.accepted_tokens += accepted;
      ++r.usage.verify_steps;
      {
        std::lock_guard<std::mutex> lock(mu_);
        stats_.drafted += g;
        stats_.verified += drafts_verified;
        stats_.accepted += accepted;
        ++stats_.spec_steps;
      }
      VerifyObservation o;
      o.request_id = r.order;
      o.draft_signals = absl::MakeConstSpan(signals.data() + static_cast<int64_t>(i) * g, g);
      o.num_verified_drafts = drafts_verified;
      o.accepted_drafts = accepted;
      observations.push_back(o);
      // Draft entries past the accepted prefix are stale; re-fed next step.
      r.draft_valid = n_before + std::min(accepted, g - 1);
    }
    r.target_valid = n_before + accepted;
    if (Commit(r, tokens, logprobs)) finished.push_back(&r);
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    stats_.last_verify_lens = verify_lens;
  }
  // Metrics: this rank's running figures (every rank; sent with the plan
  // check), then rank 0's report of the step.
  const int64_t step_collective_ns = collective_timer_->nanoseconds() - collective_start;
  verify_nanoseconds_ += verify_ns;
  step_collective_nanoseconds_ += step_collective_ns;
  if (metrics_ != nullptr) {
    RecordStepMetrics(batch, spec, verify_lens, confidences, sampled_step.last_valid_offset,
                      total_q, verify_ns * 1e-9, step_collective_ns * 1e-9);
  }
  if (!observations.empty()) {
    if (absl::Status s = estimator_->Observe(observations); !s.ok()) return s;
  }
  for (Request* r : finished) Finish(*r, ToFinishReason(r->stop->reason()));
  return absl::OkStatus();
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
        PlanReason::kEmptyBatch}) {
    info.plan_reasons.emplace_back(PlanReasonName(reason));
  }
  metrics_->Configure(info);
}

void Engine::RecordStepMetrics(const std::vector<Request*>& batch, const std::vector<bool>& spec,
                               const std::vector<int32_t>& verify_lens,
                               const std::vector<double>& confidences,
                               const std::vector<int32_t>& accepted, int64_t verify_tokens,
                               double verify_seconds, double collective_seconds) {
  const int g = gamma_;
  std::vector<DraftOutcome> drafts;
  for (size_t i = 0; i < batch.size(); ++i) {
    if (!spec[i]) continue;
    const int verified = verify_lens[i] - 1;
    drafts.push_back(DraftOutcome{g, verified, accepted[i]});
    // Draft j's confidence is the chance of its acceptance given drafts
    // 0..j-1 accepted, so its outcomes are the accepted prefix and the first
    // rejected draft; later drafts say nothing about theirs. Only fitted
    // positions count: an unfitted one scores its prior, not a prediction.
    for (int j = 0; j < verified && j <= accepted[i]; ++j) {
      if (!estimator_->position(j).fitted) continue;
      metrics_->RecordCalibration(j, confidences[i * g + j], j < accepted[i]);
    }
  }
  StepRecord record;
  record.plan_reason = PlanReasonName(plan_.reason);
  record.planned_budget = plan_.budget;
  record.full_block_drafts = static_cast<int64_t>(drafts.size()) * g;
  record.verify_tokens = verify_tokens;
  record.verify_seconds = verify_seconds;
  record.predicted_seconds = plan_.predicted_step_seconds;
  record.collective_seconds = collective_seconds;
  record.drafts = drafts;
  metrics_->RecordStep(record);
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
  if (r.target_kv >= 0) (void)target_model_.kv->Free(r.target_kv);
  if (r.draft_kv >= 0) (void)draft_model_->kv->Free(r.draft_kv);
  auto match = [&](const std::unique_ptr<Request>& p) { return p.get() == &r; };
  if (auto it = std::find_if(running_.begin(), running_.end(), match); it != running_.end()) {
    running_.erase(it);
  } else if (auto wt = std::find_if(waiting_.begin(), waiting_.end(), match);
             wt != waiting_.end()) {
    waiting_.erase(wt);
  }
}

}  // namespace verdict
