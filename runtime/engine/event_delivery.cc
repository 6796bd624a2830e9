#include "runtime/engine/event_delivery.h"

namespace verdict {

EventDelivery::EventDelivery() : thread_([this] { Loop(); }) {}

EventDelivery::~EventDelivery() {
  Flush();
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  work_cv_.notify_one();
  thread_.join();
}

void EventDelivery::Flush() {
  if (pending_.empty()) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    handed_total_ += static_cast<int64_t>(pending_.size());
    if (handed_.empty()) {
      handed_.swap(pending_);
    } else {
      for (auto& e : pending_) handed_.push_back(std::move(e));
      pending_.clear();
    }
  }
  work_cv_.notify_one();
}

void EventDelivery::FlushAndWait() {
  Flush();
  std::unique_lock<std::mutex> lock(mu_);
  done_cv_.wait(lock, [this] { return delivered_ == handed_total_; });
}

int64_t EventDelivery::delivered() const {
  std::lock_guard<std::mutex> lock(mu_);
  return delivered_;
}

void EventDelivery::Loop() {
  Batch batch;
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    // Stops only once everything handed over is delivered.
    work_cv_.wait(lock, [this] { return !handed_.empty() || stopping_; });
    if (handed_.empty()) return;
    batch.swap(handed_);
    lock.unlock();
    for (auto& [callback, event] : batch) callback(event);
    const int64_t n = static_cast<int64_t>(batch.size());
    batch.clear();
    lock.lock();
    delivered_ += n;
    done_cv_.notify_all();
  }
}

}  // namespace verdict
