#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>

#include "kernels/cuda_check.h"
#include "kernels/model/internal/random_fill.h"

namespace verdict {
namespace model_internal {
namespace {

__device__ __forceinline__ uint64_t SplitMix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

__device__ __forceinline__ float NonZeroUniform(uint64_t seed, size_t i, float scale) {
  const uint64_t h = SplitMix64(seed * 0x2545f4914f6cdd1dull + i);
  const float u = static_cast<float>(h >> 40) * (1.0f / 16777216.0f);  // [0, 1)
  const float magnitude = scale * (1.0f / 64.0f + u * (63.0f / 64.0f));
  return (h & 1u) ? magnitude : -magnitude;
}

template <typename T>
__global__ void RandomFillKernel(T* out, size_t count, uint64_t seed, float scale) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const float v = NonZeroUniform(seed, i, scale);
    if constexpr (sizeof(T) == 2) {
      out[i] = __float2bfloat16(v);
    } else {
      out[i] = v;
    }
  }
}

template <typename T>
absl::Status Launch(T* out, size_t count, uint64_t seed, float scale, cudaStream_t stream) {
  if (count == 0) return absl::OkStatus();
  const int threads = 256;
  const int blocks = static_cast<int>(std::min<size_t>((count + threads - 1) / threads, 16384));
  RandomFillKernel<<<blocks, threads, 0, stream>>>(out, count, seed, scale);
  VERDICT_CUDA_RETURN_IF_ERROR(cudaGetLastError());
  return absl::OkStatus();
}

}  // namespace

absl::Status InvokeRandomBf16Fill(uint16_t* out, size_t count, uint64_t seed, float scale,
                                  cudaStream_t stream) {
  return Launch(reinterpret_cast<__nv_bfloat16*>(out), count, seed, scale, stream);
}

absl::Status InvokeRandomF32Fill(float* out, size_t count, uint64_t seed, float scale,
                                 cudaStream_t stream) {
  return Launch(out, count, seed, scale, stream);
}

}  // namespace model_internal
}  // namespace verdict
