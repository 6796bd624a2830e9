// NvlinkAllReduce across the ranks of one host, one GPU each: run under
// `mpirun -np N` (tools/device/tp_check.sh does); a world of one (no
// mpirun) checks the same expectations with a single term. The CPU twin
// (OneShotAllReduceCpu) over every rank's input, gathered on the host, is
// the oracle: every rank's result must equal it bit for bit.
#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "comm/create_communicator.h"
#include "comm/local_communicator.h"
#include "comm/nccl_communicator.h"
#include "comm/nvlink_all_reduce.h"
#include "comm/one_shot_all_reduce.h"
#include "comm/testing/gpu_test_util.h"
#include "gtest/gtest.h"
#include "kernels/bf16.h"

namespace verdict {
namespace {

// MPI stays up between the tests' communicators.
testing::Environment* const mpi_session_environment =
    testing::AddGlobalTestEnvironment(new MpiSessionEnvironment);

constexpr size_t kMaxBytes = size_t{1} << 20;

class NvlinkAllReduceGpuTest : public testing::Test {
 protected:
  void SetUp() override {
    // The NCCL communicator selects this rank's GPU (and is the peer to
    // compare with); the host communicator shares the IPC handles.
    CommOptions options;
    options.timeout = absl::Seconds(30);
    absl::StatusOr<std::unique_ptr<NcclCommunicator>> nccl = NcclCommunicator::Create(options);
    ASSERT_TRUE(nccl.ok()) << nccl.status();
    nccl_ = *std::move(nccl);
    if (MpiSession::LaunchedByLauncher()) {
      absl::StatusOr<std::unique_ptr<Communicator>> mpi = CreateCommunicator(Backend::kMpi);
      ASSERT_TRUE(mpi.ok()) << mpi.status();
      host_ = *std::move(mpi);
    } else {
      host_ = std::make_unique<LocalCommunicator>();
    }
    absl::StatusOr<std::unique_ptr<NvlinkAllReduce>> all_reduce =
        NvlinkAllReduce::Create(*host_, kMaxBytes);
    ASSERT_TRUE(all_reduce.ok()) << all_reduce.status();
    all_reduce_ = *std::move(all_reduce);
    ASSERT_EQ(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), cudaSuccess);
  }
  void TearDown() override {
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
    // Every rank's kernels are done before any rank unmaps and frees.
    if (host_ != nullptr) {
      EXPECT_TRUE(host_->Barrier().ok());
    }
    all_reduce_.reset();
  }

  int rank() const { return host_->rank(); }
  int world() const { return host_->world_size(); }

  // This rank's input: random values of `type` (raw bits), seeded by rank
  // and `salt`. Small integers and halves in bf16, so sums stay exact too.
  std::vector<uint8_t> Input(DataType type, size_t count, int salt) const {
    std::mt19937 rng(1000 * rank() + salt);
    std::uniform_real_distribution<float> value(-4.0f, 4.0f);
    std::vector<uint8_t> bytes(count * (type == DataType::kBFloat16 ? 2 : 4));
    for (size_t i = 0; i < count; ++i) {
      const float v = value(rng);
      if (type == DataType::kBFloat16) {
        const uint16_t bits = FloatToBf16(v);
        std::memcpy(bytes.data() + 2 * i, &bits, 2);
      } else {
        std::memcpy(bytes.data() + 4 * i, &v, 4);
      }
    }
    return bytes;
  }

  // The CPU twin over every rank's `mine`, gathered on the host.
  std::vector<uint8_t> Expected(const std::vector<uint8_t>& mine, size_t count, DataType type) {
    std::vector<uint8_t> all(mine.size() * static_cast<size_t>(world()));
    EXPECT_TRUE(host_->AllGather(mine.data(), all.data(), mine.size(), DataType::kUInt8).ok());
    std::vector<const void*> inputs;
    for (int r = 0; r < world(); ++r) inputs.push_back(all.data() + r * mine.size());
    std::vector<uint8_t> out(mine.size());
    OneShotAllReduceCpu(inputs, static_cast<int64_t>(count), type, out.data());
    return out;
  }

  enum class Out { kSeparate, kInPlace, kUnaligned };

  // Runs the all-reduce on `mine`: into another buffer, in place, or into a
  // buffer one element past a 16-byte boundary (the element-wise path).
  std::vector<uint8_t> Reduce(const std::vector<uint8_t>& mine, size_t count, DataType type,
                              Out where) {
    const size_t element = mine.size() / count;
    DeviceBuffer<uint8_t> send(mine), recv(std::vector<uint8_t>(mine.size() + element, 0xAB));
    uint8_t* out = where == Out::kInPlace     ? send.get()
                   : where == Out::kUnaligned ? recv.get() + element
                                              : recv.get();
    EXPECT_TRUE(all_reduce_->AllReduceSum(send.get(), out, count, type, stream_).ok());
    EXPECT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
    if (where == Out::kInPlace) return send.ToHost();
    std::vector<uint8_t> got = recv.ToHost();
    const size_t skip = where == Out::kUnaligned ? element : 0;
    return std::vector<uint8_t>(got.begin() + skip, got.begin() + skip + mine.size());
  }

