#include "scheduler/plan_command.h"

#include <cstdio>
#include <fstream>
#include <string>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace verdict {
namespace {

using json = nlohmann::json;
using ::testing::HasSubstr;

std::string WriteTemp(const std::string& name, const std::string& text) {
  const std::string path = std::string(::testing::TempDir()) + "/" + name;
  std::ofstream(path) << text;
  return path;
}

// The exercise of seeds/001_4939eb13572a4c80.txt: two requests, three confidences each.
constexpr char kStep[] = R"({"requests": [
  {"confidences": [0.9, 0.9, 0.9]},
  {"confidences": [0.6, 0.5, 0.4], "max_verify_len": 4}]})";

// One second up to five verify tokens, two from six.
constexpr char kStaircase[] = R"({"batch_sizes": [2], "verify_tokens": [2, 5, 6, 8],
  "seconds": [[1.0, 1.0, 2.0, 2.0]]})";

json PlanJson(const PlanCommandArgs& args) {
  const absl::StatusOr<std::string> out = PlanCommandJson(args);
  EXPECT_TRUE(out.ok()) << out.status();
  if (!out.ok()) return json();
  const json doc = json::parse(*out, nullptr, false);
  EXPECT_FALSE(doc.is_discarded()) << *out;
  return doc;
}

TEST(PlanCommandTest, PrintsThePlannedBudget) {
  PlanCommandArgs args;
  args.cost_table_path = WriteTemp("staircase.json", kStaircase);
  args.input_path = WriteTemp("step.json", kStep);
  args.mode = "compact";
  const json plan = PlanJson(args);
  EXPECT_EQ(plan["mode"], "compact");
  EXPECT_EQ(plan["reason"], "planned");
  EXPECT_EQ(plan["requests"], 2);
  EXPECT_EQ(plan["gamma"], 3);
  EXPECT_EQ(plan["budget"], 3);
  EXPECT_EQ(plan["verify_lens"], json::array({4, 1}));
  EXPECT_EQ(plan["verify_tokens"], 5);
  EXPECT_EQ(plan["packed"], true);
  EXPECT_DOUBLE_EQ(plan["predicted_step_seconds"].get<double>(), 1.0);
  EXPECT_NEAR(plan["predicted_committed_tokens"].get<double>(), 4.439, 1e-12);
  EXPECT_TRUE(plan["plan_hash"].is_string());
}

// The draft plan comes first: a table without the draft split drafts every
// request's cap; with one, drafting that cannot pay drafts nothing, and the
// verify plan is then plain decode, priced at zero passes.
TEST(PlanCommandTest, PrintsTheDraftPlanBeforeTheVerifyPlan) {
  PlanCommandArgs args;
  args.cost_table_path = WriteTemp("staircase.json", kStaircase);
  args.input_path = WriteTemp("step.json", kStep);
  args.mode = "compact";
  json plan = PlanJson(args);
  EXPECT_EQ(plan["draft"]["reason"], "no-draft-split");
  EXPECT_EQ(plan["draft"]["depths"], json::array({3, 3}));
  EXPECT_EQ(plan["draft"]["passes"], 3);
  EXPECT_EQ(plan["draft"]["drafting_requests"], 2);
  EXPECT_TRUE(plan["draft"]["draft_plan_hash"].is_string());

  // Two requests: each step costs 1 s plus 1 s per draft pass, 0.1 s a row.
  args.cost_table_path = WriteTemp("costly_passes.json", R"({"batch_sizes": [2],
      "verify_tokens": [2, 8], "seconds": [[3.2, 3.8]],
      "draft_passes": 3, "draft_pass_seconds": [1.0]})");
  plan = PlanJson(args);
  EXPECT_EQ(plan["draft"]["reason"], "planned");
  EXPECT_EQ(plan["draft"]["depths"], json::array({0, 0}));
  EXPECT_EQ(plan["draft"]["passes"], 0);
  EXPECT_EQ(plan["reason"], "no-drafts");
  EXPECT_EQ(plan["verify_lens"], json::array({1, 1}));
  EXPECT_EQ(plan["verify_tokens"], 2);
  EXPECT_NEAR(plan["predicted_step_seconds"].get<double>(), 3.2 - 3 * 1.0, 1e-12);
  EXPECT_EQ(plan["draft"]["predicted_step_seconds"], plan["predicted_step_seconds"]);

  // Cheap passes: the first request (confidences 0.9) drafts its three, the
  // second's first draft still pays, its later ones do not.
  args.cost_table_path = WriteTemp("cheap_passes.json", R"({"batch_sizes": [2],
      "verify_tokens": [2, 8], "seconds": [[1.2, 1.8]],
      "draft_passes": 3, "draft_pass_seconds": [0.001]})");
  plan = PlanJson(args);
  EXPECT_EQ(plan["draft"]["reason"], "planned");
  EXPECT_EQ(plan["draft"]["passes"], 3);
  EXPECT_EQ(plan["draft"]["depths"][0], 3);
  EXPECT_LT(plan["draft"]["depths"][1].get<int>(), 3);
  for (int i = 0; i < 2; ++i) {
    EXPECT_LE(plan["verify_lens"][i].get<int>(), plan["draft"]["depths"][i].get<int>() + 1);
  }
}

