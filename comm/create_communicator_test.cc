// The factory, run as a plain test: no launcher, so the MPI backend is a
// singleton world, and the NCCL backend needs a GPU.
#include "comm/create_communicator.h"

#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "comm/mpi_session.h"
#include "gtest/gtest.h"

namespace verdict {
namespace {

TEST(CreateCommunicatorTest, LocalIsAWorldOfOne) {
  absl::StatusOr<std::unique_ptr<Communicator>> comm = CreateCommunicator(Backend::kLocal);
  ASSERT_TRUE(comm.ok()) << comm.status();
  EXPECT_EQ((*comm)->world_size(), 1);
  int64_t value = -9;
  ASSERT_TRUE((*comm)->AllReduceSum(&value, &value, 1, DataType::kInt64).ok());
  EXPECT_EQ(value, -9);
}

TEST(CreateCommunicatorTest, MpiWithoutALauncherIsASingletonWorld) {
  ASSERT_FALSE(MpiSession::LaunchedByLauncher()) << "run this test without mpirun";
  CommOptions options;
  options.timeout = absl::Seconds(20);
  absl::StatusOr<std::unique_ptr<Communicator>> comm = CreateCommunicator(Backend::kMpi, options);
  ASSERT_TRUE(comm.ok()) << comm.status();
  EXPECT_EQ((*comm)->rank(), 0);
  EXPECT_EQ((*comm)->world_size(), 1);
  float values[] = {1.5f, -2.0f};
  float sums[] = {0.0f, 0.0f};
  ASSERT_TRUE((*comm)->AllReduceSum(values, sums, 2, DataType::kFloat32).ok());
  EXPECT_EQ(sums[0], 1.5f);
  EXPECT_EQ(sums[1], -2.0f);
  uint16_t gathered[2] = {0, 0};
  const uint16_t own = 0x3f80;
  ASSERT_TRUE((*comm)->AllGather(&own, gathered, 1, DataType::kBFloat16).ok());
  EXPECT_EQ(gathered[0], 0x3f80);
  EXPECT_EQ(gathered[1], 0);  // a world of one fills one block
  EXPECT_TRUE((*comm)->Barrier().ok());
}

TEST(CreateCommunicatorTest, NcclNeedsAGpu) {
  int gpus = 0;
  const bool have_gpu = cudaGetDeviceCount(&gpus) == cudaSuccess && gpus > 0;
  absl::StatusOr<std::unique_ptr<Communicator>> comm = CreateCommunicator(Backend::kNccl);
  if (have_gpu) {
    ASSERT_TRUE(comm.ok()) << comm.status();
    EXPECT_EQ((*comm)->world_size(), 1);
  } else {
    // No GPU (CI): a clear error naming the rank and the CUDA call, not a crash.
    ASSERT_FALSE(comm.ok());
    EXPECT_TRUE(absl::StartsWith(comm.status().message(), "rank 0: cudaGetDeviceCount"))
        << comm.status();
  }
}

}  // namespace
}  // namespace verdict
