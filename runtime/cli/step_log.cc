#include "runtime/cli/step_log.h"

#include <cerrno>
#include <cstring>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "nlohmann/json.hpp"

namespace verdict {

absl::StatusOr<std::unique_ptr<StepLog>> StepLog::Open(const std::string& path) {
  std::FILE* file = std::fopen(path.c_str(), "w");
  if (file == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("--step-log: cannot write ", path, ": ", std::strerror(errno)));
  }
  return std::unique_ptr<StepLog>(new StepLog(file));
}

StepLog::~StepLog() { std::fclose(file_); }

std::string StepLog::Line(const StepTiming& step) {
  nlohmann::ordered_json line = {
      {"step", step.step},
      {"batch", step.batch_size},
      {"verify_tokens", step.verify_tokens},
      {"budget", step.budget},
      {"plan_reason", std::string(PlanReasonName(step.plan_reason))},
      {"draft_reason", std::string(DraftReasonName(step.draft_reason))},
      {"draft_passes", step.draft_passes},
      {"drafting_requests", step.drafting_requests},
      {"catch_up_tokens", step.catch_up_tokens},
      {"draft_seconds", step.draft_seconds},
      {"verify_seconds", step.verify_seconds},
      {"prefill_tokens", step.prefill_tokens},
      {"priced_prefill_rows", step.priced_prefill_rows},
      {"target_prefill_seconds", step.target_prefill_seconds},
      {"draft_prefill_seconds", step.draft_prefill_seconds},
      {"predicted_seconds", step.predicted_seconds},
      {"plan_seconds", step.plan_seconds},
      {"await_seconds", step.await_seconds},
      // Seconds since the Unix epoch, to the microsecond.
      {"committed_at", static_cast<double>(absl::ToUnixMicros(step.committed_at)) * 1e-6},
  };
  return line.dump();
}

void StepLog::Write(const StepTiming& step) {
  const std::string line = Line(step);
  std::fwrite(line.data(), 1, line.size(), file_);
  std::fputc('\n', file_);
}

}  // namespace verdict
