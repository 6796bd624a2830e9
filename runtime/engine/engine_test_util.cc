#include "runtime/engine/engine_test_util.h"

#include <algorithm>

namespace verdict {

absl::Status OutputCollector::Submit(Engine& engine, GenerationRequest request) {
  const std::string id = request.id;
  {
    std::lock_guard<std::mutex> lock(mu_);
    outputs_[id] = CollectedOutput();
    ++pending_;
  }
  absl::Status s = engine.Submit(std::move(request), [this, id, &engine](const GenerationEvent& e) {
    std::lock_guard<std::mutex> lock(mu_);
    CollectedOutput& out = outputs_[id];
    ++out.events;
    out.token_ids.insert(out.token_ids.end(), e.token_ids.begin(), e.token_ids.end());
    out.logprobs.insert(out.logprobs.end(), e.logprobs.begin(), e.logprobs.end());
    out.text += e.text;
    out.usage = e.usage;
    if (e.finished) {
      ++out.finished_events;
      out.engine_ready_at_finish = engine.ready();
      out.finish_reason = e.finish_reason;
      out.error = e.error;
      --pending_;
      cv_.notify_all();
    }
  });
  if (!s.ok()) {
    std::lock_guard<std::mutex> lock(mu_);
    --pending_;
  }
  return s;
}

bool OutputCollector::WaitAll(absl::Time deadline) {
  std::unique_lock<std::mutex> lock(mu_);
  auto done = [this] { return pending_ == 0 || abandoned_; };
  if (deadline == absl::InfiniteFuture()) {
    cv_.wait(lock, done);
    return true;
  }
  return cv_.wait_until(lock, absl::ToChronoTime(deadline), done);
}

void OutputCollector::Abandon() {
  std::lock_guard<std::mutex> lock(mu_);
  abandoned_ = true;
  cv_.notify_all();
}

CollectedOutput OutputCollector::output(const std::string& id) {
  std::lock_guard<std::mutex> lock(mu_);
  return outputs_[id];
}

void OutputCollector::set_output(const std::string& id, CollectedOutput output) {
  std::lock_guard<std::mutex> lock(mu_);
  outputs_[id] = std::move(output);
}

EngineHarness::EngineHarness(Engine* engine) : engine_(engine) {
  loop_ = std::thread([this] {
    absl::Status s = engine_->Run();
    {
      std::lock_guard<std::mutex> lock(mu_);
      run_status_ = s;
    }
    collector_.Abandon();
  });
}

EngineHarness::~EngineHarness() { Stop(); }

void EngineHarness::Stop() {
  if (!loop_.joinable()) return;
  if (engine_->rank() == 0) engine_->Shutdown();
  loop_.join();
}

absl::Status EngineHarness::Submit(GenerationRequest request) {
  return collector_.Submit(*engine_, std::move(request));
}

void EngineHarness::WaitAll() { collector_.WaitAll(); }

CollectedOutput EngineHarness::output(const std::string& id) { return collector_.output(id); }

absl::Status EngineHarness::run_status() {
  std::lock_guard<std::mutex> lock(mu_);
  return run_status_;
}

std::vector<CollectedOutput> EngineHarness::GenerateAll(
    const std::vector<GenerationRequest>& requests) {
  std::vector<CollectedOutput> outputs;
  if (engine_->rank() != 0) return outputs;
  for (const GenerationRequest& r : requests) {
    absl::Status s = Submit(r);
    if (!s.ok()) {
      CollectedOutput failed;
      failed.finish_reason = FinishReason::kError;
      failed.error = s.ToString();
      collector_.set_output(r.id, std::move(failed));
    }
  }
  WaitAll();
  for (const GenerationRequest& r : requests) outputs.push_back(output(r.id));
  return outputs;
}

GenerationRequest TextRequest(const Engine& engine, const std::string& id,
                              const std::string& prompt, int max_tokens, float temperature,
                              uint64_t seed) {
  GenerationRequest r;
  r.id = id;
  r.prompt_token_ids = *engine.tokenizer().Encode(prompt, true);
  r.params.max_tokens = max_tokens;
  r.params.temperature = temperature;
  r.params.seed = seed;
  return r;
}

std::string VerifyModeTestName(VerifyMode mode) {
  std::string name(VerifyModeName(mode));
  name.erase(std::remove(name.begin(), name.end(), '-'), name.end());
  return name;
}

std::string ModeAndOverlapTestName(const ::testing::TestParamInfo<ModeAndOverlap>& info) {
  return VerifyModeTestName(std::get<0>(info.param)) +
         (std::get<1>(info.param) ? "_overlap" : "");
}

}  // namespace verdict
