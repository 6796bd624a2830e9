#include "runtime/bench/bench_load.h"

#include <algorithm>
#include <atomic>
#include <mutex>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "runtime/bench/bench_report.h"
#include "runtime/bench/scripted_socket_server.h"
#include "runtime/server/http_server.h"
#include "runtime/server/openai_api.h"
#include "runtime/server/serving_test_util.h"

namespace verdict {
namespace {

using json = nlohmann::json;
using ::testing::HasSubstr;

// Answers like a speculative engine: each step commits 1 + (step % 3)
// tokens in one event (a bonus token plus accepted drafts, 4 drafts a step),
// every `step` of time. `usage_skew` adds to the final completion count, to
// play a server whose usage disagrees with what it streamed; `stop_after`
// > 0 ends every request with a stop after that many tokens.
class SteppedService : public GenerationService {
 public:
  explicit SteppedService(std::chrono::milliseconds step, int usage_skew = 0, int stop_after = 0)
      : step_(step), usage_skew_(usage_skew), stop_after_(stop_after) {}
  ~SteppedService() override {
    std::vector<std::thread> threads;
    {
      std::lock_guard<std::mutex> lock(mu_);
      threads.swap(threads_);
    }
    for (std::thread& t : threads) t.join();
  }

  absl::Status Submit(GenerationRequest request, GenerationCallback on_event) override {
    std::lock_guard<std::mutex> lock(mu_);
    requests_.push_back(request);
    threads_.emplace_back([this, request = std::move(request), on_event] {
      const int now = ++running_;
      int peak = peak_.load();
      while (now > peak && !peak_.compare_exchange_weak(peak, now)) {
      }
      GenerationEvent event;
      event.request_id = request.id;
      event.usage.prompt_tokens = static_cast<int>(request.prompt_token_ids.size());
      int produced = 0;
      for (int step = 0; produced < request.params.max_tokens; ++step) {
        std::this_thread::sleep_for(step_);
        const int n = std::min(1 + step % 3, request.params.max_tokens - produced);
        event.token_ids.assign(static_cast<size_t>(n), ByteTokenizer::IdOf('a'));
        event.text.assign(static_cast<size_t>(n), 'a');
        event.logprobs.assign(static_cast<size_t>(n), -0.5f);
        produced += n;
        event.usage.completion_tokens = produced;
        event.usage.draft_tokens += 4;
        event.usage.accepted_tokens += n - 1;
        event.usage.verify_steps += 1;
        const bool stop = stop_after_ > 0 && produced >= stop_after_;
        if (stop || produced >= request.params.max_tokens) {
          event.usage.completion_tokens += usage_skew_;
          event.finished = true;
          event.finish_reason = stop ? FinishReason::kStop : FinishReason::kLength;
          --running_;
          on_event(event);
          break;
        }
        on_event(event);
      }
    });
    return absl::OkStatus();
  }
  void Cancel(const std::string&) override {}

  int peak() const { return peak_.load(); }
  std::vector<GenerationRequest> requests() const {
    std::lock_guard<std::mutex> lock(mu_);
    return requests_;
  }

 private:
  const std::chrono::milliseconds step_;
  const int usage_skew_;
  const int stop_after_;
  mutable std::mutex mu_;
  std::vector<std::thread> threads_;
  std::vector<GenerationRequest> requests_;
  std::atomic<int> running_{0};
  std::atomic<int> peak_{0};
};

class BenchLoadTest : public ::testing::Test {
 protected:
  BenchLoadTest() : api_(ServedModel{"tiny", 100000, 8, 1700000000}, tokenizer_, ChatTemplate()) {}

  void Start(GenerationService& service, std::string api_key = "") {
    HttpServerOptions http;
    http.port = 0;
    http.api_key = std::move(api_key);
    http.log = [](absl::string_view) {};
    server_ = std::make_unique<HttpServer>(http, api_, service);
    ASSERT_TRUE(server_->Start().ok());
    options_.target = {"127.0.0.1", server_->port(), ""};
    options_.max_tokens = 11;
    options_.seed = 100;
    options_.request_timeout = absl::Seconds(20);
  }

  void TearDown() override {
    if (server_) server_->Shutdown(absl::Seconds(1));
  }

