// Test support for the NCCL communicator's GPU tests: MPI held up for the
// whole binary when a launcher started it, and device copies of host
// vectors.
#ifndef VERDICT_COMM_TESTING_GPU_TEST_UTIL_H_
#define VERDICT_COMM_TESTING_GPU_TEST_UTIL_H_

#include <cuda_runtime_api.h>

#include <cstddef>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
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

}  // namespace verdict

#endif  // VERDICT_COMM_TESTING_GPU_TEST_UTIL_H_
