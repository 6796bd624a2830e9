#include "monitoring/metrics.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace verdict {
namespace {

using ::testing::HasSubstr;

TEST(ServingMetricsTest, CountersAppearInTextExposition) {
  auto registry = std::make_shared<prometheus::Registry>();
  ServingMetrics metrics(registry);
  metrics.RecordRequestFinished(RequestOutcome::kStop, 12, 30, 0.5);
  metrics.RecordRequestFinished(RequestOutcome::kLength, 8, 16, 0.25);
  metrics.RecordSpeculativeStep(/*proposed=*/10, /*verified=*/7, /*accepted=*/5);
  metrics.SetQueueDepth(3, 4);

  const std::string text = SerializeMetrics(*registry);
  EXPECT_THAT(text, HasSubstr("verdict_requests_total{outcome=\"stop\"} 1"));
  EXPECT_THAT(text, HasSubstr("verdict_requests_total{outcome=\"length\"} 1"));
  EXPECT_THAT(text, HasSubstr("verdict_requests_total{outcome=\"error\"} 0"));
  EXPECT_THAT(text, HasSubstr("verdict_prompt_tokens_total 20"));
  EXPECT_THAT(text, HasSubstr("verdict_generated_tokens_total 46"));
  EXPECT_THAT(text, HasSubstr("verdict_draft_tokens_accepted_total 5"));
  EXPECT_THAT(text, HasSubstr("verdict_running_requests 3"));
  EXPECT_THAT(text, HasSubstr("verdict_waiting_requests 4"));
  EXPECT_THAT(text, HasSubstr("verdict_request_latency_seconds_count 2"));
  EXPECT_THAT(text, HasSubstr("verdict_request_latency_seconds_sum 0.75"));
}

// Finds a free loopback port by binding port 0.
int FreePort() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  socklen_t len = sizeof(addr);
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  close(fd);
  return ntohs(addr.sin_port);
}

std::string HttpGet(int port, const std::string& path) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    return "";
  }
  const std::string request =
      absl::StrCat("GET ", path, " HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n");
  (void)!write(fd, request.data(), request.size());
  std::string response;
  char buf[4096];
  ssize_t n;
  while ((n = read(fd, buf, sizeof(buf))) > 0) response.append(buf, n);
  close(fd);
  return response;
}

TEST(MetricsExposerTest, ServesRegistryOverHttp) {
  auto registry = std::make_shared<prometheus::Registry>();
  ServingMetrics metrics(registry);
  metrics.RecordSpeculativeStep(6, 6, 4);
  const int port = FreePort();
  auto exposer = StartMetricsExposer(absl::StrCat("127.0.0.1:", port), registry);
  ASSERT_TRUE(exposer.ok()) << exposer.status();
  const std::string response = HttpGet(port, "/metrics");
  EXPECT_THAT(response, HasSubstr("200 OK"));
  EXPECT_THAT(response, HasSubstr("verdict_draft_tokens_proposed_total 6"));
}

TEST(MetricsExposerTest, BusyPortIsAnError) {
  auto registry = std::make_shared<prometheus::Registry>();
  const int port = FreePort();
  auto first = StartMetricsExposer(absl::StrCat("127.0.0.1:", port), registry);
  ASSERT_TRUE(first.ok()) << first.status();
  auto second = StartMetricsExposer(absl::StrCat("127.0.0.1:", port), registry);
  ASSERT_FALSE(second.ok());
  EXPECT_THAT(std::string(second.status().message()), HasSubstr(absl::StrCat(port)));
}

}  // namespace
}  // namespace verdict
