#include "monitoring/metrics.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <limits>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace verdict {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

TEST(ServingMetricsTest, CountersAppearInTextExposition) {
  auto registry = std::make_shared<prometheus::Registry>();
  ServingMetrics metrics(registry);
  metrics.RecordRequestFinished(RequestOutcome::kStop, 12, 30, 0.5);
  metrics.RecordRequestFinished(RequestOutcome::kLength, 8, 16, 0.25);
  metrics.RecordSpeculativeStep(/*proposed=*/10, /*verified=*/7, /*accepted=*/5);
  metrics.SetQueueDepth(3, 4);
  metrics.RecordRequestRejected();

  const std::string text = SerializeMetrics(*registry);
  EXPECT_THAT(text, HasSubstr("verdict_requests_total{outcome=\"stop\"} 1"));
  EXPECT_THAT(text, HasSubstr("verdict_requests_total{outcome=\"length\"} 1"));
  EXPECT_THAT(text, HasSubstr("verdict_requests_total{outcome=\"error\"} 0"));
  EXPECT_THAT(text, HasSubstr("verdict_requests_total{outcome=\"rejected\"} 1"));
  EXPECT_THAT(text, HasSubstr("verdict_prompt_tokens_total 20"));
  EXPECT_THAT(text, HasSubstr("verdict_generated_tokens_total 46"));
  EXPECT_THAT(text, HasSubstr("verdict_draft_tokens_accepted_total 5"));
  EXPECT_THAT(text, HasSubstr("verdict_running_requests 3"));
  EXPECT_THAT(text, HasSubstr("verdict_waiting_requests 4"));
  EXPECT_THAT(text, HasSubstr("verdict_request_latency_seconds_count 2"));
  EXPECT_THAT(text, HasSubstr("verdict_request_latency_seconds_sum 0.75"));
}

EngineInfo TestInfo() {
  EngineInfo info;
  info.verify_mode = "compact";
  info.num_draft_tokens = 3;
  info.world_size = 2;
  info.max_running_requests = 8;
  info.max_waiting_requests = 16;
  info.plan_reasons = {"planned", "confidence-prior"};
  return info;
}

TEST(ServingMetricsTest, ConfigureCreatesEverySeriesAtZero) {
  auto registry = std::make_shared<prometheus::Registry>();
  ServingMetrics metrics(registry);
  metrics.Configure(TestInfo());
  const std::string text = SerializeMetrics(*registry);
  EXPECT_THAT(text, HasSubstr("verdict_verify_mode_info{mode=\"compact\"} 1"));
  EXPECT_THAT(text, HasSubstr("verdict_num_draft_tokens 3"));
  EXPECT_THAT(text, HasSubstr("verdict_tp_world_size 2"));
  EXPECT_THAT(text, HasSubstr("verdict_tp_ranks_up 2"));
  EXPECT_THAT(text, HasSubstr("verdict_max_waiting_requests 16"));
  EXPECT_THAT(text, HasSubstr("verdict_plan_steps_total{reason=\"confidence-prior\"} 0"));
  EXPECT_THAT(text, HasSubstr("verdict_draft_position_accepted_total{position=\"2\"} 0"));
  EXPECT_THAT(text, Not(HasSubstr("position=\"3\"")));
  // No Brier score before the first sample (0 would mean perfect).
  EXPECT_THAT(text, HasSubstr("verdict_estimator_brier_score{position=\"0\"} Nan"));
  EXPECT_THAT(text, HasSubstr("verdict_rank_collective_seconds_total{rank=\"1\"} 0"));
  EXPECT_THAT(text, Not(HasSubstr("rank=\"2\"")));
  EXPECT_THAT(text, HasSubstr("verdict_graph_replays_total{model=\"target\"} 0"));
  EXPECT_THAT(text, HasSubstr("verdict_graph_replays_total{model=\"draft\"} 0"));
}

TEST(ServingMetricsTest, GraphReplaysFollowTheModelsTotals) {
  auto registry = std::make_shared<prometheus::Registry>();
  ServingMetrics metrics(registry);
  metrics.Configure(TestInfo());
  metrics.RecordGraphReplays(3, 8);
  metrics.RecordGraphReplays(5, 8);
  metrics.RecordGraphReplays(4, 9);  // a counter never goes back
  const std::string text = SerializeMetrics(*registry);
  EXPECT_THAT(text, HasSubstr("verdict_graph_replays_total{model=\"target\"} 5\n"));
  EXPECT_THAT(text, HasSubstr("verdict_graph_replays_total{model=\"draft\"} 9\n"));
}

