// Hands the engine's generation events to their callbacks on a thread of its
// own, so that the scheduling thread does not pay for them.
//
// A callback typically queues the event for a waiting front-end thread (the
// HTTP server's handler of that request) and wakes it: a futex wake a
// request, a few microseconds each, which at hundreds of requests a step is
// milliseconds of the scheduling thread's time, the thread that plans the
// next step and keeps the device fed. The engine queues a step's events as
// it commits them (Queue, no lock) and hands them over once a loop iteration
// (Flush: one lock, one wake); this thread runs them in the order they were
// queued, so each request's events keep their order and its finishing event
// stays its last.
#ifndef VERDICT_RUNTIME_ENGINE_EVENT_DELIVERY_H_
#define VERDICT_RUNTIME_ENGINE_EVENT_DELIVERY_H_

#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "runtime/engine/generation.h"

namespace verdict {

class EventDelivery {
 public:
  EventDelivery();
  // Delivers everything queued, flushed or not, then stops the thread.
  ~EventDelivery();
  EventDelivery(const EventDelivery&) = delete;
  EventDelivery& operator=(const EventDelivery&) = delete;

  // From the engine's thread only: adds an event to the batch Flush hands
  // over.
  void Queue(GenerationCallback callback, GenerationEvent event) {
    pending_.emplace_back(std::move(callback), std::move(event));
  }
  // Hands the queued events to the delivery thread. From the engine's thread.
  void Flush();
  // Flush, then waits until every event handed over has been delivered (a
  // loop that ends, so that its requests' last events have reached their
  // clients when it returns).
  void FlushAndWait();

  // Events delivered so far.
  int64_t delivered() const;

 private:
  using Batch = std::vector<std::pair<GenerationCallback, GenerationEvent>>;
  void Loop();

  Batch pending_;  // the engine thread's, unlocked

  mutable std::mutex mu_;
  std::condition_variable work_cv_;  // handed_ grew, or stopping_
  std::condition_variable done_cv_;  // delivered_ grew
  Batch handed_;                     // guarded by mu_
  int64_t handed_total_ = 0;         // guarded by mu_
  int64_t delivered_ = 0;            // guarded by mu_
  bool stopping_ = false;            // guarded by mu_
  std::thread thread_;
};

}  // namespace verdict

#endif  // VERDICT_RUNTIME_ENGINE_EVENT_DELIVERY_H_