  ByteTokenizer tokenizer_;
  OpenAiApi api_;
  std::unique_ptr<HttpServer> server_;
  LoadOptions options_;
  std::vector<BenchPrompt> prompts_ = {{"first"}, {"second"}, {"", {1, 70, 71}}};
};

TEST(CompletionRequestBodyTest, FixedLengthSeededStreamWithTokenCounts) {
  LoadOptions options;
  options.max_tokens = 32;
  options.temperature = 0;
  options.top_k = 20;
  options.seed = 7;
  options.model = "m";
  const json body = json::parse(CompletionRequestBody(options, {"", {1, 2}}, 5));
  EXPECT_EQ(body["prompt"], json({1, 2}));
  EXPECT_EQ(body["max_tokens"], 32);
  EXPECT_EQ(body["temperature"], 0.0);
  EXPECT_EQ(body["top_k"], 20);
  EXPECT_EQ(body["seed"], 12);
  EXPECT_EQ(body["ignore_eos"], true);
  EXPECT_EQ(body["stream"], true);
  EXPECT_EQ(body["stream_options"]["include_usage"], true);
  EXPECT_EQ(body["logprobs"], 0);
  EXPECT_EQ(body["model"], "m");
  options.top_k = 0;
  options.model = "";
  const json plain = json::parse(CompletionRequestBody(options, {"text"}, 0));
  EXPECT_FALSE(plain.contains("top_k"));
  EXPECT_FALSE(plain.contains("model"));
  EXPECT_EQ(plain["prompt"], "text");
}

TEST_F(BenchLoadTest, EveryRequestCompletesAndCountsAddUp) {
  SteppedService service(std::chrono::milliseconds(10));
  Start(service);
  std::vector<LoadProgress> updates;
  LoadResult result = RunLoad(
      options_, prompts_, 4, 10, [&](const LoadProgress& p) { updates.push_back(p); },
      absl::Milliseconds(5));
  ASSERT_EQ(result.records.size(), 10u);
  for (size_t i = 0; i < result.records.size(); ++i) {
    const RequestRecord& r = result.records[i];
    EXPECT_TRUE(r.ok) << r.error;
    EXPECT_EQ(r.index, static_cast<int>(i));
    EXPECT_EQ(r.prompt_index, static_cast<int>(i % 3));
    EXPECT_EQ(r.finish_reason, "length");
    EXPECT_EQ(r.completion_tokens, 11);
    EXPECT_EQ(r.streamed_tokens(), 11);
    // Steps of 1, 2, 3, 1, 2, 2 tokens: several tokens per chunk.
    EXPECT_EQ(r.chunk_tokens, (std::vector<int>{1, 2, 3, 1, 2, 2}));
    EXPECT_EQ(r.verify_steps, 6);
    EXPECT_EQ(r.draft_tokens, 24);
    EXPECT_EQ(r.accepted_tokens, 5);
    EXPECT_GT(r.ttft_s(), 0);
    EXPECT_TRUE(std::is_sorted(r.chunk_times_s.begin(), r.chunk_times_s.end()));
    EXPECT_GT(r.decode_rate(), 0);
  }
  // Seeds and prompts follow the request index.
  std::vector<GenerationRequest> sent = service.requests();
  ASSERT_EQ(sent.size(), 10u);
  std::vector<uint64_t> seeds;
  for (const GenerationRequest& g : sent) seeds.push_back(*g.params.seed);
  std::sort(seeds.begin(), seeds.end());
  EXPECT_EQ(seeds.front(), 100u);
  EXPECT_EQ(seeds.back(), 109u);
  EXPECT_TRUE(std::any_of(sent.begin(), sent.end(), [](const GenerationRequest& g) {
    return g.prompt_token_ids == std::vector<int32_t>{1, 70, 71};
  }));
  // Four clients kept four requests in flight, never more.
  EXPECT_EQ(service.peak(), 4);

  ASSERT_FALSE(updates.empty());
  EXPECT_EQ(updates.back().done, 10);
  EXPECT_EQ(updates.back().failed, 0);
  EXPECT_EQ(updates.back().tokens, 110);
  EXPECT_GT(result.duration_s, 0);

  PointSummary s = Summarize(4, result.records, result.duration_s);
  EXPECT_EQ(s.completed, 10);
  EXPECT_EQ(s.completion_tokens, 110);
  EXPECT_EQ(s.streamed_tokens, 110);
  EXPECT_NEAR(s.acceptance_length, 11.0 / 6.0, 1e-12);
  EXPECT_DOUBLE_EQ(s.verify_tokens_per_step, 5);
  EXPECT_GT(s.decode_tokens_per_s, 0);
  EXPECT_GT(s.itl_p50_ms, 0);
}

TEST_F(BenchLoadTest, UsageThatDisagreesWithTheStreamFails) {
  SteppedService service(std::chrono::milliseconds(1), /*usage_skew=*/1);
  Start(service);
  LoadResult result = RunLoad(options_, prompts_, 2, 3);
  for (const RequestRecord& r : result.records) {
    EXPECT_FALSE(r.ok);
    EXPECT_EQ(r.error, "streamed 11 tokens but usage counts 12");
  }
  EXPECT_EQ(Summarize(2, result.records, result.duration_s).failed, 3);
}

TEST_F(BenchLoadTest, OnlyFixedLengthCompletionsCount) {
  // A server that stops early (despite ignore_eos) gives requests of
  // another length than asked for, which would skew every number.
  SteppedService service(std::chrono::milliseconds(1), 0, /*stop_after=*/4);
  Start(service);
  RequestRecord early = RunRequest(options_, prompts_, 0, BenchClock::now());
  EXPECT_FALSE(early.ok);
  EXPECT_EQ(early.error, "finish_reason 'stop', expected 'length'");
  EXPECT_EQ(early.streamed_tokens(), 6);  // steps of 1, 2, 3 tokens

  options_.max_tokens = 100001;  // past the context: refused up front
  RequestRecord too_long = RunRequest(options_, prompts_, 0, BenchClock::now());
  EXPECT_FALSE(too_long.ok);
  EXPECT_THAT(too_long.error, HasSubstr("HTTP 400"));
  EXPECT_THAT(too_long.error, HasSubstr("context"));
}

// A usage count past an int (or negative, or not an integer) fails the
// request, naming the field; before, 2^32 + 11 read as 11 and a string as 0.
TEST(BenchLoadUsageTest, CountsThatDoNotFitFailTheRequest) {
  // One event with all 11 tokens, then the usage, as the server streams.
  const auto stream = [](const std::string& usage) {
    const std::string events =
        R"(data: {"choices": [{"text": "aaaaaaaaaaa", "logprobs": {"tokens": )"
        R"(["a", "a", "a", "a", "a", "a", "a", "a", "a", "a", "a"]}, "finish_reason": "length"}]})"
        "\n\n"
        R"(data: {"choices": [], "usage": )" +
        usage + "}\n\ndata: [DONE]\n\n";
    return "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: " +
           std::to_string(events.size()) + "\r\n\r\n" + events;
  };
  const std::vector<BenchPrompt> prompts = {{"first"}};
  const auto run = [&](const std::string& usage) {
    ScriptedSocketServer server(stream(usage), 1000);
    LoadOptions options;
    options.target = {"127.0.0.1", server.port(), ""};
    options.max_tokens = 11;
    options.request_timeout = absl::Seconds(20);
    return RunRequest(options, prompts, 0, BenchClock::now());
  };

  RequestRecord good =
      run(R"({"prompt_tokens": 5, "completion_tokens": 11, "speculative": {"draft_tokens": 8,)"
          R"( "accepted_tokens": 3, "verify_steps": 2}})");
  EXPECT_TRUE(good.ok) << good.error;
  EXPECT_EQ(good.completion_tokens, 11);
  EXPECT_EQ(good.draft_tokens, 8);
  EXPECT_EQ(good.verify_steps, 2);

  const struct {
    const char* usage;
    const char* error;
  } cases[] = {
      {R"({"prompt_tokens": 5, "completion_tokens": 4294967307})",
       "bad usage: usage.completion_tokens: expected an integer in [0, 2147483647], got "
       "4294967307"},
      {R"({"prompt_tokens": -1, "completion_tokens": 11})",
       "bad usage: usage.prompt_tokens: expected an integer in [0, 2147483647], got -1"},
      {R"({"prompt_tokens": 5, "completion_tokens": 11.0})",
       "bad usage: usage.completion_tokens: expected an integer in [0, 2147483647], got 11.0"},
      {R"({"prompt_tokens": "5", "completion_tokens": 11})",
       "bad usage: usage.prompt_tokens: expected an integer in [0, 2147483647], got \"5\""},
      {R"({"prompt_tokens": 5, "completion_tokens": 11,)"
       R"( "speculative": {"draft_tokens": 18446744073709551615}})",
       "bad usage: usage.speculative.draft_tokens: expected an integer in [0, 2147483647], got "
       "18446744073709551615"},
  };
  for (const auto& c : cases) {
    RequestRecord r = run(c.usage);
    EXPECT_FALSE(r.ok) << c.usage;
    EXPECT_EQ(r.error, c.error) << c.usage;
  }
}

TEST_F(BenchLoadTest, RejectedRequestsAndUnreachableServersFail) {
  SteppedService service(std::chrono::milliseconds(1));
  Start(service, "secret");
  RequestRecord r = RunRequest(options_, prompts_, 0, BenchClock::now());
  EXPECT_FALSE(r.ok);
  EXPECT_THAT(r.error, HasSubstr("HTTP 401"));
  options_.api_key = "secret";
  r = RunRequest(options_, prompts_, 0, BenchClock::now());
  EXPECT_TRUE(r.ok) << r.error;

  const int port = server_->port();
  server_->Shutdown(absl::Seconds(1));
  server_.reset();
  options_.target = {"127.0.0.1", port, ""};
  LoadResult down = RunLoad(options_, prompts_, 2, 2);
  for (const RequestRecord& d : down.records) {
    EXPECT_FALSE(d.ok);
    EXPECT_THAT(d.error, HasSubstr("cannot connect"));
  }
}

}  // namespace
}  // namespace verdict
