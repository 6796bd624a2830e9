#include "runtime/server/http_server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "runtime/server/serving_test_util.h"

namespace verdict {
namespace {

using json = nlohmann::json;
using ::testing::Contains;
using ::testing::HasSubstr;
using ::testing::SizeIs;

// A minimal HTTP/1.1 client over a raw socket, so the tests control exactly
// what is sent and when the connection closes.
struct HttpResponse {
  int status = 0;
  std::map<std::string, std::string> headers;  // lower-case names
  std::string body;                            // de-chunked
};

class HttpConnection {
 public:
  // `from`: the client's own address (any loopback address; 0: the
  // kernel's choice).
  explicit HttpConnection(int port, uint32_t from = 0) {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    timeval timeout = {20, 0};
    setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
    if (from != 0) {
      sockaddr_in local = {};
      local.sin_family = AF_INET;
      local.sin_addr.s_addr = htonl(from);
      bind(fd_, reinterpret_cast<sockaddr*>(&local), sizeof(local));
    }
    sockaddr_in addr = {};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    connected_ = connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  }
  ~HttpConnection() { Close(); }

  bool connected() const { return connected_; }
  void Close() {
    if (fd_ >= 0) close(fd_);
    fd_ = -1;
  }
  // Ends the sending side; the answer can still be read.
  void CloseWrite() { shutdown(fd_, SHUT_WR); }

  bool Send(absl::string_view data) {
    while (!data.empty()) {
      ssize_t n = send(fd_, data.data(), data.size(), MSG_NOSIGNAL);
      if (n <= 0) return false;
      data.remove_prefix(static_cast<size_t>(n));
    }
    return true;
  }

  bool SendRequest(absl::string_view method, absl::string_view path, absl::string_view body,
                   absl::string_view extra_headers = "", bool close = false) {
    return Send(absl::StrCat(method, " ", path, " HTTP/1.1\r\nHost: localhost\r\n",
                             "Content-Type: application/json\r\nContent-Length: ", body.size(),
                             "\r\n", close ? "Connection: close\r\n" : "", extra_headers, "\r\n",
                             body));
  }

  // Reads until `marker` is in the unread data; false on EOF or timeout.
  bool ReadUntil(absl::string_view marker) {
    while (!absl::StrContains(buffer_, marker)) {
      if (!Fill()) return false;
    }
    return true;
  }
  const std::string& buffer() const { return buffer_; }

  // Whether the server has sent something (or closed) within `timeout`.
  bool AnswerWithin(absl::Duration timeout) {
    if (!buffer_.empty()) return true;
    pollfd p = {fd_, POLLIN, 0};
    return poll(&p, 1, static_cast<int>(absl::ToInt64Milliseconds(timeout))) > 0;
  }

  // One whole response (Content-Length, chunked, or up to EOF).
  HttpResponse ReadResponse() {
    HttpResponse r;
    if (!ReadUntil("\r\n\r\n")) return r;
    size_t head_end = buffer_.find("\r\n\r\n");
    std::vector<std::string> lines = absl::StrSplit(buffer_.substr(0, head_end), "\r\n");
    buffer_.erase(0, head_end + 4);
    std::vector<std::string> status_line = absl::StrSplit(lines[0], ' ');
    if (status_line.size() < 2 || !absl::SimpleAtoi(status_line[1], &r.status)) return r;
    for (size_t i = 1; i < lines.size(); ++i) {
      size_t colon = lines[i].find(':');
      if (colon == std::string::npos) continue;
      r.headers[absl::AsciiStrToLower(lines[i].substr(0, colon))] =
          std::string(absl::StripAsciiWhitespace(lines[i].substr(colon + 1)));
    }
    if (r.headers["transfer-encoding"] == "chunked") {
      for (;;) {
        if (!ReadUntil("\r\n")) return r;
        size_t eol = buffer_.find("\r\n");
        size_t size = 0;
        absl::SimpleHexAtoi(buffer_.substr(0, eol), &size);
        while (buffer_.size() < eol + 2 + size + 2) {
          if (!Fill()) return r;
        }
        r.body += buffer_.substr(eol + 2, size);
        buffer_.erase(0, eol + 2 + size + 2);
        if (size == 0) return r;
      }
    }
    if (r.headers.count("content-length")) {
      size_t length = 0;
      absl::SimpleAtoi(r.headers["content-length"], &length);
      while (buffer_.size() < length) {
        if (!Fill()) break;
      }
      r.body = buffer_.substr(0, length);
      buffer_.erase(0, std::min(length, buffer_.size()));
      return r;
    }
    while (Fill()) {
    }
    r.body = buffer_;
    buffer_.clear();
    return r;
  }

 private:
  bool Fill() {
    char buf[4096];
    ssize_t n = recv(fd_, buf, sizeof(buf), 0);
    if (n <= 0) return false;
    buffer_.append(buf, static_cast<size_t>(n));
    return true;
  }

  int fd_ = -1;
  bool connected_ = false;
  std::string buffer_;
};

HttpResponse Fetch(int port, absl::string_view method, absl::string_view path,
                   absl::string_view body = "", absl::string_view extra_headers = "") {
  HttpConnection c(port);
  if (!c.connected() || !c.SendRequest(method, path, body, extra_headers, /*close=*/true)) {
    return {};
  }
  return c.ReadResponse();
}

json JsonOf(const HttpResponse& r) { return json::parse(r.body, nullptr, false); }

// The data payloads of an SSE body.
std::vector<std::string> SseData(const std::string& body) {
  std::vector<std::string> data;
  for (absl::string_view frame : absl::StrSplit(body, "\n\n", absl::SkipEmpty())) {
    if (absl::StartsWith(frame, "data: ")) data.emplace_back(frame.substr(6));
  }
  return data;
}

// The text of a completion or chat response, streamed or not.
std::string TextOf(const HttpResponse& r, bool chat, bool stream) {
  if (!stream) {
    json j = JsonOf(r);
    return chat ? j["choices"][0]["message"]["content"].get<std::string>()
                : j["choices"][0]["text"].get<std::string>();
  }
  std::string text;
  for (const std::string& d : SseData(r.body)) {
    if (d == "[DONE]") continue;
    json chunk = json::parse(d);
    if (chunk["choices"].empty()) continue;
    const json& choice = chunk["choices"][0];
    if (chat) {
      if (choice["delta"].contains("content")) text += choice["delta"]["content"].get<std::string>();
    } else {
      text += choice["text"].get<std::string>();
    }
  }
  return text;
}

std::string CompletionBody(int max_tokens, bool stream = false, absl::string_view extra = "") {
  return absl::StrCat(R"({"model": "tiny", "prompt": "Once upon", "max_tokens": )", max_tokens,
                      R"(, "stream": )", stream ? "true" : "false", extra, "}");
}

std::string ChatBody(int max_tokens, bool stream = false, absl::string_view extra = "") {
  return absl::StrCat(
      R"({"model": "tiny", "messages": [{"role": "user", "content": "Hello"}], "max_tokens": )",
      max_tokens, R"(, "stream": )", stream ? "true" : "false", extra, "}");
}

class HttpServerTest : public ::testing::Test {
 protected:
  HttpServerTest() : api_(ServedModel{"tiny", 100000, 8, 1700000000}, tokenizer_, ChatTemplate()) {}

  // Starts a server on a free port with `service`.
  void StartServer(GenerationService& service, HttpServerOptions options = {}) {
    options.port = 0;
    options.log = [this](absl::string_view line) {
      absl::MutexLock lock(&log_mu_);
      log_.emplace_back(line);
    };
    server_ = std::make_unique<HttpServer>(options, api_, service, [this] { return ready_.load(); });
    ASSERT_TRUE(server_->Start().ok());
    port_ = server_->port();
    ASSERT_GT(port_, 0);
  }

