// NcclCommunicator on one GPU, as a world of one rank (run without mpirun, or
// under mpirun -np 1): collectives on device buffers give the right values,
// and a stream that never drains turns into DeadlineExceeded, an aborted
// NCCL communicator and refused calls, not a hang.
#include <cuda_runtime_api.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "comm/nccl_communicator.h"
#include "comm/testing/gpu_test_util.h"
#include "gtest/gtest.h"
#include "kernels/bf16.h"

namespace verdict {
namespace {

// MPI stays up between the tests' communicators.
testing::Environment* const mpi_session_environment =
    testing::AddGlobalTestEnvironment(new MpiSessionEnvironment);

class NcclCommunicatorGpuTest : public testing::Test {
 protected:
  void SetUp() override {
    CommOptions options;
    options.timeout = absl::Seconds(20);
    absl::StatusOr<std::unique_ptr<NcclCommunicator>> comm = NcclCommunicator::Create(options);
    ASSERT_TRUE(comm.ok()) << comm.status();
    comm_ = *std::move(comm);
    ASSERT_EQ(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), cudaSuccess);
  }
  void TearDown() override {
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }

  std::unique_ptr<NcclCommunicator> comm_;
  cudaStream_t stream_ = nullptr;
};

TEST_F(NcclCommunicatorGpuTest, WorldOfOneOnTheFirstGpu) {
  EXPECT_EQ(comm_->rank(), 0);
  EXPECT_EQ(comm_->world_size(), 1);
  EXPECT_EQ(comm_->device(), 0);
  EXPECT_STREQ(std::getenv("NCCL_NVLS_ENABLE"), "0");
  EXPECT_TRUE(comm_->Barrier().ok());
}

TEST_F(NcclCommunicatorGpuTest, AllReduceSumOfOneRankIsTheInput) {
  std::vector<float> f32 = {1.5f, -2.25f, 1e30f, 0.0f, 7.0f};
  DeviceBuffer<float> f32_send(f32), f32_recv(std::vector<float>(f32.size(), -1.0f));
  ASSERT_TRUE(
      comm_->AllReduceSum(f32_send.get(), f32_recv.get(), f32.size(), DataType::kFloat32, stream_)
          .ok());
  EXPECT_EQ(f32_recv.ToHost(), f32);

  std::vector<uint16_t> bf16 = {FloatToBf16(1.0f), FloatToBf16(-3.5f), 0x7f80, 0x0001};
  DeviceBuffer<uint16_t> bf16_buffer(bf16);
  ASSERT_TRUE(comm_
                  ->AllReduceSum(bf16_buffer.get(), bf16_buffer.get(), bf16.size(),
                                 DataType::kBFloat16, stream_)
                  .ok());
  EXPECT_EQ(bf16_buffer.ToHost(), bf16);

  std::vector<int32_t> i32 = {INT32_MIN, -1, 0, INT32_MAX};
  DeviceBuffer<int32_t> i32_send(i32), i32_recv(std::vector<int32_t>(i32.size(), 5));
  ASSERT_TRUE(
      comm_->AllReduceSum(i32_send.get(), i32_recv.get(), i32.size(), DataType::kInt32, stream_)
          .ok());
  EXPECT_EQ(i32_recv.ToHost(), i32);

  std::vector<int64_t> i64 = {int64_t{1} << 40, -(int64_t{3} << 50), 42};
  DeviceBuffer<int64_t> i64_buffer(i64);
  ASSERT_TRUE(
      comm_->AllReduceSum(i64_buffer.get(), i64_buffer.get(), i64.size(), DataType::kInt64, stream_)
          .ok());
  EXPECT_EQ(i64_buffer.ToHost(), i64);

  std::vector<uint8_t> u8(1 << 20);
  for (size_t i = 0; i < u8.size(); ++i) u8[i] = static_cast<uint8_t>(i * 7);
  DeviceBuffer<uint8_t> u8_send(u8), u8_recv(std::vector<uint8_t>(u8.size(), 0));
  ASSERT_TRUE(
      comm_->AllReduceSum(u8_send.get(), u8_recv.get(), u8.size(), DataType::kUInt8, stream_).ok());
  EXPECT_EQ(u8_recv.ToHost(), u8);
}

TEST_F(NcclCommunicatorGpuTest, BroadcastFromRootZeroKeepsTheBuffer) {
  std::vector<int64_t> values(1000);
  for (size_t i = 0; i < values.size(); ++i) values[i] = (int64_t{1} << 35) * i - 17;
  DeviceBuffer<int64_t> buffer(values);
  ASSERT_TRUE(comm_->Broadcast(buffer.get(), values.size(), DataType::kInt64, 0, stream_).ok());
  EXPECT_EQ(buffer.ToHost(), values);
  EXPECT_EQ(comm_->Broadcast(buffer.get(), 1, DataType::kInt64, 1, stream_).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(NcclCommunicatorGpuTest, AllGatherOutOfPlaceAndInPlace) {
  std::vector<float> values = {3.0f, -1.0f, 0.5f};
  DeviceBuffer<float> send(values), recv(std::vector<float>(values.size(), 9.0f));
  ASSERT_TRUE(
      comm_->AllGather(send.get(), recv.get(), values.size(), DataType::kFloat32, stream_).ok());
  EXPECT_EQ(recv.ToHost(), values);
  ASSERT_TRUE(
      comm_->AllGather(recv.get(), recv.get(), values.size(), DataType::kFloat32, stream_).ok());
  EXPECT_EQ(recv.ToHost(), values);
}

TEST(NcclCommunicatorAsyncGpuTest, EnqueueThenSynchronize) {
  CommOptions options;
  options.timeout = absl::Seconds(20);
  options.wait_for_completion = false;
  absl::StatusOr<std::unique_ptr<NcclCommunicator>> comm = NcclCommunicator::Create(options);
  ASSERT_TRUE(comm.ok()) << comm.status();
  cudaStream_t stream;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  std::vector<int32_t> values(4096);
  for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<int32_t>(i) - 2000;
  DeviceBuffer<int32_t> send(values), recv(std::vector<int32_t>(values.size(), 0));
  for (int step = 0; step < 8; ++step) {
    ASSERT_TRUE((*comm)
                    ->AllReduceSum(send.get(), recv.get(), values.size(), DataType::kInt32, stream)
                    .ok());
  }
  ASSERT_TRUE((*comm)->Synchronize(stream).ok());
  EXPECT_EQ(recv.ToHost(), values);
  cudaStreamDestroy(stream);
}

// Holds a stream until released: stands in for a peer that never arrives.
void CUDART_CB HoldStream(void* released) {
  auto* flag = static_cast<std::atomic<bool>*>(released);
  while (!flag->load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
}

TEST(NcclCommunicatorTimeoutGpuTest, StuckStreamBecomesDeadlineExceededAndAborts) {
  CommOptions options;
  options.timeout = absl::Seconds(1);
  absl::StatusOr<std::unique_ptr<NcclCommunicator>> comm = NcclCommunicator::Create(options);
  ASSERT_TRUE(comm.ok()) << comm.status();
  cudaStream_t stream;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  std::vector<float> values = {1.0f, 2.0f};
  DeviceBuffer<float> buffer(values);

  std::atomic<bool> released{false};
  ASSERT_EQ(cudaLaunchHostFunc(stream, &HoldStream, &released), cudaSuccess);
  // Released well after the deadline: ncclCommAbort may wait for the device
  // to drain, and this keeps the test from hanging if it does.
  std::thread releaser([&released] {
    std::this_thread::sleep_for(std::chrono::seconds(4));
    released = true;
  });
  const absl::Time start = absl::Now();
  absl::Status status =
      (*comm)->AllReduceSum(buffer.get(), buffer.get(), 2, DataType::kFloat32, stream);
  const absl::Duration waited = absl::Now() - start;
  const bool returned_before_release = !released.load();
  releaser.join();

  EXPECT_EQ(status.code(), absl::StatusCode::kDeadlineExceeded) << status;
  EXPECT_TRUE(absl::StartsWith(status.message(), "rank 0: AllReduceSum/ncclAllReduce timed out"))
      << status;
  EXPECT_GE(waited, options.timeout);
  EXPECT_LT(waited, absl::Seconds(15));
  // Informational: whether ncclCommAbort returned without waiting for the stream.
  std::fprintf(stderr, "timed-out AllReduceSum returned after %s (%s the stream was released)\n",
               absl::FormatDuration(waited).c_str(), returned_before_release ? "before" : "after");

  absl::Status refused =
      (*comm)->AllReduceSum(buffer.get(), buffer.get(), 2, DataType::kFloat32, stream);
  EXPECT_EQ(refused.code(), absl::StatusCode::kFailedPrecondition) << refused;
  EXPECT_TRUE(absl::StrContains(refused.message(), "timed out")) << refused;
  EXPECT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  cudaStreamDestroy(stream);
}

}  // namespace
}  // namespace verdict
