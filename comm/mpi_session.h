// MpiSession: MPI for the whole process. The first MpiCommunicator starts MPI
// and the last holder of the session finalizes it, so a process that dies
// mid-run (exit() from deep inside, a signal) never reaches MPI_Finalize,
// which would wait for its peers; mpirun then ends the whole job instead.
//
// MPI can be started only once per process. A program that creates and drops
// communicators over its life (tests, a restart loop) holds a session from
// main() so that MPI stays up between them.
#ifndef VERDICT_COMM_MPI_SESSION_H_
#define VERDICT_COMM_MPI_SESSION_H_

#include <sys/types.h>

#include <atomic>
#include <memory>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"

namespace verdict {

class MpiSession {
 public:
  // Starts MPI (MPI_THREAD_SERIALIZED: any thread, one at a time) on the
  // first call; later calls share the running session. Fails once the
  // session has ended. Without a launcher, MPI starts as a singleton world of
  // one rank.
  static absl::StatusOr<std::shared_ptr<MpiSession>> Acquire();

  // Whether a launcher (mpirun, srun) started this process. Without one the
  // world is this process alone.
  static bool LaunchedByLauncher();

  // Whether a signal from process `sender` (siginfo_t::si_pid) came from the
  // launcher that started this process: its parent (mpirun on the first
  // node, the node's orted elsewhere) under a launcher. Open MPI's launcher
  // sends its ranks SIGTERM only to end the job (a rank died, a rank called
  // MPI_Abort, mpirun itself got SIGTERM or SIGINT): SIGCONT at once,
  // SIGTERM odls_base_sigkill_timeout (1 s) later, SIGKILL as long after
  // that. Such a SIGTERM leaves no time to drain, and a peer may be gone. A
  // SIGTERM from anyone else (deploy/launch.sh, an operator) is the usual
  // request to drain.
  static bool SignalFromLauncher(pid_t sender);

  MpiSession(const MpiSession&) = delete;
  MpiSession& operator=(const MpiSession&) = delete;
  // MPI_Finalize, unless a timed-out collective is still pending: finalize
  // would wait for it forever, so the session calls MPI_Abort instead.
  ~MpiSession();

  int world_rank() const { return world_rank_; }
  int world_size() const { return world_size_; }
  // This rank's index among the ranks on its host, and their number; picks
  // the GPU of a rank.
  int local_rank() const { return local_rank_; }
  int local_size() const { return local_size_; }

  // Records that a collective timed out with its request still pending.
  void MarkCollectivePending() { collective_pending_ = true; }

  // MPI_THREAD_SERIALIZED lets any thread call MPI, one call at a time. The
  // communicators hold this lock for each MPI call and never across a wait,
  // so two threads may each drive collectives on their own communicator at
  // once (the engine's scheduling thread and its step executor).
  absl::Mutex& call_mutex() { return call_mutex_; }

 private:
  MpiSession() = default;

  bool owns_mpi_ = false;  // false when MPI was started outside this class
  int world_rank_ = 0;
  int world_size_ = 1;
  int local_rank_ = 0;
  int local_size_ = 1;
  std::atomic<bool> collective_pending_{false};
  absl::Mutex call_mutex_;
};

}  // namespace verdict

#endif  // VERDICT_COMM_MPI_SESSION_H_
