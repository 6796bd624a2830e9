#include "runtime/cli/generate_command.h"

#include <cstdio>
#include <thread>

#include "absl/flags/flag.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "runtime/cli/engine_flags.h"

ABSL_FLAG(std::string, prompt, "", "generate: the prompt text");
ABSL_FLAG(int, max_tokens, 64, "generate: tokens to generate at most");
ABSL_FLAG(double, temperature, 0.0, "generate: sampling temperature (0 = greedy)");
ABSL_FLAG(double, top_p, 1.0, "generate: nucleus sampling mass");
ABSL_FLAG(double, min_p, 0.0, "generate: keep tokens with p >= min_p * p_max (0 = off)");
ABSL_FLAG(int, top_k, 0, "generate: keep the k most likely tokens (0 = all)");
ABSL_FLAG(int64_t, request_seed, -1, "generate: the request's seed (-1: from --seed)");
ABSL_FLAG(bool, print_token_ids, false,
          "generate: also print the prompt's and the completion's token ids on stderr");

namespace verdict {

int RunGenerateCommand(absl::Span<char* const> positional) {
  if (!positional.empty()) {
    std::fprintf(stderr, "verdict generate: unexpected argument '%s'\n", positional[0]);
    return 2;
  }
  absl::StatusOr<EngineRuntime> rt = StartEngineFromFlags();
  if (!rt.ok()) {
    std::fprintf(stderr, "verdict generate: %s\n", rt.status().ToString().c_str());
    return 1;
  }
  Engine& engine = *rt->engine;
  absl::Status run_status;
  if (engine.rank() != 0) {
    run_status = engine.Run();
  } else {
    std::thread loop([&] { run_status = engine.Run(); });
    GenerationRequest request;
    request.id = "generate-0";
    const std::string prompt = absl::GetFlag(FLAGS_prompt);
    absl::StatusOr<std::vector<int32_t>> ids = engine.tokenizer().Encode(prompt, true);
    absl::Status submit = ids.status();
    const absl::Time start = absl::Now();
    std::mutex mu;
    std::condition_variable cv;
    bool done = false;
    GenerationEvent last;
    std::vector<int32_t> completion_ids;
    if (submit.ok()) {
      request.prompt_token_ids = *ids;
      request.params.max_tokens = absl::GetFlag(FLAGS_max_tokens);
      request.params.temperature = static_cast<float>(absl::GetFlag(FLAGS_temperature));
      request.params.top_p = static_cast<float>(absl::GetFlag(FLAGS_top_p));
      request.params.min_p = static_cast<float>(absl::GetFlag(FLAGS_min_p));
      request.params.top_k = absl::GetFlag(FLAGS_top_k);
      if (absl::GetFlag(FLAGS_request_seed) >= 0) {
        request.params.seed = static_cast<uint64_t>(absl::GetFlag(FLAGS_request_seed));
      }
      submit = engine.Submit(std::move(request), [&](const GenerationEvent& event) {
        std::fputs(event.text.c_str(), stdout);
        std::fflush(stdout);
        completion_ids.insert(completion_ids.end(), event.token_ids.begin(),
                              event.token_ids.end());
        if (event.finished) {
          std::lock_guard<std::mutex> lock(mu);
          last = event;
          done = true;
          cv.notify_all();
        }
      });
    }
    if (submit.ok()) {
      std::unique_lock<std::mutex> lock(mu);
      cv.wait(lock, [&] { return done; });
    }
    const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
    engine.Shutdown();
    loop.join();
    std::fputs("\n", stdout);
    if (!submit.ok()) {
      std::fprintf(stderr, "verdict generate: %s\n", submit.ToString().c_str());
      return 1;
    }
    if (absl::GetFlag(FLAGS_print_token_ids)) {
      std::fprintf(stderr, "prompt_token_ids=%s\ncompletion_token_ids=%s\n",
                   absl::StrJoin(*ids, ",").c_str(), absl::StrJoin(completion_ids, ",").c_str());
    }
    const EngineStats stats = engine.stats();
    const GenerationUsage& u = last.usage;
    std::fprintf(stderr,
                 "%s",
                 absl::StrFormat(
                     "finish_reason=%s prompt_tokens=%d completion_tokens=%d seconds=%.3f "
                     "tokens_per_second=%.1f steps=%d drafted=%d verified=%d accepted=%d "
                     "acceptance_rate=%.3f tokens_per_step=%.3f graph_replays=%d/%d one_shot_all_reduces=%d\n",
                     FinishReasonName(last.finish_reason), u.prompt_tokens,
                     u.completion_tokens, seconds, u.completion_tokens / seconds, stats.steps,
                     stats.drafted, stats.verified, stats.accepted,
                     stats.verified ? static_cast<double>(stats.accepted) / stats.verified : 0.0,
                     stats.steps ? static_cast<double>(stats.generated) / stats.steps : 0.0,
                     stats.target_graph_replays, stats.draft_graph_replays,
                     stats.one_shot_all_reduces)
                     .c_str());
    if (last.finish_reason == FinishReason::kError) {
      std::fprintf(stderr, "verdict generate: %s\n", last.error.c_str());
      return 1;
    }
  }
  if (!run_status.ok()) {
    std::fprintf(stderr, "verdict generate (rank %d): %s\n", engine.rank(),
                 run_status.ToString().c_str());
    return 1;
  }
  return 0;
}

}  // namespace verdict
