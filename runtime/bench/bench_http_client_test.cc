#include "runtime/bench/bench_http_client.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "runtime/bench/scripted_socket_server.h"
#include "runtime/server/http_server.h"
#include "runtime/server/openai_api.h"
#include "runtime/server/serving_test_util.h"

namespace verdict {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(ParseHttpUrlTest, HostPortAndPath) {
  absl::StatusOr<HttpTarget> t = ParseHttpUrl("http://127.0.0.1:8123");
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->host, "127.0.0.1");
  EXPECT_EQ(t->port, 8123);
  EXPECT_EQ(t->base_path, "");

  t = ParseHttpUrl("http://localhost:9100/metrics/");
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->host, "localhost");
  EXPECT_EQ(t->base_path, "/metrics");

  t = ParseHttpUrl("http://example");
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->port, 80);

  t = ParseHttpUrl("http://[::1]:81/v1");
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->host, "::1");
  EXPECT_EQ(t->port, 81);
  EXPECT_EQ(t->base_path, "/v1");

  EXPECT_FALSE(ParseHttpUrl("https://127.0.0.1:8000").ok());
  EXPECT_FALSE(ParseHttpUrl("127.0.0.1:8000").ok());
  EXPECT_FALSE(ParseHttpUrl("http://host:0").ok());
  EXPECT_FALSE(ParseHttpUrl("http://host:port").ok());
  EXPECT_FALSE(ParseHttpUrl("http://:80").ok());
}

TEST(SseParserTest, EventsSplitAnywhere) {
  const std::string stream =
      ": keep-alive\n\ndata: {\"a\":1}\n\nevent: x\ndata: first\r\ndata: second\r\n\r\n"
      "data: [DONE]\n\n";
  // Every split point gives the same events.
  for (size_t cut = 0; cut <= stream.size(); ++cut) {
    SseParser parser;
    std::vector<std::string> events = parser.Feed(stream.substr(0, cut));
    for (std::string& e : parser.Feed(stream.substr(cut))) events.push_back(std::move(e));
    EXPECT_THAT(events, ElementsAre("{\"a\":1}", "first\nsecond", "[DONE]")) << "cut " << cut;
  }
}

TEST(SseParserTest, IncompleteEventWaits) {
  SseParser parser;
  EXPECT_TRUE(parser.Feed("data: x\n").empty());
  EXPECT_THAT(parser.Feed("\n"), ElementsAre("x"));
}

TEST(SendHttpRequestTest, DecodesChunksSplitAcrossReads) {
  const std::string response =
      "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nX-Test: yes\r\n\r\n"
      "5\r\nhello\r\n1;ext=1\r\n \r\n10\r\n0123456789abcdef\r\n0\r\n\r\n";
  for (size_t piece : {1, 2, 3, 7, 1000}) {
    ScriptedSocketServer server(response, piece);
    HttpTarget target{"127.0.0.1", server.port(), ""};
    HttpRequestSpec spec;
    spec.method = "POST";
    spec.path = "/x";
    spec.body = "{}";
    spec.headers.push_back({"Authorization", "Bearer k"});
    HttpResponseHead head;
    std::string body;
    int pieces = 0;
    HttpResponseHandler handler;
    handler.on_head = [&](const HttpResponseHead& h) { head = h; };
    handler.on_body = [&](absl::string_view p, BenchClock::time_point) {
      body.append(p.data(), p.size());
      ++pieces;
      return true;
    };
    absl::Status s = SendHttpRequest(target, spec, handler);
    ASSERT_TRUE(s.ok()) << s << " piece " << piece;
    EXPECT_EQ(head.status, 200);
    EXPECT_EQ(head.headers["x-test"], "yes");
    EXPECT_EQ(body, "hello 0123456789abcdef") << "piece " << piece;
    if (piece == 1) {
      EXPECT_GT(pieces, 3);  // handed over as it arrives
    }
    EXPECT_THAT(server.request(), HasSubstr("POST /x HTTP/1.1\r\n"));
    EXPECT_THAT(server.request(), HasSubstr("Content-Length: 2\r\n"));
    EXPECT_THAT(server.request(), HasSubstr("Authorization: Bearer k\r\n"));
  }
}

