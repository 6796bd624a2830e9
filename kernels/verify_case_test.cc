#include "kernels/verify_case.h"

#include <cmath>
#include <fstream>
#include <sstream>
#include <string>

#include "absl/flags/flag.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace verdict {
namespace {

using nlohmann::json;
using ::testing::AnyOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr char kWorkedExample[] = "kernels/testdata/seed_worked_example.json";

json ReadJson(const std::string& path) {
  std::ifstream file(path);
  std::stringstream text;
  text << file.rdbuf();
  return json::parse(text.str(), nullptr, false);
}

nlohmann::ordered_json RunCase(const json& c, int trials) {
  auto step = ParseVerifyCase(c);
  EXPECT_TRUE(step.ok()) << step.status();
  if (!step.ok()) return nlohmann::ordered_json();
  auto report = RunVerifyCase(**step, trials);
  EXPECT_TRUE(report.ok()) << report.status();
  return report.ok() ? *report : nlohmann::ordered_json();
}

TEST(VerifyCaseTest, OneTrialPrintsEveryField) {
  const json c = ReadJson(kWorkedExample);
  ASSERT_FALSE(c.is_discarded());
  const nlohmann::ordered_json report = RunCase(c, 1);
  ASSERT_EQ(report["rows"].size(), 2u);
  const auto& row0 = report["rows"][0];
  for (const char* key : {"row", "request", "local_step", "is_verify", "draft_token_id",
                          "raw_accept", "accept", "is_final", "candidate_token_id",
                          "verified_token_id", "logprob"}) {
    EXPECT_TRUE(row0.contains(key)) << key;
  }
  EXPECT_EQ(row0["draft_token_id"], 0);
  EXPECT_TRUE(report["rows"][1]["draft_token_id"].is_null());
  const auto& req = report["requests"][0];
  const int accepted = req["last_valid_offset"];
  if (accepted == 1) {
    EXPECT_EQ(req["emitted_token_ids"][0], 0);
  } else {
    EXPECT_THAT(req["sampled_token_id"].get<int>(), AnyOf(1, 3));  // residual [0, .5, 0, .5]
  }
  EXPECT_EQ(report["num_verified_tokens"], nlohmann::ordered_json::array({1}));
}

TEST(VerifyCaseTest, TrialsGiveHistograms) {
  const int trials = 6000;
  const nlohmann::ordered_json report = RunCase(ReadJson(kWorkedExample), trials);
  const auto& req = report["requests"][0];
  const std::vector<int64_t> lengths = req["accepted_length_histogram"];
  ASSERT_EQ(lengths.size(), 2u);
  // Accept with probability q(A) / p(A) = 2/3.
  const double sigma = std::sqrt(trials * (2.0 / 3) * (1.0 / 3));
  EXPECT_NEAR(static_cast<double>(lengths[1]), trials * 2.0 / 3, 4.5 * sigma);
  const auto& position0 = req["positions"][0];
  EXPECT_EQ(position0["emitted"], trials);
  for (const auto& [token, count] : position0["token_histogram"].items()) {
    EXPECT_THAT(token, AnyOf("0", "1", "3"));  // never C: q(C) - p(C) = 0
  }
  EXPECT_EQ(req["positions"][1]["emitted"], lengths[1]);  // the bonus after an accept
  EXPECT_NEAR(req["mean_emitted_tokens"].get<double>(),
              1.0 + static_cast<double>(lengths[1]) / trials, 1e-9);
}

TEST(VerifyCaseTest, SimulatedAcceptanceReplacesTheTargetsTest) {
  json c = ReadJson(kWorkedExample);
  ASSERT_FALSE(c.is_discarded());
  c["simulated_acceptance"] = 0.25;
  const int trials = 6000;
  const nlohmann::ordered_json report = RunCase(c, trials);
  const std::vector<int64_t> lengths = report["requests"][0]["accepted_length_histogram"];
  ASSERT_EQ(lengths.size(), 2u);
  // Accept with probability 0.25 instead of q(A) / p(A) = 2/3.
  const double sigma = std::sqrt(trials * 0.25 * 0.75);
  EXPECT_NEAR(static_cast<double>(lengths[1]), trials * 0.25, 4.5 * sigma);
}

TEST(VerifyCaseTest, SeedTwoRequestTable) {
  // Greedy rows: A accepts d1 d2 and rejects d3; B accepts all three.
  const auto peak = [](int id) {
    json row = nlohmann::ordered_json::array();
    for (int v = 0; v < 16; ++v) row.push_back(v == id ? 10.0 : 0.0);
    return row;
  };
  json c = {{"vocab_size", 16}, {"nextn", 5}};
  c["requests"] = nlohmann::ordered_json::array();
  c["requests"].push_back({{"temperature", 0},
                           {"draft_token_ids", {1, 2, 3, 4, 5}},
                           {"target_logits", {peak(1), peak(2), peak(11), peak(4), peak(12),
                                              peak(13)}}});
  c["requests"].push_back({{"temperature", 0},
                           {"draft_token_ids", {6, 7, 8}},
                           {"target_logits", {peak(6), peak(7), peak(8), peak(14)}}});
  // Greedy rows read no draft distribution, but the format asks for one.
  for (json& r : c["requests"]) {
    r["draft_probs"] = nlohmann::ordered_json::array();
    for (size_t k = 0; k < r["draft_token_ids"].size(); ++k) r["draft_probs"].push_back(peak(0));
  }
  const nlohmann::ordered_json report = RunCase(c, 1);
  EXPECT_EQ(report["num_generated_tokens"], nlohmann::ordered_json::array({2, 2, 1, 0, 0}));
  EXPECT_EQ(report["num_verified_tokens"], nlohmann::ordered_json::array({2, 2, 2, 1, 1}));
  EXPECT_EQ(report["requests"][0]["last_valid_offset"], 2);
  EXPECT_EQ(report["requests"][1]["last_valid_offset"], 3);
  EXPECT_EQ(report["requests"][0]["emitted_token_ids"], nlohmann::ordered_json::array({1, 2, 11}));
  EXPECT_EQ(report["requests"][1]["emitted_token_ids"], nlohmann::ordered_json::array({6, 7, 8, 14}));
  EXPECT_EQ(report["rows"][3]["raw_accept"], true);
  EXPECT_EQ(report["rows"][3]["accept"], false);
}

TEST(VerifyCaseTest, ErrorsNameTheRequestAndRow) {
  json c = ReadJson(kWorkedExample);
  c["requests"][0]["target_probs"][1] = {0.5, 0.5};
  auto step = ParseVerifyCase(c);
  ASSERT_FALSE(step.ok());
  EXPECT_THAT(step.status().message(), HasSubstr("request 0, row 1"));

  c = ReadJson(kWorkedExample);
  c["requests"][0]["draft_token_ids"] = {9};
  step = ParseVerifyCase(c);
  ASSERT_TRUE(step.ok());
  auto report = RunVerifyCase(**step, 1);
  ASSERT_FALSE(report.ok());
  EXPECT_THAT(report.status().message(), HasSubstr("request 0, row 0: draft token id 9"));
}

// A field that nlohmann's get<int32_t>() would wrap or round (2^32 + 1
// reads as 1) is refused, naming the field and its range.
TEST(VerifyCaseTest, RefusesNumbersThatDoNotFitTheirField) {
  struct Bad {
    const char* pointer;  // JSON pointer into the worked example
    json value;
    const char* message;
  };
  const Bad cases[] = {
      {"/requests/0/draft_token_ids/0", json::parse("4294967297"),
       "case: requests[0].draft_token_ids[0]: expected an integer in [-2147483648, 2147483647], "
       "got 4294967297"},
      {"/vocab_size", json::parse("4294967300"),
       "case: vocab_size: expected an integer in [1, 8388608], got 4294967300"},
      {"/requests/0/seed", json::parse("-1"),
       "case: requests[0].seed: expected an integer in [0, 18446744073709551615], got -1"},
      {"/requests/0/top_k", json::parse("1.5"), "case: requests[0].top_k: expected an integer"},
      {"/requests/0/top_k", json::parse("2.0"), "case: requests[0].top_k: expected an integer"},
      {"/requests/0/verify_len", json::parse("4294967296"),
       "case: requests[0].verify_len: expected an integer"},
      {"/requests/0/position", json::parse("9223372036854775808"),
       "case: requests[0].position: expected an integer"},
      {"/nextn", json::parse("1e30"), "case: nextn: expected an integer"},
      {"/requests/0/temperature", json::parse("1e39"),
       "case: requests[0].temperature: expected a finite number"},
      {"/requests/0/target_probs/0/2", json::parse("1e300"), ""},  // finite: a valid p
      {"/requests/0/draft_probs/0/1", json::parse("-1e39"),
       "case: requests[0].draft_probs[0][1]: expected a finite number"},
      {"/requests/0/stop_token_ids", json::parse("[2, 4294967298]"),
       "case: requests[0].stop_token_ids[1]: expected an integer"},
      {"/requests/0/golden_token_ids", json::parse("[-1, -4294967295]"),
       "case: requests[0].golden_token_ids[1]: expected an integer"},
      {"/bitmasks", json::parse(R"([{"step": 0, "requests": [0], "bits": [[4294967297]]}])"),
       "case: bitmasks[0].bits[0][0]: expected an integer in [0, 4294967295], got 4294967297"},
      {"/bitmasks", json::parse(R"([{"step": 4294967296, "requests": [0], "bits": [[1]]}])"),
       "case: bitmasks[0].step: expected an integer"},
      {"/bitmasks",
       json::parse(R"([{"step": 0, "requests": [0], "allowed_token_ids": [[4294967297]]}])"),
       "case: bitmasks[0].allowed_token_ids[0][0]: expected an integer"},
      {"/bitmasks", json::parse(R"([{"step": 0, "requests": [4294967296], "bits": [[1]]}])"),
       "case: bitmasks[0].requests[0]: expected an integer"},
  };
  for (const Bad& bad : cases) {
    json c = ReadJson(kWorkedExample);
    ASSERT_FALSE(c.is_discarded());
    c[json::json_pointer(bad.pointer)] = bad.value;
    auto step = ParseVerifyCase(c);
    if (std::string(bad.message).empty()) {
      EXPECT_TRUE(step.ok()) << bad.pointer << ": " << step.status();
      continue;
    }
    if (step.ok()) {
      ADD_FAILURE() << bad.pointer << " = " << bad.value.dump() << " was accepted";
      continue;
    }
    EXPECT_THAT(step.status().message(), HasSubstr(bad.message)) << bad.pointer;
  }

  // A sparse draft distribution: the id and the probability of each entry.
  json c = ReadJson(kWorkedExample);
  c["requests"][0].erase("draft_probs");
  c["requests"][0]["draft_topk"] = json::parse("[[[0, 0.5], [4294967297, 0.5]]]");
  auto step = ParseVerifyCase(c);
  ASSERT_FALSE(step.ok());
  EXPECT_THAT(step.status().message(),
              HasSubstr("case: requests[0].draft_topk[0][1][0]: expected an integer"));
  c["requests"][0]["draft_topk"] = json::parse("[[[0, 0.5], [1, 1e39]]]");
  step = ParseVerifyCase(c);
  ASSERT_FALSE(step.ok());
  EXPECT_THAT(step.status().message(),
              HasSubstr("case: requests[0].draft_topk[0][1][1]: expected a finite number"));
}

TEST(VerifyCaseTest, CommandNamesTheFileOfABadCase) {
  json c = ReadJson(kWorkedExample);
  c["requests"][0]["draft_token_ids"][0] = json::parse("4294967297");
  const std::string path = ::testing::TempDir() + "/wrapped_token_id.json";
  std::ofstream(path) << c.dump();
  absl::SetFlag(&FLAGS_case, path);
  absl::SetFlag(&FLAGS_trials, 1);
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(RunSampleCommand({}), 1);
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_THAT(err, HasSubstr(path + ": case: requests[0].draft_token_ids[0]"));
  absl::SetFlag(&FLAGS_case, "");
}

TEST(VerifyCaseTest, CommandRunsAFile) {
  absl::SetFlag(&FLAGS_case, kWorkedExample);
  absl::SetFlag(&FLAGS_trials, 3);
  EXPECT_EQ(RunSampleCommand({}), 0);
  absl::SetFlag(&FLAGS_case, "kernels/testdata/does_not_exist.json");
  EXPECT_EQ(RunSampleCommand({}), 1);
  absl::SetFlag(&FLAGS_case, "");
  EXPECT_EQ(RunSampleCommand({}), 2);
}

}  // namespace
}  // namespace verdict
