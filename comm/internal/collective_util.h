// Pieces every backend shares: argument checks that name the rank and the
// call, the deadline poll, and the timeout report.
#ifndef VERDICT_COMM_INTERNAL_COLLECTIVE_UTIL_H_
#define VERDICT_COMM_INTERNAL_COLLECTIVE_UTIL_H_

#include <cstddef>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "comm/communicator.h"

namespace verdict {
namespace comm_internal {

// A status whose message starts "rank R: ", the prefix every error from this
// layer carries.
absl::Status RankError(absl::StatusCode code, int rank, absl::string_view message);

// InvalidArgument for buffers a collective cannot use: null with count > 0,
// a root outside the world, buffers that overlap other than in place. Every
// rank passes the same arguments, so every rank refuses together and no
// collective is left half-entered.
absl::Status CheckBroadcastArgs(int rank, int world_size, const void* buffer, size_t count,
                                int root);
absl::Status CheckAllReduceArgs(int rank, const void* send, const void* recv, size_t count,
                                DataType type);
absl::Status CheckAllGatherArgs(int rank, int world_size, const void* send, const void* recv,
                                size_t count, DataType type);

// Whether `send` is this rank's block of `recv`: an in-place all-gather.
bool IsInPlaceAllGather(int rank, const void* send, const void* recv, size_t count, DataType type);

// Calls `poll` until it returns true (done) or an error, or until `timeout`
// has passed; returns false on timeout. It spins briefly, then sleeps between
// polls with a growing pause (at most 1 ms) so that ranks sharing cores let
// each other progress.
absl::StatusOr<bool> PollUntilDone(absl::Duration timeout,
                                   absl::FunctionRef<absl::StatusOr<bool>()> poll);

// Logs "rank R: <call> timed out after <timeout>" to stderr (the process may
// be aborted before the caller reports it) and returns it as
// DeadlineExceeded.
absl::Status TimeoutError(int rank, absl::string_view call, absl::Duration timeout);

// FailedPrecondition for a call on a communicator that an earlier error left
// failed; names both.
absl::Status RefusedAfterFailure(int rank, absl::string_view call, const absl::Status& failure);

}  // namespace comm_internal
}  // namespace verdict

#endif  // VERDICT_COMM_INTERNAL_COLLECTIVE_UTIL_H_
