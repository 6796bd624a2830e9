#include "runtime/engine/collective_timer.h"

#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace verdict {

template <typename Call>
absl::Status TimedCommunicator::Timed(Call call) {
  const absl::Time start = absl::Now();
  absl::Status status = call();
  nanoseconds_.fetch_add(absl::ToInt64Nanoseconds(absl::Now() - start),
                         std::memory_order_relaxed);
  calls_.fetch_add(1, std::memory_order_relaxed);
  return status;
}

absl::Status TimedCommunicator::Broadcast(void* buffer, size_t count, DataType type, int root,
                                          void* stream) {
  return Timed([&] { return inner_->Broadcast(buffer, count, type, root, stream); });
}

absl::Status TimedCommunicator::AllReduceSum(const void* send, void* recv, size_t count,
                                             DataType type, void* stream) {
  return Timed([&] { return inner_->AllReduceSum(send, recv, count, type, stream); });
}

absl::Status TimedCommunicator::AllGather(const void* send, void* recv, size_t count,
                                          DataType type, void* stream) {
  return Timed([&] { return inner_->AllGather(send, recv, count, type, stream); });
}

absl::Status TimedCommunicator::Barrier() {
  return Timed([&] { return inner_->Barrier(); });
}

absl::Status TimedCommunicator::Synchronize(void* stream) {
  return Timed([&] { return inner_->Synchronize(stream); });
}

void TimedCommunicator::Abort(const absl::Status& status) { inner_->Abort(status); }

}  // namespace verdict
