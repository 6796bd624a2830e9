// `verdict plan`: runs the draft planner and then the verify planner once on
// a step described in JSON and prints both plans, so that an operator can
// see what the planners do with a cost table (draft depths and passes,
// budget, verify lengths, predicted seconds and tokens).
//
//   verdict plan --cost-table table.json --input step.json [--mode compact]
//
// step.json: kPlanInputFormat (below).
//
// Flags: --input and --mode are this command's. --cost-table and
// --verify-mode belong to the engine (the binary has one flag set); they are
// read by name, so that the scheduler does not depend on the runtime.
// --mode defaults to --verify-mode, and that to static.
#ifndef VERDICT_SCHEDULER_PLAN_COMMAND_H_
#define VERDICT_SCHEDULER_PLAN_COMMAND_H_

#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace verdict {

// The input format, as `verdict plan --help` prints it.
extern const char kPlanInputFormat[];

struct PlanCommandArgs {
  std::string cost_table_path;  // empty: no table (the planner verifies everything)
  std::string input_path;
  std::string mode = "static";
};

// The plans as JSON text: "draft" (reason, depths, passes,
// drafting_requests, predicted_step_seconds, predicted_committed_tokens,
// draft_plan_hash), then the verify plan's mode, reason, requests, gamma,
// budget, verify_lens, verify_tokens, packed, predicted_step_seconds (null
// without a table), predicted_committed_tokens and plan_hash. Errors name
// the file and entry.
absl::StatusOr<std::string> PlanCommandJson(const PlanCommandArgs& args);

// The `plan` entry of the binary's command table: reads the flags, prints
// the plan to stdout, and returns the exit status (errors go to stderr,
// status 1).
int RunPlanCommand(absl::Span<char* const> positional);

}  // namespace verdict

#endif  // VERDICT_SCHEDULER_PLAN_COMMAND_H_