TEST(ServingMetricsTest, EagerPassesByModelAndReason) {
  auto registry = std::make_shared<prometheus::Registry>();
  ServingMetrics metrics(registry);
  metrics.Configure(TestInfo());
  metrics.RecordEagerPasses("target", "first_use", 2);
  metrics.RecordEagerPasses("target", "first_use", 7);
  metrics.RecordEagerPasses("draft", "partial_logits", 4);
  metrics.RecordEagerPasses("draft", "capture_failed", 0);  // no series yet
  const std::string text = SerializeMetrics(*registry);
  EXPECT_THAT(text, HasSubstr("verdict_eager_passes_total{model=\"target\",reason=\"first_use\"} 7\n"));
  EXPECT_THAT(text,
              HasSubstr("verdict_eager_passes_total{model=\"draft\",reason=\"partial_logits\"} 4\n"));
  EXPECT_THAT(text, Not(HasSubstr("reason=\"capture_failed\"")));
}

TEST(ServingMetricsTest, StepRecordsSpeculationAndPlannerFigures) {
  auto registry = std::make_shared<prometheus::Registry>();
  ServingMetrics metrics(registry);
  metrics.Configure(TestInfo());
  // Two speculative requests, gamma 3: one verified 3 drafts and accepted 2,
  // the other verified 1 and accepted 0.
  const std::vector<DraftOutcome> drafts = {{3, 3, 2}, {3, 1, 0}};
  StepRecord step;
  step.plan_reason = "planned";
  step.planned_budget = 4;
  step.full_block_drafts = 6;
  step.verify_tokens = 6;
  step.draft_seconds = 0.005;
  step.verify_seconds = 0.020;
  step.predicted_seconds = 0.050;
  step.collective_seconds = 0.003;
  step.drafts = drafts;
  metrics.RecordStep(step);

  const std::string text = SerializeMetrics(*registry);
  EXPECT_THAT(text, HasSubstr("verdict_decode_steps_total 1"));
  EXPECT_THAT(text, HasSubstr("verdict_plan_steps_total{reason=\"planned\"} 1"));
  EXPECT_THAT(text, HasSubstr("verdict_draft_tokens_proposed_total 6"));
  EXPECT_THAT(text, HasSubstr("verdict_draft_tokens_verified_total 4"));
  EXPECT_THAT(text, HasSubstr("verdict_draft_tokens_accepted_total 2"));
  EXPECT_THAT(text, HasSubstr("verdict_draft_position_verified_total{position=\"0\"} 2"));
  EXPECT_THAT(text, HasSubstr("verdict_draft_position_verified_total{position=\"2\"} 1"));
  EXPECT_THAT(text, HasSubstr("verdict_draft_position_accepted_total{position=\"0\"} 1"));
  EXPECT_THAT(text, HasSubstr("verdict_draft_position_accepted_total{position=\"1\"} 1"));
  EXPECT_THAT(text, HasSubstr("verdict_draft_position_accepted_total{position=\"2\"} 0"));
  // Acceptance lengths 3 and 1 (accepted + 1).
  EXPECT_THAT(text, HasSubstr("verdict_step_acceptance_length_count 2"));
  EXPECT_THAT(text, HasSubstr("verdict_step_acceptance_length_sum 4"));
  EXPECT_THAT(text, HasSubstr("verdict_step_acceptance_length_bucket{le=\"1\"} 1"));
  // 4 of 6 drafts planned: 0.667 falls in the 0.7 bucket, not the 0.6 one.
  EXPECT_THAT(text, HasSubstr("verdict_planned_budget_ratio_bucket{le=\"0.6\"} 0"));
  EXPECT_THAT(text, HasSubstr("verdict_planned_budget_ratio_bucket{le=\"0.7\"} 1"));
  EXPECT_THAT(text, HasSubstr("verdict_step_verify_tokens_sum 6"));
  EXPECT_THAT(text, HasSubstr("verdict_step_verify_seconds_sum 0.02"));
  EXPECT_THAT(text, HasSubstr("verdict_step_draft_seconds_sum 0.005"));
  EXPECT_THAT(text, HasSubstr("verdict_step_predicted_seconds_sum 0.05\n"));
  // The table prices the whole step: |0.050 - (0.005 + 0.020)| / 0.025 = 1
  // (against the verify alone it would be 1.5).
  EXPECT_THAT(text, HasSubstr("verdict_step_prediction_relative_error_sum 1\n"));
  EXPECT_THAT(text, HasSubstr("verdict_step_prediction_relative_error_bucket{le=\"0.5\"} 0"));
  EXPECT_THAT(text, HasSubstr("verdict_step_prediction_relative_error_bucket{le=\"1\"} 1"));
  EXPECT_THAT(text, HasSubstr("verdict_step_collective_seconds_sum 0.003"));
}