  std::unique_ptr<NcclCommunicator> nccl_;
  std::unique_ptr<Communicator> host_;
  std::unique_ptr<NvlinkAllReduce> all_reduce_;
  cudaStream_t stream_ = nullptr;
};

TEST_F(NvlinkAllReduceGpuTest, EqualsTheCpuTwinBitForBit) {
  int salt = 0;
  for (DataType type : {DataType::kBFloat16, DataType::kFloat32}) {
    // One element, a tail after whole 16-byte packs, decode rows of a
    // 4096 hidden size, and the largest message the buffer takes.
    const size_t largest = kMaxBytes / (type == DataType::kBFloat16 ? 2 : 4);
    for (size_t count : {size_t{1}, size_t{13}, size_t{6 * 4096}, size_t{6 * 4096 + 3}, largest}) {
      for (Out where : {Out::kSeparate, Out::kInPlace, Out::kUnaligned}) {
        const std::vector<uint8_t> mine = Input(type, count, ++salt);
        const std::vector<uint8_t> want = Expected(mine, count, type);
        const std::vector<uint8_t> got = Reduce(mine, count, type, where);
        // EXPECT, not ASSERT: every rank must go on to the same collectives.
        EXPECT_EQ(got, want) << "type " << static_cast<int>(type) << ", count " << count
                             << ", output " << static_cast<int>(where);
      }
    }
  }
}

// Many calls back to back: each block's epoch advances on every rank, and
// no rank overwrites its buffer while a peer still reads it.
TEST_F(NvlinkAllReduceGpuTest, BackToBackCallsStayInStep) {
  const size_t count = 6 * 4096;
  std::vector<std::vector<uint8_t>> inputs, wants;
  for (int call = 0; call < 64; ++call) {
    inputs.push_back(Input(DataType::kBFloat16, count, 500 + call));
    wants.push_back(Expected(inputs.back(), count, DataType::kBFloat16));
  }
  std::vector<std::unique_ptr<DeviceBuffer<uint8_t>>> sends, recvs;
  for (int call = 0; call < 64; ++call) {
    sends.push_back(std::make_unique<DeviceBuffer<uint8_t>>(inputs[call]));
    recvs.push_back(std::make_unique<DeviceBuffer<uint8_t>>(std::vector<uint8_t>(2 * count, 0)));
    ASSERT_TRUE(all_reduce_
                    ->AllReduceSum(sends[call]->get(), recvs[call]->get(), count,
                                   DataType::kBFloat16, stream_)
                    .ok());
  }
  ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
  for (int call = 0; call < 64; ++call) ASSERT_EQ(recvs[call]->ToHost(), wants[call]) << call;
}

// The models capture their layers into CUDA graphs: a replayed all-reduce
// sums the values its buffers hold at that replay.
TEST_F(NvlinkAllReduceGpuTest, ReplaysFromACapturedGraph) {
  const size_t count = 6 * 4096 + 8;
  DeviceBuffer<uint8_t> send(std::vector<uint8_t>(2 * count, 0)),
      recv(std::vector<uint8_t>(2 * count, 0));
  CapturedGraph graph(stream_, [&] {
    return all_reduce_->AllReduceSum(send.get(), recv.get(), count, DataType::kBFloat16, stream_);
  });
  ASSERT_TRUE(graph.status().ok()) << graph.status();
  for (int replay = 0; replay < 4; ++replay) {
    const std::vector<uint8_t> mine = Input(DataType::kBFloat16, count, 900 + replay);
    const std::vector<uint8_t> want = Expected(mine, count, DataType::kBFloat16);
    ASSERT_EQ(cudaMemcpyAsync(send.get(), mine.data(), mine.size(), cudaMemcpyHostToDevice,
                              stream_),
              cudaSuccess);
    ASSERT_EQ(graph.Launch(stream_), cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
    EXPECT_EQ(recv.ToHost(), want) << "replay " << replay;  // every rank replays on
  }
}

// float32 sums agree with NCCL's: exactly for two ranks (one addition in
// either order), within rounding of the order for more.
TEST_F(NvlinkAllReduceGpuTest, AgreesWithNccl) {
  const size_t count = 4096 * 8;
  const std::vector<uint8_t> mine = Input(DataType::kFloat32, count, 77);
  const std::vector<uint8_t> ours = Reduce(mine, count, DataType::kFloat32, Out::kSeparate);
  DeviceBuffer<uint8_t> buffer(mine);
  ASSERT_TRUE(
      nccl_->AllReduceSum(buffer.get(), buffer.get(), count, DataType::kFloat32, stream_).ok());
  ASSERT_EQ(cudaStreamSynchronize(stream_), cudaSuccess);
  const std::vector<uint8_t> theirs = buffer.ToHost();
  std::vector<float> a(count), b(count);
  std::memcpy(a.data(), ours.data(), ours.size());
  std::memcpy(b.data(), theirs.data(), theirs.size());
  for (size_t i = 0; i < count; ++i) {
    if (world() <= 2) {
      ASSERT_EQ(a[i], b[i]) << i;
    } else {
      // |values| < 4 per rank: each of the world - 1 additions of either
      // order rounds by at most half an ulp of a sum below 4 * world.
      ASSERT_NEAR(a[i], b[i], 2.0f * (world() - 1) * 4.0f * world() * std::ldexp(1.0f, -24))
          << i;
    }
  }
}

TEST_F(NvlinkAllReduceGpuTest, RefusesWhatItCannotCarry) {
  DeviceBuffer<uint8_t> buffer(std::vector<uint8_t>(16, 0));
  const absl::Status too_big = all_reduce_->AllReduceSum(
      buffer.get(), buffer.get(), kMaxBytes / 4 + 1, DataType::kFloat32, stream_);
  EXPECT_EQ(too_big.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(too_big.message(), "more than its buffer")) << too_big;
  const absl::Status ints =
      all_reduce_->AllReduceSum(buffer.get(), buffer.get(), 4, DataType::kInt32, stream_);
  EXPECT_EQ(ints.code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace verdict
