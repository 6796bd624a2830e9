#include <cuda_runtime.h>

#include "kernels/bench/verify_bench_inputs.h"
#include "kernels/cuda_check.h"
#include "kernels/philox.h"

namespace verdict {
namespace {

// Sum of four uniforms, centred and scaled: close enough to normal for a
// benchmark, and cheap.
__global__ void FillLogitsKernel(float* logits, int64_t n, uint64_t seed, float scale) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const PhiloxBlock b = PhiloxDraw(seed, i, 0, RandomStream::kSimulatedAcceptance, 0);
    const float s = UniformOpen01(b.v[0]) + UniformOpen01(b.v[1]) + UniformOpen01(b.v[2]) +
                    UniformOpen01(b.v[3]) - 2.0f;
    logits[i] = s * scale * 1.7320508f;  // sd of the sum is 1/sqrt(3)
  }
}

// One CTA per row: uniform weights, then divide by their sum.
__global__ void FillProbsKernel(float* probs, int32_t vocab, uint64_t seed) {
  float* row = probs + static_cast<int64_t>(blockIdx.x) * vocab;
  __shared__ float partial[32];
  float sum = 0.0f;
  for (int32_t v = threadIdx.x; v < vocab; v += blockDim.x) {
    const float u = UniformOpen01(PhiloxDraw(seed, blockIdx.x, v, RandomStream::kSimulatedAcceptance, 1).v[0]);
    row[v] = u;
    sum += u;
  }
  for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xFFFFFFFFu, sum, o);
  if ((threadIdx.x & 31) == 0) partial[threadIdx.x >> 5] = sum;
  __syncthreads();
  if (threadIdx.x < 32) {
    sum = threadIdx.x < blockDim.x / 32 ? partial[threadIdx.x] : 0.0f;
    for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xFFFFFFFFu, sum, o);
    if (threadIdx.x == 0) partial[0] = sum;
  }
  __syncthreads();
  const float inv = 1.0f / partial[0];
  for (int32_t v = threadIdx.x; v < vocab; v += blockDim.x) row[v] *= inv;
}

}  // namespace

absl::Status FillBenchLogits(float* logits, int64_t rows, int32_t vocab, uint64_t seed,
                             float scale, void* cuda_stream) {
  const int64_t n = rows * vocab;
  if (n == 0) return absl::OkStatus();
  FillLogitsKernel<<<4096, 256, 0, static_cast<cudaStream_t>(cuda_stream)>>>(logits, n, seed,
                                                                             scale);
  VERDICT_CUDA_RETURN_IF_ERROR(cudaGetLastError());
  return absl::OkStatus();
}

absl::Status FillBenchDraftProbs(float* probs, int64_t rows, int32_t vocab, uint64_t seed,
                                 void* cuda_stream) {
  if (rows == 0) return absl::OkStatus();
  FillProbsKernel<<<static_cast<unsigned>(rows), 1024, 0, static_cast<cudaStream_t>(cuda_stream)>>>(
      probs, vocab, seed);
  VERDICT_CUDA_RETURN_IF_ERROR(cudaGetLastError());
  return absl::OkStatus();
}

}  // namespace verdict