TEST(ServingMetricsTest, StepWithoutCostTableRecordsNoPrediction) {
  auto registry = std::make_shared<prometheus::Registry>();
  ServingMetrics metrics(registry);
  metrics.Configure(TestInfo());
  StepRecord step;
  step.plan_reason = "confidence-prior";
  step.verify_tokens = 1;
  step.verify_seconds = 0.01;
  step.predicted_seconds = std::numeric_limits<double>::quiet_NaN();
  metrics.RecordStep(step);  // no speculative request: no budget ratio either
  const std::string text = SerializeMetrics(*registry);
  EXPECT_THAT(text, HasSubstr("verdict_step_verify_seconds_count 1"));
  EXPECT_THAT(text, HasSubstr("verdict_step_predicted_seconds_count 0"));
  EXPECT_THAT(text, HasSubstr("verdict_step_prediction_relative_error_count 0"));
  EXPECT_THAT(text, HasSubstr("verdict_planned_budget_ratio_count 0"));
  EXPECT_THAT(text, HasSubstr("verdict_plan_steps_total{reason=\"confidence-prior\"} 1"));
}

TEST(ServingMetricsTest, BrierScoreIsTheRunningMeanSquaredError) {
  auto registry = std::make_shared<prometheus::Registry>();
  ServingMetrics metrics(registry);
  metrics.Configure(TestInfo());
  metrics.RecordCalibration(1, 0.75, true);   // (0.75 - 1)^2 = 0.0625
  metrics.RecordCalibration(1, 0.5, false);   // 0.25
  metrics.RecordCalibration(7, 0.5, false);   // no such position: ignored
  const std::string text = SerializeMetrics(*registry);
  EXPECT_THAT(text, HasSubstr("verdict_estimator_brier_score{position=\"1\"} 0.15625"));
  EXPECT_THAT(text, HasSubstr("verdict_estimator_brier_samples_total{position=\"1\"} 2"));
  EXPECT_THAT(text, HasSubstr("verdict_estimator_brier_samples_total{position=\"0\"} 0"));
  EXPECT_THAT(text, HasSubstr("verdict_estimator_brier_score{position=\"0\"} Nan"));
}

TEST(ServingMetricsTest, EstimatorAndRankTotalsNeverGoBack) {
  auto registry = std::make_shared<prometheus::Registry>();
  ServingMetrics metrics(registry);
  metrics.Configure(TestInfo());
  std::vector<EstimatorPositionState> positions(3);
  positions[0] = {true, 1.5, -0.25, 200, 3};
  metrics.RecordEstimator(true, positions);
  positions[0].observations = 150;  // a smaller total is not a reset
  metrics.RecordEstimator(true, positions);
  metrics.RecordRankFigures(1, RankFigures{64, 1.5, 0.25});
  metrics.RecordRankFigures(1, RankFigures{128, 3.0, 0.5});
  metrics.RecordRankFigures(5, RankFigures{1, 1, 1});  // no such rank: ignored
  metrics.RecordPlanCheck(false);
  metrics.RecordPlanCheck(true);
  metrics.SetRanksUp(0);
  const std::string text = SerializeMetrics(*registry);
  EXPECT_THAT(text, HasSubstr("verdict_estimator_ready 1"));
  EXPECT_THAT(text, HasSubstr("verdict_estimator_fitted{position=\"0\"} 1"));
  EXPECT_THAT(text, HasSubstr("verdict_estimator_fitted{position=\"1\"} 0"));
  EXPECT_THAT(text, HasSubstr("verdict_estimator_slope{position=\"0\"} 1.5"));
  EXPECT_THAT(text, HasSubstr("verdict_estimator_intercept{position=\"0\"} -0.25"));
  EXPECT_THAT(text, HasSubstr("verdict_estimator_observations_total{position=\"0\"} 200"));
  EXPECT_THAT(text, HasSubstr("verdict_estimator_refits_total{position=\"0\"} 3"));
  EXPECT_THAT(text, HasSubstr("verdict_rank_decode_steps_total{rank=\"1\"} 128"));
  EXPECT_THAT(text, HasSubstr("verdict_rank_verify_seconds_total{rank=\"1\"} 3"));
  EXPECT_THAT(text, HasSubstr("verdict_rank_collective_seconds_total{rank=\"1\"} 0.5"));
  EXPECT_THAT(text, HasSubstr("verdict_rank_decode_steps_total{rank=\"0\"} 0"));
  EXPECT_THAT(text, HasSubstr("verdict_plan_checks_total 2"));
  EXPECT_THAT(text, HasSubstr("verdict_plan_mismatches_total 1"));
  EXPECT_THAT(text, HasSubstr("verdict_tp_ranks_up 0"));
}

TEST(ServingMetricsTest, RequestAcceptanceLength) {
  auto registry = std::make_shared<prometheus::Registry>();
  ServingMetrics metrics(registry);
  metrics.RecordRequestAcceptanceLength(2.6);
  const std::string text = SerializeMetrics(*registry);
  EXPECT_THAT(text, HasSubstr("verdict_request_acceptance_length_bucket{le=\"2.5\"} 0"));
  EXPECT_THAT(text, HasSubstr("verdict_request_acceptance_length_bucket{le=\"2.75\"} 1"));
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
