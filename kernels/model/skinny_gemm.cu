// CUDA kernel of the skinny GEMM (kernels/model/skinny_gemm.h).
//
// One warp per output column (a weight row), grid-stride over the columns.
// Lane l reads 16-byte chunks l, l + 32, ... of the weight row, kUnroll of
// them issued before any is used, so that each warp keeps kUnroll * 512
// bytes of the weight in flight; the matching chunks of A's m rows are
// small and shared by every warp, so they come from L1. Products are summed
// per lane in chunk order, then across the warp by a butterfly: a fixed
// order for every m.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "absl/strings/str_cat.h"
#include "kernels/cuda_check.h"
#include "kernels/model/internal/device_utils.cuh"
#include "kernels/model/skinny_gemm.h"

namespace verdict {
namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kUnroll = 4;

__device__ __forceinline__ void Bf16x8ToFloat(const int4& v, float (&out)[8]) {
  const uint32_t words[4] = {static_cast<uint32_t>(v.x), static_cast<uint32_t>(v.y),
                             static_cast<uint32_t>(v.z), static_cast<uint32_t>(v.w)};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    out[2 * i] = __uint_as_float(words[i] << 16);
    out[2 * i + 1] = __uint_as_float(words[i] & 0xFFFF0000u);
  }
}

__device__ __forceinline__ void Store(float* c, float v) { *c = v; }
__device__ __forceinline__ void Store(__nv_bfloat16* c, float v) { *c = __float2bfloat16_rn(v); }

template <int M, typename OutT>
__global__ void __launch_bounds__(kThreads)
    SkinnyGemmKernel(const __nv_bfloat16* __restrict__ a, const __nv_bfloat16* __restrict__ w,
                     const __nv_bfloat16* __restrict__ bias, OutT* __restrict__ c, int n, int k) {
  const int lane = threadIdx.x & 31;
  const int chunks = k / 8;
  const int4* a4 = reinterpret_cast<const int4*>(a);
  for (int col = blockIdx.x * kWarps + (threadIdx.x >> 5); col < n; col += gridDim.x * kWarps) {
    const int4* w4 = reinterpret_cast<const int4*>(w + static_cast<int64_t>(col) * k);
    float acc[M];
#pragma unroll
    for (int r = 0; r < M; ++r) acc[r] = 0.0f;
    const auto accumulate = [&](const int4& wv, int chunk) {
      float wf[8];
      Bf16x8ToFloat(wv, wf);
#pragma unroll
      for (int r = 0; r < M; ++r) {
        float af[8];
        Bf16x8ToFloat(__ldg(a4 + static_cast<int64_t>(r) * chunks + chunk), af);
#pragma unroll
        for (int j = 0; j < 8; ++j) acc[r] = fmaf(af[j], wf[j], acc[r]);
      }
    };
    int chunk = lane;
    for (; chunk + 32 * (kUnroll - 1) < chunks; chunk += 32 * kUnroll) {
      int4 wv[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) wv[u] = __ldcs(w4 + chunk + 32 * u);
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) accumulate(wv[u], chunk + 32 * u);
    }
    for (; chunk < chunks; chunk += 32) accumulate(__ldcs(w4 + chunk), chunk);
#pragma unroll
    for (int r = 0; r < M; ++r) {
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) acc[r] += __shfl_xor_sync(0xFFFFFFFFu, acc[r], o);
    }
    if (lane == 0) {
      const float b = bias != nullptr ? __bfloat162float(bias[col]) : 0.0f;
#pragma unroll
      for (int r = 0; r < M; ++r) Store(c + static_cast<int64_t>(r) * n + col, acc[r] + b);
    }
  }
}

template <typename OutT>
absl::Status Launch(const uint16_t* a, const uint16_t* w, const uint16_t* bias, OutT* c, int m,
                    int n, int k, cudaStream_t stream) {
  if (!SkinnyGemmFits(m, k, a, w) || n <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("skinny gemm: unsupported m=", m, " n=", n,
                                                   " k=", k, " or unaligned operands"));
  }
  const auto* a16 = reinterpret_cast<const __nv_bfloat16*>(a);
  const auto* w16 = reinterpret_cast<const __nv_bfloat16*>(w);
  const auto* b16 = reinterpret_cast<const __nv_bfloat16*>(bias);
  // A warp per column, up to a grid the GPU holds a few times over.
  const int blocks = std::min((n + kWarps - 1) / kWarps, 8192);
  switch (m) {
    case 1:
      SkinnyGemmKernel<1><<<blocks, kThreads, 0, stream>>>(a16, w16, b16, c, n, k);
      break;
    case 2:
      SkinnyGemmKernel<2><<<blocks, kThreads, 0, stream>>>(a16, w16, b16, c, n, k);
      break;
    case 3:
      SkinnyGemmKernel<3><<<blocks, kThreads, 0, stream>>>(a16, w16, b16, c, n, k);
      break;
    default:
      SkinnyGemmKernel<4><<<blocks, kThreads, 0, stream>>>(a16, w16, b16, c, n, k);
      break;
  }
  VERDICT_CUDA_RETURN_IF_ERROR(cudaGetLastError());
  return absl::OkStatus();
}

}  // namespace

bool SkinnyGemmFits(int m, int k, const void* a, const void* w) {
  return m >= 1 && m <= kSkinnyGemmMaxRows && k > 0 && k % 8 == 0 &&
         model_internal::IsAligned16(a) && model_internal::IsAligned16(w);
}

absl::Status InvokeSkinnyGemm(const uint16_t* a, const uint16_t* w, const uint16_t* bias,
                              uint16_t* c, int m, int n, int k, cudaStream_t stream) {
  return Launch(a, w, bias, reinterpret_cast<__nv_bfloat16*>(c), m, n, k, stream);
}

absl::Status InvokeSkinnyGemm(const uint16_t* a, const uint16_t* w, const uint16_t* bias, float* c,
                              int m, int n, int k, cudaStream_t stream) {
  return Launch(a, w, bias, c, m, n, k, stream);
}

}  // namespace verdict
