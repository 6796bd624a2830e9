#include "runtime/bench/bench_stats.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "runtime/bench/bench_report.h"

namespace verdict {
namespace {

using ::testing::DoubleNear;
using ::testing::HasSubstr;
using ::testing::Not;

// A completed request: chunks at the given times (s since sent) with the
// given token counts, and usage matching them.
RequestRecord Completed(int index, std::vector<double> times, std::vector<int> tokens,
                        double start_s, double end_s, int steps, int accepted) {
  RequestRecord r;
  r.index = index;
  r.ok = true;
  r.finish_reason = "length";
  r.start_s = start_s;
  r.end_s = end_s;
  r.chunk_times_s = std::move(times);
  r.chunk_tokens = std::move(tokens);
  r.has_usage = true;
  r.prompt_tokens = 10;
  r.completion_tokens = r.streamed_tokens();
  r.verify_steps = steps;
  r.accepted_tokens = accepted;
  r.draft_tokens = 5 * steps;
  return r;
}

TEST(PercentileTest, InterpolatesLikeNumpy) {
  EXPECT_TRUE(std::isnan(Percentile({}, 50)));
  EXPECT_DOUBLE_EQ(Percentile({7}, 99), 7);
  EXPECT_DOUBLE_EQ(Percentile({4, 1, 3, 2}, 50), 2.5);
  EXPECT_DOUBLE_EQ(Percentile({1, 2, 3, 4, 5}, 0), 1);
  EXPECT_DOUBLE_EQ(Percentile({1, 2, 3, 4, 5}, 100), 5);
  // numpy.percentile(range(1, 101), 99) == 99.01
  std::vector<double> hundred;
  for (int i = 1; i <= 100; ++i) hundred.push_back(i);
  EXPECT_NEAR(Percentile(hundred, 99), 99.01, 1e-9);
}

TEST(RequestRecordTest, DecodeRateStartsAfterTheFirstChunk) {
  // 1 token at 0.1 s, then 3 + 4 tokens by 0.3 s: 7 tokens in 0.2 s.
  RequestRecord r = Completed(0, {0.1, 0.2, 0.3}, {1, 3, 4}, 0, 0.35, 3, 5);
  EXPECT_EQ(r.streamed_tokens(), 8);
  EXPECT_DOUBLE_EQ(r.ttft_s(), 0.1);
  EXPECT_DOUBLE_EQ(r.decode_rate(), 7 / 0.2);
  // A first chunk of several tokens (the first step accepted drafts) does
  // not count toward the decode rate.
  RequestRecord multi = Completed(0, {0.1, 0.3}, {4, 2}, 0, 0.3, 2, 4);
  EXPECT_DOUBLE_EQ(multi.decode_rate(), 2 / 0.2);
  EXPECT_EQ(Completed(0, {0.1}, {5}, 0, 0.1, 1, 4).decode_rate(), -1);
  EXPECT_EQ(RequestRecord().ttft_s(), -1);
}

TEST(SummarizeTest, SeedTwoDecodeRateAndLatencies) {
  std::vector<RequestRecord> records = {
      // 10 tokens after the first in 0.5 s: 20 tok/s.
      Completed(0, {0.2, 0.45, 0.7}, {1, 5, 5}, 0.0, 0.8, 4, 7),
      // 6 tokens after the first in 0.2 s: 30 tok/s.
      Completed(1, {0.4, 0.5, 0.6}, {2, 3, 3}, 0.1, 0.75, 3, 5),
  };
  RequestRecord failed;
  failed.index = 2;
  failed.error = "HTTP 503: draining";
  failed.chunk_tokens = {1};
  failed.chunk_times_s = {0.1};
  records.push_back(failed);

  PointSummary s = Summarize(4, records, 2.0);
  EXPECT_EQ(s.concurrency, 4);
  EXPECT_EQ(s.num_requests, 3);
  EXPECT_EQ(s.completed, 2);
  EXPECT_EQ(s.failed, 1);
  EXPECT_THAT(s.errors, testing::ElementsAre("HTTP 503: draining"));
  EXPECT_DOUBLE_EQ(s.mean_request_decode_rate, 25);
  // Concurrency 4 is capped at the 3 requests of the point.
  EXPECT_DOUBLE_EQ(s.decode_tokens_per_s, 75);
  EXPECT_EQ(s.completion_tokens, 19);
  EXPECT_EQ(s.streamed_tokens, 19);
  EXPECT_DOUBLE_EQ(s.output_tokens_per_s, 9.5);
  EXPECT_DOUBLE_EQ(s.requests_per_s, 1.0);
  EXPECT_DOUBLE_EQ(s.ttft_p50_ms, 300);
  EXPECT_DOUBLE_EQ(s.e2e_p50_ms, (800 + 650) / 2.0);
  // ITL samples: 5 of 50 ms, 5 of 50 ms, 3 of 33.3 ms, 3 of 33.3 ms.
  EXPECT_NEAR(s.itl_p50_ms, 50, 1e-9);
  EXPECT_NEAR(s.itl_p99_ms, 50, 1e-9);
  // (7 + 5 accepted + 7 steps) / 7 steps.
  EXPECT_EQ(s.verify_steps, 7);
  EXPECT_NEAR(s.acceptance_length, 19.0 / 7.0, 1e-12);
  // Without the server's counter: every proposed draft (5 a step) verified.
  EXPECT_EQ(s.verify_tokens_source, "drafts");
  EXPECT_DOUBLE_EQ(s.verify_tokens_per_step, 6);
  // With it: 14 drafts verified over 7 request-steps.
  PointSummary server = Summarize(4, records, 2.0, 14, 19);
  EXPECT_EQ(server.verify_tokens_source, "server");
  EXPECT_DOUBLE_EQ(server.verify_tokens_per_step, 3);
  EXPECT_EQ(server.server_generated_tokens, 19);
}

TEST(SummarizeTest, NoSpeculationLeavesSpeculativeNumbersUndefined) {
  RequestRecord r = Completed(0, {0.1, 0.2}, {1, 1}, 0, 0.2, 0, 0);
  r.draft_tokens = 0;
  PointSummary s = Summarize(1, {r}, 0.2);
  EXPECT_TRUE(std::isnan(s.acceptance_length));
  EXPECT_TRUE(std::isnan(s.verify_tokens_per_step));
  EXPECT_EQ(s.verify_tokens_source, "");
  EXPECT_DOUBLE_EQ(s.decode_tokens_per_s, 10);
}

TEST(PrometheusValueTest, FindsUnlabelledSamples) {
  const std::string text =
      "# HELP verdict_generated_tokens_total Tokens\n"
      "# TYPE verdict_generated_tokens_total counter\n"
      "verdict_generated_tokens_total 1234\n"
      "verdict_requests_total{outcome=\"length\"} 3\n"
      "verdict_draft_tokens_verified_total 5.5e+02\n";
  EXPECT_DOUBLE_EQ(*PrometheusValue(text, "verdict_generated_tokens_total"), 1234);
  EXPECT_DOUBLE_EQ(*PrometheusValue(text, "verdict_draft_tokens_verified_total"), 550);
  EXPECT_EQ(PrometheusValue(text, "verdict_requests_total").status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(PrometheusValue("x abc\n", "x").status().code(), absl::StatusCode::kDataLoss);
}

BenchReport SampleReport() {
  BenchReport report;
  report.config.label = "static-tp1";
  report.config.url = "http://127.0.0.1:8000";
  report.config.model = "verdict-default";
  report.config.prompts = "builtin";
  report.config.num_prompts = 32;
  report.config.max_tokens = 16;
  report.config.seed = 1;
  report.config.warmup_requests = -1;
  report.config.warmup_max_tokens = 16;
  BenchPoint one;
  one.requests = {Completed(0, {0.2, 0.45, 0.7}, {1, 5, 5}, 0.0, 0.8, 4, 7)};
  one.summary = Summarize(1, one.requests, 0.8);
  BenchPoint four;
  four.requests = {Completed(0, {0.4, 0.5, 0.6}, {2, 3, 3}, 0.1, 0.75, 3, 5)};
  RequestRecord bad;
  bad.index = 1;
  bad.error = "streamed 3 tokens but usage counts 4";
  four.requests.push_back(bad);
  four.summary = Summarize(4, four.requests, 0.75, 6, 8);
  report.points = {one, four};
  return report;
}

TEST(BenchReportTest, JsonHoldsSummariesAndRequests) {
  const nlohmann::json j = ReportJson(SampleReport());
  EXPECT_EQ(j["version"], kBenchReportVersion);
  EXPECT_EQ(j["label"], "static-tp1");
  EXPECT_EQ(j["config"]["max_tokens"], 16);
  ASSERT_EQ(j["points"].size(), 2u);
  const nlohmann::json& p = j["points"][0];
  EXPECT_EQ(p["concurrency"], 1);
  EXPECT_EQ(p["completed"], 1);
  EXPECT_EQ(p["completion_tokens"], 11);
  EXPECT_DOUBLE_EQ(p["decode_tokens_per_s"].get<double>(), 20);
  EXPECT_TRUE(p["server_generated_tokens"].is_null());
  ASSERT_EQ(p["requests"].size(), 1u);
  EXPECT_EQ(p["requests"][0]["completion_tokens"], 11);
  EXPECT_EQ(p["requests"][0]["streamed_tokens"], 11);
  EXPECT_EQ(p["requests"][0]["chunks"], 3);
  const nlohmann::json& q = j["points"][1];
  EXPECT_EQ(q["failed"], 1);
  EXPECT_EQ(q["verify_tokens_source"], "server");
  EXPECT_EQ(q["requests"][1]["ok"], false);
  EXPECT_TRUE(q["requests"][1]["ttft_ms"].is_null());
}

TEST(BenchReportTest, CsvHasOneRowAPoint) {
  const std::string csv = ReportCsv(SampleReport());
  std::vector<std::string> lines = absl::StrSplit(csv, '\n', absl::SkipEmpty());
  ASSERT_EQ(lines.size(), 3u);
  std::vector<std::string> header = absl::StrSplit(lines[0], ',');
  std::vector<std::string> row = absl::StrSplit(lines[1], ',');
  ASSERT_EQ(header.size(), row.size());
  EXPECT_EQ(header[0], "label");
  EXPECT_EQ(row[0], "static-tp1");
  auto column = [&](const std::string& name) {
    return row[std::find(header.begin(), header.end(), name) - header.begin()];
  };
  EXPECT_EQ(column("concurrency"), "1");
  EXPECT_EQ(column("decode_tokens_per_s"), "20");
  EXPECT_EQ(column("completion_tokens"), "11");
  EXPECT_EQ(column("verify_tokens_source"), "drafts");
}

TEST(BenchReportTest, MarkdownTableAndFailures) {
  const std::string md = ReportMarkdown(SampleReport());
  EXPECT_THAT(md, HasSubstr("## verdict bench: static-tp1"));
  EXPECT_THAT(md, HasSubstr("| concurrency | requests | decode tok/s |"));
  EXPECT_THAT(md, HasSubstr("| 1 | 1 | 20 | "));
  EXPECT_THAT(md, HasSubstr("| 4 | 1 (1 failed) | "));
  EXPECT_THAT(md, HasSubstr("- c4: streamed 3 tokens but usage counts 4"));
  EXPECT_THAT(md, HasSubstr("warm-up: one request per client of 16 tokens"));
}

TEST(BenchReportTest, WritesTheThreeFiles) {
  const std::string dir =
      std::string(std::getenv("TEST_TMPDIR") ? std::getenv("TEST_TMPDIR") : "/tmp") +
      "/bench_report_test/sub";
  std::filesystem::remove_all(dir);
  ASSERT_TRUE(WriteReport(SampleReport(), dir + "/run").ok());
  for (const char* ext : {".json", ".csv", ".md"}) {
    EXPECT_TRUE(std::filesystem::exists(dir + "/run" + ext)) << ext;
  }
  std::ifstream in(dir + "/run.json");
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_EQ(nlohmann::json::parse(text.str()), ReportJson(SampleReport()));
}

}  // namespace
}  // namespace verdict
