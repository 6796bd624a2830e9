#include "runtime/engine/step_executor.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "kernels/draft_sampler.h"
#include "kernels/verify_step.h"

namespace verdict {
namespace {

// The draft proposes with its own random numbers: a seed derived from the
// request's, so no draw is shared with the target's accept test, residual or
// bonus at the same position (sharing would correlate proposal and
// correction and bias the output).
uint64_t DraftSeed(uint64_t seed) { return seed ^ 0x9E3779B97F4A7C15ull; }

}  // namespace

StepExecutor::StepExecutor(const Options& options, ModelRunner* target, ModelRunner* draft,
                           const TimedCommunicator* model_comm)
    : options_(options), target_(target), draft_(draft), model_comm_(model_comm) {}

StepExecutor::~StepExecutor() { Stop(); }

absl::Status StepExecutor::Admit(const std::vector<ExecutorRequest>& requests) {
  // Every prompt token but the last: the last is the first row of the
  // request's first decode step.
  ForwardBatch target_batch, draft_batch;
  for (const ExecutorRequest& r : requests) {
    if (requests_.count(r.id)) {
      return absl::InternalError(absl::StrCat("request ", r.id, " is already on the device"));
    }
    if (options_.fused_prefill) continue;
    const int prompt_len = static_cast<int>(r.prompt_token_ids.size());
    if (prompt_len < 2) continue;
    ForwardRequest fr;
    fr.start_position = 0;
    fr.token_ids = absl::MakeConstSpan(r.prompt_token_ids.data(), prompt_len - 1);
    fr.num_logits = 0;
    fr.kv_handle = r.target_kv;
    target_batch.requests.push_back(fr);
    if (r.speculative && r.prefill_draft && draft_ != nullptr) {
      fr.kv_handle = r.draft_kv;
      draft_batch.requests.push_back(fr);
    }
  }
  if (!target_batch.requests.empty()) {
    const absl::Time start = absl::Now();
    if (absl::Status s = target_->Forward(target_batch, nullptr); !s.ok()) return s;
    target_prefill_nanoseconds_ += absl::ToInt64Nanoseconds(absl::Now() - start);
    for (const ForwardRequest& fr : target_batch.requests) prefill_tokens_ += fr.token_ids.size();
  }
  if (!draft_batch.requests.empty()) {
    const absl::Time start = absl::Now();
    if (absl::Status s = draft_->Forward(draft_batch, nullptr); !s.ok()) return s;
    draft_prefill_nanoseconds_ += absl::ToInt64Nanoseconds(absl::Now() - start);
  }
  for (const ExecutorRequest& r : requests) {
    DeviceRequest& d = requests_[r.id];
    d.request = r;
    d.tokens = r.prompt_token_ids;
    // Fused: nothing read yet; the step's passes catch both models up.
    d.target_valid = options_.fused_prefill ? 0 : static_cast<int64_t>(d.tokens.size()) - 1;
    d.draft_valid = r.prefill_draft ? d.target_valid : 0;
  }
  return absl::OkStatus();
}

absl::Status StepExecutor::ProposeDrafts(const StepJob& job, StepOutcome* outcome) {
  job_collective_start_ = model_comm_ != nullptr ? model_comm_->nanoseconds() : 0;
  for (int64_t id : job.released) requests_.erase(id);
  const int b = static_cast<int>(job.batch.size());
  const int g = options_.gamma;
  if (static_cast<int>(job.verify_lens.size()) != b ||
      static_cast<int>(job.draft_depths.size()) != b) {
    return absl::InternalError(absl::StrCat("step ", job.step, ": ", job.verify_lens.size(),
                                            " verify lengths and ", job.draft_depths.size(),
                                            " draft depths for ", b, " requests"));
  }
  batch_.clear();
  outcome->step = job.step;
  outcome->drafted.assign(b, 0);
  outcome->draft_depths.assign(b, 0);
  outcome->draft_passes = 0;
  outcome->stop_skipped.assign(b, 0);
  outcome->signals.assign(static_cast<size_t>(b) * g, 0.0f);
  bool any_drafts = false;
  for (int i = 0; i < b; ++i) {
    auto it = requests_.find(job.batch[i]);
    if (it == requests_.end()) {
      return absl::InternalError(
          absl::StrCat("step ", job.step, ": request ", job.batch[i], " is not on the device"));
    }
    DeviceRequest& r = it->second;
    batch_.push_back(&r);
    const int depth = std::clamp(job.draft_depths[i], 0, g);
    const bool drafts = depth > 0 && r.request.speculative && draft_ != nullptr;
    // A request that is done on the device (a stop token emitted, or its
    // length reached) is done for the CPU too once this step's predecessor
    // reaches it: its drafts could never be committed.
    const bool done = r.emitted_stop || r.generated() >= r.request.max_tokens;
    outcome->drafted[i] = drafts && !done;
    outcome->stop_skipped[i] = drafts && r.emitted_stop;
    if (outcome->drafted[i]) {
      outcome->draft_depths[i] = depth;
      outcome->draft_passes = std::max(outcome->draft_passes, depth);
    }
    any_drafts = any_drafts || outcome->drafted[i];
  }
  drafts_.assign(static_cast<size_t>(b) * g, 0);
  store_rows_.assign(b, -1);
  draft_probs_.clear();
  if (!any_drafts) return absl::OkStatus();
  if (options_.device_sampling == nullptr) {
    draft_probs_.assign(static_cast<size_t>(b) * g * options_.vocab_size, 0.0f);
  }
  const absl::Time draft_start = absl::Now();
  absl::Status status = RunDrafts(batch_, outcome);
  outcome->draft_nanoseconds = absl::ToInt64Nanoseconds(absl::Now() - draft_start);
  return status;
}

absl::Status StepExecutor::RunDrafts(const std::vector<DeviceRequest*>& batch,
                                     StepOutcome* outcome) {
  const int vocab = options_.vocab_size;
  const int g = options_.gamma;
  // Draft row s is batch entry rows[s]; the rows go deepest first, so that
  // pass j runs rows 0..active[j]-1, a prefix: each pass's inputs and
  // logits stay where the previous pass left them.
  std::vector<int> rows;
  for (size_t i = 0; i < batch.size(); ++i) {
    if (outcome->drafted[i]) rows.push_back(static_cast<int>(i));
  }
  std::stable_sort(rows.begin(), rows.end(), [&](int a, int b) {
    return outcome->draft_depths[a] > outcome->draft_depths[b];
  });
  const int n = static_cast<int>(rows.size());
  const int passes = outcome->draft_passes;
  std::vector<int> active(passes, 0);  // rows that draft at pass j
  for (int s = 0; s < n; ++s) {
    for (int j = 0; j < outcome->draft_depths[rows[s]]; ++j) ++active[j];
  }
  DeviceSampling* device = options_.device_sampling;
  std::vector<float> temperatures(n), top_ps(n), min_ps(n);
  std::vector<int32_t> top_ks(n);
  std::vector<uint64_t> seeds(n);
  std::vector<int64_t> positions(n);  // pass 0's: each row's last token
  for (int s = 0; s < n; ++s) {
    const ExecutorRequest& p = batch[rows[s]]->request;
    temperatures[s] = p.temperature;
    top_ks[s] = p.top_k;
    top_ps[s] = p.top_p;
    min_ps[s] = p.min_p;
    seeds[s] = DraftSeed(p.seed);
    positions[s] = static_cast<int64_t>(batch[rows[s]]->tokens.size()) - 1;
  }
  DraftSampleInputs in;
  in.num_rows = n;
  in.vocab_size = vocab;
  in.temperatures = temperatures.data();
  in.top_ks = top_ks.data();
  in.top_ps = top_ps.data();
  in.min_ps = min_ps.data();
  in.seeds = seeds.data();
  in.positions = positions.data();

  // Pass j's batch: pass 0 catches up on every emitted token the draft has
  // not seen (after a fully accepted step: the last draft and the bonus
  // token; after steps without drafts: all their tokens); pass j > 0 feeds
  // draft j - 1.
  const auto pass_batch = [&](int j, const int32_t* previous_drafts) {
    ForwardBatch fb;
    for (int s = 0; s < active[j]; ++s) {
      DeviceRequest& r = *batch[rows[s]];
      ForwardRequest fr;
      fr.kv_handle = r.request.draft_kv;
      fr.num_logits = 1;
      if (j == 0) {
        fr.start_position = r.draft_valid;
        fr.token_ids = absl::MakeConstSpan(r.tokens.data() + r.draft_valid,
                                           r.tokens.size() - r.draft_valid);
      } else {
        fr.start_position = positions[s] + j;
        fr.token_ids = absl::MakeConstSpan(previous_drafts + s, 1);
      }
      fb.requests.push_back(fr);
    }
    return fb;
  };

  std::vector<int32_t> tokens(static_cast<size_t>(passes) * n);  // [pass][row]
  std::vector<float> signals(static_cast<size_t>(passes) * n);
  if (device != nullptr) {
    // On the device: each pass's tokens feed the next pass where the sampler
    // wrote them, and a whole draft (TP 1, or --draft-tp 1) waits for
    // nothing until the last pass (a sharded draft at TP > 1 takes the
    // collectives' timed wait after every pass). The draft's store row s
    // holds batch entry rows[s]. A pass over fewer rows than the first
    // leaves the other rows' logits as the pass before wrote them: the
    // sampler draws from those, and the draws past a row's depth are never
    // read.
    void* queue = draft_->device_queue();
    if (queue == nullptr) return absl::InternalError("device sampling needs a device draft model");
    absl::StatusOr<float*> logits = device->DraftLogits(n);
    if (!logits.ok()) return logits.status();
    for (int s = 0; s < n; ++s) store_rows_[rows[s]] = s;
    if (absl::Status st = device->BeginDrafts(in, queue); !st.ok()) return st;
    const std::vector<int32_t> placeholders(n, 0);  // ids the device overwrites
    for (int j = 0; j < passes; ++j) {
      ForwardBatch fb = pass_batch(j, placeholders.data());
      if (j > 0) fb.device_token_ids = device->DraftTokens(j - 1);
      fb.wait = j == passes - 1;
      if (absl::Status st = draft_->Forward(fb, *logits); !st.ok()) return st;
      if (absl::Status st = device->SampleDraft(j); !st.ok()) return st;
    }
    if (absl::Status st = device->FinishDrafts(passes, tokens.data(), signals.data()); !st.ok()) {
      return st;
    }
  } else {
    std::vector<float> host_logits(static_cast<size_t>(n) * vocab);
    std::vector<float> step_probs(static_cast<size_t>(n) * vocab);
    std::vector<int64_t> pass_positions(n);
    in.logits = host_logits.data();
    in.positions = pass_positions.data();
    for (int j = 0; j < passes; ++j) {
      const int32_t* previous = j > 0 ? tokens.data() + static_cast<size_t>(j - 1) * n : nullptr;
      if (absl::Status st = draft_->Forward(pass_batch(j, previous), host_logits.data());
          !st.ok()) {
        return st;
      }
      in.num_rows = active[j];
      for (int s = 0; s < active[j]; ++s) pass_positions[s] = positions[s] + j;
      DraftSampleOutputs out{tokens.data() + static_cast<size_t>(j) * n, step_probs.data(),
                             signals.data() + static_cast<size_t>(j) * n};
      if (absl::Status st = DraftSampleCpu(in, &out); !st.ok()) return st;
      for (int s = 0; s < active[j]; ++s) {
        const int64_t slot = static_cast<int64_t>(rows[s]) * g + j;
        std::copy_n(step_probs.data() + static_cast<int64_t>(s) * vocab, vocab,
                    draft_probs_.data() + slot * vocab);
      }
    }
  }
  for (int s = 0; s < n; ++s) {
    const int depth = outcome->draft_depths[rows[s]];
    for (int j = 0; j < depth; ++j) {
      const int64_t slot = static_cast<int64_t>(rows[s]) * g + j;
      drafts_[slot] = tokens[static_cast<size_t>(j) * n + s];
      outcome->signals[slot] = signals[static_cast<size_t>(j) * n + s];
    }
    DeviceRequest& r = *batch[rows[s]];
    // Written through the input of draft depth - 1; trimmed after the verify.
    r.draft_valid = static_cast<int64_t>(r.tokens.size()) - 1 + depth;
  }
  return absl::OkStatus();
}

absl::Status StepExecutor::Verify(const StepJob& job, StepOutcome* outcome) {
  const int b = static_cast<int>(batch_.size());
  const int g = options_.gamma;
  const int vocab = options_.vocab_size;
  // The target verifies: the full block of every drafting request, or in a
  // packed step (StepJob::packed: compact mode, below the full block) only
  // the planned rows.
  std::vector<int32_t> ftp(b), seqlen(b), catch_up(b), sampler_cutoff(b), top_ks(b),
      stop_offsets(b + 1, 0);
  std::vector<int64_t> positions(b);
  std::vector<float> temperatures(b), top_ps(b), min_ps(b);
  std::vector<uint64_t> seeds(b);
  std::vector<int32_t> verify_tokens, verify_drafts, stop_ids;
  std::vector<float> verify_probs;
  outcome->verify_lens.assign(b, 1);
  int32_t total_q = 0;
  for (int i = 0; i < b; ++i) {
    DeviceRequest& r = *batch_[i];
    const ExecutorRequest& p = r.request;
    const bool drafted = outcome->drafted[i];
    // The plan was made from the CPU's view, which may be a step behind:
    // cap it with what the device knows (the tokens left, the draft cap).
    const int draft_cap = p.max_draft_tokens >= 0 ? std::min(g, p.max_draft_tokens) : g;
    const int64_t left = p.max_tokens - r.generated();
    const int32_t cap =
        static_cast<int32_t>(std::max<int64_t>(1, std::min<int64_t>(draft_cap + 1, left)));
    const int depth = outcome->draft_depths[i];
    const int32_t verify_len =
        drafted ? std::clamp<int32_t>(job.verify_lens[i], 1, std::min(cap, depth + 1)) : 1;
    outcome->verify_lens[i] = verify_len;
    const int64_t last = static_cast<int64_t>(r.tokens.size()) - 1;
    // The uniform layout verifies every proposed draft (the sampler's cutoff
    // stops acceptance at the verify length); a packed step only its rows.
    const int rows = !drafted ? 1 : (job.packed ? verify_len : depth + 1);
    ftp[i] = total_q;
    seqlen[i] = rows;
    total_q += rows;
    // A prompt the target has not read (fused_prefill) goes ahead of the
    // verify rows, in the same forward: logits for the verify rows only.
    catch_up[i] = static_cast<int32_t>(last - r.target_valid);
    prefill_tokens_ += catch_up[i];
    verify_tokens.insert(verify_tokens.end(), r.tokens.begin() + r.target_valid,
                         r.tokens.begin() + last);
    sampler_cutoff[i] = verify_len - 1;
    positions[i] = last;
    temperatures[i] = p.temperature;
    top_ks[i] = p.top_k;
    top_ps[i] = p.top_p;
    min_ps[i] = p.min_p;
    seeds[i] = p.seed;
    // The sampler flags a request whose emitted tokens hold one of these
    // (emitted_stop_token), so the step after it drafts nothing for it.
    stop_ids.insert(stop_ids.end(), p.stop_token_ids.begin(), p.stop_token_ids.end());
    stop_offsets[i + 1] = static_cast<int32_t>(stop_ids.size());
    verify_tokens.push_back(r.tokens.back());
    for (int k = 0; k + 1 < rows; ++k) {
      const int64_t slot = static_cast<int64_t>(i) * g + k;
      verify_tokens.push_back(drafts_[slot]);
      verify_drafts.push_back(drafts_[slot]);
      if (options_.device_sampling == nullptr) {
        verify_probs.insert(verify_probs.end(), draft_probs_.begin() + slot * vocab,
                            draft_probs_.begin() + (slot + 1) * vocab);
      }
    }
  }
  ForwardBatch fb;
  int32_t offset = 0;
  for (int i = 0; i < b; ++i) {
    ForwardRequest fr;
    fr.kv_handle = batch_[i]->request.target_kv;
    fr.start_position = positions[i] - catch_up[i];
    fr.token_ids = absl::MakeConstSpan(verify_tokens.data() + offset, catch_up[i] + seqlen[i]);
    fr.num_logits = seqlen[i];
    fb.requests.push_back(fr);
    offset += catch_up[i] + seqlen[i];
  }
  DeviceSampling* device = options_.device_sampling;
  std::vector<float> host_logits;
  float* logits = nullptr;
  if (device != nullptr) {
    absl::StatusOr<float*> d = device->VerifyLogits(total_q);
    if (!d.ok()) return d.status();
    logits = *d;
  } else {
    host_logits.resize(static_cast<size_t>(total_q) * vocab);
    logits = host_logits.data();
  }
  // Metrics: the measured verify time (target forward + sampler), what the
  // cost table predicts.
  const absl::Time verify_start = absl::Now();
  if (absl::Status s = target_->Forward(fb, logits); !s.ok()) return s;

  // The fused sampler: acceptance, residual or bonus, accepted prefix.
  VerifyInputs in;
  in.num_requests = b;
  in.total_q = total_q;
  in.vocab_size = vocab;
  in.logits = logits;
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
  in.min_ps = min_ps.data();
  in.seeds = seeds.data();
  in.stop_token_offsets = stop_offsets.data();
  in.stop_token_ids = stop_ids.data();
  in.config = options_.sampler;
  in.config.nextn = g;
  HostVerifyOutputs sampled_step(in);
  if (device != nullptr) {
    if (absl::Status s = device->Verify(in, store_rows_, &sampled_step); !s.ok()) return s;
  } else {
    VerifyOutputs out = sampled_step.View();
    if (absl::Status s = VerifySampleCpu(in, &out); !s.ok()) return s;
  }
  outcome->verify_nanoseconds = absl::ToInt64Nanoseconds(absl::Now() - verify_start);
  outcome->verify_tokens = total_q;

  // The device's own bookkeeping: the next step starts from here, whether
  // or not the CPU has seen these tokens yet.
  outcome->accepted.assign(b, 0);
  outcome->emitted_stop.assign(b, 0);
  outcome->token_offsets.assign(b + 1, 0);
  outcome->tokens.clear();
  outcome->logprobs.clear();
  for (int i = 0; i < b; ++i) {
    DeviceRequest& r = *batch_[i];
    const int accepted = sampled_step.last_valid_offset[i];
    const int64_t n_before = static_cast<int64_t>(r.tokens.size());
    for (int k = 0; k < accepted; ++k) {
      outcome->tokens.push_back(sampled_step.verified_token_ids[ftp[i] + k]);
      outcome->logprobs.push_back(sampled_step.token_logprobs[ftp[i] + k]);
    }
    outcome->tokens.push_back(sampled_step.sampled_token_ids[i]);
    outcome->logprobs.push_back(sampled_step.token_logprobs[ftp[i] + accepted]);
    outcome->token_offsets[i + 1] = static_cast<int32_t>(outcome->tokens.size());
    outcome->accepted[i] = accepted;
    outcome->emitted_stop[i] = sampled_step.emitted_stop_token[i];
    // Draft entries past the accepted prefix are stale; re-fed next step.
    if (outcome->drafted[i]) {
      r.draft_valid = n_before + std::min(accepted, outcome->draft_depths[i] - 1);
    }
    r.target_valid = n_before + accepted;
    r.tokens.insert(r.tokens.end(), outcome->tokens.begin() + outcome->token_offsets[i],
                    outcome->tokens.end());
    r.emitted_stop = sampled_step.emitted_stop_token[i] != 0;
  }
  outcome->collective_nanoseconds =
      model_comm_ != nullptr ? model_comm_->nanoseconds() - job_collective_start_ : 0;
  outcome->prefill_tokens = std::exchange(prefill_tokens_, 0);
  outcome->target_prefill_nanoseconds = std::exchange(target_prefill_nanoseconds_, 0);
  outcome->draft_prefill_nanoseconds = std::exchange(draft_prefill_nanoseconds_, 0);
  return absl::OkStatus();
}

absl::StatusOr<StepOutcome> StepExecutor::Execute(const StepJob& job) {
  if (!job.admitted.empty()) {
    if (absl::Status s = Admit(job.admitted); !s.ok()) return s;
  }
  StepOutcome outcome;
  if (absl::Status s = ProposeDrafts(job, &outcome); !s.ok()) return s;
  if (absl::Status s = Verify(job, &outcome); !s.ok()) return s;
  return outcome;
}

// ------------------------------------------------------------ the worker

void StepExecutor::Start() {
  std::lock_guard<std::mutex> lock(mu_);
  if (worker_.joinable()) return;
  stopping_ = false;
  worker_ = std::thread([this] { WorkerLoop(); });
}

void StepExecutor::Enqueue(StepJob job) {
  std::lock_guard<std::mutex> lock(mu_);
  ++in_flight_;
  queued_.push_back(std::move(job));
  cv_.notify_all();
}

void StepExecutor::WorkerLoop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    cv_.wait(lock, [this] { return stopping_ || !queued_.empty(); });
    if (stopping_) return;
    StepJob job = std::move(queued_.front());
    queued_.pop_front();
    const absl::Status failure = failure_;
    lock.unlock();
    absl::StatusOr<StepOutcome> outcome = failure.ok() ? Execute(job) : failure;
    lock.lock();
    if (!outcome.ok() && failure_.ok()) failure_ = outcome.status();
    done_.push_back(std::move(outcome));
    cv_.notify_all();
  }
}

absl::StatusOr<StepOutcome> StepExecutor::Await() {
  std::unique_lock<std::mutex> lock(mu_);
  if (in_flight_ == 0) return absl::InternalError("step executor: no step in flight");
  cv_.wait(lock, [this] { return !done_.empty() || stopping_; });
  if (done_.empty()) return absl::CancelledError("step executor: stopped");
  absl::StatusOr<StepOutcome> outcome = std::move(done_.front());
  done_.pop_front();
  --in_flight_;
  return outcome;
}

int64_t StepExecutor::in_flight() const {
  std::lock_guard<std::mutex> lock(mu_);
  return in_flight_;
}

void StepExecutor::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
    cv_.notify_all();
  }
  if (worker_.joinable()) worker_.join();
  std::lock_guard<std::mutex> lock(mu_);
  queued_.clear();
  done_.clear();
  in_flight_ = 0;
}

}  // namespace verdict
