// NcclCommunicator across ranks, one GPU each: run under
// `mpirun -np N` on a machine with N GPUs (tools/device/tp_check.sh does).
// Every expectation is written for any world size, so a world of one (run
// without mpirun) checks the same arithmetic with a single term.
//
// Covers what tensor parallelism uses: the all-reduce of the row-parallel
// projections (bf16, also replayed from a captured CUDA graph), the logits'
// all-gather (f32), rank 0's broadcast of verify lengths (int32), and a peer
// that never enters a collective, which must become DeadlineExceeded on the
// waiting rank, not a hang.
#include <cuda_runtime_api.h>

#include <cstdint>
#include <cstdlib>
#include <memory>
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

class NcclTensorParallelGpuTest : public testing::Test {
 protected:
  // `wait`: whether each collective waits for its completion (the engine's
  // models run with false and synchronize once per pass).
  void Create(bool wait, absl::Duration timeout = absl::Seconds(30)) {
    CommOptions options;
    options.timeout = timeout;
    options.wait_for_completion = wait;
    absl::StatusOr<std::unique_ptr<NcclCommunicator>> comm = NcclCommunicator::Create(options);
    ASSERT_TRUE(comm.ok()) << comm.status();
    comm_ = *std::move(comm);
    ASSERT_EQ(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), cudaSuccess);
  }
  void TearDown() override {
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }
  int rank() const { return comm_->rank(); }
  int world() const { return comm_->world_size(); }

  std::unique_ptr<NcclCommunicator> comm_;
  cudaStream_t stream_ = nullptr;
};

// On one host (as tp_check.sh runs it) the local rank is the rank.
TEST_F(NcclTensorParallelGpuTest, EachRankOwnsItsGpu) {
  Create(/*wait=*/true);
  int devices = 0;
  ASSERT_EQ(cudaGetDeviceCount(&devices), cudaSuccess);
  ASSERT_GE(devices, world()) << "one GPU per rank";
  EXPECT_EQ(comm_->device(), rank());
  int current = -1;
  ASSERT_EQ(cudaGetDevice(&current), cudaSuccess);
  EXPECT_EQ(current, rank());
  EXPECT_STREQ(std::getenv("NCCL_NVLS_ENABLE"), "0");
  EXPECT_TRUE(comm_->Barrier().ok());
}

// Rank r contributes (r + 1) * x; the sum is x * N (N + 1) / 2, exact in
// every type for the small integers used.
TEST_F(NcclTensorParallelGpuTest, AllReduceSumsEveryRanksContribution) {
  Create(/*wait=*/true);
  const int n = world();
  const int scale = rank() + 1;
  const int total = n * (n + 1) / 2;

  std::vector<uint16_t> bf16(4096), want_bf16(bf16.size());
  for (size_t i = 0; i < bf16.size(); ++i) {
    const int x = static_cast<int>(i % 17) - 8;
    bf16[i] = FloatToBf16(static_cast<float>(x * scale));
    want_bf16[i] = FloatToBf16(static_cast<float>(x * total));
  }
  DeviceBuffer<uint16_t> bf16_buffer(bf16);
  ASSERT_TRUE(comm_
                  ->AllReduceSum(bf16_buffer.get(), bf16_buffer.get(), bf16.size(),
                                 DataType::kBFloat16, stream_)
                  .ok());
  EXPECT_EQ(bf16_buffer.ToHost(), want_bf16);

  std::vector<float> f32(1 << 20), want_f32(f32.size());
  for (size_t i = 0; i < f32.size(); ++i) {
    const float x = static_cast<float>(static_cast<int>(i % 1001) - 500) * 0.25f;
    f32[i] = x * static_cast<float>(scale);
    want_f32[i] = x * static_cast<float>(total);
  }
  DeviceBuffer<float> f32_send(f32), f32_recv(std::vector<float>(f32.size(), -1.0f));
  ASSERT_TRUE(
      comm_->AllReduceSum(f32_send.get(), f32_recv.get(), f32.size(), DataType::kFloat32, stream_)
          .ok());
  EXPECT_EQ(f32_recv.ToHost(), want_f32);

  std::vector<int64_t> i64 = {int64_t{1} << 40, -(int64_t{3} << 30), 42};
  std::vector<int64_t> mine(i64.size()), want_i64(i64.size());
  for (size_t i = 0; i < i64.size(); ++i) {
    mine[i] = i64[i] * scale;
    want_i64[i] = i64[i] * total;
  }
  DeviceBuffer<int64_t> i64_buffer(mine);
  ASSERT_TRUE(
      comm_->AllReduceSum(i64_buffer.get(), i64_buffer.get(), mine.size(), DataType::kInt64, stream_)
          .ok());
  EXPECT_EQ(i64_buffer.ToHost(), want_i64);
}