TEST(PlanCommandTest, StaticModeAndNoTable) {
  PlanCommandArgs args;
  args.input_path = WriteTemp("step.json", kStep);
  const json plan = PlanJson(args);
  EXPECT_EQ(plan["mode"], "static");
  EXPECT_EQ(plan["verify_lens"], json::array({4, 4}));
  EXPECT_TRUE(plan["predicted_step_seconds"].is_null());

  args.mode = "cap-accept";
  const json no_table = PlanJson(args);
  EXPECT_EQ(no_table["reason"], "no-cost-table");
  EXPECT_EQ(no_table["verify_tokens"], 8);
}

TEST(PlanCommandTest, PinnedBudget) {
  PlanCommandArgs args;
  args.input_path = WriteTemp("pinned.json", R"({"pinned_budget": 0.5, "requests": [
      {"confidences": [0.9, 0.9, 0.9]}, {"confidences": [0.6, 0.5, 0.4]}]})");
  args.mode = "compact";
  const json plan = PlanJson(args);
  EXPECT_EQ(plan["reason"], "pinned-budget");
  EXPECT_EQ(plan["verify_lens"], json::array({4, 1}));
}

TEST(PlanCommandTest, FlagsFromTheInput) {
  PlanCommandArgs args;
  args.cost_table_path = WriteTemp("staircase.json", kStaircase);
  args.input_path = WriteTemp("flags.json", R"({"requests": [
      {"confidences": [0.9, 0.9], "stop_emitted": true},
      {"confidences": [0.9, 0.9], "speculation_disabled": true}]})");
  args.mode = "compact";
  EXPECT_EQ(PlanJson(args)["verify_lens"], json::array({1, 1}));
}

TEST(PlanCommandTest, RefusesBadInput) {
  PlanCommandArgs args;
  args.mode = "compact";
  args.input_path = WriteTemp(
      "ragged.json", R"({"requests": [{"confidences": [0.5]}, {"confidences": [0.5, 0.5]}]})");
  EXPECT_THAT(std::string(PlanCommandJson(args).status().message()),
              HasSubstr("requests[1] has 2 confidences, requests[0] has 1"));
  args.input_path = WriteTemp("text.json", R"({"requests": [{"confidences": ["high"]}]})");
  EXPECT_THAT(std::string(PlanCommandJson(args).status().message()),
              HasSubstr("confidences[0] is not a number"));
  args.input_path = WriteTemp("broken.json", "{");
  EXPECT_THAT(std::string(PlanCommandJson(args).status().message()), HasSubstr("not valid JSON"));
  args.input_path =
      WriteTemp("len.json", R"({"requests": [{"confidences": [0.5], "max_verify_len": 0}]})");
  EXPECT_THAT(std::string(PlanCommandJson(args).status().message()), HasSubstr("max_verify_len"));
  args.input_path = "/nonexistent/step.json";
  EXPECT_EQ(PlanCommandJson(args).status().code(), absl::StatusCode::kNotFound);
  args.input_path = WriteTemp("step.json", kStep);
  args.mode = "ragged";
  EXPECT_THAT(std::string(PlanCommandJson(args).status().message()),
              HasSubstr("unknown verify mode"));
}

