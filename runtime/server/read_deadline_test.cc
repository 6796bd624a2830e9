#include "runtime/server/read_deadline.h"

#include <sys/socket.h>
#include <unistd.h>

#include <atomic>

#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace verdict {
namespace {

// A connected pair of stream sockets; [0] is read, [1] written.
struct SocketPair {
  SocketPair() { EXPECT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0); }
  ~SocketPair() {
    close(fds[0]);
    close(fds[1]);
  }
  int fds[2] = {-1, -1};
};

TEST(ReadDeadlinesTest, ABlockedReadReturnsAtTheDeadline) {
  ReadDeadlines deadlines(absl::Milliseconds(10));
  SocketPair pair;
  const absl::Time start = absl::Now();
  auto watch = deadlines.Arm(pair.fds[0], start + absl::Milliseconds(200));
  char byte;
  // Nothing is ever written: only the deadline ends this read (with EOF).
  EXPECT_EQ(recv(pair.fds[0], &byte, 1, 0), 0);
  const absl::Duration waited = absl::Now() - start;
  EXPECT_GE(waited, absl::Milliseconds(190));
  EXPECT_LT(waited, absl::Seconds(3));
  EXPECT_TRUE(watch->expired());
}

TEST(ReadDeadlinesTest, AWatchEndedInTimeLeavesTheSocketAlone) {
  ReadDeadlines deadlines(absl::Milliseconds(10));
  SocketPair pair;
  {
    auto watch = deadlines.Arm(pair.fds[0], absl::Now() + absl::Milliseconds(50));
    EXPECT_FALSE(watch->expired());
  }
  absl::SleepFor(absl::Milliseconds(150));
  ASSERT_EQ(send(pair.fds[1], "x", 1, 0), 1);
  char byte = 0;
  EXPECT_EQ(recv(pair.fds[0], &byte, 1, 0), 1);
  EXPECT_EQ(byte, 'x');
}

TEST(ReadDeadlinesTest, OnlyTheLateSocketIsShut) {
  ReadDeadlines deadlines(absl::Milliseconds(10));
  SocketPair late, early;
  auto late_watch = deadlines.Arm(late.fds[0], absl::Now() + absl::Milliseconds(50));
  auto early_watch = deadlines.Arm(early.fds[0], absl::Now() + absl::Seconds(60));
  absl::SleepFor(absl::Milliseconds(200));
  EXPECT_TRUE(late_watch->expired());
  EXPECT_FALSE(early_watch->expired());
  ASSERT_EQ(send(early.fds[1], "y", 1, 0), 1);
  char byte = 0;
  EXPECT_EQ(recv(early.fds[0], &byte, 1, 0), 1);
}

// A socket found only when needed: the search runs once, at the deadline,
// and a watch ended in time never searches.
TEST(ReadDeadlinesTest, ASocketFoundAtTheDeadlineIsSearchedForOnce) {
  ReadDeadlines deadlines(absl::Milliseconds(10));
  SocketPair late, early;
  std::atomic<int> late_searches = 0, early_searches = 0;
  auto late_watch = deadlines.Arm(
      [&] {
        ++late_searches;
        return late.fds[0];
      },
      absl::Now() + absl::Milliseconds(50));
  {
    auto early_watch = deadlines.Arm(
        [&] {
          ++early_searches;
          return early.fds[0];
        },
        absl::Now() + absl::Seconds(60));
  }
  char byte;
  EXPECT_EQ(recv(late.fds[0], &byte, 1, 0), 0);  // shut at the deadline
  absl::SleepFor(absl::Milliseconds(100));       // ticks after it search no more
  EXPECT_TRUE(late_watch->expired());
  EXPECT_EQ(late_searches.load(), 1);
  EXPECT_EQ(early_searches.load(), 0);
}

// A socket the search did not find: nothing is shut and the watch does not
// report a shut read.
TEST(ReadDeadlinesTest, ASocketNotFoundIsNotExpired) {
  ReadDeadlines deadlines(absl::Milliseconds(10));
  std::atomic<int> searches = 0;
  auto watch = deadlines.Arm(
      [&] {
        ++searches;
        return -1;
      },
      absl::Now() + absl::Milliseconds(20));
  absl::SleepFor(absl::Milliseconds(200));
  EXPECT_EQ(searches.load(), 1);
  EXPECT_FALSE(watch->expired());
}

}  // namespace
}  // namespace verdict
