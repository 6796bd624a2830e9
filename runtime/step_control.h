// StepControl: what rank 0 tells every rank before a step, so that all
// tensor-parallel ranks run the same batch: the requests that arrived (with
// the seed rank 0 chose for them), the requests cancelled, and whether to
// shut down. Only rank 0 talks to clients; the others follow these messages.
#ifndef VERDICT_RUNTIME_STEP_CONTROL_H_
#define VERDICT_RUNTIME_STEP_CONTROL_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "comm/communicator.h"
#include "runtime/generation.h"

namespace verdict {

struct ArrivedRequest {
  GenerationRequest request;  // params.seed is always set here
};

struct StepControl {
  std::vector<ArrivedRequest> arrived;  // in arrival order
  std::vector<std::string> cancelled;
  bool shutdown = false;

  bool empty() const { return arrived.empty() && cancelled.empty() && !shutdown; }
};

std::string SerializeStepControl(const StepControl& control);
absl::StatusOr<StepControl> ParseStepControl(std::string_view bytes);

// Collective: rank 0's `control` replaces every other rank's.
absl::Status BroadcastStepControl(Communicator& comm, StepControl* control);

}  // namespace verdict

#endif  // VERDICT_RUNTIME_STEP_CONTROL_H_
