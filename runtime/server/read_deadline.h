// Deadlines on reading a request body. civetweb bounds each socket read by
// its request timeout, but a client that sends one byte every few seconds
// never trips it and holds a worker thread for as long as it likes. A
// ReadDeadlines thread shuts the read side of a socket whose deadline has
// passed, so that the handler blocked in mg_read returns at once.
#ifndef VERDICT_RUNTIME_SERVER_READ_DEADLINE_H_
#define VERDICT_RUNTIME_SERVER_READ_DEADLINE_H_

#include <cstdint>
#include <map>
#include <memory>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/functional/any_invocable.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace verdict {

class ReadDeadlines {
 public:
  // Deadlines are checked every `tick`.
  explicit ReadDeadlines(absl::Duration tick = absl::Milliseconds(50));
  ~ReadDeadlines();

  ReadDeadlines(const ReadDeadlines&) = delete;
  ReadDeadlines& operator=(const ReadDeadlines&) = delete;

  // Watches one socket while its owner reads from it; destroying the watch
  // ends it. The socket must stay open until then (the watch may shut it
  // down, never close it).
  class Watch {
   public:
    ~Watch();
    Watch(const Watch&) = delete;
    Watch& operator=(const Watch&) = delete;
    // Whether the deadline passed and the socket's read side was shut.
    bool expired() const;

   private:
    friend class ReadDeadlines;
    Watch(ReadDeadlines* owner, int64_t key) : owner_(owner), key_(key) {}
    ReadDeadlines* owner_;
    int64_t key_;
  };

  std::unique_ptr<Watch> Arm(int fd, absl::Time deadline);
  // As Arm(fd, ...), with the socket found only once the deadline has
  // passed (by `socket`, on the deadlines' thread; -1: none to shut), for
  // an owner whose socket costs a search to find and that seldom needs it.
  std::unique_ptr<Watch> Arm(absl::AnyInvocable<int()> socket, absl::Time deadline);

 private:
  struct Entry {
    absl::AnyInvocable<int()> socket;
    absl::Time deadline;
    bool passed = false;   // the deadline, once seen by the thread
    bool expired = false;  // and the socket's read side shut
  };

  void Run();

  const absl::Duration tick_;
  mutable absl::Mutex mu_;
  std::map<int64_t, Entry> entries_ ABSL_GUARDED_BY(mu_);
  int64_t next_key_ ABSL_GUARDED_BY(mu_) = 0;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace verdict

#endif  // VERDICT_RUNTIME_SERVER_READ_DEADLINE_H_
