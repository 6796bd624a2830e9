// StepControl: what rank 0 tells every rank before a step, so that all
// tensor-parallel ranks run the same batch: the requests that arrived (with
// the seed rank 0 chose for them), the requests cancelled, a change of the
// pinned verify budget or draft depth, and whether to shut down. Only rank 0 talks to
// clients; the others follow these messages.
#ifndef VERDICT_RUNTIME_ENGINE_STEP_CONTROL_H_
#define VERDICT_RUNTIME_ENGINE_STEP_CONTROL_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "comm/communicator.h"
#include "runtime/engine/generation.h"

namespace verdict {

struct ArrivedRequest {
  GenerationRequest request;  // params.seed is always set here
};

// A new pin of the planner's verify budget (`verdict profile`): every rank
// applies it before the step its message precedes, so all ranks plan the
// same budget from the same step on.
struct BudgetPinChange {
  // The fraction of the block's drafts to verify; nullopt unpins.
  std::optional<double> fraction;
};

// A new pin of the draft planner's depth (`verdict profile`), applied as a
// budget pin is.
struct DraftPinChange {
  // Every request drafts min(depth, its cap); nullopt unpins.
  std::optional<int> depth;
};

struct StepControl {
  std::vector<ArrivedRequest> arrived;  // in arrival order
  std::vector<std::string> cancelled;
  std::optional<BudgetPinChange> budget_pin;  // unset: the pin stays as it is
  std::optional<DraftPinChange> draft_pin;    // unset: the pin stays as it is
  bool shutdown = false;

  bool empty() const {
    return arrived.empty() && cancelled.empty() && !budget_pin.has_value() &&
           !draft_pin.has_value() && !shutdown;
  }
};

std::string SerializeStepControl(const StepControl& control);
absl::StatusOr<StepControl> ParseStepControl(std::string_view bytes);

// Collective: rank 0's `control` replaces every other rank's.
absl::Status BroadcastStepControl(Communicator& comm, StepControl* control);

}  // namespace verdict

#endif  // VERDICT_RUNTIME_ENGINE_STEP_CONTROL_H_
