// Test support: runs an Engine's loop on a thread and collects the outputs
// of submitted requests.
#ifndef VERDICT_RUNTIME_ENGINE_ENGINE_TEST_UTIL_H_
#define VERDICT_RUNTIME_ENGINE_ENGINE_TEST_UTIL_H_

#include <condition_variable>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "runtime/engine/engine.h"

namespace verdict {

struct CollectedOutput {
  std::vector<int32_t> token_ids;
  std::string text;
  std::vector<float> logprobs;
  FinishReason finish_reason = FinishReason::kNone;
  std::string error;
  GenerationUsage usage;
  int events = 0;
  int finished_events = 0;
  // Engine::ready() when the finishing event arrived: a request the failed
  // loop ends must find the engine already not ready, so that /health says
  // so before the client sees the error.
  bool engine_ready_at_finish = true;
};

// Collects the events of submitted requests, one CollectedOutput each.
class OutputCollector {
 public:
  // Rank 0: submits `request` with a callback that records its events.
  absl::Status Submit(Engine& engine, GenerationRequest request);
  // Until every submitted request finished, Abandon() was called, or
  // `deadline`; false at the deadline.
  bool WaitAll(absl::Time deadline = absl::InfiniteFuture());
  // No more events will come (the loop has ended): wakes the waiters.
  void Abandon();
  CollectedOutput output(const std::string& id);
  void set_output(const std::string& id, CollectedOutput output);

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, CollectedOutput> outputs_;
  int pending_ = 0;
  bool abandoned_ = false;
};

class EngineHarness {
 public:
  // Starts engine->Run() on a thread (every rank must run one).
  explicit EngineHarness(Engine* engine);
  // Shuts the engine down and joins the loop.
  ~EngineHarness();
  // The same, earlier: the engine's counters are final afterwards. Every
  // rank calls it; idempotent.
  void Stop();

  // Rank 0: submits and returns immediately.
  absl::Status Submit(GenerationRequest request);
  // Rank 0: waits until every submitted request finished.
  void WaitAll();
  CollectedOutput output(const std::string& id);
  absl::Status run_status();

  // Submits `requests` together and waits for all; rank 0 returns the
  // outputs in request order, other ranks an empty vector.
  std::vector<CollectedOutput> GenerateAll(const std::vector<GenerationRequest>& requests);

 private:
  Engine* engine_;
  OutputCollector collector_;
  std::thread loop_;
  std::mutex mu_;
  absl::Status run_status_;
};

// Openings of the bundled models' corpus, for tests that decode many
// requests at once.
inline constexpr const char* kBundledPrompts[] = {
    "It is a truth universally acknowledged",
    "Mr. Darcy was",
    "Call me Ishmael.",
    "In the beginning God created",
    "She could not help",
    "The carriage stopped at the door, and",
    "My dear Miss Bennet,",
    "Upon my word,",
    "The whale",
    "And it came to pass",
    "Elizabeth",
    "\"You are mistaken,\" said he,",
    "It was a dark",
    "The Martians",
    "Captain Nemo",
    "Pip",
};

// A request for the bundled models' tokenizer from prompt text.
GenerationRequest TextRequest(const Engine& engine, const std::string& id,
                              const std::string& prompt, int max_tokens, float temperature,
                              uint64_t seed);

// Test names of parameterised tests: a verify mode without its dash
// ("capaccept"), with "_overlap" when overlap scheduling is on (BUILD files
// select the tests by these names).
std::string VerifyModeTestName(VerifyMode mode);
using ModeAndOverlap = std::tuple<VerifyMode, bool>;
std::string ModeAndOverlapTestName(const ::testing::TestParamInfo<ModeAndOverlap>& info);

}  // namespace verdict

#endif  // VERDICT_RUNTIME_ENGINE_ENGINE_TEST_UTIL_H_
