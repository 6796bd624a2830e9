#include "runtime/server/request_head.h"

#include "gtest/gtest.h"

namespace verdict {
namespace {

TEST(RequestHeadTest, LengthOnlyOnceTheEmptyLineHasArrived) {
  EXPECT_FALSE(RequestHeadLength("").has_value());
  EXPECT_FALSE(RequestHeadLength("GET / HTTP/1.1\r\nHost: x\r\n").has_value());
  EXPECT_FALSE(RequestHeadLength("GET / HTTP/1.1\r\nHost: x\r\n\r").has_value());
  EXPECT_EQ(RequestHeadLength("GET / HTTP/1.1\r\nHost: x\r\n\r\nbody"), 27u);
  EXPECT_EQ(RequestHeadLength("GET / HTTP/1.1\nHost: x\n\nbody"), 24u);
}

TEST(RequestHeadTest, ProbesAreRecognised) {
  std::optional<ProbeRequest> health = ParseProbe("GET /health HTTP/1.1\r\nHost: x\r\n\r\n");
  ASSERT_TRUE(health.has_value());
  EXPECT_EQ(health->path, "/health");
  EXPECT_TRUE(health->keep_alive);
  std::optional<ProbeRequest> ready =
      ParseProbe("GET /ready?verbose=1 HTTP/1.1\r\nConnection: keep-alive, Close\r\n\r\n");
  ASSERT_TRUE(ready.has_value());
  EXPECT_EQ(ready->path, "/ready");
  EXPECT_FALSE(ready->keep_alive);
  EXPECT_TRUE(ParseProbe("GET /health HTTP/1.1\r\ncontent-length: 0\r\n\r\n").has_value());
  std::optional<ProbeRequest> old = ParseProbe("GET /health HTTP/1.0\n\n");
  ASSERT_TRUE(old.has_value());
  EXPECT_FALSE(old->keep_alive);
}

TEST(RequestHeadTest, EverythingElseIsLeftToCivetweb) {
  for (const char* head : {
           "POST /health HTTP/1.1\r\n\r\n",
           "HEAD /health HTTP/1.1\r\n\r\n",
           "GET /healthz HTTP/1.1\r\n\r\n",
           "GET /v1/models HTTP/1.1\r\n\r\n",
           "GET /health HTTP/9.9\r\n\r\n",
           "GET  /health HTTP/1.1\r\n\r\n",
           "GET /health HTTP/1.1\r\nContent-Length: 1\r\n\r\nx",
           "GET /health HTTP/1.1\r\nContent-Length: 0\r\nContent-Length: 0\r\n\r\n",
           "GET /health HTTP/1.1\r\ntransfer-encoding: chunked\r\n\r\n",
           "GET /health HTTP/1.1\r\n folded\r\n\r\n",
           "GET /health HTTP/1.1\r\nno colon\r\n\r\n",
           "GARBAGE\r\n\r\n",
           "\r\n\r\n",
       }) {
    EXPECT_FALSE(ParseProbe(head).has_value()) << head;
  }
}

}  // namespace
}  // namespace verdict
