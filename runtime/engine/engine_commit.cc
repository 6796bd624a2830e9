// The engine's commit: a finished step's tokens into each request (stop
// checks, streaming, finishing), freeing retired KV, and the step's metrics.
#include <algorithm>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "runtime/engine/engine.h"
#include "runtime/engine/engine_request.h"
#include "scheduler/cost_table.h"

namespace verdict {
namespace {

FinishReason ToFinishReason(StopReason reason) {
  return reason == StopReason::kLength ? FinishReason::kLength : FinishReason::kStop;
}

}  // namespace

absl::Status Engine::CommitStep(const PlannedStep& step, const StepOutcome& outcome) {
  // The executor is done with this step's job: caches of requests that no
  // later job names go back.
  completed_step_ = outcome.step;
  FreeRetiredKv();
  const int b = static_cast<int>(step.batch.size());
  const int g = gamma_;
  // Metrics: the drafts' confidences as the estimator scores them before it
  // folds this step (with overlap off, the ones the plan used); a step
  // without drafts has none to score.
  std::vector<double> confidences;
  if (metrics_ != nullptr && outcome.draft_passes > 0) {
    confidences.assign(static_cast<size_t>(b) * g, 0.0);
    if (absl::Status s = estimator_->Score(outcome.signals, absl::MakeSpan(confidences));
        !s.ok()) {
      return s;
    }
  }
  std::vector<VerifyObservation> observations;
  std::vector<Request*> finished;
  std::vector<uint8_t> committed(b, 0);
  int plain_rows = 0;  // committed speculative requests that drafted nothing
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
      const int depth = outcome.draft_depths[i];
      r->usage.draft_tokens += depth;
      r->usage.accepted_tokens += accepted;
      ++r->usage.verify_steps;
      {
        std::lock_guard<std::mutex> lock(mu_);
        stats_.drafted += depth;
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
      // The positions this step drafted take its signals; deeper ones keep
      // what an earlier step saw there (a request that drafts less deep
      // keeps its evidence that deeper drafts do not pay).
      if (r->lagged_signals.empty()) {
        r->lagged_signals.assign(g, std::numeric_limits<float>::quiet_NaN());
      }
      std::copy_n(signals.begin(), depth, r->lagged_signals.begin());
      r->catch_up_tokens = 0;
    } else if (r->speculative) {
      ++r->usage.plain_steps;
      ++plain_rows;
      r->catch_up_tokens += static_cast<int32_t>(tokens.size());
    }
    if (Commit(*r, tokens, logprobs)) finished.push_back(r);
  }
  // Metrics: this rank's running figures (every rank; sent with the plan
  // check), then rank 0's report of the step. Under overlap the models'
  // collectives run on the executor's communicator, timed apart.
  const int64_t step_collective_ns = step.collective_nanoseconds + outcome.collective_nanoseconds;
  verify_nanoseconds_ += outcome.verify_nanoseconds;
  step_collective_nanoseconds_ += step_collective_ns;
  const int drafting = static_cast<int>(
      std::count(outcome.drafted.begin(), outcome.drafted.end(), uint8_t{1}));
  if (metrics_ != nullptr) {
    RecordStepMetrics(step, outcome, committed, confidences, drafting, plain_rows,
                      step_collective_ns * 1e-9);
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    stats_.draft_passes += outcome.draft_passes;
    if (outcome.draft_passes == 0) ++stats_.plain_steps;
  }
  if (step_observer_) {
    StepTiming timing;
    timing.step = outcome.step;
    timing.batch_size = b;
    timing.verify_tokens = outcome.verify_tokens;
    timing.budget = step.budget;
    timing.plan_reason = step.reason;
    timing.pinned_budget_fraction = step.pinned_budget_fraction;
    timing.draft_passes = outcome.draft_passes;
    timing.draft_reason = step.draft_reason;
    timing.drafting_requests = drafting;
    timing.catch_up_tokens = step.catch_up_tokens;
    timing.draft_seconds = outcome.draft_nanoseconds * 1e-9;
    timing.verify_seconds = outcome.verify_nanoseconds * 1e-9;
    timing.prefill_tokens = outcome.prefill_tokens;
    timing.priced_prefill_rows = step.prefill_rows;
    timing.target_prefill_seconds = outcome.target_prefill_nanoseconds * 1e-9;
    timing.draft_prefill_seconds = outcome.draft_prefill_nanoseconds * 1e-9;
    timing.predicted_seconds = step.predicted_seconds;
    timing.plan_seconds = step.plan_nanoseconds * 1e-9;
    timing.await_seconds = step.await_nanoseconds * 1e-9;
    timing.committed_at = absl::Now();
    step_observer_(timing);
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
  for (DraftReason reason : {DraftReason::kPlanned, DraftReason::kNoDraftSplit,
                             DraftReason::kConfidencePrior, DraftReason::kOperatorLimit,
                             DraftReason::kEmptyBatch, DraftReason::kPinnedDepth}) {
    info.draft_reasons.emplace_back(DraftReasonName(reason));
  }
  metrics_->Configure(info);
}

void Engine::RecordStepMetrics(const PlannedStep& step, const StepOutcome& outcome,
                               const std::vector<uint8_t>& committed,
                               const std::vector<double>& confidences, int drafting,
                               int plain_rows, double collective_seconds) {
  const int g = gamma_;
  std::vector<DraftOutcome> drafts;
  for (size_t i = 0; i < step.batch.size(); ++i) {
    if (!committed[i] || !outcome.drafted[i]) continue;
    const int verified = outcome.verify_lens[i] - 1;
    const int accepted = outcome.accepted[i];
    drafts.push_back(DraftOutcome{outcome.draft_depths[i], verified, accepted});
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
  record.draft_reason = DraftReasonName(step.draft_reason);
  record.draft_passes = outcome.draft_passes;
  record.plain_rows = plain_rows;
  record.drafting_requests = drafting;
  record.planned_budget = step.budget;
  record.full_block_drafts = 0;
  for (const DraftOutcome& d : drafts) record.full_block_drafts += d.proposed;
  record.verify_tokens = outcome.verify_tokens;
  record.draft_seconds = outcome.draft_nanoseconds * 1e-9;
  record.verify_seconds = outcome.verify_nanoseconds * 1e-9;
  record.predicted_seconds = step.predicted_seconds;
  record.collective_seconds = collective_seconds;
  record.drafts = drafts;
  metrics_->RecordStep(record);
  metrics_->RecordGraphReplays(target_model_.runner->graph_replays(),
                               draft_model_ ? draft_model_->runner->graph_replays() : 0);
  for (const ModelRunner::EagerReason reason : ModelRunner::kEagerReasons) {
    const char* name = ModelRunner::EagerReasonName(reason);
    metrics_->RecordEagerPasses("target", name, target_model_.runner->eager_passes(reason));
    if (draft_model_) {
      metrics_->RecordEagerPasses("draft", name, draft_model_->runner->eager_passes(reason));
    }
  }
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
  // What the detokenizer still holds (a byte run, a partial character, a
  // long run it decodes only now and then) is part of the text, as in a
  // whole decode of the tokens.
  if (absl::StatusOr<std::string> rest = r.detokenizer->Finish(); rest.ok()) {
    r.stop->AppendFinalText(*rest);
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
  if (!r.callback || finished) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = callbacks_.find(r.req.id);
    if (it == callbacks_.end()) return;
    if (!r.callback) r.callback = it->second;
    if (finished) {
      callbacks_.erase(it);
      --in_flight_;
    }
  }
  if (!event.token_ids.empty() || !event.text.empty() || finished) {
    delivery_.Queue(finished ? std::move(r.callback) : r.callback, std::move(event));
  }
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
