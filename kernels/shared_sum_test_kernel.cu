#include "kernels/shared_sum_test_kernel.h"

#include <cuda_runtime.h>

#include "kernels/shared_sum.cuh"

namespace verdict {
namespace {

constexpr int kMaxCounters = 64;

__global__ void SharedSumKernel(const unsigned long long* values, int per_thread, int counters,
                                unsigned long long* sums) {
  __shared__ unsigned long long counter[kMaxCounters];
  for (int c = threadIdx.x; c < counters; c += blockDim.x) counter[c] = 0;
  __syncthreads();
  for (int i = 0; i < per_thread; ++i) {
    SharedAddU64(&counter[(threadIdx.x + i) % counters],
                 values[static_cast<int64_t>(threadIdx.x) * per_thread + i]);
  }
  __syncthreads();
  for (int c = threadIdx.x; c < counters; c += blockDim.x) sums[c] = counter[c];
}

std::string Error(cudaError_t e) { return e == cudaSuccess ? "" : cudaGetErrorString(e); }

}  // namespace

std::string RunSharedSumKernel(const uint64_t* values, int threads, int per_thread, int counters,
                               uint64_t* sums) {
  if (counters < 1 || counters > kMaxCounters) return "counters out of range";
  const size_t value_bytes = sizeof(uint64_t) * threads * per_thread;
  unsigned long long* d_values = nullptr;
  unsigned long long* d_sums = nullptr;
  std::string error = Error(cudaMalloc(&d_values, value_bytes));
  if (error.empty()) error = Error(cudaMalloc(&d_sums, sizeof(uint64_t) * counters));
  if (error.empty()) error = Error(cudaMemcpy(d_values, values, value_bytes, cudaMemcpyHostToDevice));
  if (error.empty()) {
    SharedSumKernel<<<1, threads>>>(d_values, per_thread, counters, d_sums);
    error = Error(cudaGetLastError());
  }
  if (error.empty()) {
    error = Error(cudaMemcpy(sums, d_sums, sizeof(uint64_t) * counters, cudaMemcpyDeviceToHost));
  }
  cudaFree(d_values);
  cudaFree(d_sums);
  return error;
}

}  // namespace verdict
