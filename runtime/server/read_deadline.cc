#include "runtime/server/read_deadline.h"

#include <sys/socket.h>

#include <utility>

#include "absl/time/clock.h"

namespace verdict {

ReadDeadlines::ReadDeadlines(absl::Duration tick) : tick_(tick), thread_([this] { Run(); }) {}

ReadDeadlines::~ReadDeadlines() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  thread_.join();
}

std::unique_ptr<ReadDeadlines::Watch> ReadDeadlines::Arm(int fd, absl::Time deadline) {
  return Arm([fd] { return fd; }, deadline);
}

std::unique_ptr<ReadDeadlines::Watch> ReadDeadlines::Arm(absl::AnyInvocable<int()> socket,
                                                         absl::Time deadline) {
  absl::MutexLock lock(&mu_);
  const int64_t key = next_key_++;
  entries_[key] = Entry{std::move(socket), deadline};
  return std::unique_ptr<Watch>(new Watch(this, key));
}

ReadDeadlines::Watch::~Watch() {
  absl::MutexLock lock(&owner_->mu_);
  owner_->entries_.erase(key_);
}

bool ReadDeadlines::Watch::expired() const {
  absl::MutexLock lock(&owner_->mu_);
  auto it = owner_->entries_.find(key_);
  return it != owner_->entries_.end() && it->second.expired;
}

void ReadDeadlines::Run() {
  absl::MutexLock lock(&mu_);
  auto stopping = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stop_; };
  while (!mu_.AwaitWithTimeout(absl::Condition(&stopping), tick_)) {
    const absl::Time now = absl::Now();
    for (auto& [key, entry] : entries_) {
      if (!entry.passed && now >= entry.deadline) {
        // Under the lock: the watch, and so the open socket, outlives this.
        entry.passed = true;
        if (const int fd = entry.socket(); fd >= 0) {
          shutdown(fd, SHUT_RD);
          entry.expired = true;
        }
      }
    }
  }
}

}  // namespace verdict
