#include "comm/mpi_session.h"

#include <mpi.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>

#include "absl/base/const_init.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "comm/internal/mpi_error.h"

namespace verdict {
namespace {

ABSL_CONST_INIT absl::Mutex session_mutex(absl::kConstInit);
// Allocated on first use and never freed: no destructor runs at exit.
std::weak_ptr<MpiSession>* live_session = nullptr;  // guarded by session_mutex

}  // namespace

bool MpiSession::LaunchedByLauncher() {
  // Open MPI's mpirun, PMIx launchers (srun, prterun) and MPICH's Hydra.
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK", "PMI_SIZE"}) {
    if (std::getenv(name) != nullptr) return true;
  }
  return false;
}

bool MpiSession::SignalFromLauncher(pid_t sender) {
  // A process whose launcher has gone is adopted by init (or a subreaper),
  // which is no launcher.
  return LaunchedByLauncher() && sender > 1 && sender == getppid();
}

absl::StatusOr<std::shared_ptr<MpiSession>> MpiSession::Acquire() {
  absl::MutexLock lock(&session_mutex);
  if (live_session != nullptr) {
    if (std::shared_ptr<MpiSession> session = live_session->lock()) return session;
  }
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) {
    return absl::FailedPreconditionError(
        "MPI has been finalized in this process and cannot start again; hold an MpiSession "
        "from main() to keep it up between communicators");
  }
  std::shared_ptr<MpiSession> session(new MpiSession());
  int initialized = 0;
  MPI_Initialized(&initialized);
  int provided = 0;
  // Owned only once it is fully set up: a session that fails here leaves MPI
  // running for the next Acquire instead of finalizing it under the lock.
  bool started_here = false;
  if (!initialized) {
    int rc = MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided);
    // The rank is unknown until MPI runs; the launcher's variable names it.
    if (rc != MPI_SUCCESS) {
      const char* rank = std::getenv("OMPI_COMM_WORLD_RANK");
      return comm_internal::MpiCallError(rc, rank != nullptr ? std::atoi(rank) : 0,
                                         "MPI_Init_thread");
    }
    started_here = true;
  } else {
    MPI_Query_thread(&provided);
  }
  MPI_Comm_rank(MPI_COMM_WORLD, &session->world_rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &session->world_size_);
  if (provided < MPI_THREAD_SERIALIZED) {
    return comm_internal::RankError(absl::StatusCode::kFailedPrecondition, session->world_rank_,
                                    absl::StrCat("MPI provides thread level ", provided,
                                                 "; the communicators need MPI_THREAD_SERIALIZED"));
  }
  // The ranks that share memory are the ranks on this host.
  MPI_Comm host;
  int rc = MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, session->world_rank_,
                               MPI_INFO_NULL, &host);
  if (rc != MPI_SUCCESS) {
    return comm_internal::MpiCallError(rc, session->world_rank_, "MPI_Comm_split_type");
  }
  MPI_Comm_rank(host, &session->local_rank_);
  MPI_Comm_size(host, &session->local_size_);
  MPI_Comm_free(&host);
  session->owns_mpi_ = started_here;
  if (live_session == nullptr) live_session = new std::weak_ptr<MpiSession>();
  *live_session = session;
  return session;
}

MpiSession::~MpiSession() {
  if (!owns_mpi_) return;
  // An Acquire racing with the end of the session waits, then finds MPI
  // finalized, instead of adopting an MPI that is about to go.
  absl::MutexLock lock(&session_mutex);
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  if (collective_pending_) {
    std::fprintf(stderr,
                 "rank %d: a timed-out collective is still pending, so MPI_Finalize would "
                 "never return; calling MPI_Abort\n",
                 world_rank_);
    std::fflush(nullptr);
    // The exit code a timed-out rank's Abort() would give (AbortExitCode).
    MPI_Abort(MPI_COMM_WORLD, static_cast<int>(absl::StatusCode::kDeadlineExceeded));
  }
  MPI_Finalize();
}

}  // namespace verdict
