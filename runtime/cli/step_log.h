// `verdict serve --step-log=PATH`: one JSON object per decode step as rank 0
// saw it (the batch, the draft and verify plans, the measured phases and the
// cost table's price), for finding where a step's time goes and how well the
// table prices each kind of step. tools/bench/step_log_summary.py reads it.
#ifndef VERDICT_RUNTIME_CLI_STEP_LOG_H_
#define VERDICT_RUNTIME_CLI_STEP_LOG_H_

#include <cstdio>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "runtime/engine/engine.h"

namespace verdict {

class StepLog {
 public:
  // Creates or truncates `path`; refuses, naming it, a path it cannot write.
  static absl::StatusOr<std::unique_ptr<StepLog>> Open(const std::string& path);
  ~StepLog();  // flushes and closes
  StepLog(const StepLog&) = delete;
  StepLog& operator=(const StepLog&) = delete;

  // One line; called on the engine's loop thread. Buffered: a step pays for
  // a formatted line, not for a write to the disk.
  void Write(const StepTiming& step);

  // The line Write appends, without its newline.
  static std::string Line(const StepTiming& step);

 private:
  explicit StepLog(std::FILE* file) : file_(file) {}
  std::FILE* file_;
};

}  // namespace verdict

#endif  // VERDICT_RUNTIME_CLI_STEP_LOG_H_
