// CUDA kernels of the skinny GEMM and of its fused gate_up + SiLU-and-mul
// (kernels/model/skinny_gemm.h).
//
// One warp per output column (a weight row; two rows, gate i and up i, for
// the fused op), grid-stride over the columns. Lane l reads 16-byte chunks
// l, l + 32, ... of the weight row, kUnroll of them (per row) issued before
// any is used, so that each warp keeps kUnroll * 512 bytes of each row in
// flight; the matching chunks of A's m rows are small and shared by every
// warp, so they come from L1. Products are summed per lane in chunk order,
// then across the warp by a butterfly: a fixed order for every m, and the
// same for a row whichever kernel reads it (WarpDots is shared).
//
// Both kernels are launched with model_internal::LaunchDependent: in a
// decode pass of microsecond kernels their CTAs become resident while the
// kernel before them drains, and they let the next kernel do the same once
// their columns are done.
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

// An output as InvokeSkinnyGemm stores it: float as is, bf16 rounded to
// nearest even.
__device__ __forceinline__ void Store(float* c, float v) { *c = v; }
__device__ __forceinline__ void Store(__nv_bfloat16* c, float v) { *c = __float2bfloat16_rn(v); }

// acc[q][r] += the products of one 8-element chunk of weight row q (wv[q])
// with the same chunk of A's row r, in element order. A's chunk is read once
// for all R weight rows.
template <int M, int R>
__device__ __forceinline__ void AccumulateChunk(const int4* __restrict__ a4, int chunks, int chunk,
                                                const int4 (&wv)[R], float (&acc)[R][M]) {
  float wf[R][8];
#pragma unroll
  for (int q = 0; q < R; ++q) Bf16x8ToFloat(wv[q], wf[q]);
#pragma unroll
  for (int r = 0; r < M; ++r) {
    float af[8];
    Bf16x8ToFloat(__ldg(a4 + static_cast<int64_t>(r) * chunks + chunk), af);
#pragma unroll
    for (int q = 0; q < R; ++q) {
#pragma unroll
      for (int j = 0; j < 8; ++j) acc[q][r] = fmaf(af[j], wf[q][j], acc[q][r]);
    }
  }
}

// acc[q][r] = dot(weight row w4[q], A's row r), on every lane of the warp.
// Each row's products are summed in one fixed order (per lane in chunk
// order, then the butterfly) whatever R is, so a row's sums are the same
// bits whether it is read alone (SkinnyGemmKernel, R = 1) or next to
// another (SkinnyGateUpSiluKernel, R = 2). All R rows' kUnroll chunks are
// issued before any is used: R * kUnroll loads in flight per lane.
template <int M, int R>
__device__ __forceinline__ void WarpDots(const int4* __restrict__ a4, const int4* const (&w4)[R],
                                         int chunks, float (&acc)[R][M]) {
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int q = 0; q < R; ++q) {
#pragma unroll
    for (int r = 0; r < M; ++r) acc[q][r] = 0.0f;
  }
  int chunk = lane;
  for (; chunk + 32 * (kUnroll - 1) < chunks; chunk += 32 * kUnroll) {
    int4 wv[kUnroll][R];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
#pragma unroll
      for (int q = 0; q < R; ++q) wv[u][q] = __ldcs(w4[q] + chunk + 32 * u);
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) AccumulateChunk<M, R>(a4, chunks, chunk + 32 * u, wv[u], acc);
  }
  for (; chunk < chunks; chunk += 32) {
    int4 wv[R];
#pragma unroll
    for (int q = 0; q < R; ++q) wv[q] = __ldcs(w4[q] + chunk);
    AccumulateChunk<M, R>(a4, chunks, chunk, wv, acc);
  }
#pragma unroll
  for (int q = 0; q < R; ++q) {
#pragma unroll
    for (int r = 0; r < M; ++r) {
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) acc[q][r] += __shfl_xor_sync(0xFFFFFFFFu, acc[q][r], o);
    }
  }
}

template <int M, typename OutT>
__global__ void __launch_bounds__(kThreads)
    SkinnyGemmKernel(const __nv_bfloat16* __restrict__ a, const __nv_bfloat16* __restrict__ w,
                     const __nv_bfloat16* __restrict__ bias, OutT* __restrict__ c, int n, int k) {
  model_internal::WaitForPredecessor();  // LaunchDependent's contract
  const int lane = threadIdx.x & 31;
  const int chunks = k / 8;
  const int4* a4 = reinterpret_cast<const int4*>(a);
  for (int col = blockIdx.x * kWarps + (threadIdx.x >> 5); col < n; col += gridDim.x * kWarps) {
    const int4* const w4[1] = {reinterpret_cast<const int4*>(w + static_cast<int64_t>(col) * k)};
    float acc[1][M];
    WarpDots<M, 1>(a4, w4, chunks, acc);
    if (lane == 0) {
      const float b = bias != nullptr ? __bfloat162float(bias[col]) : 0.0f;
#pragma unroll
      for (int r = 0; r < M; ++r) Store(c + static_cast<int64_t>(r) * n + col, acc[0][r] + b);
    }
  }
  model_internal::AllowDependents();
}

