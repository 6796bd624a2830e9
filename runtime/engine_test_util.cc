#include "runtime/engine_test_util.h"

namespace verdict {

EngineHarness::EngineHarness(Engine* engine) : engine_(engine) {
  loop_ = std::thread([this] {
    absl::Status s = engine_->Run();
    std::lock_guard<std::mutex> lock(mu_);
    run_status_ = s;
    stopped_ = true;
    cv_.notify_all();
  });
}

EngineHarness::~EngineHarness() { Stop(); }

void EngineHarness::Stop() {
  if (!loop_.joinable()) return;
  if (engine_->rank() == 0) engine_->Shutdown();
  loop_.join();
}

absl::Status EngineHarness::Submit(GenerationRequest request) {
  const std::string id = request.id;
  {
    std::lock_guard<std::mutex> lock(mu_);
    outputs_[id] = CollectedOutput();
    ++pending_;
  }
  absl::Status s = engine_->Submit(std::move(request), [this, id](const GenerationEvent& e) {
    std::lock_guard<std::mutex> lock(mu_);
    CollectedOutput& out = outputs_[id];
    ++out.events;
    out.token_ids.insert(out.token_ids.end(), e.token_ids.begin(), e.token_ids.end());
    out.logprobs.insert(out.logprobs.end(), e.logprobs.begin(), e.logprobs.end());
    out.text += e.text;
    out.usage = e.usage;
    if (e.finished) {
      ++out.finished_events;
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

void EngineHarness::WaitAll() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [this] { return pending_ == 0 || stopped_; });
}

CollectedOutput EngineHarness::output(const std::string& id) {
  std::lock_guard<std::mutex> lock(mu_);
  return outputs_[id];
}

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
      std::lock_guard<std::mutex> lock(mu_);
      outputs_[r.id] = failed;
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

}  // namespace verdict
