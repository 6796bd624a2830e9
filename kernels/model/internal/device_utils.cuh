// Small device building blocks shared by the model ops: 16-byte bf16
// vectors converted to and from float, and warp/block sums. Device code only
// (included from .cu files).
#ifndef VERDICT_KERNELS_MODEL_INTERNAL_DEVICE_UTILS_CUH_
#define VERDICT_KERNELS_MODEL_INTERNAL_DEVICE_UTILS_CUH_

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <utility>

namespace verdict {
namespace model_internal {

// Eight bf16 values moved as one 16-byte access.
struct alignas(16) Bf16x8 {
  __nv_bfloat162 pair[4];
};

__device__ __forceinline__ void LoadBf16x8(const __nv_bfloat16* src, float (&out)[8]) {
  const Bf16x8 v = *reinterpret_cast<const Bf16x8*>(src);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 f = __bfloat1622float2(v.pair[i]);
    out[2 * i] = f.x;
    out[2 * i + 1] = f.y;
  }
}

__device__ __forceinline__ void StoreBf16x8(__nv_bfloat16* dst, const float (&in)[8]) {
  Bf16x8 v;
#pragma unroll
  for (int i = 0; i < 4; ++i) v.pair[i] = __floats2bfloat162_rn(in[2 * i], in[2 * i + 1]);
  *reinterpret_cast<Bf16x8*>(dst) = v;
}

__device__ __forceinline__ void LoadF32x8(const float* src, float (&out)[8]) {
  const float4 a = reinterpret_cast<const float4*>(src)[0];
  const float4 b = reinterpret_cast<const float4*>(src)[1];
  out[0] = a.x;
  out[1] = a.y;
  out[2] = a.z;
  out[3] = a.w;
  out[4] = b.x;
  out[5] = b.y;
  out[6] = b.z;
  out[7] = b.w;
}

__device__ __forceinline__ void StoreF32x8(float* dst, const float (&in)[8]) {
  reinterpret_cast<float4*>(dst)[0] = make_float4(in[0], in[1], in[2], in[3]);
  reinterpret_cast<float4*>(dst)[1] = make_float4(in[4], in[5], in[6], in[7]);
}

__device__ __forceinline__ float LoadAsFloat(const float* p) { return *p; }
__device__ __forceinline__ float LoadAsFloat(const __nv_bfloat16* p) {
  return __bfloat162float(*p);
}

__device__ __forceinline__ void LoadX8(const float* src, float (&out)[8]) { LoadF32x8(src, out); }
__device__ __forceinline__ void LoadX8(const __nv_bfloat16* src, float (&out)[8]) {
  LoadBf16x8(src, out);
}

__device__ __forceinline__ float WarpSum(float v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

// Sum over the block; every thread gets the result. `scratch` holds 32
// floats of shared memory; kThreads is a multiple of 32.
template <int kThreads>
__device__ __forceinline__ float BlockSum(float v, float* scratch) {
  static_assert(kThreads % 32 == 0 && kThreads <= 1024, "whole warps");
  constexpr int kWarps = kThreads / 32;
  v = WarpSum(v);
  if (kWarps == 1) return v;
  const int warp = threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  __syncthreads();  // scratch may still be read from a previous call
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < kWarps ? scratch[lane] : 0.0f;
  return WarpSum(v);
}

// silu(g) = g * sigmoid(g), shared by silu_and_mul.cu and the fused
// gate_up kernel of skinny_gemm.cu, whose outputs must agree bit for bit.
// expf (not __expf): full float accuracy, so the result differs from the
// CPU twin only by the final bf16 rounding.
__device__ __forceinline__ float Silu(float g) { return g / (1.0f + expf(-g)); }

// ---- Programmatic dependent launch (Hopper) ----
//
// A decode pass is a chain of small kernels, each a few microseconds long,
// so the gap between one kernel's last CTA and the next kernel's first is a
// large share of the pass. A kernel launched with LaunchDependent may be
// scheduled while the kernel before it in the stream drains: its CTAs become
// resident early and start the moment the predecessor's memory is visible.
//
// The contract every kernel launched with LaunchDependent keeps: it calls
// WaitForPredecessor() before anything else (every CTA, unconditionally, so
// that its completion implies the predecessor's), and may call
// AllowDependents() once the rest of its work no longer needs the SM to
// itself. A kernel that never calls AllowDependents lets the next one launch
// as its CTAs exit. Launched the ordinary way, both calls are no-ops.
__device__ __forceinline__ void WaitForPredecessor() {
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
}
__device__ __forceinline__ void AllowDependents() {
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
}

// kernel<<<grid, block, smem_bytes, stream>>>(args...) with programmatic
// stream serialization allowed (see above). Also inside CUDA graph capture,
// where it becomes a programmatic edge.
template <typename... Params, typename... Args>
cudaError_t LaunchDependent(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem_bytes,
                            cudaStream_t stream, Args&&... args) {
  cudaLaunchConfig_t config = {};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = smem_bytes;
  config.stream = stream;
  cudaLaunchAttribute attribute[1];
  attribute[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute[0].val.programmaticStreamSerializationAllowed = 1;
  config.attrs = attribute;
  config.numAttrs = 1;
  return cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...);
}

inline bool IsAligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

}  // namespace model_internal
}  // namespace verdict

#endif  // VERDICT_KERNELS_MODEL_INTERNAL_DEVICE_UTILS_CUH_
