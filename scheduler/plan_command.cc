#include "scheduler/plan_command.h"

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <utility>
#include <vector>

#include "absl/flags/commandlineflag.h"
#include "absl/flags/flag.h"
#include "absl/flags/reflection.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "nlohmann/json.hpp"
#include "runtime/base/json_number.h"
#include "scheduler/cost_table.h"
#include "scheduler/draft_planner.h"
#include "scheduler/verify_planner.h"

ABSL_FLAG(std::string, input, "",
          "`verdict plan`: the step to plan, as JSON (scheduler/plan_command.h); "
          "`verdict tokenize`: the JSON lines to tokenize (empty: stdin)");
ABSL_FLAG(std::string, mode, "",
          "`verdict plan`: static, cap-accept or compact; empty: the value of --verify-mode");

namespace verdict {

const char kPlanInputFormat[] = R"(--input STEP.json, one decode step:
{"requests": [{"confidences": [0.9, 0.8, 0.7],   one per draft (gamma)
               "max_verify_len": 4,               optional, gamma + 1
               "speculation_disabled": false,     optional
               "stop_emitted": false}, ...],      optional
 "confidence_ready": true,                        optional
 "prefill_rows": 0,                               optional: prompt rows the
                                                  verify reads (step log's
                                                  priced_prefill_rows)
 "pinned_budget": 0.5}                            optional, a fraction
Every request has the same number of confidences (gamma). --cost-table and
--verify-mode are the engine's flags, read here by name; --mode defaults to
--verify-mode, and that to static.)";

namespace {

using json = nlohmann::json;

// The largest max_verify_len a step file may give: no step runs anywhere
// near 2^30 rows.
constexpr int32_t kMaxVerifyLen = int32_t{1} << 30;

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open ", path));
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

// A step read from the input file, in the planner's layout.
struct Step {
  int gamma = 0;
  std::vector<double> confidences;
  std::vector<int32_t> max_verify_lens;
  std::vector<uint8_t> flags;
  bool confidence_ready = true;
  int64_t prefill_rows = 0;
  std::optional<double> pinned_budget_fraction;
};

absl::StatusOr<bool> OptionalBool(const json& object, const char* key, bool fallback,
                                  const std::string& where) {
  auto it = object.find(key);
  if (it == object.end()) return fallback;
  if (!it->is_boolean())
    return absl::InvalidArgumentError(absl::StrCat(where, ".", key, " is not true or false"));
  return it->get<bool>();
}

absl::StatusOr<Step> ParseStep(const std::string& text) {
  const json doc = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) return absl::InvalidArgumentError("not valid JSON");
  if (!doc.is_object()) return absl::InvalidArgumentError("the top level is not an object");
  auto requests = doc.find("requests");
  if (requests == doc.end() || !requests->is_array()) {
    return absl::InvalidArgumentError("'requests' is missing or not an array");
  }
  Step step;
  absl::StatusOr<bool> ready = OptionalBool(doc, "confidence_ready", true, "input");
  if (!ready.ok()) return ready.status();
  step.confidence_ready = *ready;
  if (auto it = doc.find("prefill_rows"); it != doc.end()) {
    absl::StatusOr<int64_t> rows = JsonIntegerAs<int64_t>(*it, "prefill_rows", 0, kMaxPrefillRows);
    if (!rows.ok()) return rows.status();
    step.prefill_rows = *rows;
  }
  if (auto it = doc.find("pinned_budget"); it != doc.end()) {
    if (!it->is_number()) return absl::InvalidArgumentError("pinned_budget is not a number");
    absl::StatusOr<double> fraction = JsonFiniteNumber(*it, "pinned_budget");
    if (!fraction.ok()) return fraction.status();
    step.pinned_budget_fraction = *fraction;
  }
  for (size_t i = 0; i < requests->size(); ++i) {
    const json& r = (*requests)[i];
    const std::string where = absl::StrCat("requests[", i, "]");
    if (!r.is_object()) return absl::InvalidArgumentError(absl::StrCat(where, " is not an object"));
    auto conf = r.find("confidences");
    if (conf == r.end() || !conf->is_array() || conf->empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ".confidences is missing, empty or not an array"));
    }
    if (i == 0) step.gamma = static_cast<int>(conf->size());
    if (static_cast<int>(conf->size()) != step.gamma) {
      return absl::InvalidArgumentError(absl::StrCat(where, " has ", conf->size(),
                                                     " confidences, requests[0] has ", step.gamma,
                                                     " (one gamma per step)"));
    }
    for (size_t j = 0; j < conf->size(); ++j) {
      if (!(*conf)[j].is_number()) {
        return absl::InvalidArgumentError(
            absl::StrCat(where, ".confidences[", j, "] is not a number"));
      }
      absl::StatusOr<double> confidence =
          JsonFiniteNumber((*conf)[j], absl::StrCat(where, ".confidences[", j, "]"));
      if (!confidence.ok()) return confidence.status();
      step.confidences.push_back(*confidence);
    }
    int32_t max_len = step.gamma + 1;
    if (auto it = r.find("max_verify_len"); it != r.end()) {
      absl::StatusOr<int32_t> len =
          JsonIntegerAs<int32_t>(*it, absl::StrCat(where, ".max_verify_len"), 1, kMaxVerifyLen);
      if (!len.ok()) return len.status();
      max_len = *len;
    }
    step.max_verify_lens.push_back(max_len);
    absl::StatusOr<bool> disabled = OptionalBool(r, "speculation_disabled", false, where);
    if (!disabled.ok()) return disabled.status();
    absl::StatusOr<bool> stopped = OptionalBool(r, "stop_emitted", false, where);
    if (!stopped.ok()) return stopped.status();
    step.flags.push_back(static_cast<uint8_t>((*disabled ? kSpeculationDisabled : 0) |
                                              (*stopped ? kStopEmitted : 0)));
  }
  if (step.gamma == 0) step.gamma = 1;  // no requests: any gamma plans the empty step
  return step;
}