// The logits' layout: rank r's vocabulary shard lands at block r.
TEST_F(NcclTensorParallelGpuTest, AllGatherPlacesEachRanksBlockAtItsIndex) {
  Create(/*wait=*/true);
  const size_t count = 151936 / 2 + 3;  // a vocabulary shard of no round size
  std::vector<float> shard(count);
  for (size_t i = 0; i < count; ++i) shard[i] = static_cast<float>(rank() * 1000003 + i);
  DeviceBuffer<float> send(shard),
      recv(std::vector<float>(count * static_cast<size_t>(world()), -1.0f));
  ASSERT_TRUE(comm_->AllGather(send.get(), recv.get(), count, DataType::kFloat32, stream_).ok());
  const std::vector<float> got = recv.ToHost();
  for (int r = 0; r < world(); ++r) {
    for (size_t i = 0; i < count; i += 997) {
      ASSERT_EQ(got[r * count + i], static_cast<float>(r * 1000003 + i)) << "block " << r;
    }
    EXPECT_EQ(got[r * count + count - 1], static_cast<float>(r * 1000003 + count - 1));
  }
}

// Rank 0's verify lengths reach every rank, whatever the others held.
TEST_F(NcclTensorParallelGpuTest, BroadcastGivesEveryRankRootsVerifyLengths) {
  Create(/*wait=*/true);
  std::vector<int32_t> lengths(512);
  for (size_t i = 0; i < lengths.size(); ++i) lengths[i] = static_cast<int32_t>((i * 7) % 6);
  std::vector<int32_t> mine =
      rank() == 0 ? lengths : std::vector<int32_t>(lengths.size(), -100 - rank());
  DeviceBuffer<int32_t> buffer(mine);
  ASSERT_TRUE(comm_->Broadcast(buffer.get(), mine.size(), DataType::kInt32, 0, stream_).ok());
  EXPECT_EQ(buffer.ToHost(), lengths);
}

// The models capture their layers, all-reduces included, into CUDA graphs
// at TP > 1: each replay must sum the buffers' values of that moment.
TEST_F(NcclTensorParallelGpuTest, AllReduceCapturedInAGraphSumsOnEveryReplay) {
  Create(/*wait=*/false);
  ASSERT_TRUE(comm_->CapturableInCudaGraphs());
  const size_t count = 8192;
  DeviceBuffer<float> send(std::vector<float>(count, 0.0f)), recv(std::vector<float>(count, 0.0f));

  CapturedGraph graph(stream_, [&] {
    return comm_->AllReduceSum(send.get(), recv.get(), count, DataType::kFloat32, stream_);
  });
  ASSERT_TRUE(graph.status().ok()) << graph.status();

  const int n = world();
  for (int replay = 1; replay <= 3; ++replay) {
    std::vector<float> mine(count);
    for (size_t i = 0; i < count; ++i) {
      mine[i] = static_cast<float>(replay * 100 + (rank() + 1) * static_cast<int>(i % 13));
    }
    ASSERT_EQ(cudaMemcpyAsync(send.get(), mine.data(), count * sizeof(float),
                              cudaMemcpyHostToDevice, stream_),
              cudaSuccess);
    ASSERT_EQ(graph.Launch(stream_), cudaSuccess);
    ASSERT_TRUE(comm_->Synchronize(stream_).ok());
    const std::vector<float> got = recv.ToHost();
    for (size_t i = 0; i < count; ++i) {
      const float want =
          static_cast<float>(n * replay * 100 + n * (n + 1) / 2 * static_cast<int>(i % 13));
      ASSERT_EQ(got[i], want) << "replay " << replay << " element " << i;
    }
  }
}

// The last rank never enters the all-reduce: every other rank's timed wait
// turns it into DeadlineExceeded naming the call, within the timeout.
TEST_F(NcclTensorParallelGpuTest, APeerThatNeverArrivesIsATimeoutNotAHang) {
  Create(/*wait=*/false, absl::Seconds(2));
  const bool absent = world() > 1 && rank() == world() - 1;
  std::vector<float> values(64, 1.0f);
  DeviceBuffer<float> buffer(values);
  if (!absent) {
    const absl::Time start = absl::Now();
    absl::Status status =
        comm_->AllReduceSum(buffer.get(), buffer.get(), values.size(), DataType::kFloat32, stream_);
    if (status.ok()) status = comm_->Synchronize(stream_);
    const absl::Duration waited = absl::Now() - start;
    if (world() == 1) {
      // Nobody is missing in a world of one: the sum is the input.
      EXPECT_TRUE(status.ok()) << status;
      EXPECT_EQ(buffer.ToHost(), values);
    } else {
      EXPECT_EQ(status.code(), absl::StatusCode::kDeadlineExceeded) << status;
      EXPECT_TRUE(absl::StrContains(status.message(), "timed out")) << status;
      EXPECT_LT(waited, absl::Seconds(15));
    }
  }
  // The waiting ranks' NCCL communicators are aborted; the absent rank's
  // finalize in the destructor is bounded by the same timeout.
}

}  // namespace
}  // namespace verdict