TEST(SendHttpRequestTest, ContentLengthAndCloseDelimitedBodies) {
  {
    ScriptedSocketServer server("HTTP/1.1 404 Not Found\r\nContent-Length: 4\r\n\r\nnopeEXTRA", 3);
    absl::StatusOr<HttpResponse> r = FetchHttp({"127.0.0.1", server.port(), ""}, {});
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->status, 404);
    EXPECT_EQ(r->body, "nope");
  }
  {
    ScriptedSocketServer server("HTTP/1.0 200 OK\r\n\r\nuntil close", 4);
    absl::StatusOr<HttpResponse> r = FetchHttp({"127.0.0.1", server.port(), ""}, {});
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->body, "until close");
  }
}

TEST(SendHttpRequestTest, TruncatedAndMalformedResponsesAreErrors) {
  {
    ScriptedSocketServer server("HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort", 100);
    EXPECT_EQ(FetchHttp({"127.0.0.1", server.port(), ""}, {}).status().code(),
              absl::StatusCode::kDataLoss);
  }
  {
    ScriptedSocketServer server("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nab",
                                100);
    EXPECT_EQ(FetchHttp({"127.0.0.1", server.port(), ""}, {}).status().code(),
              absl::StatusCode::kDataLoss);
  }
  {
    ScriptedSocketServer server("SSH-2.0-x\r\n\r\n", 100);
    EXPECT_EQ(FetchHttp({"127.0.0.1", server.port(), ""}, {}).status().code(),
              absl::StatusCode::kDataLoss);
  }
}

TEST(SendHttpRequestTest, ClosedPortIsUnavailable) {
  // Bind and close a socket, so the port is free and nothing listens.
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr = {};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  socklen_t len = sizeof(addr);
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  close(fd);
  absl::StatusOr<HttpResponse> r = FetchHttp({"127.0.0.1", ntohs(addr.sin_port), ""}, {});
  EXPECT_EQ(r.status().code(), absl::StatusCode::kUnavailable);
}

TEST(SendHttpRequestTest, SilentServerTimesOut) {
  // Accepts, reads the request, then holds the connection open and silent.
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr = {};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  socklen_t len = sizeof(addr);
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  listen(fd, 1);
  HttpRequestSpec spec;
  spec.timeout = absl::Milliseconds(300);
  absl::StatusOr<HttpResponse> r = FetchHttp({"127.0.0.1", ntohs(addr.sin_port), ""}, spec);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kDeadlineExceeded);
  close(fd);
}

// Against the real front end: a streamed completion arrives as SSE events
// over chunked encoding, one piece at a time.
TEST(SendHttpRequestTest, StreamsFromTheHttpServer) {
  ByteTokenizer tokenizer;
  OpenAiApi api(ServedModel{"tiny", 100000, 8, 1700000000}, tokenizer, ChatTemplate());
  ScriptedGenerationService::Options options;
  options.step = std::chrono::milliseconds(5);
  ScriptedGenerationService service(options);
  HttpServerOptions http;
  http.port = 0;
  HttpServer server(http, api, service);
  ASSERT_TRUE(server.Start().ok());
  HttpTarget target{"127.0.0.1", server.port(), ""};

  absl::StatusOr<HttpResponse> health = FetchHttp(target, {"GET", "/health"});
  ASSERT_TRUE(health.ok()) << health.status();
  EXPECT_EQ(health->status, 200);

  HttpRequestSpec spec;
  spec.method = "POST";
  spec.path = "/v1/completions";
  spec.body = R"({"prompt": "x", "max_tokens": 6, "stream": true})";
  SseParser sse;
  std::vector<std::string> events;
  std::vector<BenchClock::time_point> times;
  HttpResponseHandler handler;
  handler.on_body = [&](absl::string_view piece, BenchClock::time_point at) {
    for (std::string& e : sse.Feed(piece)) {
      events.push_back(std::move(e));
      times.push_back(at);
    }
    return true;
  };
  ASSERT_TRUE(SendHttpRequest(target, spec, handler).ok());
  ASSERT_GE(events.size(), 7u);
  EXPECT_EQ(events.back(), "[DONE]");
  std::string text;
  for (const std::string& e : events) {
    if (e != "[DONE]") text += nlohmann::json::parse(e)["choices"][0]["text"].get<std::string>();
  }
  EXPECT_EQ(text, "abcdef");
  // The service spaces tokens 5 ms apart: the stream was not read at once.
  EXPECT_GT(times.back() - times.front(), std::chrono::milliseconds(15));
  server.Shutdown(absl::Seconds(1));
}

}  // namespace
}  // namespace verdict