// act[r, col] for col < inter from weight rows col (gate) and inter + col
// (up): what SkinnyGemmKernel<M, __nv_bfloat16> with n = 2 * inter and no
// bias stores at gate_up[r, col] and gate_up[r, inter + col], followed by
// SiluAndMulKernel's arithmetic on those two bf16 values.
template <int M>
__global__ void __launch_bounds__(kThreads)
    SkinnyGateUpSiluKernel(const __nv_bfloat16* __restrict__ a,
                           const __nv_bfloat16* __restrict__ w_gate_up,
                           __nv_bfloat16* __restrict__ act, int inter, int k) {
  model_internal::WaitForPredecessor();  // LaunchDependent's contract
  const int lane = threadIdx.x & 31;
  const int chunks = k / 8;
  const int4* a4 = reinterpret_cast<const int4*>(a);
  for (int col = blockIdx.x * kWarps + (threadIdx.x >> 5); col < inter; col += gridDim.x * kWarps) {
    const int4* const w4[2] = {
        reinterpret_cast<const int4*>(w_gate_up + static_cast<int64_t>(col) * k),
        reinterpret_cast<const int4*>(w_gate_up + (static_cast<int64_t>(inter) + col) * k)};
    float acc[2][M];
    WarpDots<M, 2>(a4, w4, chunks, acc);
    if (lane == 0) {
#pragma unroll
      for (int r = 0; r < M; ++r) {
        // "+ 0.0f" is SkinnyGemmKernel's absent bias: it turns a -0 sum into
        // +0, and the unfused pair's bits keep that sign through the SiLU.
        __nv_bfloat16 gate, up;
        Store(&gate, acc[0][r] + 0.0f);
        Store(&up, acc[1][r] + 0.0f);
        act[static_cast<int64_t>(r) * inter + col] = __float2bfloat16_rn(
            model_internal::Silu(__bfloat162float(gate)) * __bfloat162float(up));
      }
    }
  }
  model_internal::AllowDependents();
}

// The kernel instance for m rows (1 <= m <= kSkinnyGemmMaxRows).
template <typename OutT>
auto GemmKernelFor(int m) {
  switch (m) {
    case 1:
      return SkinnyGemmKernel<1, OutT>;
    case 2:
      return SkinnyGemmKernel<2, OutT>;
    case 3:
      return SkinnyGemmKernel<3, OutT>;
    default:
      return SkinnyGemmKernel<4, OutT>;
  }
}

auto GateUpSiluKernelFor(int m) {
  switch (m) {
    case 1:
      return SkinnyGateUpSiluKernel<1>;
    case 2:
      return SkinnyGateUpSiluKernel<2>;
    case 3:
      return SkinnyGateUpSiluKernel<3>;
    default:
      return SkinnyGateUpSiluKernel<4>;
  }
}

// A warp per column, up to a grid the GPU holds a few times over.
int Blocks(int columns) { return std::min((columns + kWarps - 1) / kWarps, 8192); }

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
  VERDICT_CUDA_RETURN_IF_ERROR(model_internal::LaunchDependent(
      GemmKernelFor<OutT>(m), Blocks(n), kThreads, 0, stream, a16, w16, b16, c, n, k));
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

absl::Status InvokeSkinnyGateUpSilu(const uint16_t* a, const uint16_t* w_gate_up, uint16_t* act,
                                    int m, int inter, int k, cudaStream_t stream) {
  if (!SkinnyGemmFits(m, k, a, w_gate_up) || inter <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("skinny gate_up silu: unsupported m=", m,
                                                   " inter=", inter, " k=", k,
                                                   " or unaligned operands"));
  }
  VERDICT_CUDA_RETURN_IF_ERROR(model_internal::LaunchDependent(
      GateUpSiluKernelFor(m), Blocks(inter), kThreads, 0, stream,
      reinterpret_cast<const __nv_bfloat16*>(a), reinterpret_cast<const __nv_bfloat16*>(w_gate_up),
      reinterpret_cast<__nv_bfloat16*>(act), inter, k));
  VERDICT_CUDA_RETURN_IF_ERROR(cudaGetLastError());
  return absl::OkStatus();
}

}  // namespace verdict
