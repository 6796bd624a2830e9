#include "runtime/server/http_exchange.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace verdict {
namespace {

// Feeds `bytes` whole, then one byte at a time into a second exchange:
// both must agree, however the bytes arrive.
struct Pair {
  HttpExchange whole, dripped;
  void Client(absl::string_view bytes) {
    whole.FromClient(bytes);
    for (char c : bytes) dripped.FromClient(absl::string_view(&c, 1));
  }
  void Upstream(absl::string_view bytes) {
    whole.FromUpstream(bytes);
    for (char c : bytes) dripped.FromUpstream(absl::string_view(&c, 1));
  }
  // The state of both, as one string, after checking that they agree.
  std::string State() const {
    auto of = [](const HttpExchange& e) {
      return absl::StrCat(e.lost() ? "lost" : "followed", e.idle() ? " idle" : "",
                          e.closing() ? " closing" : "", " through=", e.answered_through());
    };
    EXPECT_EQ(of(whole), of(dripped));
    return of(whole);
  }
};

constexpr char kGet[] = "GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n";
constexpr char kGetClose[] = "GET /v1/models HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
constexpr char kAnswer[] = "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello";

TEST(HttpExchangeTest, AKeptAliveExchangeIsIdleOnceAnsweredWhole) {
  Pair p;
  EXPECT_EQ(p.State(), "followed idle through=0");
  p.Client(kGet);
  EXPECT_EQ(p.State(), "followed through=0");
  p.Upstream("HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhel");
  EXPECT_EQ(p.State(), "followed through=0");
  p.Upstream("lo");
  EXPECT_EQ(p.State(), absl::StrCat("followed idle through=", std::string(kAnswer).size()));
}

TEST(HttpExchangeTest, AnAnswerToARequestThatAskedToCloseEndsTheConnection) {
  Pair p;
  p.Client(kGetClose);
  p.Upstream(kAnswer);
  EXPECT_EQ(p.State(), absl::StrCat("followed idle closing through=", std::string(kAnswer).size()));
  // Bytes after it are not followed.
  p.Upstream("garbage");
  p.Client("more garbage");
  EXPECT_EQ(p.State(), absl::StrCat("followed idle closing through=", std::string(kAnswer).size()));
}

TEST(HttpExchangeTest, AnAnswerThatSaysCloseEndsTheConnection) {
  Pair p;
  p.Client("POST /v1/completions HTTP/1.1\r\nContent-Length: 100\r\n\r\n{");
  // A refusal before the body has arrived.
  const std::string refusal =
      "HTTP/1.1 413 Payload Too Large\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}";
  p.Upstream(refusal);
  EXPECT_EQ(p.State(), absl::StrCat("followed closing through=", refusal.size()));
}

TEST(HttpExchangeTest, HttpOneZeroClosesUnlessItAsksToKeepAlive) {
  Pair closes, stays;
  closes.Client("GET / HTTP/1.0\r\n\r\n");
  stays.Client("GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n");
  closes.Upstream(kAnswer);
  stays.Upstream(kAnswer);
  EXPECT_TRUE(closes.whole.closing());
  EXPECT_FALSE(stays.whole.closing());
  EXPECT_TRUE(stays.whole.idle());
}

TEST(HttpExchangeTest, BodiesByLengthAndChunkedAndPipelinedRequests) {
  Pair p;
  p.Client(
      "\r\nPOST /a HTTP/1.1\r\nContent-Length: 4\r\n\r\nabcd"
      "POST /b HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n3;x=y\r\nabc\r\n0\r\nT: 1\r\n\r\n"
      "GET /c HTTP/1.1\nConnection: close\n\n");
  const std::string stream =
      "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
      "5\r\ndata:\r\n10\r\n0123456789abcdef\r\n0\r\n\r\n";
  p.Upstream(kAnswer);
  EXPECT_EQ(p.State(), absl::StrCat("followed through=", std::string(kAnswer).size()));
  p.Upstream(stream);
  const size_t two = std::string(kAnswer).size() + stream.size();
  EXPECT_EQ(p.State(), absl::StrCat("followed through=", two));
  p.Upstream("HTTP/1.1 204 No Content\r\n\r\n");
  EXPECT_EQ(p.State(), absl::StrCat("followed idle closing through=", two + 27));
}

TEST(HttpExchangeTest, InterimAnswersAreNotTheAnswer) {
  Pair p;
  p.Client("POST /a HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\n");
  p.Upstream("HTTP/1.1 100 Continue\r\n\r\n");
  EXPECT_EQ(p.State(), "followed through=0");
  p.Client("{}");
  p.Upstream(kAnswer);
  EXPECT_EQ(p.State(), absl::StrCat("followed idle through=", 25 + std::string(kAnswer).size()));
}

TEST(HttpExchangeTest, ARequestPartlyReceivedIsNotIdle) {
  Pair p;
  p.Client(kGet);
  p.Upstream(kAnswer);
  p.Client("GET /v1/mo");
  EXPECT_EQ(p.State(), absl::StrCat("followed through=", std::string(kAnswer).size()));
}

TEST(HttpExchangeTest, WhatItCannotFollowIsLost) {
  for (const std::string& request : std::vector<std::string>{
           "HEAD / HTTP/1.1\r\n\r\n",
           "CONNECT x:1 HTTP/1.1\r\n\r\n",
           "GET / HTTP/2\r\n\r\n",
           "GET /  HTTP/1.1\r\n\r\n",
           "GET / HTTP/1.1\r\nUpgrade: websocket\r\nConnection: upgrade\r\n\r\n",
           "POST / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\nx",
           "POST / HTTP/1.1\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n",
           "POST / HTTP/1.1\r\nTransfer-Encoding: gzip, chunked\r\n\r\n",
           "POST / HTTP/1.1\r\nContent-Length: +1\r\n\r\nx",
           "GET / HTTP/1.1\r\nX: a\r\n folded\r\n\r\n",
           "GET / HTTP/1.1\r\nX : a\r\n\r\n",
           "GET / HTTP/1.1\r\nno colon\r\n\r\n",
           "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
           "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nabc\r\n",
           absl::StrCat("GET / HTTP/1.1\r\nX: ", std::string(40000, 'a')),
       }) {
    Pair p;
    p.Client(request);
    EXPECT_EQ(p.State().substr(0, 4), "lost") << request;
  }
  for (const std::string& answer : std::vector<std::string>{
           "HTTP/1.1 200 OK\r\n\r\nuntil the close",
           "HTTP/1.1 101 Switching Protocols\r\n\r\n",
           "HTTP/1.1 2000 OK\r\nContent-Length: 0\r\n\r\n",
           "\r\nHTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n",
           "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n",
       }) {
    Pair p;
    p.Client(kGet);
    p.Upstream(answer);
    EXPECT_EQ(p.State().substr(0, 4), "lost") << answer;
  }
}

}  // namespace
}  // namespace verdict
