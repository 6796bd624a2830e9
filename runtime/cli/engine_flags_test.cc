// The engine's flags as StartEngineFromFlags reads them: each value of
// --cuda-graphs sets the options it names, and any other value is refused
// with the flag and the value before anything is loaded.
#include "runtime/cli/engine_flags.h"

#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/flags/declare.h"
#include "absl/flags/flag.h"
#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "runtime/engine/engine.h"

ABSL_DECLARE_FLAG(std::string, cuda_graphs);
ABSL_DECLARE_FLAG(std::string, cuda_graph_capture);
ABSL_DECLARE_FLAG(int, cuda_graph_capture_batch);
ABSL_DECLARE_FLAG(std::string, cost_table);
ABSL_DECLARE_FLAG(std::string, cost_table_dirs);

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

// The start-up capture: blocks by default, all or off on request, up to
// --max-running-requests unless the batch is given; other values refused by
// name.
TEST(EngineFlagsTest, CudaGraphCaptureTiersAndBatch) {
  EngineOptions options;
  ASSERT_EQ(OptionsFromFlags(&options).code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(options.graph_capture, GraphCaptureTiers::kBlocks);
  EXPECT_EQ(options.graph_capture_batch, 0);
  struct Case {
    const char* value;
    GraphCaptureTiers tiers;
  };
  for (const Case& c : {Case{"all", GraphCaptureTiers::kAll}, Case{"off", GraphCaptureTiers::kOff},
                        Case{"blocks", GraphCaptureTiers::kBlocks}}) {
    absl::SetFlag(&FLAGS_cuda_graph_capture, c.value);
    absl::SetFlag(&FLAGS_cuda_graph_capture_batch, 96);
    ASSERT_EQ(OptionsFromFlags(&options).code(), absl::StatusCode::kCancelled) << c.value;
    EXPECT_EQ(options.graph_capture, c.tiers) << c.value;
    EXPECT_EQ(options.graph_capture_batch, 96);
  }
  absl::SetFlag(&FLAGS_cuda_graph_capture, "ragged");
  absl::Status status = OptionsFromFlags(&options);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(),
              HasSubstr("--cuda-graph-capture must be blocks, all or off, not 'ragged'"));
  absl::SetFlag(&FLAGS_cuda_graph_capture, "blocks");
  absl::SetFlag(&FLAGS_cuda_graph_capture_batch, -1);
  status = OptionsFromFlags(&options);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("--cuda-graph-capture-batch must be 0 or positive"));
  absl::SetFlag(&FLAGS_cuda_graph_capture_batch, 0);
}

// By default the server finds its cost table: --cost-table auto, searched
// in the operator's cache (where verdict profile writes), then in the tables
// the project ships.
TEST(EngineFlagsTest, CostTableIsAutoSearchingTheCacheThenTheBundledTables) {
  unsetenv("VERDICT_COST_TABLE_DIR");
  unsetenv("XDG_CACHE_HOME");
  setenv("HOME", "/home/op", 1);
  EngineOptions options;
  ASSERT_EQ(OptionsFromFlags(&options).code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(options.cost_table_path, kAutoCostTable);
  ASSERT_EQ(options.cost_table_dirs.size(), 2u);
  EXPECT_EQ(options.cost_table_dirs[0], "/home/op/.cache/verdict/cost_tables");
  EXPECT_THAT(options.cost_table_dirs[1], HasSubstr("deploy/cost_tables"));
  EXPECT_TRUE(std::filesystem::is_directory(options.cost_table_dirs[1]))
      << options.cost_table_dirs[1];

  setenv("XDG_CACHE_HOME", "/xdg", 1);
  ASSERT_EQ(OptionsFromFlags(&options).code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(options.cost_table_dirs[0], "/xdg/verdict/cost_tables");
  setenv("VERDICT_COST_TABLE_DIR", "/tables", 1);
  ASSERT_EQ(OptionsFromFlags(&options).code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(options.cost_table_dirs[0], "/tables");
  unsetenv("VERDICT_COST_TABLE_DIR");
  unsetenv("XDG_CACHE_HOME");
}

TEST(EngineFlagsTest, CostTableNoneAndTheDirectoriesAsGiven) {
  absl::SetFlag(&FLAGS_cost_table, "none");
  absl::SetFlag(&FLAGS_cost_table_dirs, "/a:/b::/c");
  EngineOptions options;
  ASSERT_EQ(OptionsFromFlags(&options).code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(options.cost_table_path, "");
  EXPECT_EQ(options.cost_table_dirs, (std::vector<std::string>{"/a", "/b", "/c"}));
  absl::SetFlag(&FLAGS_cost_table, "auto");
  absl::SetFlag(&FLAGS_cost_table_dirs, "");
}

}  // namespace
}  // namespace verdict
