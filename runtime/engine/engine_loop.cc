// The engine's loop: step control across ranks, admission into the batch,
// the step's plan, and running it (one step at a time, or overlapped with
// the executor's worker thread).
#include <algorithm>
#include <atomic>
#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "runtime/engine/engine.h"
#include "runtime/engine/engine_request.h"

namespace verdict {
namespace {

// Marks the loop's work for Engine::StepRunningFor while it is in scope.
class StepMark {
 public:
  explicit StepMark(std::atomic<int64_t>& started_unix_ns) : started_(started_unix_ns) {
    started_.store(absl::ToUnixNanos(absl::Now()), std::memory_order_relaxed);
  }
  ~StepMark() { started_.store(0, std::memory_order_relaxed); }
  StepMark(const StepMark&) = delete;
  StepMark& operator=(const StepMark&) = delete;

 private:
  std::atomic<int64_t>& started_;
};

}  // namespace

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
    delivery_.FlushAndWait();
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
    if (control.draft_pin.has_value() && draft_planner_ != nullptr) {
      absl::Status s = draft_planner_->SetPinnedDepth(control.draft_pin->depth);
      if (!s.ok()) return fail(s);
    }
    const bool shutdown = control.shutdown;
    ApplyControl(std::move(control));
    if (shutdown) {
      // The steps still in flight name finished requests only: their
      // commit drops the tokens and keeps the counters and metrics whole.
      {
        const StepMark mark(step_started_unix_ns_);
        while (!steps_in_flight_.empty()) {
          absl::StatusOr<StepOutcome> outcome = executor_->Await();
          PlannedStep step = std::move(steps_in_flight_.front());
          steps_in_flight_.pop_front();
          absl::Status s = outcome.ok() ? CommitStep(step, *outcome) : outcome.status();
          if (!s.ok()) return fail(s);
        }
      }
      DrainSteps();
      while (!running_.empty()) Finish(*running_.front(), FinishReason::kCancelled);
      while (!waiting_.empty()) Finish(*waiting_.front(), FinishReason::kCancelled);
      delivery_.FlushAndWait();
      return absl::OkStatus();
    }
    absl::Status step = absl::OkStatus();
    {
      const StepMark mark(step_started_unix_ns_);
      Admit();
      if (options_.overlap) {
        step = StepOverlapped();
      } else if (!running_.empty()) {
        step = Step();
      }
    }
    // A failed step leaves the batch in an unknown state: fail its requests.
    if (!step.ok()) return fail(step);
    UpdateGauges();
    // The iteration's events go out while the next iteration plans.
    delivery_.Flush();
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
  // While the batch decodes without drafts (above --speculation-max-batch,
  // or the last draft plan drafted nobody), a request joining it has its
  // prompt priced as catch-up tokens: the draft reads it in the first pass
  // of the request's first drafting step, which the draft planner prices,
  // so a request that never drafts never pays for it (with --prefill
  // separate it also skips the draft's prefill pass). Otherwise the prompt
  // is a prefill, which the draft planner does not price: the batch drafts,
  // and so will the request. The decision reads state every rank shares
  // (the batch size, the checked draft plan).
  const bool plain_batch =
      !DraftsAtBatch(static_cast<int>(running_.size())) ||
      (draft_plan_.reason == DraftReason::kPlanned && !draft_plan_.depths.empty() &&
       draft_plan_.drafting_requests == 0);
  std::vector<ExecutorRequest> on_device;
  for (Request* r : admitted) {
    on_device.push_back(ToExecutorRequest(*r));
    // All but the last prompt token: the last is the first verify row.
    const int32_t prompt_rows = std::max(0, static_cast<int32_t>(r->tokens.size()) - 1);
    if (options_.fused_prefill) r->prefill_rows = prompt_rows;
    if (plain_batch && r->speculative) {
      on_device.back().prefill_draft = false;
      r->catch_up_tokens = prompt_rows;
    }
  }
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

absl::Status Engine::CheckPlanAcrossRanks(const VerifyPlan& plan, const DraftPlan& draft_plan) {
  const int world = comm_->world_size();
  if (world == 1) return absl::OkStatus();
  {
    std::lock_guard<std::mutex> lock(mu_);  // stats() reads from other threads
    ++stats_.plan_checks;
  }
  // Words 0-2 are the hashes the check compares (the verify plan, the
  // estimator, the draft plan). Words 3-5 carry this rank's cumulative
  // figures for the TP metrics (decode steps completed before this one,
  // verify and in-step collective nanoseconds), so that rank 0 reports every
  // rank without a collective of their own.
  constexpr int kWords = 6;
  const int64_t mine[kWords] = {static_cast<int64_t>(PlanHash(plan)),
                                static_cast<int64_t>(estimator_->StateHash()),
                                static_cast<int64_t>(DraftPlanHash(draft_plan)),
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
          r, RankFigures{figures[3], figures[4] * 1e-9, figures[5] * 1e-9});
    }
  }
  for (int r = 1; r < world; ++r) {
    if (all[kWords * r] != all[0] || all[kWords * r + 1] != all[1] ||
        all[kWords * r + 2] != all[2]) {
      {
        std::lock_guard<std::mutex> lock(mu_);
        ++stats_.plan_mismatches;
      }
      if (metrics_ != nullptr) metrics_->RecordPlanCheck(/*mismatch=*/true);
      return absl::InternalError(absl::StrCat(
          "step ", stats_.steps, ": rank ", r, " planned differently from rank 0 (plan hash ",
          all[kWords * r], " vs ", all[0], ", estimator hash ", all[kWords * r + 1], " vs ",
          all[1], ", draft plan hash ", all[kWords * r + 2], " vs ", all[2],
          "); this rank's draft depths: [", absl::StrJoin(draft_plan.depths, ","),
          "], verify lengths: [", absl::StrJoin(plan.verify_lens, ","), "]"));
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
  // running_ is in admission order, which is `order`'s (Admit numbers the
  // requests as it appends them; removals keep the order): a binary search,
  // so that a commit of B requests costs B log B, not B^2.
  const auto it =
      std::lower_bound(running_.begin(), running_.end(), order,
                       [](const std::unique_ptr<Request>& r, int64_t o) { return r->order < o; });
  return it != running_.end() && (*it)->order == order ? it->get() : nullptr;
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
  e.min_p = p.min_p;
  e.seed = r.seed;
  // The sampler flags a request whose emitted tokens hold one of these
  // (emitted_stop_token), so the step after it drafts nothing for it.
  e.stop_token_ids = r.stop->conditions().eos_token_ids;
  e.stop_token_ids.insert(e.stop_token_ids.end(), p.stop_token_ids.begin(),
                          p.stop_token_ids.end());
  return e;
}

StepJob Engine::NewJob(const std::vector<Request*>& batch, const PlannedStep& step) {
  StepJob job;
  job.step = stats_.steps;
  job.released = std::move(pending_released_);
  pending_released_.clear();
  for (Request* r : batch) {
    job.batch.push_back(r->order);
    r->last_step = job.step;
    r->prefill_rows = 0;  // this job's verify reads the prompt
  }
  job.draft_depths = step.draft_depths;
  job.verify_lens = step.verify_lens;
  job.packed = step.packed;
  return job;
}

bool Engine::DraftsAtBatch(int batch_size) const {
  // The batch size is the same on every rank, so is the answer.
  return options_.speculation_max_batch == 0 || batch_size <= options_.speculation_max_batch;
}

Engine::StepCaps Engine::VerifyCaps(const std::vector<Request*>& batch) const {
  const int b = static_cast<int>(batch.size());
  StepCaps caps;
  caps.max_verify_lens.assign(b, 1);
  caps.flags.assign(b, 0);
  caps.catch_up_tokens.assign(b, 0);
  for (int i = 0; i < b; ++i) {
    const SamplingParams& p = batch[i]->req.params;
    caps.catch_up_tokens[i] = batch[i]->catch_up_tokens;
    caps.prefill_rows += batch[i]->prefill_rows;
    // Under overlap the CPU's count may be a step behind the device's; the
    // executor caps the plan again with its own.
    const int64_t left = p.max_tokens - batch[i]->num_generated();
    const int cap = p.max_draft_tokens >= 0 ? std::min(gamma_, p.max_draft_tokens) : gamma_;
    caps.max_verify_lens[i] =
        static_cast<int32_t>(std::max<int64_t>(1, std::min<int64_t>(cap + 1, left)));
    if (!batch[i]->speculative) caps.flags[i] = kSpeculationDisabled;
  }
  return caps;
}

absl::Status Engine::LaggedConfidences(const std::vector<Request*>& batch,
                                       std::vector<double>* confidences) {
  const int b = static_cast<int>(batch.size());
  const int g = gamma_;
  std::vector<float> signals(static_cast<size_t>(b) * g, 0.0f);
  for (int i = 0; i < b; ++i) {
    const std::vector<float>& lagged = batch[i]->lagged_signals;
    for (int j = 0; j < static_cast<int>(lagged.size()); ++j) {
      if (!std::isnan(lagged[j])) signals[static_cast<size_t>(i) * g + j] = lagged[j];
    }
  }
  confidences->assign(signals.size(), 0.0);
  if (absl::Status s = estimator_->Score(signals, absl::MakeSpan(*confidences)); !s.ok()) {
    return s;
  }
  for (int i = 0; i < b; ++i) {
    const std::vector<float>& lagged = batch[i]->lagged_signals;
    for (int j = 0; j < g; ++j) {
      if (j >= static_cast<int>(lagged.size()) || std::isnan(lagged[j])) {
        (*confidences)[static_cast<size_t>(i) * g + j] = estimator_->UnseenConfidence(j);
      }
    }
  }
  return absl::OkStatus();
}

absl::Status Engine::PlanDrafts(const StepCaps& caps, absl::Span<const double> confidences,
                                bool broadcast, PlannedStep* step) {
  const int b = static_cast<int>(caps.max_verify_lens.size());
  DraftPlannerInput input;
  input.confidences = confidences;
  input.max_verify_lens = caps.max_verify_lens;
  input.flags = caps.flags;
  input.catch_up_tokens = caps.catch_up_tokens;
  input.confidence_ready = estimator_->ready();
  input.drafts_allowed = DraftsAtBatch(b);
  if (absl::Status s = draft_planner_->Plan(input, &draft_plan_); !s.ok()) return s;
  std::vector<int32_t> depths = draft_plan_.depths;
  if (broadcast && comm_->world_size() > 1) {
    // As the verify lengths (PlanStep): every rank runs rank 0's drafts,
    // whatever its own plan said; the plan check compares the plans.
    if (absl::Status s = comm_->Broadcast(depths.data(), b, DataType::kInt32, 0); !s.ok()) {
      return s;
    }
  }
  step->SetDraftDepths(std::move(depths));
  step->draft_reason = draft_plan_.reason;
  step->catch_up_tokens = draft_plan_.catch_up_tokens;
  return absl::OkStatus();
}

absl::Status Engine::PlanStep(const std::vector<Request*>& batch, const StepCaps& caps,
                              absl::Span<const double> confidences, bool depths_sent,
                              PlannedStep* step) {
  const int b = static_cast<int>(batch.size());
  PlannerInput input;
  input.confidences = confidences;
  input.max_verify_lens = caps.max_verify_lens;
  input.flags = caps.flags;
  input.confidence_ready = estimator_->ready();
  input.drafts = step->draft_passes > 0;
  input.draft_depths = step->draft_depths;
  input.draft_passes = step->draft_passes;
  input.prefill_rows = caps.prefill_rows;
  if (absl::Status s = planner_->Plan(input, &plan_); !s.ok()) return s;
  if (options_.plan_check_interval > 0 && stats_.steps % options_.plan_check_interval == 0) {
    if (absl::Status s = CheckPlanAcrossRanks(plan_, draft_plan_); !s.ok()) return s;
  }
  // Rank 0's lengths and layout go out on the host communicator even on the
  // CUDA backend: under overlap this thread plans step N+1 while the
  // executor's stream runs step N's NCCL collectives, and one NCCL
  // communicator used from two threads could order its collectives
  // differently on each rank. The layout (and under overlap the depths)
  // travels with the lengths so that every rank runs the same rows whatever
  // its own plan said.
  std::vector<int32_t> message = plan_.verify_lens;
  if (!depths_sent) message.insert(message.end(), step->draft_depths.begin(),
                                   step->draft_depths.end());
  message.push_back(plan_.packed ? 1 : 0);
  if (comm_->world_size() > 1) {
    const int words = static_cast<int>(message.size());
    if (absl::Status s = comm_->Broadcast(message.data(), words, DataType::kInt32, 0); !s.ok()) {
      return s;
    }
  }
  const bool packed = message.back() != 0;
  std::vector<int32_t> verify_lens(message.begin(), message.begin() + b);
  if (!depths_sent) {
    step->SetDraftDepths(std::vector<int32_t>(message.begin() + b, message.begin() + 2 * b));
  }
  step->batch.clear();
  for (Request* r : batch) step->batch.push_back(r->order);
  step->reason = plan_.reason;
  step->packed = packed;
  step->budget = plan_.budget;
  step->predicted_seconds = plan_.predicted_step_seconds;
  step->prefill_rows = caps.prefill_rows;
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

  // 1. The draft plan, from each request's latest drafts (a step old), on
  //    every rank; rank 0's depths are used.
  PlannedStep step;
  absl::Time plan_start = absl::Now();
  const StepCaps caps = VerifyCaps(batch);
  std::vector<double> lagged;
  if (absl::Status s = LaggedConfidences(batch, &lagged); !s.ok()) return s;
  if (absl::Status s = PlanDrafts(caps, lagged, /*broadcast=*/true, &step); !s.ok()) return s;
  step.plan_nanoseconds = absl::ToInt64Nanoseconds(absl::Now() - plan_start);

  // 2. Drafts, their distributions and confidence signals.
  step.verify_lens.assign(b, 1);
  StepJob job = NewJob(batch, step);
  StepOutcome outcome;
  if (absl::Status s = executor_->ProposeDrafts(job, &outcome); !s.ok()) return s;

  // 3. The fresh drafts' confidences and the verify plan, on every rank;
  //    rank 0's lengths are used.
  plan_start = absl::Now();
  std::vector<double> confidences(static_cast<size_t>(b) * g, 0.0);
  if (absl::Status s = estimator_->Score(outcome.signals, absl::MakeSpan(confidences)); !s.ok()) {
    return s;
  }
  if (absl::Status s = PlanStep(batch, caps, confidences, /*depths_sent=*/true, &step);
      !s.ok()) {
    return s;
  }
  step.plan_nanoseconds += absl::ToInt64Nanoseconds(absl::Now() - plan_start);
  job.verify_lens = step.verify_lens;
  job.packed = step.packed;

  // 4. The target verifies the planned rows; the fused sampler accepts.
  if (absl::Status s = executor_->Verify(job, &outcome); !s.ok()) return s;
  step.collective_nanoseconds = collective_timer_->nanoseconds() - collective_start;

  // 5. Commit, observe, finish.
  return CommitStep(step, outcome);
}

absl::Status Engine::StepOverlapped() {
  const bool plan = !running_.empty();
  if (plan) {
    std::vector<Request*> batch = RunningBatch();
    const int64_t collective_start = BeginStep();
    // This step's drafts do not exist yet (the executor proposes them when
    // it runs the step), so each request is planned, drafts and verify
    // alike, from its latest drafts whose results have reached the CPU: one
    // or two steps old.
    const absl::Time plan_start = absl::Now();
    std::vector<double> confidences;
    if (absl::Status s = LaggedConfidences(batch, &confidences); !s.ok()) return s;
    PlannedStep step;
    const StepCaps caps = VerifyCaps(batch);
    if (absl::Status s = PlanDrafts(caps, confidences, /*broadcast=*/false, &step); !s.ok()) {
      return s;
    }
    if (absl::Status s = PlanStep(batch, caps, confidences, /*depths_sent=*/false, &step);
        !s.ok()) {
      return s;
    }
    step.plan_nanoseconds = absl::ToInt64Nanoseconds(absl::Now() - plan_start);
    StepJob job = NewJob(batch, step);
    job.admitted = std::move(pending_admitted_);
    pending_admitted_.clear();
    step.collective_nanoseconds = collective_timer_->nanoseconds() - collective_start;
    executor_->Enqueue(std::move(job));
    steps_in_flight_.push_back(std::move(step));
  }
  // The previous step's tokens reach the CPU now, while the device runs the
  // step just enqueued.
  if (steps_in_flight_.size() > (plan ? 1u : 0u)) {
    const absl::Time await_start = absl::Now();
    absl::StatusOr<StepOutcome> outcome = executor_->Await();
    PlannedStep step = std::move(steps_in_flight_.front());
    steps_in_flight_.pop_front();
    if (!outcome.ok()) return outcome.status();
    step.await_nanoseconds = absl::ToInt64Nanoseconds(absl::Now() - await_start);
    return CommitStep(step, *outcome);
  }
  return absl::OkStatus();
}

}  // namespace verdict
