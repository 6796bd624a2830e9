#include "runtime/server/serving_test_util.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"

namespace verdict {

absl::StatusOr<std::vector<int32_t>> ByteTokenizer::Encode(std::string_view text,
                                                           bool add_bos) const {
  std::vector<int32_t> ids;
  if (add_bos) ids.push_back(kBos);
  for (char c : text) ids.push_back(IdOf(c));
  return ids;
}

absl::StatusOr<std::string> ByteTokenizer::Decode(absl::Span<const int32_t> ids) const {
  std::string text;
  for (int32_t id : ids) {
    if (id < 0 || id >= vocab_size()) {
      return absl::InvalidArgumentError(absl::StrCat("token id ", id, " outside the vocabulary"));
    }
    if (id >= 4) text.push_back(static_cast<char>(id - 4));
  }
  return text;
}

std::string ByteTokenizer::IdToPiece(int32_t id) const {
  static const char* const kControl[] = {"<unk>", "<s>", "</s>", "<pad>"};
  if (id < 0 || id >= vocab_size()) return "";
  if (id < 4) return kControl[id];
  return std::string(1, static_cast<char>(id - 4));
}

ScriptedGenerationService::~ScriptedGenerationService() {
  std::vector<std::thread> threads;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [id, cancelled] : cancel_flags_) cancelled = true;
    threads.swap(threads_);
  }
  for (std::thread& t : threads) t.join();
}

std::string ScriptedGenerationService::ExpectedText(int max_tokens) {
  std::string text;
  for (int i = 0; i < max_tokens; ++i) text.push_back(static_cast<char>('a' + i % 26));
  return text;
}

absl::Status ScriptedGenerationService::Submit(GenerationRequest request,
                                               GenerationCallback on_event) {
  if (unavailable_) return absl::UnavailableError("shutting down");
  std::lock_guard<std::mutex> lock(mu_);
  if (static_cast<int>(cancel_flags_.size()) >= options_.max_running) {
    return absl::ResourceExhaustedError("the request queue is full");
  }
  if (cancel_flags_.count(request.id)) {
    return absl::InvalidArgumentError(absl::StrCat("duplicate request id ", request.id));
  }
  cancel_flags_[request.id] = false;
  submitted_.push_back(request);
  threads_.emplace_back(&ScriptedGenerationService::Run, this, std::move(request),
                        std::move(on_event));
  return absl::OkStatus();
}

void ScriptedGenerationService::Cancel(const std::string& request_id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = cancel_flags_.find(request_id);
  if (it == cancel_flags_.end() || it->second) return;
  it->second = true;
  cancelled_.push_back(request_id);
  cv_.notify_all();
}

void ScriptedGenerationService::Run(GenerationRequest request, GenerationCallback on_event) {
  const SamplingParams& p = request.params;
  GenerationEvent event;
  event.request_id = request.id;
  event.usage.prompt_tokens = static_cast<int>(request.prompt_token_ids.size());
  for (int i = 0;; ++i) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait_for(lock, options_.step, [&] { return cancel_flags_[request.id]; });
      if (cancel_flags_[request.id]) {
        event.token_ids.clear();
        event.text.clear();
        event.logprobs.clear();
        event.finished = true;
        event.finish_reason = FinishReason::kCancelled;
        break;
      }
    }
    const char letter = static_cast<char>('a' + i % 26);
    const int32_t token = ByteTokenizer::IdOf(letter);
    const bool stop_token = std::find(p.stop_token_ids.begin(), p.stop_token_ids.end(), token) !=
                            p.stop_token_ids.end();
    event.token_ids = {token};
    event.text = stop_token ? "" : std::string(1, letter);
    event.logprobs.clear();
    if (p.logprobs > 0) event.logprobs = {-0.25f * static_cast<float>(i + 1)};
    event.usage.completion_tokens = i + 1;
    if (p.speculation) {
      event.usage.draft_tokens += 2;
      event.usage.accepted_tokens += 1;
      event.usage.verify_steps += 1;
    }
    if (stop_token || i + 1 >= p.max_tokens) {
      event.finished = true;
      event.finish_reason = stop_token ? FinishReason::kStop : FinishReason::kLength;
      break;
    }
    on_event(event);
  }
  on_event(event);
  std::lock_guard<std::mutex> lock(mu_);
  cancel_flags_.erase(request.id);
  cv_.notify_all();
}

int ScriptedGenerationService::running() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int>(cancel_flags_.size());
}

std::vector<GenerationRequest> ScriptedGenerationService::submitted() const {
  std::lock_guard<std::mutex> lock(mu_);
  return submitted_;
}

std::vector<std::string> ScriptedGenerationService::cancelled() const {
  std::lock_guard<std::mutex> lock(mu_);
  return cancelled_;
}

bool ScriptedGenerationService::WaitForCancel(const std::string& request_id,
                                              std::chrono::milliseconds timeout) const {
  std::unique_lock<std::mutex> lock(mu_);
  return cv_.wait_for(lock, timeout, [&] {
    return std::find(cancelled_.begin(), cancelled_.end(), request_id) != cancelled_.end();
  });
}

bool ScriptedGenerationService::WaitIdle(std::chrono::milliseconds timeout) const {
  std::unique_lock<std::mutex> lock(mu_);
  return cv_.wait_for(lock, timeout, [&] { return cancel_flags_.empty(); });
}

}  // namespace verdict
