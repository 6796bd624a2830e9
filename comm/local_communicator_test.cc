#include "comm/local_communicator.h"

#include <cstdint>
#include <numeric>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace verdict {
namespace {

TEST(DataTypeTest, Sizes) {
  EXPECT_EQ(DataTypeSize(DataType::kFloat32), 4u);
  EXPECT_EQ(DataTypeSize(DataType::kBFloat16), 2u);
  EXPECT_EQ(DataTypeSize(DataType::kInt32), 4u);
  EXPECT_EQ(DataTypeSize(DataType::kInt64), 8u);
  EXPECT_EQ(DataTypeSize(DataType::kUInt8), 1u);
}

TEST(AbortExitCodeTest, IsTheStatusCodeNumber) {
  EXPECT_EQ(AbortExitCode(absl::DeadlineExceededError("x")), 4);
  EXPECT_EQ(AbortExitCode(absl::InternalError("x")), 13);
  EXPECT_EQ(AbortExitCode(absl::OkStatus()), 1);
}

TEST(LocalCommunicatorTest, WorldOfOne) {
  LocalCommunicator comm;
  EXPECT_EQ(comm.rank(), 0);
  EXPECT_EQ(comm.world_size(), 1);
  EXPECT_TRUE(comm.Barrier().ok());
  EXPECT_TRUE(comm.Synchronize().ok());
}

TEST(LocalCommunicatorTest, BroadcastFromRootZeroKeepsTheBuffer) {
  LocalCommunicator comm;
  std::vector<int64_t> buffer = {5, -6, 7};
  ASSERT_TRUE(comm.Broadcast(buffer.data(), buffer.size(), DataType::kInt64, 0).ok());
  EXPECT_EQ(buffer, (std::vector<int64_t>{5, -6, 7}));
}

TEST(LocalCommunicatorTest, BroadcastRejectsARootOutsideTheWorld) {
  LocalCommunicator comm;
  int32_t value = 1;
  absl::Status status = comm.Broadcast(&value, 1, DataType::kInt32, 1);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StartsWith(status.message(), "rank 0: Broadcast")) << status;
}

TEST(LocalCommunicatorTest, AllReduceSumCopiesAndWorksInPlace) {
  LocalCommunicator comm;
  std::vector<float> send = {1.5f, -2.0f, 3.25f};
  std::vector<float> recv(3, -1.0f);
  ASSERT_TRUE(comm.AllReduceSum(send.data(), recv.data(), 3, DataType::kFloat32).ok());
  EXPECT_EQ(recv, send);
  ASSERT_TRUE(comm.AllReduceSum(recv.data(), recv.data(), 3, DataType::kFloat32).ok());
  EXPECT_EQ(recv, send);
}

TEST(LocalCommunicatorTest, AllReduceSumRejectsPartialOverlap) {
  LocalCommunicator comm;
  std::vector<int32_t> buffer(8, 0);
  absl::Status status = comm.AllReduceSum(buffer.data(), buffer.data() + 1, 4, DataType::kInt32);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(status.message(), "AllReduceSum")) << status;
}

TEST(LocalCommunicatorTest, AllGatherCopiesTheOnlyBlock) {
  LocalCommunicator comm;
  std::vector<uint8_t> send(5);
  std::iota(send.begin(), send.end(), 250);  // wraps past 255
  std::vector<uint8_t> recv(5, 0);
  ASSERT_TRUE(comm.AllGather(send.data(), recv.data(), 5, DataType::kUInt8).ok());
  EXPECT_EQ(recv, send);
  ASSERT_TRUE(comm.AllGather(recv.data(), recv.data(), 5, DataType::kUInt8).ok());
  EXPECT_EQ(recv, send);
}

TEST(LocalCommunicatorTest, ZeroCountAcceptsNullBuffers) {
  LocalCommunicator comm;
  EXPECT_TRUE(comm.Broadcast(nullptr, 0, DataType::kFloat32, 0).ok());
  EXPECT_TRUE(comm.AllReduceSum(nullptr, nullptr, 0, DataType::kFloat32).ok());
  EXPECT_TRUE(comm.AllGather(nullptr, nullptr, 0, DataType::kFloat32).ok());
}

TEST(LocalCommunicatorTest, NullBufferWithElementsIsAnError) {
  LocalCommunicator comm;
  float value = 0;
  EXPECT_EQ(comm.AllReduceSum(nullptr, &value, 1, DataType::kFloat32).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(comm.AllGather(&value, nullptr, 1, DataType::kFloat32).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(LocalCommunicatorDeathTest, AbortExitsWithTheStatusCode) {
  LocalCommunicator comm;
  EXPECT_EXIT(comm.Abort(absl::DeadlineExceededError("peer gone")), testing::ExitedWithCode(4),
              "rank 0: aborting: DEADLINE_EXCEEDED: peer gone");
}

}  // namespace
}  // namespace verdict