// Integers that do not fit the field are refused with the field's path and
// range, never converted: 2^32 + 1 is not 1, 1.0 is not an integer.
TEST(PlanCommandTest, RefusesNumbersThatDoNotFitTheirField) {
  PlanCommandArgs args;
  args.mode = "compact";
  const struct {
    const char* json;
    const char* message;
  } cases[] = {
      {R"({"requests": [{"confidences": [0.5]},
                        {"confidences": [0.5], "max_verify_len": 4294967297}]})",
       "requests[1].max_verify_len: expected an integer in [1, 1073741824], got 4294967297"},
      {R"({"requests": [{"confidences": [0.5], "max_verify_len": 18446744073709551615}]})",
       "requests[0].max_verify_len: expected an integer in [1, 1073741824], got "
       "18446744073709551615"},
      {R"({"requests": [{"confidences": [0.5], "max_verify_len": -4294967295}]})",
       "requests[0].max_verify_len: expected an integer in [1, 1073741824], got -4294967295"},
      {R"({"requests": [{"confidences": [0.5], "max_verify_len": 2.0}]})",
       "requests[0].max_verify_len: expected an integer in [1, 1073741824], got 2.0"},
      {R"({"requests": [{"confidences": [0.5], "max_verify_len": true}]})",
       "requests[0].max_verify_len: expected an integer in [1, 1073741824], got true"},
      {R"({"requests": [{"confidences": [0.5]}], "prefill_rows": -1})",
       "prefill_rows: expected an integer in [0, 2147483647], got -1"},
      {R"({"requests": [{"confidences": [0.5]}], "prefill_rows": 2147483648})",
       "prefill_rows: expected an integer in [0, 2147483647], got 2147483648"},
  };
  for (const auto& c : cases) {
    args.input_path = WriteTemp("wide.json", c.json);
    const absl::Status s = PlanCommandJson(args).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.json;
    EXPECT_THAT(std::string(s.message()), HasSubstr(c.message)) << c.json;
    EXPECT_THAT(std::string(s.message()), HasSubstr("wide.json: ")) << c.json;
  }
  // The ends of the range still plan.
  args.input_path = WriteTemp(
      "ends.json",
      R"({"requests": [{"confidences": [0.5], "max_verify_len": 1},
                       {"confidences": [0.5], "max_verify_len": 1073741824}]})");
  EXPECT_TRUE(PlanCommandJson(args).ok());
}

// A step whose verify also reads joining prompts (the step log's
// priced_prefill_rows) is priced at its rows plus those. On the staircase
// (one second up to five rows) the plain step verifies three drafts in five
// rows (PrintsThePlannedBudget); with one prompt row the third draft would
// make six rows and two seconds, so the plan verifies two.
TEST(PlanCommandTest, PrefillRowsArePricedWithTheVerifyRows) {
  PlanCommandArgs args;
  args.cost_table_path = WriteTemp("staircase.json", kStaircase);
  args.mode = "compact";
  args.input_path = WriteTemp("prompts.json", R"({"requests": [
    {"confidences": [0.9, 0.9, 0.9]},
    {"confidences": [0.6, 0.5, 0.4], "max_verify_len": 4}], "prefill_rows": 1})");
  const json plan = PlanJson(args);
  EXPECT_EQ(plan["reason"], "planned");
  EXPECT_EQ(plan["budget"], 2);
  EXPECT_EQ(plan["verify_lens"], json::array({3, 1}));
  EXPECT_EQ(plan["verify_tokens"], 4);  // the verify rows; the prompt row rides on them
  EXPECT_DOUBLE_EQ(plan["predicted_step_seconds"].get<double>(), 1.0);
  EXPECT_NEAR(plan["predicted_committed_tokens"].get<double>(), 3.71, 1e-12);
}

TEST(PlanCommandTest, RefusesABadTableNamingTheCell) {
  PlanCommandArgs args;
  args.mode = "compact";
  args.input_path = WriteTemp("step.json", kStep);
  args.cost_table_path =
      WriteTemp("bad_table.json", R"({"batch_sizes": [1, 2], "verify_tokens": [1, 8],
      "seconds": [[0.1, 0.2], [0.2]]})");
  const absl::Status s = PlanCommandJson(args).status();
  EXPECT_FALSE(s.ok());
  EXPECT_THAT(std::string(s.message()), HasSubstr("seconds[1][1] (batch 2, tokens 8) is missing"));
  EXPECT_THAT(std::string(s.message()), HasSubstr("bad_table.json"));
}

}  // namespace
}  // namespace verdict