absl::Status WithPrefix(const std::string& prefix, const absl::Status& status) {
  return absl::Status(status.code(), absl::StrCat(prefix, ": ", status.message()));
}

// The current value of a flag another part of the binary defines, or ""
// when this binary has no such flag.
std::string FlagByName(const char* name) {
  const absl::CommandLineFlag* flag = absl::FindCommandLineFlag(name);
  return flag == nullptr ? std::string() : flag->CurrentValue();
}

}  // namespace

absl::StatusOr<std::string> PlanCommandJson(const PlanCommandArgs& args) {
  absl::StatusOr<VerifyMode> mode = ParseVerifyMode(args.mode);
  if (!mode.ok()) return mode.status();
  if (args.input_path.empty()) return absl::InvalidArgumentError("--input is required");
  absl::StatusOr<std::string> text = ReadFile(args.input_path);
  if (!text.ok()) return text.status();
  absl::StatusOr<Step> step = ParseStep(*text);
  if (!step.ok()) return WithPrefix(args.input_path, step.status());

  std::optional<CostTable> table;
  if (!args.cost_table_path.empty()) {
    absl::StatusOr<CostTable> loaded = CostTable::Load(args.cost_table_path);
    if (!loaded.ok()) return loaded.status();
    table = *std::move(loaded);
  }
  // First the draft plan, then the verify plan over the drafts it gives, both
  // from the file's confidences: what the engine does under overlap (with
  // overlap off it plans the verify from the fresh drafts' confidences).
  DraftPlannerOptions draft_options;
  draft_options.gamma = step->gamma;
  absl::StatusOr<DraftPlanner> draft_planner = DraftPlanner::Create(draft_options, table);
  if (!draft_planner.ok()) return draft_planner.status();
  DraftPlannerInput draft_input;
  draft_input.confidences = step->confidences;
  draft_input.max_verify_lens = step->max_verify_lens;
  draft_input.flags = step->flags;
  draft_input.confidence_ready = step->confidence_ready;
  DraftPlan draft_plan;
  if (absl::Status s = draft_planner->Plan(draft_input, &draft_plan); !s.ok()) {
    return WithPrefix(args.input_path, s);
  }

  PlannerOptions options;
  options.mode = *mode;
  options.gamma = step->gamma;
  options.pinned_budget_fraction = step->pinned_budget_fraction;
  absl::StatusOr<VerifyPlanner> planner =
      VerifyPlanner::Create(std::move(options), std::move(table));
  if (!planner.ok()) return planner.status();
  VerifyPlan plan;
  PlannerInput input{step->confidences, step->max_verify_lens, step->flags,
                     step->confidence_ready};
  input.drafts = draft_plan.passes > 0;
  input.draft_depths = draft_plan.depths;
  input.draft_passes = draft_plan.passes;
  input.prefill_rows = step->prefill_rows;
  if (absl::Status s = planner->Plan(input, &plan); !s.ok()) return WithPrefix(args.input_path, s);

  const auto seconds_or_null = [](double v) { return std::isnan(v) ? json(nullptr) : json(v); };
  json out = json::object();
  out["draft"] = {{"reason", std::string(DraftReasonName(draft_plan.reason))},
                  {"depths", draft_plan.depths},
                  {"passes", draft_plan.passes},
                  {"drafting_requests", draft_plan.drafting_requests},
                  {"predicted_step_seconds", seconds_or_null(draft_plan.predicted_step_seconds)},
                  {"predicted_committed_tokens", draft_plan.predicted_committed_tokens},
                  {"draft_plan_hash", absl::StrFormat("0x%016x", DraftPlanHash(draft_plan))}};
  out["mode"] = std::string(VerifyModeName(plan.mode));
  out["reason"] = std::string(PlanReasonName(plan.reason));
  out["requests"] = plan.verify_lens.size();
  out["gamma"] = step->gamma;
  out["budget"] = plan.budget;
  out["verify_lens"] = plan.verify_lens;
  out["verify_tokens"] = plan.verify_tokens;
  out["packed"] = plan.packed;
  out["predicted_step_seconds"] = seconds_or_null(plan.predicted_step_seconds);
  out["predicted_committed_tokens"] = plan.predicted_committed_tokens;
  out["plan_hash"] = absl::StrFormat("0x%016x", PlanHash(plan));
  return out.dump(2) + "\n";
}

int RunPlanCommand(absl::Span<char* const> positional) {
  if (!positional.empty()) {
    std::fprintf(stderr, "verdict plan: unexpected argument '%s'\n", positional[0]);
    return 2;
  }
  PlanCommandArgs args;
  args.cost_table_path = FlagByName("cost_table");
  args.input_path = absl::GetFlag(FLAGS_input);
  args.mode = absl::GetFlag(FLAGS_mode);
  if (args.mode.empty()) args.mode = FlagByName("verify_mode");
  if (args.mode.empty()) args.mode = "static";
  absl::StatusOr<std::string> out = PlanCommandJson(args);
  if (!out.ok()) {
    std::fprintf(stderr, "verdict plan: %s\n", std::string(out.status().message()).c_str());
    return 1;
  }
  std::fputs(out->c_str(), stdout);
  return 0;
}

}  // namespace verdict
