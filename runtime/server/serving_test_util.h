// Test doubles for the serving front end: a byte-level tokenizer and a
// GenerationService that produces a known token sequence on its own
// threads, with the engine's contract (ordered events, one final event,
// Cancel, a bounded queue, Unavailable while shutting down).
#ifndef VERDICT_RUNTIME_SERVER_SERVING_TEST_UTIL_H_
#define VERDICT_RUNTIME_SERVER_SERVING_TEST_UTIL_H_

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "runtime/engine/generation.h"
#include "runtime/text/tokenizer.h"

namespace verdict {

// One token per byte: id = byte + 4; ids 0..3 are <unk>, <s>, </s>, <pad>
// and decode to nothing.
class ByteTokenizer : public Tokenizer {
 public:
  static constexpr int kBos = 1;
  static constexpr int kEos = 2;
  static int32_t IdOf(char c) { return static_cast<unsigned char>(c) + 4; }

  absl::StatusOr<std::vector<int32_t>> Encode(std::string_view text, bool add_bos) const override;
  absl::StatusOr<std::string> Decode(absl::Span<const int32_t> ids) const override;
  int vocab_size() const override { return 260; }
  int bos_id() const override { return kBos; }
  int eos_id() const override { return kEos; }
  std::string IdToPiece(int32_t id) const override;
};

// Generates, for every request, the letters "abcdefghij..." (one token per
// letter, repeating after z), one token per event every `step` of time,
// until max_tokens or a stop token id. Usage counts are exact; with
// speculation each token is counted as two drafts of which one is accepted.
// Logprobs, when asked for, are -0.25 * (index + 1).
class ScriptedGenerationService : public GenerationService {
 public:
  struct Options {
    std::chrono::milliseconds step{1};
    int max_running = 1000;  // Submit beyond this is ResourceExhausted
  };

  ScriptedGenerationService() : ScriptedGenerationService(Options()) {}
  explicit ScriptedGenerationService(Options options) : options_(options) {}
  ~ScriptedGenerationService() override;

  absl::Status Submit(GenerationRequest request, GenerationCallback on_event) override;
  void Cancel(const std::string& request_id) override;

  // Submit answers Unavailable while set.
  void SetUnavailable(bool unavailable) { unavailable_ = unavailable; }

  // The expected output of max_tokens tokens.
  static std::string ExpectedText(int max_tokens);

  int running() const;
  std::vector<GenerationRequest> submitted() const;
  std::vector<std::string> cancelled() const;
  // Waits until `request_id` was cancelled; false on timeout.
  bool WaitForCancel(const std::string& request_id, std::chrono::milliseconds timeout) const;
  // Waits until no request runs; false on timeout.
  bool WaitIdle(std::chrono::milliseconds timeout) const;

 private:
  void Run(GenerationRequest request, GenerationCallback on_event);

  const Options options_;
  std::atomic<bool> unavailable_{false};
  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  std::map<std::string, bool> cancel_flags_;  // running request -> cancelled
  std::vector<GenerationRequest> submitted_;
  std::vector<std::string> cancelled_;
  std::vector<std::thread> threads_;
};

}  // namespace verdict

#endif  // VERDICT_RUNTIME_SERVER_SERVING_TEST_UTIL_H_
