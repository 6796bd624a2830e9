#include "runtime/engine/collective_timer.h"

#include <cstdint>
#include <cstring>
#include <thread>

#include "absl/status/status.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "comm/local_communicator.h"
#include "gtest/gtest.h"

namespace verdict {
namespace {

// A world of three ranks as seen from rank 1: AllReduceSum takes 30 ms and
// Broadcast fails, so the wrapper's timing and status forwarding show.
class SlowCommunicator final : public Communicator {
 public:
  int rank() const override { return 1; }
  int world_size() const override { return 3; }
  absl::Status Broadcast(void*, size_t, DataType, int root, void*) override {
    last_root = root;
    return absl::DeadlineExceededError("rank 1: Broadcast timed out");
  }
  absl::Status AllReduceSum(const void* send, void* recv, size_t count, DataType type,
                            void*) override {
    absl::SleepFor(absl::Milliseconds(30));
    std::memcpy(recv, send, count * DataTypeSize(type));
    static_cast<int32_t*>(recv)[0] *= 3;
    return absl::OkStatus();
  }
  absl::Status AllGather(const void*, void*, size_t count, DataType, void*) override {
    last_count = count;
    return absl::OkStatus();
  }
  int last_root = -1;
  size_t last_count = 0;
};

TEST(TimedCommunicatorTest, ForwardsCallsAndStatuses) {
  SlowCommunicator inner;
  TimedCommunicator timed(&inner);
  EXPECT_EQ(timed.rank(), 1);
  EXPECT_EQ(timed.world_size(), 3);
  int32_t value[2] = {7, 1};
  ASSERT_TRUE(timed.AllReduceSum(value, value, 2, DataType::kInt32).ok());
  EXPECT_EQ(value[0], 21);
  absl::Status broadcast = timed.Broadcast(value, 2, DataType::kInt32, /*root=*/2);
  EXPECT_EQ(broadcast.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(inner.last_root, 2);
  int64_t gathered[15];
  ASSERT_TRUE(timed.AllGather(gathered, gathered, 5, DataType::kInt64).ok());
  EXPECT_EQ(inner.last_count, 5u);
  EXPECT_EQ(timed.calls(), 3);
}

TEST(TimedCommunicatorTest, CountsTimeInsideCollectivesOnly) {
  SlowCommunicator inner;
  TimedCommunicator timed(&inner);
  EXPECT_EQ(timed.nanoseconds(), 0);
  int32_t value = 1;
  ASSERT_TRUE(timed.AllReduceSum(&value, &value, 1, DataType::kInt32).ok());
  ASSERT_TRUE(timed.AllReduceSum(&value, &value, 1, DataType::kInt32).ok());
  absl::SleepFor(absl::Milliseconds(400));  // outside any collective: not counted
  const double seconds = timed.nanoseconds() * 1e-9;
  EXPECT_GE(seconds, 0.060);
  // Far below the 460 ms that counting the sleep outside would give, with
  // room for a loaded CI host oversleeping the two 30 ms calls.
  EXPECT_LT(seconds, 0.300);
}

TEST(TimedCommunicatorTest, WrapsARealBackend) {
  LocalCommunicator local;
  TimedCommunicator timed(&local);
  float data[3] = {1, 2, 3};
  float out[3] = {};
  ASSERT_TRUE(timed.AllGather(data, out, 3, DataType::kFloat32).ok());
  EXPECT_EQ(out[2], 3.0f);
  ASSERT_TRUE(timed.Barrier().ok());
  ASSERT_TRUE(timed.Synchronize().ok());
  EXPECT_EQ(timed.calls(), 3);
  EXPECT_GE(timed.nanoseconds(), 0);
}

}  // namespace
}  // namespace verdict
