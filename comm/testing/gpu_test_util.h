// Test support for the communicators' GPU tests: MPI held up for the whole
// binary when a launcher started it, device copies of host vectors, and
// captured CUDA graphs.
#ifndef VERDICT_COMM_TESTING_GPU_TEST_UTIL_H_
#define VERDICT_COMM_TESTING_GPU_TEST_UTIL_H_

#include <cuda_runtime_api.h>

#include <cstddef>
#include <functional>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "comm/mpi_session.h"
#include "gtest/gtest.h"

namespace verdict {

// Under mpirun each communicator bootstraps over MPI; holding the session
// keeps MPI up between the tests' communicators. Register it once per
// binary with testing::AddGlobalTestEnvironment.
class MpiSessionEnvironment : public testing::Environment {
 public:
  void SetUp() override {
    if (!MpiSession::LaunchedByLauncher()) return;
    absl::StatusOr<std::shared_ptr<MpiSession>> session = MpiSession::Acquire();
    ASSERT_TRUE(session.ok()) << session.status();
    session_ = *std::move(session);
  }
  void TearDown() override { session_.reset(); }

 private:
  std::shared_ptr<MpiSession> session_;
};

// A device copy of `host`, freed with the object.
template <typename T>
class DeviceBuffer {
 public:
  explicit DeviceBuffer(const std::vector<T>& host) : size_(host.size()) {
    EXPECT_EQ(cudaMalloc(reinterpret_cast<void**>(&data_), size_ * sizeof(T)), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(data_, host.data(), size_ * sizeof(T), cudaMemcpyHostToDevice),
              cudaSuccess);
    // From pageable memory cudaMemcpy may return before the DMA lands, and
    // the tests' non-blocking streams do not wait for the legacy stream.
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() { cudaFree(data_); }
  T* get() { return data_; }
  std::vector<T> ToHost() const {
    std::vector<T> host(size_);
    EXPECT_EQ(cudaMemcpy(host.data(), data_, size_ * sizeof(T), cudaMemcpyDeviceToHost),
              cudaSuccess);
    return host;
  }

 private:
  size_t size_;
  T* data_ = nullptr;
};

// A CUDA graph of what `enqueue` puts on `stream` (thread-local capture),
// instantiated; freed with the object on every way out (a live graph can
// hold a communicator's resources). status() says whether capture and
// instantiation worked, with the enqueue's own error first.
class CapturedGraph {
 public:
  CapturedGraph(cudaStream_t stream, const std::function<absl::Status()>& enqueue) {
    if (cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal) != cudaSuccess) {
      status_ = absl::InternalError("cudaStreamBeginCapture failed");
      return;
    }
    const absl::Status enqueued = enqueue();
    const cudaError_t ended = cudaStreamEndCapture(stream, &graph_);
    if (!enqueued.ok()) {
      status_ = enqueued;
    } else if (ended != cudaSuccess) {
      status_ = absl::InternalError(absl::StrCat("cudaStreamEndCapture: ", cudaGetErrorString(ended)));
    } else if (const cudaError_t made = cudaGraphInstantiate(&exec_, graph_, 0); made != cudaSuccess) {
      exec_ = nullptr;
      status_ = absl::InternalError(absl::StrCat("cudaGraphInstantiate: ", cudaGetErrorString(made)));
    }
  }
  CapturedGraph(const CapturedGraph&) = delete;
  CapturedGraph& operator=(const CapturedGraph&) = delete;
  ~CapturedGraph() {
    if (exec_ != nullptr) cudaGraphExecDestroy(exec_);
    if (graph_ != nullptr) cudaGraphDestroy(graph_);
  }
  const absl::Status& status() const { return status_; }
  cudaError_t Launch(cudaStream_t stream) { return cudaGraphLaunch(exec_, stream); }

 private:
  absl::Status status_;
  cudaGraph_t graph_ = nullptr;
  cudaGraphExec_t exec_ = nullptr;
};

}  // namespace verdict

#endif  // VERDICT_COMM_TESTING_GPU_TEST_UTIL_H_