  // Handlers finish just after their last write, so a client may see its
  // answer a moment before the server stops counting the request.
  bool WaitNoneInFlight() {
    for (int i = 0; i < 250 && server_->in_flight() > 0; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return server_->in_flight() == 0;
  }

  std::vector<std::string> log() {
    absl::MutexLock lock(&log_mu_);
    return log_;
  }

  bool Healthy() {
    HttpResponse health = Fetch(port_, "GET", "/health");
    HttpResponse done = Fetch(port_, "POST", "/v1/completions", CompletionBody(3));
    return health.status == 200 && done.status == 200 && TextOf(done, false, false) == "abc";
  }

  // Drips a request head on `c`, one byte every 100 ms, until an answer
  // comes: under a head deadline of 600 ms it must be the deadline's 408
  // (a JSON error, Connection: close) before the head was whole, after
  // 550 ms to 2 s; then the connection closes and the server still serves.
  void ExpectDrippedHeadCutOff(HttpConnection& c) {
    // One byte every 100 ms: each read is quick, the head as a whole is not.
    const std::string head = "GET /v1/models HTTP/1.1\r\nHost: localhost\r\nX-Padding: " +
                             std::string(100, 'x') + "\r\n\r\n";
    const absl::Time start = absl::Now();
    size_t sent = 0;
    while (sent < head.size() && !c.AnswerWithin(absl::Milliseconds(100))) {
      if (!c.Send(head.substr(sent++, 1))) break;
    }
    const absl::Duration answered_after = absl::Now() - start;
    RecordProperty("answered_after_ms", static_cast<int>(absl::ToInt64Milliseconds(answered_after)));
    RecordProperty("bytes_sent", static_cast<int>(sent));
    HttpResponse r = c.ReadResponse();
    EXPECT_EQ(r.status, 408) << r.body;
    EXPECT_EQ(r.headers["connection"], "close");
    EXPECT_TRUE(JsonOf(r)["error"]["message"].is_string()) << r.body;
    EXPECT_LT(sent, head.size());
    EXPECT_GE(answered_after, absl::Milliseconds(550));
    EXPECT_LT(answered_after, absl::Seconds(2));
    EXPECT_EQ(c.ReadResponse().status, 0);
    EXPECT_TRUE(Healthy());
  }

  // Sends a completion's head, then its body one byte every 100 ms, on `c`
  // (the server's body timeout 600 ms): each read is quick, the body as a
  // whole is not. Expects the 408 with a JSON error within seconds, nothing
  // more submitted than `submitted_before`, and the server still healthy.
  void ExpectDrippedBodyCutOff(HttpConnection& c, size_t submitted_before) {
    const std::string body = CompletionBody(2);
    ASSERT_TRUE(c.Send(absl::StrCat("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: ",
                                    body.size(), "\r\n\r\n")));
    const absl::Time start = absl::Now();
    for (size_t i = 0; i < 12 && i < body.size(); ++i) {
      c.Send(body.substr(i, 1));
      absl::SleepFor(absl::Milliseconds(100));
    }
    HttpResponse r = c.ReadResponse();
    EXPECT_EQ(r.status, 408) << r.body;
    EXPECT_TRUE(JsonOf(r)["error"]["message"].is_string()) << r.body;
    EXPECT_LT(absl::Now() - start, absl::Seconds(5));
    EXPECT_EQ(service_.submitted().size(), submitted_before);
    EXPECT_TRUE(Healthy());
  }

  // A service configured by the test itself. Members are declared before
  // server_ so that the server stops before any service goes away.
  template <typename Service, typename... Args>
  Service& MakeService(Args&&... args) {
    auto service = std::make_unique<Service>(std::forward<Args>(args)...);
    Service& ref = *service;
    own_service_ = std::move(service);
    return ref;
  }

  ByteTokenizer tokenizer_;
  OpenAiApi api_;
  ScriptedGenerationService service_;
  std::unique_ptr<GenerationService> own_service_;
  std::atomic<bool> ready_{true};
  absl::Mutex log_mu_;
  std::vector<std::string> log_;
  std::unique_ptr<HttpServer> server_;
  int port_ = 0;
};

TEST_F(HttpServerTest, HealthReadyAndModels) {
  StartServer(service_);
  HttpResponse health = Fetch(port_, "GET", "/health");
  EXPECT_EQ(health.status, 200);
  EXPECT_EQ(JsonOf(health)["status"], "ok");
  EXPECT_EQ(Fetch(port_, "GET", "/ready").status, 200);
  ready_ = false;
  HttpResponse not_ready = Fetch(port_, "GET", "/ready");
  EXPECT_EQ(not_ready.status, 503);
  EXPECT_EQ(Fetch(port_, "GET", "/health").status, 200);
  ready_ = true;

  HttpResponse models = Fetch(port_, "GET", "/v1/models");
  ASSERT_EQ(models.status, 200);
  EXPECT_EQ(models.headers["content-type"], "application/json");
  EXPECT_EQ(JsonOf(models)["data"][0]["id"], "tiny");
  EXPECT_EQ(JsonOf(Fetch(port_, "GET", "/v1/models/tiny"))["id"], "tiny");
  HttpResponse missing = Fetch(port_, "GET", "/v1/models/other");
  EXPECT_EQ(missing.status, 404);
  EXPECT_EQ(JsonOf(missing)["error"]["code"], "model_not_found");
}

TEST_F(HttpServerTest, HealthIsUnhealthyOnceTheProcessCannotServe) {
  std::atomic<bool> alive{true};
  HttpServerOptions options;
  options.alive = [&alive] { return alive.load(); };
  StartServer(service_, options);
  EXPECT_EQ(Fetch(port_, "GET", "/health").status, 200);
  alive = false;
  HttpResponse health = Fetch(port_, "GET", "/health");
  EXPECT_EQ(health.status, 503);
  EXPECT_EQ(JsonOf(health)["status"], "unhealthy");
}

TEST_F(HttpServerTest, Completion) {
  StartServer(service_);
  HttpResponse r = Fetch(port_, "POST", "/v1/completions",
                         CompletionBody(5, false, R"(, "seed": 7, "temperature": 0.5)"));
  ASSERT_EQ(r.status, 200) << r.body;
  json j = JsonOf(r);
  EXPECT_EQ(j["object"], "text_completion");
  EXPECT_EQ(j["model"], "tiny");
  EXPECT_EQ(j["choices"][0]["text"], "abcde");
  EXPECT_EQ(j["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(j["usage"]["prompt_tokens"], 10);  // BOS + "Once upon"
  EXPECT_EQ(j["usage"]["completion_tokens"], 5);
  EXPECT_EQ(j["usage"]["total_tokens"], 15);
  EXPECT_EQ(j["usage"]["speculative"]["draft_tokens"], 10);
  EXPECT_EQ(j["usage"]["speculative"]["accepted_tokens"], 5);
  EXPECT_EQ(r.headers["x-request-id"], j["id"].get<std::string>());
  EXPECT_TRUE(absl::StartsWith(j["id"].get<std::string>(), "cmpl-"));

  std::vector<GenerationRequest> submitted = service_.submitted();
  ASSERT_THAT(submitted, SizeIs(1));
  EXPECT_EQ(submitted[0].id, j["id"]);
  EXPECT_EQ(submitted[0].params.seed, 7u);
  EXPECT_EQ(submitted[0].params.temperature, 0.5f);
  EXPECT_EQ(submitted[0].params.max_tokens, 5);
}

TEST_F(HttpServerTest, ChatAndStopTokenFinish) {
  StartServer(service_);
  HttpResponse r = Fetch(port_, "POST", "/v1/chat/completions", ChatBody(4));
  ASSERT_EQ(r.status, 200) << r.body;
  json j = JsonOf(r);
  EXPECT_EQ(j["object"], "chat.completion");
  EXPECT_TRUE(absl::StartsWith(j["id"].get<std::string>(), "chatcmpl-"));
  EXPECT_EQ(j["choices"][0]["message"]["role"], "assistant");
  EXPECT_EQ(j["choices"][0]["message"]["content"], "abcd");
  // "c" is a stop token: generation ends there with finish_reason "stop".
  std::string body = absl::StrCat(R"({"prompt": "x", "max_tokens": 10, "stop_token_ids": [)",
                                  ByteTokenizer::IdOf('c'), "]}");
  json stopped = JsonOf(Fetch(port_, "POST", "/v1/completions", body));
  EXPECT_EQ(stopped["choices"][0]["text"], "ab");
  EXPECT_EQ(stopped["choices"][0]["finish_reason"], "stop");
}

TEST_F(HttpServerTest, StreamingCompletionAndChat) {
  StartServer(service_);
  HttpResponse r = Fetch(port_, "POST", "/v1/completions",
                         CompletionBody(6, true, R"(, "stream_options": {"include_usage": true})"));
  ASSERT_EQ(r.status, 200);
  EXPECT_EQ(r.headers["content-type"], "text/event-stream");
  EXPECT_EQ(r.headers["transfer-encoding"], "chunked");
  std::vector<std::string> data = SseData(r.body);
  ASSERT_GE(data.size(), 3u);
  EXPECT_EQ(data.back(), "[DONE]");
  EXPECT_EQ(TextOf(r, false, true), "abcdef");
  json usage = json::parse(data[data.size() - 2]);
  EXPECT_EQ(usage["usage"]["completion_tokens"], 6);
  json finish = json::parse(data[data.size() - 3]);
  EXPECT_EQ(finish["choices"][0]["finish_reason"], "length");

  HttpResponse chat = Fetch(port_, "POST", "/v1/chat/completions", ChatBody(3, true));
  ASSERT_EQ(chat.status, 200);
  std::vector<std::string> chat_data = SseData(chat.body);
  EXPECT_EQ(json::parse(chat_data[0])["choices"][0]["delta"]["role"], "assistant");
  EXPECT_EQ(chat_data.back(), "[DONE]");
  EXPECT_EQ(TextOf(chat, true, true), "abc");
}

TEST_F(HttpServerTest, KeepAliveServesSeveralRequestsOnOneConnection) {
  StartServer(service_);
  HttpConnection c(port_);
  ASSERT_TRUE(c.connected());
  for (int i = 1; i <= 3; ++i) {
    ASSERT_TRUE(c.SendRequest("POST", "/v1/completions", CompletionBody(i, i == 2)));
    HttpResponse r = c.ReadResponse();
    ASSERT_EQ(r.status, 200);
    EXPECT_EQ(TextOf(r, false, i == 2), ScriptedGenerationService::ExpectedText(i));
  }
  ASSERT_TRUE(c.SendRequest("GET", "/health", ""));
  EXPECT_EQ(c.ReadResponse().status, 200);
}

struct Malformed {
  std::string method;
  std::string path;
  std::string body;
  int status;
  std::string param;  // "" when the error names no field
};

// A body nested 200,000 levels deep in chat_template_kwargs (well within
// the body limit) crashed the server on civetweb's 100 KiB worker stack; it
// is a 400 now, on every endpoint, and the server keeps serving.
TEST_F(HttpServerTest, ADeeplyNestedBodyIs400AndTheServerKeepsServing) {
  StartServer(service_);
  const int depth = 200000;
  const std::string deep = std::string(depth, '[') + std::string(depth, ']');
  const std::string chat = R"({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2, )"
                           R"("chat_template_kwargs": {"x": )" + deep + "}}";
  for (const char* path : {"/v1/chat/completions", "/tokenize"}) {
    const HttpResponse r = Fetch(port_, "POST", path, chat);
    EXPECT_EQ(r.status, 400) << path;
    EXPECT_THAT(r.body, HasSubstr("deeper than")) << path;
  }
  EXPECT_EQ(Fetch(port_, "POST", "/v1/completions", CompletionBody(5)).status, 200);
  EXPECT_EQ(Fetch(port_, "GET", "/health").status, 200);
}

TEST_F(HttpServerTest, MalformedRequestsGet4xxAndTheServerKeepsServing) {
  HttpServerOptions options;
  options.max_body_bytes = 4096;
  StartServer(service_, options);
  const std::string msg = R"("messages": [{"role": "user", "content": "hi"}])";
  const std::vector<Malformed> cases = {
      {"POST", "/v1/completions", "", 400, ""},
      {"POST", "/v1/completions", "{\"prompt\": ", 400, ""},
      {"POST", "/v1/completions", "\xff\xfe", 400, ""},
      {"POST", "/v1/completions", "[]", 400, ""},
      {"POST", "/v1/completions", "null", 400, ""},
      {"POST", "/v1/completions", R"({"prompt": "x", "model": "gpt-3.5"})", 404, "model"},
      {"POST", "/v1/completions", R"({"max_tokens": 3})", 400, "prompt"},
      {"POST", "/v1/completions", R"({"prompt": {"a": 1}})", 400, "prompt"},
      {"POST", "/v1/completions", R"({"prompt": [1, 2, 99999]})", 400, "prompt[2]"},
      {"POST", "/v1/completions", R"({"prompt": "x", "max_tokens": -1})", 400, "max_tokens"},
      {"POST", "/v1/completions", R"({"prompt": "x", "max_tokens": 100000})", 400, "max_tokens"},
      {"POST", "/v1/completions", R"({"prompt": "x", "max_tokens": 1e3})", 400, "max_tokens"},
      {"POST", "/v1/completions", R"({"prompt": "x", "temperature": 3})", 400, "temperature"},
      {"POST", "/v1/completions", R"({"prompt": "x", "temperature": "0"})", 400, "temperature"},
      {"POST", "/v1/completions", R"({"prompt": "x", "top_p": 0.0})", 400, "top_p"},
      {"POST", "/v1/completions", R"({"prompt": "x", "top_p": 2})", 400, "top_p"},
      {"POST", "/v1/completions", R"({"prompt": "x", "min_p": 2})", 400, "min_p"},
      {"POST", "/v1/completions", R"({"prompt": "x", "top_k": -5})", 400, "top_k"},
      {"POST", "/v1/completions", R"({"prompt": "x", "top_k": 1.5})", 400, "top_k"},
      {"POST", "/v1/completions", R"({"prompt": "x", "seed": "abc"})", 400, "seed"},
      {"POST", "/v1/completions", R"({"prompt": "x", "stop": {"a": 1}})", 400, "stop"},
      {"POST", "/v1/completions", R"({"prompt": "x", "stop": [null]})", 400, "stop[0]"},
      {"POST", "/v1/completions", R"({"prompt": "x", "stop_token_ids": ["a"]})", 400,
       "stop_token_ids[0]"},
      {"POST", "/v1/completions", R"({"prompt": "x", "stream": 1})", 400, "stream"},
      {"POST", "/v1/completions", R"({"prompt": "x", "logprobs": 10})", 400, "logprobs"},
      {"POST", "/v1/completions", R"({"prompt": "x", "n": 4})", 400, "n"},
      {"POST", "/v1/completions", R"({"prompt": "x", "best_of": 2})", 400, "best_of"},
      {"POST", "/v1/completions", R"({"prompt": "x", "echo": true})", 400, "echo"},
      {"POST", "/v1/completions", R"({"prompt": "x", "presence_penalty": 1})", 400,
       "presence_penalty"},
      {"POST", "/v1/completions", R"({"prompt": "x", "logit_bias": {"1": 1}})", 400, "logit_bias"},
      {"POST", "/v1/completions", R"({"prompt": "x", "speculation": "off"})", 400, "speculation"},
      {"POST", "/v1/completions", R"({"prompt": "x", "max_draft_tokens": 100})", 400,
       "max_draft_tokens"},
      {"POST", "/v1/chat/completions", R"({"messages": {}})", 400, "messages"},
      {"POST", "/v1/chat/completions", R"({"messages": [{"role": "robot", "content": "x"}]})", 400,
       "messages[0].role"},
      {"POST", "/v1/chat/completions", "{" + msg + R"(, "tools": [{"type": "function"}]})", 400,
       "tools"},
      {"POST", "/v1/chat/completions", "{" + msg + R"(, "top_logprobs": 3})", 400, "top_logprobs"},
      {"POST", "/v1/completions", "{\"prompt\": \"" + std::string(5000, 'x') + "\"}", 413, "body"},
      {"POST", "/tokenize", "{", 400, ""},
      {"POST", "/tokenize", R"({"prompt": 3})", 400, "prompt"},
      {"POST", "/tokenize", "{" + msg + R"(, "chat_template_kwargs": "x"})", 400,
       "chat_template_kwargs"},
      {"POST", "/tokenize", "{" + msg + R"(, "add_generation_prompt": true, "continue_final_message": true})",
       400, "continue_final_message"},
      {"POST", "/tokenize", R"({"prompt": "x", "temprature": 1})", 400, "temprature"},
      {"POST", "/detokenize", R"({"tokens": [1, 2, 260]})", 400, "tokens[2]"},
      {"POST", "/detokenize", R"({"tokens": 7})", 400, "tokens"},
      {"POST", "/v1/chat/completions", "{" + msg + R"(, "continue_final_message": 1})", 400,
       "continue_final_message"},
      {"GET", "/tokenize", "", 405, ""},
      {"GET", "/detokenize", "", 405, ""},
      {"GET", "/v1/completions", "", 405, ""},
      {"DELETE", "/v1/models", "", 405, ""},
      {"POST", "/health", "", 405, ""},
      {"GET", "/v2/nothing", "", 404, ""},
      {"GET", "/v1/nothing", "", 404, ""},
  };
  ASSERT_GE(cases.size(), 30u);
  for (const Malformed& c : cases) {
    SCOPED_TRACE(c.method + " " + c.path + " " + c.body.substr(0, 80));
    HttpResponse r = Fetch(port_, c.method, c.path, c.body);
    EXPECT_EQ(r.status, c.status) << r.body;
    EXPECT_EQ(r.headers["content-type"], "application/json");
    json j = JsonOf(r);
    ASSERT_TRUE(j.is_object()) << r.body;
    ASSERT_TRUE(j.contains("error")) << r.body;
    EXPECT_FALSE(j["error"]["message"].get<std::string>().empty());
    if (c.param.empty()) {
      EXPECT_TRUE(j["error"]["param"].is_null()) << r.body;
    } else {
      EXPECT_EQ(j["error"]["param"], c.param) << r.body;
      EXPECT_THAT(j["error"]["message"].get<std::string>(),
                  HasSubstr(c.param == "body" ? "limit" : c.param));
    }
  }
  EXPECT_TRUE(service_.submitted().empty());
  EXPECT_TRUE(Healthy());
}

TEST_F(HttpServerTest, ErrorsCivetwebAnswersItselfAreJson) {
  StartServer(service_);
  for (const char* request : {"GARBAGE\r\n\r\n", "GET /health HTTP/9.9\r\n\r\n"}) {
    HttpConnection c(port_);
    ASSERT_TRUE(c.connected());
    ASSERT_TRUE(c.Send(request));
    HttpResponse r = c.ReadResponse();
    EXPECT_GE(r.status, 400) << request;
    EXPECT_LT(r.status, 600) << request;
    EXPECT_EQ(r.headers["content-type"], "application/json") << request << r.body;
    json body = json::parse(r.body, nullptr, /*allow_exceptions=*/false);
    ASSERT_TRUE(body.is_object()) << request << ": " << r.body;
    EXPECT_TRUE(body["error"]["message"].is_string()) << r.body;
  }
  EXPECT_TRUE(Healthy());
}

TEST_F(HttpServerTest, ADrippedBodyIsCutOffAtTheBodyTimeout) {
  HttpServerOptions options;
  options.body_timeout = absl::Milliseconds(600);
  StartServer(service_, options);
  HttpConnection c(port_);
  ASSERT_TRUE(c.connected());
  ExpectDrippedBodyCutOff(c, 0);
}

TEST_F(HttpServerTest, ADrippedHeadIsCutOffAtTheHeadTimeout) {
  HttpServerOptions options;
  options.head_timeout = absl::Milliseconds(600);
  StartServer(service_, options);
  HttpConnection c(port_);
  ASSERT_TRUE(c.connected());
  ExpectDrippedHeadCutOff(c);
}

// Once every request of a kept-alive connection is answered, the listener
// reads the next head itself, under the same deadline as the first one
// (from the moment the connection went idle), and answers the same 408.
// Before, the head went to civetweb as it came, whose keep-alive timeout
// (0.5 s) cut it with a 400.
TEST_F(HttpServerTest, ADrippedHeadOnAKeptAliveConnectionIsCutOffToo) {
  HttpServerOptions options;
  options.head_timeout = absl::Milliseconds(600);
  options.max_connections_per_client = 1;
  StartServer(service_, options);
  HttpConnection c(port_);
  ASSERT_TRUE(c.SendRequest("GET", "/v1/models", ""));
  ASSERT_EQ(c.ReadResponse().status, 200);
  // The connection then no longer counts against the cap of 1.
  ExpectDrippedHeadCutOff(c);
}

// A later head that comes in pieces, past civetweb's keep-alive timeout
// (0.5 s, which drops civetweb's end of the idle connection) but within
// the head deadline, is served (on a fresh connection to civetweb).
TEST_F(HttpServerTest, ALaterHeadInPiecesWithinTheDeadlineIsServed) {
  HttpServerOptions options;
  options.head_timeout = absl::Seconds(5);
  StartServer(service_, options);
  HttpConnection c(port_);
  ASSERT_TRUE(c.SendRequest("POST", "/v1/completions", CompletionBody(1)));
  ASSERT_EQ(c.ReadResponse().status, 200);
  const std::string body = CompletionBody(2);
  const std::string request =
      absl::StrCat("POST /v1/completions HTTP/1.1\r\nHost: localhost\r\nContent-Length: ",
                   body.size(), "\r\n\r\n", body);
  for (size_t i = 0; i < 8; ++i) {
    ASSERT_TRUE(c.Send(request.substr(i, 1)));
    absl::SleepFor(absl::Milliseconds(100));
  }
  ASSERT_TRUE(c.Send(request.substr(8)));
  HttpResponse r = c.ReadResponse();
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(TextOf(r, false, false), ScriptedGenerationService::ExpectedText(2));
  // And the connection stays kept alive.
  ASSERT_TRUE(c.SendRequest("GET", "/v1/models", ""));
  EXPECT_EQ(c.ReadResponse().status, 200);
}

// The body deadline holds for every request of a connection: civetweb's
// handler arms it for each body it reads.
TEST_F(HttpServerTest, ADrippedBodyOnAKeptAliveConnectionIsCutOffToo) {
  HttpServerOptions options;
  options.body_timeout = absl::Milliseconds(600);
  StartServer(service_, options);
  HttpConnection c(port_);
  ASSERT_TRUE(c.SendRequest("POST", "/v1/completions", CompletionBody(1)));
  ASSERT_EQ(c.ReadResponse().status, 200);
  ExpectDrippedBodyCutOff(c, 1);
}

// A connection from `from` that has had one probe answered and stays
// open (kept alive), so it counts against the caps until it closes.
std::unique_ptr<HttpConnection> HeldConnection(int port, uint32_t from = 0) {
  auto c = std::make_unique<HttpConnection>(port, from);
  if (!c->connected() || !c->Send("GET /health HTTP/1.1\r\nHost: x\r\n\r\n") ||
      c->ReadResponse().status != 200) {
    return nullptr;
  }
  return c;
}

TEST_F(HttpServerTest, AnIdleKeptAliveProbeConnectionIsClosedWithoutAnAnswer) {
  HttpServerOptions options;
  options.head_timeout = absl::Milliseconds(300);
  StartServer(service_, options);
  std::unique_ptr<HttpConnection> c = HeldConnection(port_);
  ASSERT_NE(c, nullptr);
  const absl::Time start = absl::Now();
  ASSERT_TRUE(c->AnswerWithin(absl::Seconds(5)));
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(250));
  // Closed, with no unasked-for 408 that a next request would take for
  // its answer.
  HttpResponse r = c->ReadResponse();
  EXPECT_EQ(r.status, 0) << r.body;
  EXPECT_TRUE(c->buffer().empty()) << c->buffer();
}

// The answer to a fresh connection's first probe from `from`.
HttpResponse ProbeFrom(int port, uint32_t from = 0) {
  HttpConnection c(port, from);
  if (!c.connected() || !c.Send("GET /health HTTP/1.1\r\nHost: x\r\n\r\n")) return {};
  return c.ReadResponse();
}

TEST_F(HttpServerTest, ConnectionsPastThePerClientCapAre429UntilOneCloses) {
  HttpServerOptions options;
  options.max_connections_per_client = 3;
  options.max_connections = 0;
  StartServer(service_, options);
  std::vector<std::unique_ptr<HttpConnection>> held;
  for (int i = 0; i < 3; ++i) {
    held.push_back(HeldConnection(port_));
    ASSERT_NE(held.back(), nullptr) << i;
  }
  const absl::Time start = absl::Now();
  HttpResponse refused = ProbeFrom(port_);
  RecordProperty("refused_after_us",
                 static_cast<int>(absl::ToInt64Microseconds(absl::Now() - start)));
  EXPECT_LT(absl::Now() - start, absl::Seconds(1));
  EXPECT_EQ(refused.status, 429) << refused.body;
  EXPECT_EQ(refused.headers["retry-after"], "1");
  EXPECT_EQ(refused.headers["content-type"], "application/json");
  EXPECT_THAT(JsonOf(refused)["error"]["message"].get<std::string>(), HasSubstr("at most 3"));
  // Another address has a count of its own.
  EXPECT_EQ(ProbeFrom(port_, 0x7f000002).status, 200);  // 127.0.0.2
  // Once one closes, a new connection is admitted, and the cap holds again.
  held.pop_back();
  int status = 0;
  for (int i = 0; i < 100 && status != 200; ++i) {
    HttpResponse r = ProbeFrom(port_);
    status = r.status;
    if (status != 200) {
      EXPECT_EQ(status, 429);
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
  EXPECT_EQ(status, 200);
  held.push_back(HeldConnection(port_));
  ASSERT_NE(held.back(), nullptr);
  EXPECT_EQ(ProbeFrom(port_).status, 429);
}

TEST_F(HttpServerTest, ConnectionsPastTheTotalCapAre503UntilOneCloses) {
  HttpServerOptions options;
  options.max_connections = 3;
  options.max_connections_per_client = 0;
  StartServer(service_, options);
  std::vector<std::unique_ptr<HttpConnection>> held;
  held.push_back(HeldConnection(port_, 0x7f000002));
  held.push_back(HeldConnection(port_, 0x7f000003));
  held.push_back(HeldConnection(port_));
  for (const auto& c : held) ASSERT_NE(c, nullptr);
  // Every address is refused, the generation endpoints too.
  for (uint32_t from : {0u, 0x7f000004u}) {
    const absl::Time start = absl::Now();
    HttpResponse refused = ProbeFrom(port_, from);
    RecordProperty(absl::StrCat("refused_after_us_", from == 0 ? "first" : "second"),
                   static_cast<int>(absl::ToInt64Microseconds(absl::Now() - start)));
    EXPECT_LT(absl::Now() - start, absl::Seconds(1));
    EXPECT_EQ(refused.status, 503) << refused.body;
    EXPECT_EQ(refused.headers["retry-after"], "1");
    EXPECT_TRUE(JsonOf(refused)["error"]["message"].is_string()) << refused.body;
  }
  EXPECT_EQ(Fetch(port_, "POST", "/v1/completions", CompletionBody(3)).status, 503);
  held.erase(held.begin());
  int status = 0;
  for (int i = 0; i < 100 && status != 200; ++i) {
    status = ProbeFrom(port_).status;
    if (status != 200) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_EQ(status, 200);
  held.push_back(HeldConnection(port_));
  ASSERT_NE(held.back(), nullptr);
  EXPECT_EQ(ProbeFrom(port_).status, 503);
  // The closes reach the gate a moment after the client makes them.
  held.clear();
  status = 0;
  for (int i = 0; i < 100 && status != 200; ++i) {
    status = ProbeFrom(port_).status;
    if (status != 200) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_TRUE(Healthy());
}

// What `verdict bench` does: each client sends one request per connection
// (Connection: close), closes its socket as soon as the answer is whole and
// sends the next at once. It never has more than one connection open, so a
// cap a little above the number of clients must refuse none of them, however
// late civetweb's workers close their ends. Half the clients leave out
// "Connection: close" and close the kept-alive connection themselves after
// its one answer. The generations take the same time, so that many end
// together and their clients come back at once, as a batch's do.
TEST_F(HttpServerTest, ClientsThatCloseAfterEachAnswerStayUnderTheirCap) {
  constexpr int kClients = 16;
  constexpr int kRequestsEach = 48;
  ScriptedGenerationService::Options service_options;
  service_options.step = std::chrono::milliseconds(2);
  ScriptedGenerationService& service = MakeService<ScriptedGenerationService>(service_options);
  HttpServerOptions options;
  options.max_connections_per_client = kClients + 2;
  StartServer(service, options);
  struct Tally {
    int ok = 0;
    std::map<int, int> other;  // status -> count (0: no answer)
    std::string example;
  };
  std::vector<Tally> tallies(kClients);
  std::vector<std::thread> clients;
  for (int i = 0; i < kClients; ++i) {
    clients.emplace_back([&, i] {
      const bool close = i % 2 == 0;
      for (int j = 0; j < kRequestsEach; ++j) {
        // Generations, streamed and not, and a worker's answer (the models
        // list), a tokenization and a probe the gate answers itself.
        std::string method = "POST", path = "/v1/completions", body;
        switch (j % 6) {
          case 0:
          case 1:
            body = CompletionBody(4, /*stream=*/j % 2 == 1);
            break;
          case 2:
            body = ChatBody(4, /*stream=*/true);
            path = "/v1/chat/completions";
            break;
          case 3:
            method = "GET";
            path = "/v1/models";
            break;
          case 4:
            path = "/tokenize";
            body = R"({"model": "tiny", "prompt": "Hi"})";
            break;
          default:
            method = "GET";
            path = "/health";
            break;
        }
        HttpResponse r;
        {
          HttpConnection c(port_);
          if (c.connected() && c.SendRequest(method, path, body, "", close)) r = c.ReadResponse();
        }
        if (r.status == 200) {
          ++tallies[i].ok;
        } else {
          ++tallies[i].other[r.status];
          if (tallies[i].example.empty()) tallies[i].example = r.body;
        }
      }
    });
  }
  for (std::thread& t : clients) t.join();
  int ok = 0;
  for (int i = 0; i < kClients; ++i) {
    SCOPED_TRACE(i);
    ok += tallies[i].ok;
    EXPECT_TRUE(tallies[i].other.empty())
        << "statuses other than 200: "
        << absl::StrJoin(tallies[i].other, ", ", absl::PairFormatter(" x")) << "; e.g. "
        << tallies[i].example;
  }
  RecordProperty("answered_200", ok);
  EXPECT_EQ(ok, kClients * kRequestsEach);
  EXPECT_TRUE(WaitNoneInFlight());
}

TEST_F(HttpServerTest, ProbesAreAnsweredWhileEveryWorkerIsHeld) {
  HttpServerOptions options;
  options.num_threads = 2;
  options.body_timeout = absl::Seconds(30);
  StartServer(service_, options);
  // Two clients that send a head and then a body far slower than they
  // said: each holds a worker thread while its body is read.
  std::vector<std::unique_ptr<HttpConnection>> holders;
  for (int i = 0; i < 2; ++i) {
    holders.push_back(std::make_unique<HttpConnection>(port_));
    ASSERT_TRUE(holders.back()->Send(
        "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n{"));
  }
  // And clients that send their heads slowly, which no worker waits for.
  std::vector<std::unique_ptr<HttpConnection>> drippers;
  for (int i = 0; i < 8; ++i) {
    drippers.push_back(std::make_unique<HttpConnection>(port_));
    ASSERT_TRUE(drippers.back()->Send("GET /v1/models HTTP/1.1\r\nHo"));
  }
  // Every worker is held: a request that needs one waits.
  HttpConnection models(port_);
  ASSERT_TRUE(models.Send("GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n"));
  EXPECT_FALSE(models.AnswerWithin(absl::Milliseconds(500)));
  for (const char* path : {"/health", "/ready"}) {
    const absl::Time start = absl::Now();
    HttpResponse r = Fetch(port_, "GET", path);
    const absl::Duration took = absl::Now() - start;
    RecordProperty(absl::StrCat(path + 1, "_us"),
                   static_cast<int>(absl::ToInt64Microseconds(took)));
    EXPECT_EQ(r.status, 200) << path << ": " << r.body;
    EXPECT_LT(took, absl::Milliseconds(200)) << path;
  }
  EXPECT_FALSE(models.AnswerWithin(absl::ZeroDuration()));
  // Once the holders go, the waiting request is served.
  holders.clear();
  EXPECT_EQ(models.ReadResponse().status, 200);
  EXPECT_TRUE(Healthy());
}

TEST_F(HttpServerTest, ABodyCutShortIsAnsweredAtOnce) {
  StartServer(service_);
  const std::string body = CompletionBody(2);
  HttpConnection c(port_);
  ASSERT_TRUE(c.connected());
  ASSERT_TRUE(c.Send(absl::StrCat("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: ",
                                  body.size() + 10, "\r\n\r\n", body)));
  // The client sends no more and closes its sending side.
  const absl::Time start = absl::Now();
  c.CloseWrite();
  HttpResponse r = c.ReadResponse();
  EXPECT_EQ(r.status, 400) << r.body;
  EXPECT_THAT(JsonOf(r)["error"]["message"].get<std::string>(), HasSubstr("cut short"));
  EXPECT_LT(absl::Now() - start, absl::Seconds(2));
  EXPECT_TRUE(Healthy());
}

// Two lengths for one body: civetweb would take the first Content-Length
// (or chunked over Content-Length), a proxy in front may take the other.
TEST_F(HttpServerTest, AnAmbiguousBodyLengthIsRefusedAndTheConnectionClosed) {
  StartServer(service_);
  const std::string body = R"({"prompt": "x"})";
  for (const std::string& framing :
       {absl::StrCat("Content-Length: 2\r\nContent-Length: ", body.size(), "\r\n"),
        absl::StrCat("Content-Length: ", body.size(), "\r\nTransfer-Encoding: chunked\r\n"),
        std::string("Transfer-Encoding: gzip, chunked\r\n")}) {
    HttpConnection c(port_);
    ASSERT_TRUE(c.connected());
    ASSERT_TRUE(c.Send(absl::StrCat("POST /tokenize HTTP/1.1\r\nHost: x\r\n", framing, "\r\n",
                                    body, "GET /health HTTP/1.1\r\nHost: x\r\n\r\n")));
    HttpResponse r = c.ReadResponse();
    EXPECT_EQ(r.status, 400) << framing;
    EXPECT_EQ(r.headers["connection"], "close") << framing;
    // What followed is not taken for a second request.
    EXPECT_EQ(c.ReadResponse().status, 0) << framing;
  }
  EXPECT_TRUE(Healthy());
}

TEST_F(HttpServerTest, TokenizeAndDetokenize) {
  StartServer(service_);
  HttpResponse r = Fetch(port_, "POST", "/tokenize", R"({"model": "tiny", "prompt": "Hi"})");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(r.headers["content-type"], "application/json");
  json tokenized = JsonOf(r);
  const std::vector<int32_t> hi = *tokenizer_.Encode("Hi", /*add_bos=*/true);
  EXPECT_EQ(tokenized["tokens"].get<std::vector<int32_t>>(), hi);
  EXPECT_EQ(tokenized["count"], hi.size());
  EXPECT_EQ(tokenized["max_model_len"], 100000);

  r = Fetch(port_, "POST", "/tokenize",
            R"({"messages": [{"role": "user", "content": "Hello"}], "add_special_tokens": true})");
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(JsonOf(r)["tokens"].get<std::vector<int32_t>>(),
            *tokenizer_.Encode("User: Hello\nAssistant:", /*add_bos=*/true));

  r = Fetch(port_, "POST", "/detokenize", json({{"tokens", hi}}).dump());
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(JsonOf(r), json({{"prompt", "Hi"}}));
  // Neither reaches the engine.
  EXPECT_TRUE(service_.submitted().empty());
}

// The chat template arguments reach the prompt the engine is given.
TEST_F(HttpServerTest, ChatTemplateArgumentsShapeTheSubmittedPrompt) {
  StartServer(service_);
  HttpResponse r = Fetch(
      port_, "POST", "/v1/chat/completions",
      R"({"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Well, "}],
          "continue_final_message": true, "max_tokens": 2})");
  ASSERT_EQ(r.status, 200) << r.body;
  std::vector<GenerationRequest> submitted = service_.submitted();
  ASSERT_EQ(submitted.size(), 1u);
  EXPECT_EQ(submitted[0].prompt_token_ids,
            *tokenizer_.Encode("User: Hi\nAssistant: Well, ", /*add_bos=*/true));
}

TEST_F(HttpServerTest, UnknownFieldIsA400NamingIt) {
  StartServer(service_);
  HttpResponse r = Fetch(port_, "POST", "/v1/completions",
                         CompletionBody(2, false, R"(, "temprature": 0.5)"));
  EXPECT_EQ(r.status, 400) << r.body;
  EXPECT_EQ(JsonOf(r)["error"]["param"], "temprature");
  EXPECT_TRUE(service_.submitted().empty());
  EXPECT_TRUE(Healthy());
}

TEST_F(HttpServerTest, UnknownFieldsAreServedAndLoggedOnceWhenAccepted) {
  api_.set_accept_unknown_fields(true);
  StartServer(service_);
  for (int i = 0; i < 3; ++i) {
    HttpResponse r = Fetch(port_, "POST", "/v1/completions",
                           CompletionBody(2, false, R"(, "mirostat": 2)"));
    EXPECT_EQ(r.status, 200) << r.body;
  }
  int mentions = 0;
  for (const std::string& line : log()) mentions += absl::StrContains(line, "'mirostat'");
  EXPECT_EQ(mentions, 1);
}

TEST_F(HttpServerTest, ApiKey) {
  HttpServerOptions options;
  options.api_key = "sk-secret";
  StartServer(service_, options);
  HttpResponse none = Fetch(port_, "POST", "/v1/completions", CompletionBody(2));
  EXPECT_EQ(none.status, 401);
  EXPECT_EQ(JsonOf(none)["error"]["code"], "invalid_api_key");
  EXPECT_EQ(none.headers["www-authenticate"], "Bearer");
  for (const char* header : {"Authorization: Bearer sk-secreT\r\n",
                             "Authorization: Bearer sk-secret2\r\n",
                             "Authorization: Bearer sk-secre\r\n", "Authorization: Bearer \r\n",
                             "Authorization: sk-secret\r\n", "Authorization: Basic sk-secret\r\n"}) {
    EXPECT_EQ(Fetch(port_, "GET", "/v1/models", "", header).status, 401) << header;
  }
  EXPECT_EQ(Fetch(port_, "GET", "/v1/models", "", "Authorization: Bearer sk-secret\r\n").status,
            200);
  HttpResponse ok = Fetch(port_, "POST", "/v1/completions", CompletionBody(2),
                          "Authorization: bearer sk-secret\r\n");
  EXPECT_EQ(ok.status, 200);
  EXPECT_EQ(TextOf(ok, false, false), "ab");
  // The tokenizer's endpoints take the key like the rest of the API.
  for (const char* path : {"/tokenize", "/detokenize"}) {
    const char* body = path[1] == 't' ? R"({"prompt": "x"})" : R"({"tokens": [5]})";
    HttpResponse refused = Fetch(port_, "POST", path, body, "Authorization: Bearer nope\r\n");
    EXPECT_EQ(refused.status, 401) << path;
    EXPECT_EQ(JsonOf(refused)["error"]["code"], "invalid_api_key") << path;
    EXPECT_EQ(Fetch(port_, "POST", path, body).status, 401) << path;
    EXPECT_EQ(Fetch(port_, "POST", path, body, "Authorization: Bearer sk-secret\r\n").status,
              200)
        << path;
  }
  // Probes stay open for orchestrators.
  EXPECT_EQ(Fetch(port_, "GET", "/health").status, 200);
  EXPECT_EQ(Fetch(port_, "GET", "/ready").status, 200);
}

TEST_F(HttpServerTest, BodyLimit) {
  HttpServerOptions options;
  options.max_body_bytes = 1024;
  StartServer(service_, options);
  std::string big = CompletionBody(2, false, absl::StrCat(R"(, "user": ")", std::string(2000, 'u'),
                                                          "\""));
  HttpResponse r = Fetch(port_, "POST", "/v1/completions", big);
  EXPECT_EQ(r.status, 413);
  EXPECT_EQ(JsonOf(r)["error"]["param"], "body");

  // A huge announced length is refused before the body arrives.
  HttpConnection c(port_);
  ASSERT_TRUE(c.Send("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 1073741824\r\n"
                     "\r\n{\"prompt\": \""));
  EXPECT_EQ(c.ReadResponse().status, 413);

  // A chunked body is cut off at the limit as well.
  HttpConnection chunked(port_);
  ASSERT_TRUE(chunked.Send("POST /v1/completions HTTP/1.1\r\nHost: x\r\n"
                           "Transfer-Encoding: chunked\r\n\r\n"));
  std::string piece(500, ' ');
  for (int i = 0; i < 4; ++i) {
    ASSERT_TRUE(chunked.Send(absl::StrCat(absl::Hex(piece.size()), "\r\n", piece, "\r\n")));
  }
  ASSERT_TRUE(chunked.Send("0\r\n\r\n"));
  EXPECT_EQ(chunked.ReadResponse().status, 413);

  std::string small = CompletionBody(2);
  ASSERT_LT(small.size(), 1024u);
  EXPECT_TRUE(Healthy());
}

TEST_F(HttpServerTest, BodyOverTheLimitIsRefusedOnEveryPathAndClosesTheConnection) {
  // Announced lengths past the limit, up to ones near and beyond 2^63 (which
  // civetweb reads as 2^63 - 1), on paths that answer without reading a
  // body: a wrong key, an unknown endpoint, a probe. Each gets 413 and the
  // connection closes: kept open, civetweb would add the length to the
  // request's to find the next request.
  HttpServerOptions options;
  options.api_key = "sk-secret";
  options.max_body_bytes = 1024;
  StartServer(service_, options);
  for (const char* length : {"1025", "9223372036854775807", "99999999999999999999999"}) {
    for (const char* head : {"POST /tokenize HTTP/1.1\r\nAuthorization: Bearer nope\r\n",
                             "POST /v1/nowhere HTTP/1.1\r\n", "GET /health HTTP/1.1\r\n"}) {
      HttpConnection c(port_);
      ASSERT_TRUE(c.Send(absl::StrCat(head, "Host: x\r\nContent-Length: ", length,
                                      "\r\n\r\n{}")));
      HttpResponse r = c.ReadResponse();
      EXPECT_EQ(r.status, 413) << head << length;
      EXPECT_EQ(JsonOf(r)["error"]["code"], "request_too_large") << head << length;
      EXPECT_EQ(r.headers["connection"], "close") << head << length;
      EXPECT_FALSE(c.ReadUntil("HTTP/1.1")) << "the connection stayed open: " << head << length;
    }
  }
  EXPECT_EQ(Fetch(port_, "GET", "/health").status, 200);
  EXPECT_EQ(Fetch(port_, "POST", "/tokenize", R"({"prompt": "x"})",
                  "Authorization: Bearer sk-secret\r\n").status,
            200);
}

TEST_F(HttpServerTest, FullQueueIs429AndShuttingDownEngineIs503) {
  ScriptedGenerationService::Options service_options;
  service_options.max_running = 0;
  ScriptedGenerationService& full = MakeService<ScriptedGenerationService>(service_options);
  StartServer(full);
  HttpResponse r = Fetch(port_, "POST", "/v1/completions", CompletionBody(2));
  EXPECT_EQ(r.status, 429);
  EXPECT_EQ(r.headers["retry-after"], "1");
  EXPECT_EQ(JsonOf(r)["error"]["type"], "rate_limit_error");
  full.SetUnavailable(true);
  r = Fetch(port_, "POST", "/v1/chat/completions", ChatBody(2));
  EXPECT_EQ(r.status, 503);
  EXPECT_EQ(r.headers["retry-after"], "1");
  EXPECT_EQ(server_->in_flight(), 0);
}

TEST_F(HttpServerTest, ClientDisconnectMidStreamCancelsTheRequest) {
  ScriptedGenerationService::Options service_options;
  service_options.step = std::chrono::milliseconds(5);
  ScriptedGenerationService& slow = MakeService<ScriptedGenerationService>(service_options);
  StartServer(slow);
  HttpConnection c(port_);
  ASSERT_TRUE(c.SendRequest("POST", "/v1/completions", CompletionBody(50000, true)));
  ASSERT_TRUE(c.ReadUntil("\r\n\r\n"));
  size_t at = c.buffer().find("X-Request-Id: ");
  ASSERT_NE(at, std::string::npos);
  std::string id = c.buffer().substr(at + 14, c.buffer().find("\r\n", at) - at - 14);
  // Read a few tokens, then hang up.
  ASSERT_TRUE(c.ReadUntil("\"text\":\"c\""));
  c.Close();
  EXPECT_TRUE(slow.WaitForCancel(id, std::chrono::seconds(10)));
  EXPECT_TRUE(slow.WaitIdle(std::chrono::seconds(10)));
  EXPECT_TRUE(WaitNoneInFlight());
}

TEST_F(HttpServerTest, ClientDisconnectBeforeTheBodyCancelsTheRequest) {
  ScriptedGenerationService::Options service_options;
  service_options.step = std::chrono::milliseconds(5);
  ScriptedGenerationService& slow = MakeService<ScriptedGenerationService>(service_options);
  StartServer(slow);
  HttpConnection c(port_);
  ASSERT_TRUE(c.SendRequest("POST", "/v1/completions", CompletionBody(50000, false)));
  // The whole answer would take minutes; hang up once the engine runs it.
  for (int i = 0; i < 500 && slow.running() == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_EQ(slow.running(), 1);
  const std::string id = slow.submitted().at(0).id;
  const absl::Time hung_up = absl::Now();
  c.Close();
  EXPECT_TRUE(slow.WaitForCancel(id, std::chrono::seconds(10)));
  EXPECT_LT(absl::Now() - hung_up, absl::Seconds(2));
  EXPECT_TRUE(slow.WaitIdle(std::chrono::seconds(10)));
  EXPECT_TRUE(WaitNoneInFlight());
  // The server goes on serving.
  HttpResponse next = Fetch(port_, "POST", "/v1/completions", CompletionBody(3));
  EXPECT_EQ(next.status, 200);
}

// request_timeout_ms bounds one socket operation, not a whole generation.
TEST_F(HttpServerTest, GenerationsOutlastTheSocketTimeout) {
  ScriptedGenerationService::Options service_options;
  service_options.step = std::chrono::milliseconds(20);
  ScriptedGenerationService& slow = MakeService<ScriptedGenerationService>(service_options);
  HttpServerOptions options;
  options.request_timeout_ms = 200;
  options.heartbeat = absl::Seconds(10);
  StartServer(slow, options);
  HttpResponse whole = Fetch(port_, "POST", "/v1/completions", CompletionBody(40));
  ASSERT_EQ(whole.status, 200);
  EXPECT_EQ(TextOf(whole, false, false), ScriptedGenerationService::ExpectedText(40));
  HttpResponse streamed = Fetch(port_, "POST", "/v1/completions", CompletionBody(40, true));
  ASSERT_EQ(streamed.status, 200);
  EXPECT_EQ(TextOf(streamed, false, true), ScriptedGenerationService::ExpectedText(40));
}

TEST_F(HttpServerTest, ThirtyTwoConcurrentClients) {
  ScriptedGenerationService::Options service_options;
  service_options.step = std::chrono::milliseconds(2);
  ScriptedGenerationService& service = MakeService<ScriptedGenerationService>(service_options);
  StartServer(service);
  constexpr int kClients = 32;
  std::vector<HttpResponse> responses(kClients);
  std::vector<std::thread> clients;
  for (int i = 0; i < kClients; ++i) {
    clients.emplace_back([&, i] {
      const bool chat = i % 2 == 1;
      const bool stream = i % 4 >= 2;
      const int max_tokens = 5 + i;
      const std::string usage = stream ? R"(, "stream_options": {"include_usage": true})" : "";
      std::string body = chat ? ChatBody(max_tokens, stream, usage)
                              : CompletionBody(max_tokens, stream, usage);
      responses[i] = Fetch(port_, "POST", chat ? "/v1/chat/completions" : "/v1/completions", body);
    });
  }
  for (std::thread& t : clients) t.join();
  for (int i = 0; i < kClients; ++i) {
    SCOPED_TRACE(i);
    const bool chat = i % 2 == 1;
    const bool stream = i % 4 >= 2;
    const int max_tokens = 5 + i;
    ASSERT_EQ(responses[i].status, 200) << responses[i].body;
    EXPECT_EQ(TextOf(responses[i], chat, stream), ScriptedGenerationService::ExpectedText(max_tokens));
    json usage;
    if (stream) {
      std::vector<std::string> data = SseData(responses[i].body);
      ASSERT_GE(data.size(), 2u);
      usage = json::parse(data[data.size() - 2])["usage"];
    } else {
      usage = JsonOf(responses[i])["usage"];
    }
    EXPECT_EQ(usage["completion_tokens"], max_tokens);
    EXPECT_EQ(usage["total_tokens"], usage["prompt_tokens"].get<int>() + max_tokens);
  }
  EXPECT_EQ(service.submitted().size(), static_cast<size_t>(kClients));
  EXPECT_TRUE(WaitNoneInFlight());
}

TEST_F(HttpServerTest, DrainLetsShortRequestsFinishAndRefusesNewOnes) {
  ScriptedGenerationService::Options service_options;
  service_options.step = std::chrono::milliseconds(20);
  ScriptedGenerationService& service = MakeService<ScriptedGenerationService>(service_options);
  StartServer(service);
  constexpr int kRequests = 4;
  std::vector<HttpResponse> responses(kRequests);
  std::vector<std::thread> clients;
  for (int i = 0; i < kRequests; ++i) {
    clients.emplace_back([&, i] {
      responses[i] = Fetch(port_, "POST", "/v1/completions", CompletionBody(20, i % 2 == 0));
    });
  }
  for (int i = 0; i < 500 && server_->in_flight() < kRequests; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ASSERT_EQ(server_->in_flight(), kRequests);
  std::thread drain([&] { server_->Shutdown(absl::Seconds(20)); });
  for (int i = 0; i < 500 && Fetch(port_, "GET", "/ready").status != 503; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  HttpResponse refused = Fetch(port_, "POST", "/v1/completions", CompletionBody(2));
  EXPECT_EQ(refused.status, 503);
  EXPECT_EQ(refused.headers["retry-after"], "1");
  EXPECT_EQ(Fetch(port_, "GET", "/health").status, 200);
  drain.join();
  for (std::thread& t : clients) t.join();
  for (int i = 0; i < kRequests; ++i) {
    ASSERT_EQ(responses[i].status, 200);
    EXPECT_EQ(TextOf(responses[i], false, i % 2 == 0), ScriptedGenerationService::ExpectedText(20));
  }
  EXPECT_TRUE(service.cancelled().empty());
  EXPECT_FALSE(HttpConnection(port_).connected());  // the listener is closed
}

TEST_F(HttpServerTest, DrainCancelsRequestsPastTheDeadline) {
  ScriptedGenerationService::Options service_options;
  service_options.step = std::chrono::milliseconds(5);
  ScriptedGenerationService& service = MakeService<ScriptedGenerationService>(service_options);
  StartServer(service);
  HttpResponse streamed, whole;
  std::thread a([&] {
    streamed = Fetch(port_, "POST", "/v1/completions", CompletionBody(90000, true));
  });
  std::thread b([&] { whole = Fetch(port_, "POST", "/v1/chat/completions", ChatBody(90000)); });
  for (int i = 0; i < 500 && server_->in_flight() < 2; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ASSERT_EQ(server_->in_flight(), 2);
  auto start = std::chrono::steady_clock::now();
  server_->Shutdown(absl::Milliseconds(200));
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  a.join();
  b.join();
  EXPECT_THAT(service.cancelled(), SizeIs(2));
  ASSERT_EQ(streamed.status, 200);
  std::vector<std::string> data = SseData(streamed.body);
  ASSERT_GE(data.size(), 2u);
  EXPECT_EQ(data.back(), "[DONE]");
  EXPECT_EQ(json::parse(data[data.size() - 2])["error"]["type"], "server_error");
  EXPECT_EQ(whole.status, 503);
  EXPECT_TRUE(JsonOf(whole).contains("error"));
}

// An engine that never answers, not even a cancellation.
class SilentService : public GenerationService {
 public:
  absl::Status Submit(GenerationRequest, GenerationCallback) override {
    ++submitted;
    return absl::OkStatus();
  }
  void Cancel(const std::string&) override { ++cancelled; }
  std::atomic<int> submitted{0};
  std::atomic<int> cancelled{0};
};

TEST_F(HttpServerTest, DrainDoesNotHangOnAnEngineThatNeverFinishes) {
  SilentService& silent = MakeService<SilentService>();
  HttpServerOptions options;
  options.cancel_grace = absl::Milliseconds(100);
  options.heartbeat = absl::Milliseconds(50);
  StartServer(silent, options);
  HttpResponse streamed, whole;
  std::thread a([&] { streamed = Fetch(port_, "POST", "/v1/completions", CompletionBody(5, true)); });
  std::thread b([&] { whole = Fetch(port_, "POST", "/v1/completions", CompletionBody(5)); });
  for (int i = 0; i < 500 && server_->in_flight() < 2; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ASSERT_EQ(server_->in_flight(), 2);
  server_->Shutdown(absl::Milliseconds(100));
  a.join();
  b.join();
  EXPECT_EQ(silent.cancelled, 2);
  EXPECT_EQ(whole.status, 503);
  ASSERT_EQ(streamed.status, 200);
  EXPECT_THAT(streamed.body, HasSubstr(": keep-alive"));  // idle heartbeats
  std::vector<std::string> data = SseData(streamed.body);
  ASSERT_GE(data.size(), 2u);
  EXPECT_TRUE(json::parse(data[0]).contains("error"));
  EXPECT_EQ(data.back(), "[DONE]");
}

// A job whose launcher is tearing it down: the engine will never answer, so
// Abandon ends every request with its reason at once, without waiting for
// the engine or cancelling in it, and refuses new ones.
TEST_F(HttpServerTest, AbandonEndsEveryRequestAtOnceWithTheReason) {
  SilentService& silent = MakeService<SilentService>();
  HttpServerOptions options;
  options.heartbeat = absl::Seconds(30);  // no heartbeat wakes a handler first
  StartServer(silent, options);
  HttpResponse streamed, whole;
  std::thread a([&] { streamed = Fetch(port_, "POST", "/v1/completions", CompletionBody(5, true)); });
  std::thread b([&] { whole = Fetch(port_, "POST", "/v1/completions", CompletionBody(5)); });
  for (int i = 0; i < 500 && server_->in_flight() < 2; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ASSERT_EQ(server_->in_flight(), 2);
  const absl::Status reason = absl::UnavailableError("a rank died");
  auto start = std::chrono::steady_clock::now();
  server_->Abandon(reason, absl::Seconds(5));
  // Returns once the handlers are done, not at the end of its wait.
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(2));
  EXPECT_EQ(server_->in_flight(), 0);
  a.join();
  b.join();
  EXPECT_EQ(silent.cancelled, 0);
  ASSERT_EQ(streamed.status, 200);
  std::vector<std::string> data = SseData(streamed.body);
  ASSERT_EQ(data.size(), 2u) << streamed.body;
  EXPECT_EQ(json::parse(data[0])["error"]["message"], "a rank died");
  EXPECT_EQ(data[1], "[DONE]");
  EXPECT_EQ(whole.status, 503);
  EXPECT_EQ(JsonOf(whole)["error"]["message"], "a rank died");
  EXPECT_EQ(Fetch(port_, "POST", "/v1/completions", CompletionBody(5)).status, 503);
  EXPECT_EQ(silent.submitted, 2);
}

TEST_F(HttpServerTest, IdleShutdownIsPrompt) {
  StartServer(service_);
  EXPECT_EQ(Fetch(port_, "GET", "/health").status, 200);
  auto start = std::chrono::steady_clock::now();
  server_->Shutdown(absl::Seconds(30));
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(1000));
  EXPECT_FALSE(HttpConnection(port_).connected());
  server_->Shutdown(absl::Seconds(30));  // a second call does nothing
}

// The unix-domain paths this process listens on (/proc/net/unix entries
// whose inode is one of this process's sockets).
std::vector<std::string> OwnUnixListenerPaths() {
  std::vector<std::string> inodes;
  for (const auto& entry : std::filesystem::directory_iterator("/proc/self/fd")) {
    std::error_code error;
    const std::string target = std::filesystem::read_symlink(entry.path(), error).string();
    if (!error && absl::StartsWith(target, "socket:[")) {
      inodes.push_back(target.substr(8, target.size() - 9));
    }
  }
  std::vector<std::string> paths;
  std::ifstream table("/proc/net/unix");
  std::string line;
  std::getline(table, line);  // the header
  while (std::getline(table, line)) {
    // Num RefCount Protocol Flags Type St Inode Path
    std::vector<std::string> fields = absl::StrSplit(line, ' ', absl::SkipEmpty());
    const bool listening = fields.size() >= 8 && fields[3] == "00010000";  // __SO_ACCEPTCON
    if (listening && fields[7][0] == '/' &&
        std::find(inodes.begin(), inodes.end(), fields[6]) != inodes.end()) {
      paths.push_back(fields[7]);
    }
  }
  return paths;
}

// civetweb listens past the gate at a path in a directory only this user
// can enter, not at an abstract name any local user could connect to, and
// the path is gone with the server.
TEST_F(HttpServerTest, CivetwebListensOnlyWhereThisUserCanReach) {
  StartServer(service_);
  const std::vector<std::string> paths = OwnUnixListenerPaths();
  ASSERT_THAT(paths, SizeIs(1));
  const std::string dir = std::filesystem::path(paths[0]).parent_path().string();
  EXPECT_THAT(dir, HasSubstr("verdict-http-"));
  struct stat info = {};
  ASSERT_EQ(stat(dir.c_str(), &info), 0) << dir;
  EXPECT_EQ(info.st_mode & 0777, 0700u) << dir;
  EXPECT_EQ(info.st_uid, geteuid());
  EXPECT_EQ(Fetch(port_, "GET", "/v1/models").status, 200);  // through the gate
  server_->Shutdown(absl::ZeroDuration());
  EXPECT_FALSE(std::filesystem::exists(paths[0]));
  EXPECT_FALSE(std::filesystem::exists(dir));
}

// A unix-domain socket bound at `path` (left behind when `listening` is
// false, as by a server that was killed), its file dated two minutes back;
// the descriptor of a listening one, else -1.
int BindSocketFile(const std::string& path, bool listening) {
  sockaddr_un name = {};
  name.sun_family = AF_UNIX;
  std::memcpy(name.sun_path, path.c_str(), path.size() + 1);
  const int fd = socket(AF_UNIX, SOCK_STREAM, 0);
  EXPECT_EQ(bind(fd, reinterpret_cast<const sockaddr*>(&name), sizeof(name)), 0) << path;
  if (listening) {
    EXPECT_EQ(listen(fd, 4), 0);
  }
  const timeval past[2] = {{time(nullptr) - 120, 0}, {time(nullptr) - 120, 0}};
  EXPECT_EQ(utimes(path.c_str(), past), 0) << path;
  if (listening) return fd;
  close(fd);
  return -1;
}

// A lock file at `path`; with `held`, the descriptor holding its flock (a
// live server's: flock locks of separate opens conflict even within one
// process), else -1.
int MakeLockFile(const std::string& path, bool held) {
  const int fd = open(path.c_str(), O_RDONLY | O_CREAT | O_CLOEXEC, 0600);
  EXPECT_GE(fd, 0) << path;
  if (held) {
    EXPECT_EQ(flock(fd, LOCK_EX | LOCK_NB), 0) << path;
    return fd;
  }
  close(fd);
  return -1;
}

// A fresh folder that TMPDIR names for a test's span, so that the server it
// starts sweeps that folder and makes its listener there. Whatever fails,
// the destructor shuts the server down first (no thread of it reads the
// environment while it changes), puts TMPDIR back, closes the descriptors
// given to Keep and removes the folder.
class ScratchTmpdir {
 public:
  explicit ScratchTmpdir(std::unique_ptr<HttpServer>& server) : server_(server) {
    char name[] = "/tmp/verdict-test-XXXXXX";
    if (mkdtemp(name) != nullptr) path_ = name;
    if (const char* saved = std::getenv("TMPDIR")) saved_tmpdir_ = saved;
    if (!path_.empty()) setenv("TMPDIR", path_.c_str(), 1);
  }
  ~ScratchTmpdir() {
    if (server_ != nullptr) server_->Shutdown(absl::ZeroDuration());
    if (saved_tmpdir_.has_value()) {
      setenv("TMPDIR", saved_tmpdir_->c_str(), 1);
    } else {
      unsetenv("TMPDIR");
    }
    for (int fd : fds_) {
      if (fd >= 0) close(fd);
    }
    if (!path_.empty()) std::filesystem::remove_all(path_);
  }

  const std::string& path() const { return path_; }
  // A new directory `name` in the folder; its path.
  std::string MakeDir(const std::string& name) const {
    const std::string dir = path_ + "/" + name;
    EXPECT_TRUE(std::filesystem::create_directory(dir)) << dir;
    return dir;
  }
  int Keep(int fd) {
    fds_.push_back(fd);
    return fd;
  }
  void Close(int fd) {
    fds_.erase(std::remove(fds_.begin(), fds_.end(), fd), fds_.end());
    close(fd);
  }

 private:
  std::unique_ptr<HttpServer>& server_;
  std::string path_;
  std::optional<std::string> saved_tmpdir_;
  std::vector<int> fds_;
};

// A server killed before its teardown leaves its listener directory; the
// next server of the same user removes it, and only it. These directories
// have no lock file, as servers from before the lock left them: one goes
// when its socket refuses a connection and was bound over a minute ago;
// not a live server's, not a socket bound a moment ago (it may not listen
// yet), not another name.
TEST_F(HttpServerTest, StaleListenerDirectoriesOfKilledServersAreRemoved) {
  ScratchTmpdir scratch(server_);
  ASSERT_FALSE(scratch.path().empty());
  const std::string stale = scratch.MakeDir("verdict-http-dead01");
  BindSocketFile(stale + "/civetweb.sock", /*listening=*/false);
  const std::string live = scratch.MakeDir("verdict-http-live01");
  const int live_fd = scratch.Keep(BindSocketFile(live + "/civetweb.sock", /*listening=*/true));
  const std::string fresh = scratch.MakeDir("verdict-http-new001");
  BindSocketFile(fresh + "/civetweb.sock", /*listening=*/false);
  const timeval now[2] = {{time(nullptr), 0}, {time(nullptr), 0}};
  ASSERT_EQ(utimes((fresh + "/civetweb.sock").c_str(), now), 0);
  const std::string other = scratch.MakeDir("other-dead01");
  BindSocketFile(other + "/civetweb.sock", /*listening=*/false);

  StartServer(service_);
  EXPECT_FALSE(std::filesystem::exists(stale));
  EXPECT_TRUE(std::filesystem::exists(live + "/civetweb.sock"));
  EXPECT_TRUE(std::filesystem::exists(fresh + "/civetweb.sock"));
  EXPECT_TRUE(std::filesystem::exists(other + "/civetweb.sock"));
  scratch.Close(live_fd);
  // This server's own directory is in the same base.
  const std::vector<std::string> paths = OwnUnixListenerPaths();
  ASSERT_THAT(paths, SizeIs(1));
  EXPECT_EQ(std::filesystem::path(paths[0]).parent_path().parent_path().string(), scratch.path());
  EXPECT_EQ(Fetch(port_, "GET", "/v1/models").status, 200);
}

// A server holds the lock of its listener directory while it runs, and its
// directory is gone once it has shut down.
TEST_F(HttpServerTest, EachServerHoldsTheLockOfItsListenerDirectory) {
  StartServer(service_);
  const std::vector<std::string> paths = OwnUnixListenerPaths();
  ASSERT_THAT(paths, SizeIs(1));
  const std::string dir = std::filesystem::path(paths[0]).parent_path().string();
  const int fd = open((dir + "/lock").c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0) << dir;
  EXPECT_NE(flock(fd, LOCK_EX | LOCK_NB), 0);
  EXPECT_EQ(errno, EWOULDBLOCK);
  close(fd);
  server_->Shutdown(absl::ZeroDuration());
  EXPECT_FALSE(std::filesystem::exists(dir));
}

// A directory whose lock is held is a live server's, however old its
// socket and though the socket refuses connections (a server stalled
// between bind and listen, or before bind).
TEST_F(HttpServerTest, ListenerDirectoriesWhoseLockIsHeldAreKept) {
  ScratchTmpdir scratch(server_);
  ASSERT_FALSE(scratch.path().empty());
  const std::string stalled = scratch.MakeDir("verdict-http-held01");
  scratch.Keep(MakeLockFile(stalled + "/lock", /*held=*/true));
  BindSocketFile(stalled + "/civetweb.sock", /*listening=*/false);
  const std::string unbound = scratch.MakeDir("verdict-http-held02");
  scratch.Keep(MakeLockFile(unbound + "/lock", /*held=*/true));

  StartServer(service_);
  EXPECT_TRUE(std::filesystem::exists(stalled + "/civetweb.sock"));
  EXPECT_TRUE(std::filesystem::exists(stalled + "/lock"));
  EXPECT_TRUE(std::filesystem::exists(unbound + "/lock"));
}

// A directory whose lock file nobody holds is a dead server's, and goes
// whatever its socket's age, or with no socket at all (killed before bind).
TEST_F(HttpServerTest, ListenerDirectoriesWhoseLockIsFreeAreRemoved) {
  ScratchTmpdir scratch(server_);
  ASSERT_FALSE(scratch.path().empty());
  const std::string fresh = scratch.MakeDir("verdict-http-free01");
  MakeLockFile(fresh + "/lock", /*held=*/false);
  BindSocketFile(fresh + "/civetweb.sock", /*listening=*/false);
  const timeval now[2] = {{time(nullptr), 0}, {time(nullptr), 0}};
  ASSERT_EQ(utimes((fresh + "/civetweb.sock").c_str(), now), 0);
  const std::string old = scratch.MakeDir("verdict-http-free02");
  MakeLockFile(old + "/lock", /*held=*/false);
  BindSocketFile(old + "/civetweb.sock", /*listening=*/false);
  const std::string unbound = scratch.MakeDir("verdict-http-free03");
  MakeLockFile(unbound + "/lock", /*held=*/false);

  StartServer(service_);
  EXPECT_FALSE(std::filesystem::exists(fresh));
  EXPECT_FALSE(std::filesystem::exists(old));
  EXPECT_FALSE(std::filesystem::exists(unbound));
}

// The sweep follows no symlink: one named like a listener directory is
// left alone with its target, and a symlink inside a dead server's
// directory is removed, not what it points to.
TEST_F(HttpServerTest, TheSweepFollowsNoSymlink) {
  ScratchTmpdir scratch(server_);
  ASSERT_FALSE(scratch.path().empty());
  // A dead server's directory in every other respect.
  const std::string target = scratch.MakeDir("target");
  MakeLockFile(target + "/lock", /*held=*/false);
  BindSocketFile(target + "/civetweb.sock", /*listening=*/false);
  const std::string link = scratch.path() + "/verdict-http-link01";
  ASSERT_EQ(symlink(target.c_str(), link.c_str()), 0);
  const std::string precious = scratch.path() + "/precious";
  std::ofstream(precious) << "keep me";
  const std::string dead = scratch.MakeDir("verdict-http-dead02");
  MakeLockFile(dead + "/lock", /*held=*/false);
  ASSERT_EQ(symlink(precious.c_str(), (dead + "/civetweb.sock").c_str()), 0);

  StartServer(service_);
  EXPECT_TRUE(std::filesystem::is_symlink(link));
  EXPECT_TRUE(std::filesystem::exists(target + "/lock"));
  EXPECT_TRUE(std::filesystem::exists(target + "/civetweb.sock"));
  EXPECT_FALSE(std::filesystem::exists(dead));
  std::ifstream kept(precious);
  std::string text;
  std::getline(kept, text);
  EXPECT_EQ(text, "keep me");
}

// Abandon precedes an exit that runs no destructors: it leaves no listener
// path behind, and the gate still answers probes until the process ends.
TEST_F(HttpServerTest, AbandonRemovesTheListenerPath) {
  StartServer(service_);
  const std::vector<std::string> paths = OwnUnixListenerPaths();
  ASSERT_THAT(paths, SizeIs(1));
  const std::string dir = std::filesystem::path(paths[0]).parent_path().string();
  server_->Abandon(absl::UnavailableError("a peer rank is gone"), absl::Seconds(1));
  EXPECT_FALSE(std::filesystem::exists(paths[0]));
  EXPECT_FALSE(std::filesystem::exists(dir));
  // The gate answers it (the health is the engine's, alive here).
  EXPECT_EQ(Fetch(port_, "GET", "/health").status, 200);
  server_->Shutdown(absl::ZeroDuration());
}

TEST_F(HttpServerTest, StartFailsOnABusyPort) {
  StartServer(service_);
  HttpServerOptions options;
  options.port = port_;
  HttpServer second(options, api_, service_);
  absl::Status s = second.Start();
  EXPECT_FALSE(s.ok());
  EXPECT_THAT(std::string(s.message()), HasSubstr(absl::StrCat(port_)));
}

}  // namespace
}  // namespace verdict
