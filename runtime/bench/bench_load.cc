#include "runtime/bench/bench_load.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "runtime/base/json_number.h"

namespace verdict {
namespace {

using json = nlohmann::json;

double SecondsBetween(BenchClock::time_point from, BenchClock::time_point to) {
  return std::chrono::duration<double>(to - from).count();
}

// The message of an OpenAI error object, or the text itself.
std::string ErrorMessage(const std::string& body) {
  const json doc = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (doc.is_object() && doc.contains("error") && doc["error"].is_object() &&
      doc["error"].contains("message") && doc["error"]["message"].is_string()) {
    return doc["error"]["message"].get<std::string>();
  }
  return body.substr(0, 200);
}

// A count of the usage object into *out: 0 when absent or null (a server
// that does not count something leaves it out), otherwise an integer that
// fits the record's int. A count such as 2^32 + 5 must not read as 5, nor
// a string as 0: the request fails, naming the field.
absl::Status ReadCount(const json& object, const char* key, absl::string_view prefix, int* out) {
  auto it = object.find(key);
  if (it == object.end() || it->is_null()) {
    *out = 0;
    return absl::OkStatus();
  }
  absl::StatusOr<int> count = JsonIntegerAs<int>(*it, absl::StrCat(prefix, key), 0);
  if (!count.ok()) return count.status();
  *out = *count;
  return absl::OkStatus();
}

// Reads one event of the stream into the record; returns false, with the
// record's error set, on an error event or a bad usage count.
bool ReadEvent(const json& event, double at_s, RequestRecord* r) {
  if (event.contains("error")) {
    r->error = absl::StrCat("error event: ", ErrorMessage(event.dump()));
    return false;
  }
  auto choices = event.find("choices");
  if (choices != event.end() && choices->is_array() && !choices->empty()) {
    const json& choice = (*choices)[0];
    int tokens = 0;
    if (auto lp = choice.find("logprobs"); lp != choice.end() && lp->is_object()) {
      if (auto t = lp->find("tokens"); t != lp->end() && t->is_array()) {
        tokens = static_cast<int>(t->size());
      }
    }
    if (tokens > 0) {
      r->chunk_times_s.push_back(at_s);
      r->chunk_tokens.push_back(tokens);
    }
    if (auto f = choice.find("finish_reason"); f != choice.end() && f->is_string()) {
      r->finish_reason = f->get<std::string>();
    }
  }
  if (auto u = event.find("usage"); u != event.end() && u->is_object()) {
    r->has_usage = true;
    absl::Status s = ReadCount(*u, "prompt_tokens", "usage.", &r->prompt_tokens);
    if (s.ok()) s = ReadCount(*u, "completion_tokens", "usage.", &r->completion_tokens);
    if (auto spec = u->find("speculative"); s.ok() && spec != u->end() && spec->is_object()) {
      const char* prefix = "usage.speculative.";
      s = ReadCount(*spec, "draft_tokens", prefix, &r->draft_tokens);
      if (s.ok()) s = ReadCount(*spec, "accepted_tokens", prefix, &r->accepted_tokens);
      if (s.ok()) s = ReadCount(*spec, "verify_steps", prefix, &r->verify_steps);
      // Servers before the draft plan do not send it.
      if (s.ok() && spec->contains("plain_steps")) {
        s = ReadCount(*spec, "plain_steps", prefix, &r->plain_steps);
      }
    }
    if (!s.ok()) {
      r->error = absl::StrCat("bad usage: ", s.message());
      return false;
    }
  }
  return true;
}

// Why a finished stream is not the complete answer asked for; "" if it is.
std::string CheckComplete(const RequestRecord& r, bool done, int max_tokens) {
  if (!done) return "the stream ended without [DONE]";
  if (!r.has_usage) return "no usage in the stream";
  if (r.finish_reason != "length") {
    return absl::StrCat("finish_reason '", r.finish_reason, "', expected 'length'");
  }
  if (r.streamed_tokens() != r.completion_tokens) {
    return absl::StrCat("streamed ", r.streamed_tokens(), " tokens but usage counts ",
                        r.completion_tokens);
  }
  if (r.completion_tokens != max_tokens) {
    return absl::StrCat(r.completion_tokens, " completion tokens, asked for ", max_tokens);
  }
  return "";
}

}  // namespace

std::string CompletionRequestBody(const LoadOptions& options, const BenchPrompt& prompt,
                                  int index) {
  json body = {
      {"prompt", prompt.ToJson()},
      {"max_tokens", options.max_tokens},
      {"temperature", options.temperature},
      {"top_p", options.top_p},
      {"seed", options.seed + static_cast<uint64_t>(index)},
      {"ignore_eos", true},
      {"stream", true},
      {"stream_options", {{"include_usage", true}}},
      {"logprobs", 0},
  };
  if (options.top_k > 0) body["top_k"] = options.top_k;
  if (options.min_p > 0) body["min_p"] = options.min_p;
  if (!options.model.empty()) body["model"] = options.model;
  return body.dump();
}

RequestRecord RunRequest(const LoadOptions& options, const std::vector<BenchPrompt>& prompts,
                         int index, BenchClock::time_point point_start) {
  RequestRecord r;
  r.index = index;
  r.prompt_index = index % static_cast<int>(prompts.size());
  HttpRequestSpec spec;
  spec.method = "POST";
  spec.path = "/v1/completions";
  spec.body = CompletionRequestBody(options, prompts[r.prompt_index], index);
  spec.timeout = options.request_timeout;
  if (!options.api_key.empty())
    spec.headers.push_back({"Authorization", "Bearer " + options.api_key});

  int status = 0;
  bool done = false, failed = false;
  std::string error_body;
  SseParser sse;
  const BenchClock::time_point sent = BenchClock::now();
  r.start_s = SecondsBetween(point_start, sent);
  HttpResponseHandler handler;
  handler.on_head = [&](const HttpResponseHead& head) { status = head.status; };
  handler.on_body = [&](absl::string_view piece, BenchClock::time_point at) {
    if (status != 200) {
      error_body.append(piece.data(), piece.size());
      return true;
    }
    for (const std::string& data : sse.Feed(piece)) {
      if (data == "[DONE]") {
        done = true;
        continue;
      }
      const json event = json::parse(data, nullptr, /*allow_exceptions=*/false);
      if (event.is_discarded() || !event.is_object()) {
        r.error = absl::StrCat("not a JSON event: ", data.substr(0, 120));
        failed = true;
        return false;
      }
      if (!ReadEvent(event, SecondsBetween(sent, at), &r)) {
        failed = true;
        return false;
      }
    }
    return true;
  };
  absl::Status s = SendHttpRequest(options.target, spec, handler);
  r.end_s = SecondsBetween(point_start, BenchClock::now());
  if (failed) return r;
  if (!s.ok()) {
    r.error = std::string(s.message());
  } else if (status != 200) {
    r.error = absl::StrCat("HTTP ", status, ": ", ErrorMessage(error_body));
  } else {
    r.error = CheckComplete(r, done, options.max_tokens);
    r.ok = r.error.empty();
  }
  return r;
}

LoadResult RunLoad(const LoadOptions& options, const std::vector<BenchPrompt>& prompts,
                   int concurrency, int num_requests,
                   const std::function<void(const LoadProgress&)>& on_progress,
                   absl::Duration progress_interval) {
  LoadResult result;
  result.records.resize(static_cast<size_t>(std::max(num_requests, 0)));
  std::atomic<int> next{0};
  std::mutex mu;
  std::condition_variable cv;
  LoadProgress progress;
  progress.total = num_requests;
  int clients_left = std::min(concurrency, num_requests);
  const BenchClock::time_point start = BenchClock::now();

  std::vector<std::thread> clients;
  for (int c = 0; c < std::min(concurrency, num_requests); ++c) {
    clients.emplace_back([&] {
      for (int i = next++; i < num_requests; i = next++) {
        RequestRecord record = RunRequest(options, prompts, i, start);
        std::lock_guard<std::mutex> lock(mu);
        ++progress.done;
        if (!record.ok) ++progress.failed;
        progress.tokens += record.streamed_tokens();
        result.records[static_cast<size_t>(i)] = std::move(record);
      }
      std::lock_guard<std::mutex> lock(mu);
      if (--clients_left == 0) cv.notify_all();
    });
  }
  const auto interval =
      std::chrono::milliseconds(std::max<int64_t>(1, absl::ToInt64Milliseconds(progress_interval)));
  {
    std::unique_lock<std::mutex> lock(mu);
    while (!cv.wait_for(lock, interval, [&] { return clients_left == 0; })) {
      if (on_progress) {
        LoadProgress now = progress;
        now.elapsed_s = SecondsBetween(start, BenchClock::now());
        lock.unlock();
        on_progress(now);
        lock.lock();
      }
    }
  }
  for (std::thread& t : clients) t.join();
  double first = 0, last = 0;
  for (size_t i = 0; i < result.records.size(); ++i) {
    const RequestRecord& r = result.records[i];
    first = i == 0 ? r.start_s : std::min(first, r.start_s);
    last = std::max(last, r.end_s);
  }
  result.duration_s = last - first;
  if (on_progress) {
    progress.elapsed_s = SecondsBetween(start, BenchClock::now());
    on_progress(progress);
  }
  return result;
}

}  // namespace verdict
