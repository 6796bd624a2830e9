#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "kernels/cuda_check.h"
#include "kernels/model/add_bias.h"
#include "kernels/model/internal/device_utils.cuh"

namespace verdict {
namespace {

constexpr int kThreads = 256;

__device__ __forceinline__ void AddTo(float* c, float b) { *c += b; }
__device__ __forceinline__ void AddTo(__nv_bfloat16* c, float b) {
  *c = __float2bfloat16(__bfloat162float(*c) + b);
}

template <typename T>
__global__ void __launch_bounds__(kThreads)
    AddBiasKernel(T* __restrict__ c, const __nv_bfloat16* __restrict__ bias, int rows, int cols) {
  model_internal::WaitForPredecessor();  // LaunchDependent's contract
  model_internal::AllowDependents();
  const int64_t total = static_cast<int64_t>(rows) * cols;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(kThreads) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * kThreads) {
    AddTo(c + i, __bfloat162float(bias[i % cols]));
  }
}

template <typename T>
absl::Status Launch(T* c, const uint16_t* bias, int rows, int cols, cudaStream_t stream) {
  if (rows < 0 || cols <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("add_bias: bad shape rows=", rows, " cols=", cols));
  }
  if (rows == 0) return absl::OkStatus();
  const int64_t total = static_cast<int64_t>(rows) * cols;
  const int blocks = static_cast<int>(std::min<int64_t>((total + kThreads - 1) / kThreads, 8192));
  VERDICT_CUDA_RETURN_IF_ERROR(
      model_internal::LaunchDependent(AddBiasKernel<T>, blocks, kThreads, 0, stream, c,
                                      reinterpret_cast<const __nv_bfloat16*>(bias), rows, cols));
  VERDICT_CUDA_RETURN_IF_ERROR(cudaGetLastError());
  return absl::OkStatus();
}

}  // namespace

absl::Status InvokeAddBias(uint16_t* c, const uint16_t* bias, int rows, int cols,
                           cudaStream_t stream) {
  return Launch(reinterpret_cast<__nv_bfloat16*>(c), bias, rows, cols, stream);
}

absl::Status InvokeAddBias(float* c, const uint16_t* bias, int rows, int cols,
                           cudaStream_t stream) {
  return Launch(c, bias, rows, cols, stream);
}

}  // namespace verdict
