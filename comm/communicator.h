// Communicator: the collectives that tensor-parallel ranks use.
//
// One rank per GPU. The host backend (MPI) serves the CPU path and CI; the
// device backend (NCCL, bootstrapped over MPI) serves the CUDA path. Every
// collective either completes or returns an error naming the rank and the
// call within the configured timeout: a dead or stuck peer never hangs the
// caller.
#ifndef VERDICT_COMM_COMMUNICATOR_H_
#define VERDICT_COMM_COMMUNICATOR_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace verdict {

enum class DataType { kFloat32, kBFloat16, kInt32, kInt64, kUInt8 };

size_t DataTypeSize(DataType type);

// Which implementation CreateCommunicator (comm/create_communicator.h) builds.
enum class Backend {
  kLocal,  // one process, host buffers; collectives are copies
  kMpi,    // host buffers, ranks started by mpirun
  kNccl,   // device buffers and streams, one rank per GPU
};

struct CommOptions {
  // The longest one collective may take before it is reported as
  // DeadlineExceeded. A timed-out collective leaves the communicator failed:
  // the ranks no longer agree on what has been exchanged, so the caller's
  // only way on is Abort().
  absl::Duration timeout = absl::Seconds(30);
  // NCCL: the longest communicator creation may take (every rank must arrive).
  absl::Duration init_timeout = absl::Seconds(120);
  // NCCL: the CUDA device of this rank; -1 takes the rank's index among the
  // ranks on its host (one rank per GPU).
  int device = -1;
  // NCCL: true makes a collective return once it has completed on the device,
  // so `timeout` covers it (and everything enqueued on the stream before it).
  // False makes it return once enqueued; Synchronize() then applies the
  // timeout, letting the host run ahead of the device.
  bool wait_for_completion = true;
};

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int world_size() const = 0;

  // Host backends ignore `stream` and complete before returning. The device
  // backend takes device pointers and enqueues the collective on `stream`
  // (a cudaStream_t).
  virtual absl::Status Broadcast(void* buffer, size_t count, DataType type, int root,
                                 void* stream = nullptr) = 0;
  // recv[i] = sum over ranks of send[i]; send may equal recv (in place).
  virtual absl::Status AllReduceSum(const void* send, void* recv, size_t count,
                                    DataType type, void* stream = nullptr) = 0;
  // recv holds world_size() * count elements, rank r's block at r * count.
  // In place when send points at this rank's block of recv.
  virtual absl::Status AllGather(const void* send, void* recv, size_t count, DataType type,
                                 void* stream = nullptr) = 0;

  // Returns once every rank has entered Barrier, on the host; it does not
  // wait for device work. This default serves a world of one rank only.
  virtual absl::Status Barrier();

  // Returns once every collective enqueued on `stream` has completed, within
  // the timeout. Host backends complete each collective before returning, so
  // this default has nothing to wait for.
  virtual absl::Status Synchronize(void* stream = nullptr);

  // True when a device collective enqueued on a stream that is being
  // captured into a CUDA graph becomes a node of that graph: the backend
  // only enqueues (no host wait inside the call). A model may then replay
  // its layers, collectives included, as one graph. Host backends: false.
  virtual bool CapturableInCudaGraphs() const { return false; }

  // A second communicator over the same ranks whose collectives never match
  // this one's, so two threads can each run their own sequence of
  // collectives (the engine's scheduling thread and its step executor under
  // overlap scheduling). Collective: every rank calls it, in the same order
  // relative to its other collectives, while no other thread of the process
  // runs a collective. This default returns Unimplemented.
  virtual absl::StatusOr<std::unique_ptr<Communicator>> Duplicate();

  // Ends this process and every other rank, for an error after which the
  // ranks can no longer agree (a timed-out or failed collective). Logs
  // `status` with the rank; the exit code is AbortExitCode(status). This
  // default ends only this process.
  [[noreturn]] virtual void Abort(const absl::Status& status);
};

// Collective, host communicators: every rank's `bytes` becomes rank
// `root`'s (its length first, then its bytes). A world of one rank does not
// communicate.
absl::Status BroadcastBytes(Communicator& comm, std::string* bytes, int root = 0);

// The exit code of a process ended by Communicator::Abort(status): the number
// of status.code() (DEADLINE_EXCEEDED is 4), or 1 if status is OK.
int AbortExitCode(const absl::Status& status);

}  // namespace verdict

#endif  // VERDICT_COMM_COMMUNICATOR_H_
