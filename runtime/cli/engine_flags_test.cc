// The engine's flags as StartEngineFromFlags reads them: each value of
// --cuda-graphs sets the options it names, and any other value is refused
// with the flag and the value before anything is loaded.
#include "runtime/cli/engine_flags.h"

#include <string>

#include "absl/flags/declare.h"
#include "absl/flags/flag.h"
#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "runtime/engine/engine.h"

ABSL_DECLARE_FLAG(std::string, cuda_graphs);

namespace verdict {
namespace {

using ::testing::HasSubstr;

// The options the flags give, stopped before the engine starts.
absl::Status OptionsFromFlags(EngineOptions* seen) {
  absl::StatusOr<EngineRuntime> rt = StartEngineFromFlags([seen](EngineOptions* options) {
    *seen = *options;
    return absl::CancelledError("options read");
  });
  return rt.status();
}

TEST(EngineFlagsTest, CudaGraphsOnPadsExactDoesNotOffRunsEager) {
  struct Case {
    const char* value;
    bool graphs;
    bool pad;
  };
  for (const Case& c : {Case{"on", true, true}, Case{"exact", true, false},
                        Case{"off", false, false}}) {
    absl::SetFlag(&FLAGS_cuda_graphs, c.value);
    EngineOptions options;
    options.cuda_graphs = !c.graphs;
    options.pad_graph_shapes = !c.pad;
    const absl::Status status = OptionsFromFlags(&options);
    ASSERT_EQ(status.code(), absl::StatusCode::kCancelled) << c.value << ": " << status;
    EXPECT_EQ(options.cuda_graphs, c.graphs) << c.value;
    EXPECT_EQ(options.pad_graph_shapes, c.pad) << c.value;
  }
}

TEST(EngineFlagsTest, OtherCudaGraphsValuesAreRefusedByName) {
  for (const char* value : {"padded", "ON", "", "on "}) {
    absl::SetFlag(&FLAGS_cuda_graphs, value);
    EngineOptions options;
    const absl::Status status = OptionsFromFlags(&options);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << "'" << value << "'";
    EXPECT_THAT(status.message(), HasSubstr("--cuda-graphs must be on, exact or off, not '" +
                                            std::string(value) + "'"));
  }
  absl::SetFlag(&FLAGS_cuda_graphs, "on");
}

}  // namespace
}  // namespace verdict
