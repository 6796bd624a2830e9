#include "runtime/cli/step_log.h"

#include <fstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace verdict {
namespace {

StepTiming MixedStep() {
  StepTiming t;
  t.step = 41;
  t.batch_size = 64;
  t.verify_tokens = 90;
  t.budget = 26;
  t.plan_reason = PlanReason::kPlanned;
  t.draft_passes = 2;
  t.draft_reason = DraftReason::kPlanned;
  t.drafting_requests = 17;
  t.catch_up_tokens = 40;
  t.committed_at = absl::FromUnixMicros(1796300000123456);
  t.draft_seconds = 0.0021;
  t.verify_seconds = 0.0093;
  t.prefill_tokens = 93;
  t.priced_prefill_rows = 71;
  t.target_prefill_seconds = 0.0042;
  t.draft_prefill_seconds = 0.0011;
  t.predicted_seconds = 0.0107;
  t.plan_seconds = 0.00004;
  t.await_seconds = 0.0081;
  return t;
}

TEST(StepLogTest, ALineCarriesEveryFieldOfTheStep) {
  const nlohmann::json line = nlohmann::json::parse(StepLog::Line(MixedStep()));
  EXPECT_EQ(line["step"], 41);
  EXPECT_EQ(line["batch"], 64);
  EXPECT_EQ(line["verify_tokens"], 90);
  EXPECT_EQ(line["budget"], 26);
  EXPECT_EQ(line["plan_reason"], std::string(PlanReasonName(PlanReason::kPlanned)));
  EXPECT_EQ(line["draft_reason"], "planned");
  EXPECT_EQ(line["draft_passes"], 2);
  EXPECT_EQ(line["drafting_requests"], 17);
  EXPECT_EQ(line["catch_up_tokens"], 40);
  EXPECT_DOUBLE_EQ(line["committed_at"].get<double>(), 1796300000.123456);
  EXPECT_DOUBLE_EQ(line["draft_seconds"].get<double>(), 0.0021);
  EXPECT_DOUBLE_EQ(line["verify_seconds"].get<double>(), 0.0093);
  EXPECT_EQ(line["prefill_tokens"], 93);
  EXPECT_EQ(line["priced_prefill_rows"], 71);
  EXPECT_DOUBLE_EQ(line["target_prefill_seconds"].get<double>(), 0.0042);
  EXPECT_DOUBLE_EQ(line["draft_prefill_seconds"].get<double>(), 0.0011);
  EXPECT_DOUBLE_EQ(line["predicted_seconds"].get<double>(), 0.0107);
  EXPECT_DOUBLE_EQ(line["plan_seconds"].get<double>(), 0.00004);
  EXPECT_DOUBLE_EQ(line["await_seconds"].get<double>(), 0.0081);
}

TEST(StepLogTest, WritesOneLinePerStepInOrder) {
  const std::string path = ::testing::TempDir() + "/steps.jsonl";
  {
    auto log = StepLog::Open(path);
    ASSERT_TRUE(log.ok()) << log.status();
    StepTiming t = MixedStep();
    for (int i = 1; i <= 3; ++i) {
      t.step = i;
      t.draft_passes = i - 1;
      (*log)->Write(t);
    }
  }
  std::ifstream in(path);
  std::vector<nlohmann::json> lines;
  for (std::string s; std::getline(in, s);) lines.push_back(nlohmann::json::parse(s));
  ASSERT_EQ(lines.size(), 3u);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(lines[i]["step"], i + 1);
    EXPECT_EQ(lines[i]["draft_passes"], i);
  }
}

TEST(StepLogTest, APathThatCannotBeWrittenIsRefusedByName) {
  const std::string path = ::testing::TempDir() + "/no-such-dir/steps.jsonl";
  auto log = StepLog::Open(path);
  ASSERT_FALSE(log.ok());
  EXPECT_NE(log.status().message().find(path), std::string::npos) << log.status();
}

}  // namespace
}  // namespace verdict
