// `verdict sample`: replays one verify step from a JSON case file through the
// CPU twin of the sampler, so that an operator can reproduce a sampler
// decision (the CUDA kernel makes the same decisions, kernels/verify_sampler.h).
// The case format and the output are described in kSampleCaseFormat, which
// is also the help text of the --case flag.
#ifndef VERDICT_KERNELS_VERIFY_CASE_H_
#define VERDICT_KERNELS_VERIFY_CASE_H_

#include <memory>
#include <string>

#include "absl/flags/declare.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "kernels/verify_step.h"
#include "nlohmann/json.hpp"

namespace verdict {

extern const char kSampleCaseFormat[];

// Builds the step a case describes. Errors name the request and row.
absl::StatusOr<std::unique_ptr<HostVerifyStep>> ParseVerifyCase(const nlohmann::json& json);

// Runs the step `trials` times (trial t adds t to every request's seed) and
// returns the JSON report: every output field for one trial, histograms for
// more.
absl::StatusOr<nlohmann::ordered_json> RunVerifyCase(const HostVerifyStep& step, int trials);

// The `sample` command of the verdict binary (flags --case, --trials).
int RunSampleCommand(absl::Span<char* const> positional);

}  // namespace verdict

// --case=FILE.json and --trials=N of `verdict sample`.
ABSL_DECLARE_FLAG(std::string, case);
ABSL_DECLARE_FLAG(int, trials);

#endif  // VERDICT_KERNELS_VERIFY_CASE_H_
