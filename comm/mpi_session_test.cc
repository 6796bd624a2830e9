// MpiSession::SignalFromLauncher with real signals: a process that stands
// for a rank (launcher variables set) gets SIGTERM from a process it
// started itself, then from its parent, which stands for mpirun; only the
// parent's counts as the launcher's. Without the launcher variables nothing
// does (a process started by a shell or a supervisor drains on SIGTERM).
#include "comm/mpi_session.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>

#include "gtest/gtest.h"

namespace verdict {
namespace {

// Exit codes of the rank's process: bit 0, the peer's SIGTERM was taken for
// the launcher's; bit 1, the parent's was.
constexpr int kPeerCounted = 1;
constexpr int kParentCounted = 2;
constexpr int kBroken = 64;

// In the forked child: waits for a SIGTERM from a child of its own, then
// for one from its parent (told through `ready` when to send it).
[[noreturn]] void RunRank(int ready, bool under_launcher) {
  if (under_launcher) setenv("OMPI_COMM_WORLD_SIZE", "2", 1);
  sigset_t term;
  sigemptyset(&term);
  sigaddset(&term, SIGTERM);
  int code = 0;
  const pid_t peer = fork();
  if (peer == 0) {
    kill(getppid(), SIGTERM);
    _exit(0);
  }
  siginfo_t info;
  if (peer < 0 || sigwaitinfo(&term, &info) != SIGTERM || info.si_pid != peer) _exit(kBroken);
  if (MpiSession::SignalFromLauncher(info.si_pid)) code |= kPeerCounted;
  waitpid(peer, nullptr, 0);
  if (write(ready, "r", 1) != 1) _exit(kBroken);
  if (sigwaitinfo(&term, &info) != SIGTERM) _exit(kBroken);
  if (MpiSession::SignalFromLauncher(info.si_pid)) code |= kParentCounted;
  _exit(code);
}

// Runs a rank's process and returns its exit code.
int RankExitCode(bool under_launcher) {
  // Blocked before the fork, so that no SIGTERM reaches the child before
  // it waits for one.
  sigset_t term, old;
  sigemptyset(&term);
  sigaddset(&term, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &term, &old);
  int pipe_fds[2];
  if (pipe(pipe_fds) != 0) return -1;
  const pid_t rank = fork();
  if (rank == 0) RunRank(pipe_fds[1], under_launcher);
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  close(pipe_fds[1]);
  char byte;
  if (rank < 0 || read(pipe_fds[0], &byte, 1) != 1) return -1;
  close(pipe_fds[0]);
  kill(rank, SIGTERM);
  int status = 0;
  if (waitpid(rank, &status, 0) != rank || !WIFEXITED(status)) return -1;
  return WEXITSTATUS(status);
}

TEST(MpiSessionTest, OnlyTheParentOfALaunchedRankIsTheLauncher) {
  ASSERT_FALSE(MpiSession::LaunchedByLauncher()) << "run this test without mpirun";
  EXPECT_EQ(RankExitCode(/*under_launcher=*/true), kParentCounted);
}

TEST(MpiSessionTest, WithoutALauncherNoSignalIsTheLaunchers) {
  ASSERT_FALSE(MpiSession::LaunchedByLauncher()) << "run this test without mpirun";
  EXPECT_EQ(RankExitCode(/*under_launcher=*/false), 0);
}

}  // namespace
}  // namespace verdict
