// Latency of one all-reduce between the GPUs of one host: NCCL against the
// one-shot NVLink all-reduce (comm/nvlink_all_reduce.h), side by side in one
// run, as the models call them: bf16, enqueued back to back and replayed
// from a CUDA graph. Run under mpirun, one rank per GPU:
//
//   mpirun -np 2 all_reduce_benchmark [--out=FILE]
//
// Rank 0 prints a Markdown table (microseconds per call, the message's
// bytes) and writes it to --out.
#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "comm/create_communicator.h"
#include "comm/local_communicator.h"
#include "comm/mpi_session.h"
#include "comm/nccl_communicator.h"
#include "comm/nvlink_all_reduce.h"

ABSL_FLAG(std::string, out, "all_reduce_benchmark.md", "where rank 0 writes the table");
ABSL_FLAG(int, calls, 200, "all-reduces per graph");
ABSL_FLAG(int, replays, 20, "timed replays of each graph");

namespace verdict {
namespace {

void Check(const absl::Status& status, const char* what) {
  if (status.ok()) return;
  std::fprintf(stderr, "all_reduce_benchmark: %s: %s\n", what, status.ToString().c_str());
  std::exit(1);
}

void CheckCuda(cudaError_t error, const char* what) {
  if (error == cudaSuccess) return;
  std::fprintf(stderr, "all_reduce_benchmark: %s: %s\n", what, cudaGetErrorString(error));
  std::exit(1);
}

// Microseconds per call: `calls` enqueues captured in one graph, replayed
// `replays` times after one warm-up replay.
double TimePerCall(cudaStream_t stream, int calls, int replays,
                   const std::function<absl::Status()>& enqueue) {
  cudaGraph_t graph = nullptr;
  CheckCuda(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), "begin capture");
  for (int i = 0; i < calls; ++i) Check(enqueue(), "enqueue");
  CheckCuda(cudaStreamEndCapture(stream, &graph), "end capture");
  cudaGraphExec_t exec = nullptr;
  CheckCuda(cudaGraphInstantiate(&exec, graph, 0), "instantiate");
  CheckCuda(cudaGraphLaunch(exec, stream), "warm-up");
  CheckCuda(cudaStreamSynchronize(stream), "warm-up");
  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  cudaEventRecord(start, stream);
  for (int r = 0; r < replays; ++r) CheckCuda(cudaGraphLaunch(exec, stream), "replay");
  cudaEventRecord(stop, stream);
  CheckCuda(cudaEventSynchronize(stop), "replay");
  float ms = 0;
  cudaEventElapsedTime(&ms, start, stop);
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  return 1000.0 * ms / (static_cast<double>(calls) * replays);
}

int Main() {
  absl::StatusOr<std::shared_ptr<MpiSession>> session;
  std::unique_ptr<Communicator> host;
  if (MpiSession::LaunchedByLauncher()) {
    session = MpiSession::Acquire();
    Check(session.status(), "MPI");
    absl::StatusOr<std::unique_ptr<Communicator>> mpi = CreateCommunicator(Backend::kMpi);
    Check(mpi.status(), "MPI communicator");
    host = *std::move(mpi);
  } else {
    host = std::make_unique<LocalCommunicator>();
  }
  CommOptions options;
  options.wait_for_completion = false;  // as the models run it
  absl::StatusOr<std::unique_ptr<NcclCommunicator>> nccl = NcclCommunicator::Create(options);
  Check(nccl.status(), "NCCL");
  constexpr size_t kMaxBytes = size_t{4} << 20;
  absl::StatusOr<std::unique_ptr<NvlinkAllReduce>> one_shot =
      NvlinkAllReduce::Create(*host, kMaxBytes);
  Check(one_shot.status(), "NVLink all-reduce");
  cudaStream_t stream;
  CheckCuda(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "stream");
  void* buffer = nullptr;
  CheckCuda(cudaMalloc(&buffer, kMaxBytes), "buffer");
  CheckCuda(cudaMemset(buffer, 0, kMaxBytes), "buffer");

  const int calls = absl::GetFlag(FLAGS_calls);
  const int replays = absl::GetFlag(FLAGS_replays);
  std::string table = absl::StrFormat(
      "%d ranks, bf16, %d calls per graph, %d replays: microseconds per all-reduce\n\n"
      "| elements | bytes | NCCL | one-shot | one-shot / NCCL |\n|---:|---:|---:|---:|---:|\n",
      host->world_size(), calls, replays);
  // 1 x 2048 (a 1B decode row) to 512 x 4096 (a batch of verify rows).
  for (size_t count : {size_t{2048}, size_t{4096}, size_t{6 * 4096}, size_t{48 * 4096},
                       size_t{192 * 4096}, size_t{512 * 4096}}) {
    const double nccl_us = TimePerCall(stream, calls, replays, [&] {
      return (*nccl)->AllReduceSum(buffer, buffer, count, DataType::kBFloat16, stream);
    });
    const double one_shot_us = TimePerCall(stream, calls, replays, [&] {
      return (*one_shot)->AllReduceSum(buffer, buffer, count, DataType::kBFloat16, stream);
    });
    table += absl::StrFormat("| %d | %d | %.2f | %.2f | %.2f |\n", count, 2 * count, nccl_us,
                             one_shot_us, one_shot_us / nccl_us);
  }
  if (host->rank() == 0) {
    std::printf("%s", table.c_str());
    std::ofstream(absl::GetFlag(FLAGS_out)) << table;
  }
  Check(host->Barrier(), "barrier");
  cudaFree(buffer);
  cudaStreamDestroy(stream);
  return 0;
}

}  // namespace
}  // namespace verdict

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return verdict::Main();
}
