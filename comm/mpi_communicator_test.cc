// MpiCommunicator across ranks: run under mpirun with any number of ranks
// (tests/BUILD runs 2 and 4). Every rank runs every test in the same order;
// expected values are exact, chosen so that every partial sum is exactly
// representable whatever order MPI adds in.
#include "comm/mpi_communicator.h"

#include <mpi.h>

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "comm/mpi_session.h"
#include "comm/testing/rank_failure_printer.h"
#include "gtest/gtest.h"
#include "kernels/bf16.h"

namespace verdict {
namespace {

std::unique_ptr<MpiCommunicator> NewWorld() {
  CommOptions options;
  options.timeout = absl::Seconds(20);  // generous: these tests never wait on purpose
  absl::StatusOr<std::unique_ptr<MpiCommunicator>> comm = MpiCommunicator::Create(options);
  if (!comm.ok()) {
    ADD_FAILURE() << comm.status();
    return nullptr;
  }
  return *std::move(comm);
}

// One element type: its storage, the tag, each rank's contribution to
// element i, and the exact sum over a world of ranks.
struct F32 {
  using T = float;
  static constexpr DataType kType = DataType::kFloat32;
  static T Value(int rank, size_t i) { return (rank + 1) * 0.25f * (i % 13) - rank; }
  static T Sum(int world, size_t i) {
    return 0.25f * (i % 13) * (world * (world + 1) / 2) - world * (world - 1) / 2;
  }
};
struct BF16 {
  using T = uint16_t;
  static constexpr DataType kType = DataType::kBFloat16;
  // Integers of one sign per element: every partial sum stays below 256, so
  // bf16 holds it exactly.
  static float Exact(int rank, size_t i) {
    return (i % 2 ? -1.0f : 1.0f) * (rank + 1) * (i % 7 + 1);
  }
  static T Value(int rank, size_t i) { return FloatToBf16(Exact(rank, i)); }
  static T Sum(int world, size_t i) {
    return FloatToBf16((i % 2 ? -1.0f : 1.0f) * (i % 7 + 1) * (world * (world + 1) / 2));
  }
};
struct I32 {
  using T = int32_t;
  static constexpr DataType kType = DataType::kInt32;
  static T Value(int rank, size_t i) {
    return (rank + 1) * 1000003 * (static_cast<int32_t>(i % 5) - 2) + static_cast<int32_t>(i);
  }
  static T Sum(int world, size_t i) {
    return world * (world + 1) / 2 * 1000003 * (static_cast<int32_t>(i % 5) - 2) +
           world * static_cast<int32_t>(i);
  }
};
struct I64 {
  using T = int64_t;
  static constexpr DataType kType = DataType::kInt64;
  // Above 2^32, so a 32-bit reduction would show.
  static T Value(int rank, size_t i) { return (int64_t{rank + 1} << 40) + int64_t(i); }
  static T Sum(int world, size_t i) {
    return (int64_t{world * (world + 1) / 2} << 40) + int64_t{world} * int64_t(i);
  }
};
struct U8 {
  using T = uint8_t;
  static constexpr DataType kType = DataType::kUInt8;
  // Sums wrap modulo 256.
  static T Value(int rank, size_t i) { return static_cast<T>(200 + rank + i % 3); }
  static T Sum(int world, size_t i) {
    return static_cast<T>(200 * world + world * (world - 1) / 2 + world * (i % 3));
  }
};

// 1 element, an odd small count, and a count large enough for MPI's
// segmented algorithms.
constexpr size_t kCounts[] = {1, 7, 100003};

template <typename Type>
class TypedCollectiveTest : public testing::Test {};
using ElementTypes = testing::Types<F32, BF16, I32, I64, U8>;
TYPED_TEST_SUITE(TypedCollectiveTest, ElementTypes);

TYPED_TEST(TypedCollectiveTest, BroadcastFromEveryRoot) {
  using T = typename TypeParam::T;
  std::unique_ptr<MpiCommunicator> comm = NewWorld();
  ASSERT_NE(comm, nullptr);
  const int world = comm->world_size();
  for (size_t count : kCounts) {
    for (int root = 0; root < world; ++root) {
      std::vector<T> buffer(count, T(0x5a));
      if (comm->rank() == root) {
        for (size_t i = 0; i < count; ++i) buffer[i] = TypeParam::Value(root, i);
      }
      ASSERT_TRUE(comm->Broadcast(buffer.data(), count, TypeParam::kType, root).ok());
      for (size_t i = 0; i < count; ++i) {
        ASSERT_EQ(buffer[i], TypeParam::Value(root, i))
            << "root " << root << " count " << count << " element " << i;
      }
    }
  }
}

TYPED_TEST(TypedCollectiveTest, AllReduceSum) {
  using T = typename TypeParam::T;
  std::unique_ptr<MpiCommunicator> comm = NewWorld();
  ASSERT_NE(comm, nullptr);
  const int world = comm->world_size();
  for (size_t count : kCounts) {
    std::vector<T> send(count), recv(count, T(0x5a));
    for (size_t i = 0; i < count; ++i) send[i] = TypeParam::Value(comm->rank(), i);
    const std::vector<T> sent = send;
    ASSERT_TRUE(comm->AllReduceSum(send.data(), recv.data(), count, TypeParam::kType).ok());
    EXPECT_EQ(send, sent) << "send buffer changed";
    for (size_t i = 0; i < count; ++i) {
      ASSERT_EQ(recv[i], TypeParam::Sum(world, i)) << "count " << count << " element " << i;
    }
  }
}

TYPED_TEST(TypedCollectiveTest, AllReduceSumInPlace) {
  using T = typename TypeParam::T;
  std::unique_ptr<MpiCommunicator> comm = NewWorld();
  ASSERT_NE(comm, nullptr);
  for (size_t count : kCounts) {
    std::vector<T> buffer(count);
    for (size_t i = 0; i < count; ++i) buffer[i] = TypeParam::Value(comm->rank(), i);
    ASSERT_TRUE(comm->AllReduceSum(buffer.data(), buffer.data(), count, TypeParam::kType).ok());
    for (size_t i = 0; i < count; ++i) {
      ASSERT_EQ(buffer[i], TypeParam::Sum(comm->world_size(), i))
          << "count " << count << " element " << i;
    }
  }
}

TYPED_TEST(TypedCollectiveTest, AllGather) {
  using T = typename TypeParam::T;
  std::unique_ptr<MpiCommunicator> comm = NewWorld();
  ASSERT_NE(comm, nullptr);
  const int world = comm->world_size();
  for (size_t count : kCounts) {
    std::vector<T> send(count), recv(world * count, T(0x5a));
    for (size_t i = 0; i < count; ++i) send[i] = TypeParam::Value(comm->rank(), i);
    ASSERT_TRUE(comm->AllGather(send.data(), recv.data(), count, TypeParam::kType).ok());
    for (int r = 0; r < world; ++r) {
      for (size_t i = 0; i < count; ++i) {
        ASSERT_EQ(recv[r * count + i], TypeParam::Value(r, i))
            << "block " << r << " count " << count << " element " << i;
      }
    }
  }
}

TYPED_TEST(TypedCollectiveTest, AllGatherInPlace) {
  using T = typename TypeParam::T;
  std::unique_ptr<MpiCommunicator> comm = NewWorld();
  ASSERT_NE(comm, nullptr);
  const int world = comm->world_size();
  for (size_t count : kCounts) {
    std::vector<T> recv(world * count, T(0x5a));
    T* own = recv.data() + comm->rank() * count;
    for (size_t i = 0; i < count; ++i) own[i] = TypeParam::Value(comm->rank(), i);
    ASSERT_TRUE(comm->AllGather(own, recv.data(), count, TypeParam::kType).ok());
    for (int r = 0; r < world; ++r) {
      for (size_t i = 0; i < count; ++i) {
        ASSERT_EQ(recv[r * count + i], TypeParam::Value(r, i))
            << "block " << r << " count " << count << " element " << i;
      }
    }
  }
}

TEST(MpiCommunicatorTest, WorldMatchesMpi) {
  std::unique_ptr<MpiCommunicator> comm = NewWorld();
  ASSERT_NE(comm, nullptr);
  int rank = -1, size = -1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  EXPECT_EQ(comm->rank(), rank);
  EXPECT_EQ(comm->world_size(), size);
  EXPECT_GE(size, 2) << "run this binary under mpirun with at least 2 ranks";
  // All ranks of these tests run on one host.
  EXPECT_EQ(comm->local_rank(), rank);
  EXPECT_TRUE(comm->Barrier().ok());
}

TEST(MpiCommunicatorTest, Bf16SumRoundsToNearestEven) {
  // Only ranks 0 and 1 contribute non-zero values, so whatever order MPI adds
  // in, exactly one addition is inexact: the result is one rounding of the
  // exact sum, and truncation would give different bits.
  std::unique_ptr<MpiCommunicator> comm = NewWorld();
  ASSERT_NE(comm, nullptr);
  std::vector<uint16_t> values(3, 0);
  if (comm->rank() == 0) values = {0x3f80, 0x3f80, 0x3f80};  // 1.0
  if (comm->rank() == 1) {
    values = {FloatToBf16(0x1p-8f), FloatToBf16(3 * 0x1p-8f), FloatToBf16(0x1.4p-8f)};
  }
  ASSERT_TRUE(comm->AllReduceSum(values.data(), values.data(), 3, DataType::kBFloat16).ok());
  EXPECT_EQ(values[0], 0x3f80);  // 1 + 2^-8: tie, stays at the even 1.0
  EXPECT_EQ(values[1], 0x3f82);  // 1 + 3 * 2^-8: tie, up to the even 0x3f82
  EXPECT_EQ(values[2], 0x3f81);  // 1 + 1.25 * 2^-8: above the midpoint
}

TEST(MpiCommunicatorTest, BadRootIsRefusedOnEveryRankWithoutCommunicating) {
  std::unique_ptr<MpiCommunicator> comm = NewWorld();
  ASSERT_NE(comm, nullptr);
  int32_t value = 7;
  absl::Status status = comm->Broadcast(&value, 1, DataType::kInt32, comm->world_size());
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StartsWith(status.message(), absl::StrCat("rank ", comm->rank(), ": ")))
      << status;
  // Nothing was left half-entered: the communicator still works.
  ASSERT_TRUE(comm->AllReduceSum(&value, &value, 1, DataType::kInt32).ok());
  EXPECT_EQ(value, 7 * comm->world_size());
}

// Every rank ends with the root's bytes, whatever length it held before;
// an empty root string empties every rank's.
TEST(MpiCommunicatorTest, BroadcastBytesGivesEveryRankTheRootsBytes) {
  std::unique_ptr<MpiCommunicator> comm = NewWorld();
  ASSERT_NE(comm, nullptr);
  const int root = comm->world_size() - 1;
  const std::string sent = std::string("rank ") + std::to_string(root) + '\0' + "bytes";
  std::string bytes = comm->rank() == root ? sent : std::string(comm->rank() + 3, 'x');
  ASSERT_TRUE(BroadcastBytes(*comm, &bytes, root).ok());
  EXPECT_EQ(bytes, sent);
  std::string empty = comm->rank() == 0 ? "" : "left over";
  ASSERT_TRUE(BroadcastBytes(*comm, &empty).ok());
  EXPECT_EQ(empty, "");
}

TEST(MpiCommunicatorTest, ZeroCountIsANoOp) {
  std::unique_ptr<MpiCommunicator> comm = NewWorld();
  ASSERT_NE(comm, nullptr);
  EXPECT_TRUE(comm->Broadcast(nullptr, 0, DataType::kFloat32, 0).ok());
  EXPECT_TRUE(comm->AllReduceSum(nullptr, nullptr, 0, DataType::kInt64).ok());
  EXPECT_TRUE(comm->AllGather(nullptr, nullptr, 0, DataType::kUInt8).ok());
  EXPECT_TRUE(comm->Barrier().ok());
}

TEST(MpiCommunicatorTest, SubCommunicatorFromParent) {
  // Even and odd ranks form two communicators; each sums only its own ranks.
  std::unique_ptr<MpiCommunicator> world = NewWorld();
  ASSERT_NE(world, nullptr);
  MPI_Comm half;
  ASSERT_EQ(MPI_Comm_split(world->comm(), world->rank() % 2, world->rank(), &half), MPI_SUCCESS);
  CommOptions options;
  options.timeout = absl::Seconds(20);
  absl::StatusOr<std::unique_ptr<MpiCommunicator>> comm = MpiCommunicator::Create(options, half);
  MPI_Comm_free(&half);
  ASSERT_TRUE(comm.ok()) << comm.status();
  int64_t expected = 0;
  for (int r = world->rank() % 2; r < world->world_size(); r += 2) expected += r;
  int64_t value = world->rank();
  ASSERT_TRUE((*comm)->AllReduceSum(&value, &value, 1, DataType::kInt64).ok());
  EXPECT_EQ(value, expected);
  EXPECT_EQ((*comm)->rank(), world->rank() / 2);
}

// Duplicate: a second communicator over the same ranks whose collectives
// never match the first one's, so two threads may each run their own
// sequence at once (the engine's scheduling thread and its step executor).
// Each thread sums its own values 300 times; neither sees the other's.
TEST(MpiCommunicatorTest, DuplicateRunsCollectivesFromASecondThread) {
  std::unique_ptr<MpiCommunicator> world = NewWorld();
  ASSERT_NE(world, nullptr);
  absl::StatusOr<std::unique_ptr<Communicator>> dup = world->Duplicate();
  ASSERT_TRUE(dup.ok()) << dup.status();
  EXPECT_EQ((*dup)->rank(), world->rank());
  EXPECT_EQ((*dup)->world_size(), world->world_size());
  const int64_t n = world->world_size();
  auto sums = [n](Communicator* comm, int64_t base, int* wrong) {
    for (int64_t k = 0; k < 300; ++k) {
      int64_t value = base + k;
      const absl::Status s = comm->AllReduceSum(&value, &value, 1, DataType::kInt64);
      if (!s.ok() || value != n * (base + k)) ++*wrong;
    }
  };
  int wrong_world = 0, wrong_dup = 0;
  std::thread other([&] { sums(dup->get(), 1000000, &wrong_dup); });
  sums(world.get(), 0, &wrong_world);
  other.join();
  EXPECT_EQ(wrong_world, 0);
  EXPECT_EQ(wrong_dup, 0);
}

}  // namespace
}  // namespace verdict

int main(int argc, char** argv) {
  testing::InitGoogleTest(&argc, argv);
  // Held for the whole run: MPI cannot start again once the last
  // communicator of a test has gone.
  absl::StatusOr<std::shared_ptr<verdict::MpiSession>> session = verdict::MpiSession::Acquire();
  if (!session.ok()) {
    std::fprintf(stderr, "%s\n", std::string(session.status().message()).c_str());
    return 2;
  }
  const int rank = (*session)->world_rank();
  verdict::ReportFailuresByRank(rank);
  return RUN_ALL_TESTS();
}
