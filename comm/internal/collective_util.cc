#include "comm/internal/collective_util.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"

namespace verdict {
namespace comm_internal {
namespace {

// Whether [a, a + a_bytes) and [b, b + b_bytes) share a byte.
bool Overlap(const void* a, size_t a_bytes, const void* b, size_t b_bytes) {
  const auto a0 = reinterpret_cast<uintptr_t>(a);
  const auto b0 = reinterpret_cast<uintptr_t>(b);
  return a0 < b0 + b_bytes && b0 < a0 + a_bytes;
}

}  // namespace

absl::Status RankError(absl::StatusCode code, int rank, absl::string_view message) {
  return absl::Status(code, absl::StrCat("rank ", rank, ": ", message));
}

absl::Status CheckBroadcastArgs(int rank, int world_size, const void* buffer, size_t count,
                                int root) {
  if (root < 0 || root >= world_size) {
    return RankError(
        absl::StatusCode::kInvalidArgument, rank,
        absl::StrCat("Broadcast: root ", root, " is outside the world of ", world_size, " ranks"));
  }
  if (count > 0 && buffer == nullptr) {
    return RankError(absl::StatusCode::kInvalidArgument, rank,
                     absl::StrCat("Broadcast: null buffer for ", count, " elements"));
  }
  return absl::OkStatus();
}

absl::Status CheckAllReduceArgs(int rank, const void* send, const void* recv, size_t count,
                                DataType type) {
  if (count == 0) return absl::OkStatus();
  if (send == nullptr || recv == nullptr) {
    return RankError(absl::StatusCode::kInvalidArgument, rank,
                     absl::StrCat("AllReduceSum: null buffer for ", count, " elements"));
  }
  const size_t bytes = count * DataTypeSize(type);
  if (send != recv && Overlap(send, bytes, recv, bytes)) {
    return RankError(absl::StatusCode::kInvalidArgument, rank,
                     "AllReduceSum: send and recv overlap without being equal (in place)");
  }
  return absl::OkStatus();
}

absl::Status CheckAllGatherArgs(int rank, int world_size, const void* send, const void* recv,
                                size_t count, DataType type) {
  if (count == 0) return absl::OkStatus();
  if (send == nullptr || recv == nullptr) {
    return RankError(absl::StatusCode::kInvalidArgument, rank,
                     absl::StrCat("AllGather: null buffer for ", count, " elements"));
  }
  const size_t bytes = count * DataTypeSize(type);
  if (!IsInPlaceAllGather(rank, send, recv, count, type) &&
      Overlap(send, bytes, recv, bytes * world_size)) {
    return RankError(absl::StatusCode::kInvalidArgument, rank,
                     absl::StrCat("AllGather: send overlaps recv without being rank ", rank,
                                  "'s block of it (in place)"));
  }
  return absl::OkStatus();
}

bool IsInPlaceAllGather(int rank, const void* send, const void* recv, size_t count, DataType type) {
  return static_cast<const char*>(recv) + rank * count * DataTypeSize(type) ==
         static_cast<const char*>(send);
}

absl::StatusOr<bool> PollUntilDone(absl::Duration timeout,
                                   absl::FunctionRef<absl::StatusOr<bool>()> poll) {
  // Most collectives finish within microseconds: spin that long, then back
  // off so a rank that waits for a slow peer does not starve it of a core.
  const absl::Duration kSpin = absl::Microseconds(50);
  const absl::Duration kMaxPause = absl::Milliseconds(1);
  const absl::Time start = absl::Now();
  const absl::Time deadline = start + timeout;
  while (true) {
    absl::StatusOr<bool> done = poll();
    if (!done.ok() || *done) return done;
    const absl::Time now = absl::Now();
    if (now >= deadline) return false;
    const absl::Duration waited = now - start;
    if (waited > kSpin) {
      const absl::Duration pause = std::min(waited / 16, kMaxPause);
      std::this_thread::sleep_for(absl::ToChronoNanoseconds(std::min(pause, deadline - now)));
    }
  }
}

absl::Status TimeoutError(int rank, absl::string_view call, absl::Duration timeout) {
  absl::Status status =
      RankError(absl::StatusCode::kDeadlineExceeded, rank,
                absl::StrCat(call, " timed out after ", absl::FormatDuration(timeout)));
  std::fprintf(stderr, "%s\n", std::string(status.message()).c_str());
  std::fflush(stderr);
  return status;
}

absl::Status RefusedAfterFailure(int rank, absl::string_view call, const absl::Status& failure) {
  return RankError(
      absl::StatusCode::kFailedPrecondition, rank,
      absl::StrCat(call, " refused: the communicator failed earlier: ", failure.message()));
}

}  // namespace comm_internal
}  // namespace verdict
