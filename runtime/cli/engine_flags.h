// The engine's command-line flags, shared by `verdict serve`,
// `verdict generate` and `verdict profile`, and the start-up they share:
// MPI (one rank per GPU, or a world of one), the communicator, the engine.
#ifndef VERDICT_RUNTIME_CLI_ENGINE_FLAGS_H_
#define VERDICT_RUNTIME_CLI_ENGINE_FLAGS_H_

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "comm/communicator.h"
#include "comm/mpi_session.h"
#include "runtime/engine/engine.h"

namespace verdict {

// Everything a running engine needs kept alive, in destruction order.
struct EngineRuntime {
  std::shared_ptr<MpiSession> mpi;  // null in a process started without a launcher
  std::unique_ptr<Communicator> comm;
  std::unique_ptr<Engine> engine;
};

// Reads the engine flags, starts MPI and the communicator, loads the models.
// Without --model the bundled pair (models/target, models/draft) is used.
// `adjust_options`, if set, sees the flags' engine options before the models
// load, and may change them or refuse them (a command with settings of its
// own, as `verdict profile`).
absl::StatusOr<EngineRuntime> StartEngineFromFlags(
    const std::function<absl::Status(EngineOptions*)>& adjust_options = nullptr);

// The target model directory --model names (the bundled one by default),
// resolved as ResolveModelDir does.
std::string TargetModelDirFromFlags();

// The directory of the target's tokenizer: --tokenizer, else the target's
// own, else (for a builtin:NAME target shape) the bundled models/target.
std::string TokenizerDirFromFlags();

// The model directory a flag names: as given if it exists, else relative to
// the workspace `bazel run` was started from.
std::string ResolveModelDir(const std::string& dir);

// The directories --cost-table auto searches (--cost-table-dirs, or the
// operator's cache then the bundled deploy/cost_tables); the first is where
// `verdict profile` writes by default.
std::vector<std::string> CostTableDirsFromFlags();

}  // namespace verdict

#endif  // VERDICT_RUNTIME_CLI_ENGINE_FLAGS_H_
