#include "runtime/engine/event_delivery.h"

#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace verdict {
namespace {

GenerationEvent TokenEvent(const std::string& id, int32_t token, bool finished = false) {
  GenerationEvent e;
  e.request_id = id;
  e.token_ids = {token};
  e.finished = finished;
  return e;
}

// Every request's events arrive in the order they were queued, on a thread
// other than the queuing one, and only once flushed.
TEST(EventDeliveryTest, DeliversEachRequestsEventsInOrderOffTheQueuingThread) {
  std::mutex mu;
  std::vector<std::vector<int32_t>> seen(3);
  std::vector<std::thread::id> threads;
  EventDelivery delivery;
  auto callback_for = [&](int request) {
    return [&, request](const GenerationEvent& e) {
      std::lock_guard<std::mutex> lock(mu);
      seen[request].push_back(e.token_ids[0]);
      threads.push_back(std::this_thread::get_id());
    };
  };
  for (int step = 0; step < 50; ++step) {
    for (int r = 0; r < 3; ++r) {
      delivery.Queue(callback_for(r), TokenEvent("r" + std::to_string(r), step, step == 49));
    }
    if (step == 0) {
      // Queued, not flushed: nothing runs yet.
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      EXPECT_EQ(delivery.delivered(), 0);
    }
    if (step % 7 == 0) delivery.Flush();
  }
  delivery.FlushAndWait();
  EXPECT_EQ(delivery.delivered(), 150);
  std::lock_guard<std::mutex> lock(mu);
  for (int r = 0; r < 3; ++r) {
    ASSERT_EQ(seen[r].size(), 50u) << "request " << r;
    for (int step = 0; step < 50; ++step) EXPECT_EQ(seen[r][step], step) << "request " << r;
  }
  for (const std::thread::id& t : threads) EXPECT_NE(t, std::this_thread::get_id());
}

// Destroying it delivers what was queued, flushed or not: no request loses
// its last event.
TEST(EventDeliveryTest, DestructionDeliversEverythingQueued) {
  std::mutex mu;
  int delivered = 0;
  {
    EventDelivery delivery;
    for (int i = 0; i < 10; ++i) {
      delivery.Queue(
          [&](const GenerationEvent&) {
            std::lock_guard<std::mutex> lock(mu);
            ++delivered;
          },
          TokenEvent("r", i));
      if (i == 4) delivery.Flush();
    }
  }
  EXPECT_EQ(delivered, 10);
}

// A callback may cancel, i.e. call back into its engine, while the queuing
// thread goes on queuing: delivery never waits on the queuing thread.
TEST(EventDeliveryTest, ACallbackMayTakeALockTheQueuingThreadHoldsWhileQueuing) {
  std::mutex engine_mu;
  int calls = 0;
  EventDelivery delivery;
  {
    std::lock_guard<std::mutex> lock(engine_mu);
    for (int i = 0; i < 5; ++i) {
      delivery.Queue(
          [&](const GenerationEvent&) {
            std::lock_guard<std::mutex> inner(engine_mu);
            ++calls;
          },
          TokenEvent("r", i));
    }
    delivery.Flush();  // returns at once, although the callbacks must wait for engine_mu
  }
  delivery.FlushAndWait();
  EXPECT_EQ(calls, 5);
}

}  // namespace
}  // namespace verdict
