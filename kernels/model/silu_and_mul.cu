#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "kernels/cuda_check.h"
#include "kernels/model/internal/device_utils.cuh"
#include "kernels/model/silu_and_mul.h"

namespace verdict {
namespace {

using model_internal::LoadBf16x8;
using model_internal::StoreBf16x8;

constexpr int kThreads = 256;

// Grid-stride over groups of 8 outputs (kVec) or single outputs. A flat
// index keeps every thread busy for any tokens x inter split.
template <bool kVec>
__global__ void __launch_bounds__(kThreads)
    SiluAndMulKernel(const __nv_bfloat16* __restrict__ gate_up, __nv_bfloat16* __restrict__ out,
                     int tokens, int inter) {
  model_internal::WaitForPredecessor();  // LaunchDependent's contract
  model_internal::AllowDependents();
  constexpr int kWidth = kVec ? 8 : 1;
  const int groups_per_row = inter / kWidth;
  const int64_t total = static_cast<int64_t>(tokens) * groups_per_row;
  for (int64_t g = blockIdx.x * static_cast<int64_t>(kThreads) + threadIdx.x; g < total;
       g += static_cast<int64_t>(gridDim.x) * kThreads) {
    const int64_t t = g / groups_per_row;
    const int i = static_cast<int>(g % groups_per_row) * kWidth;
    const __nv_bfloat16* gate = gate_up + t * 2 * inter + i;
    const __nv_bfloat16* up = gate + inter;
    __nv_bfloat16* dst = out + t * inter + i;
    if constexpr (kVec) {
      float gv[8], uv[8], o[8];
      LoadBf16x8(gate, gv);
      LoadBf16x8(up, uv);
#pragma unroll
      for (int j = 0; j < 8; ++j) o[j] = model_internal::Silu(gv[j]) * uv[j];
      StoreBf16x8(dst, o);
    } else {
      *dst =
          __float2bfloat16(model_internal::Silu(__bfloat162float(*gate)) * __bfloat162float(*up));
    }
  }
}

}  // namespace

absl::Status InvokeSiluAndMul(const uint16_t* gate_up, uint16_t* out, int tokens, int inter,
                              cudaStream_t stream) {
  if (tokens < 0 || inter <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("silu_and_mul: bad shape tokens=", tokens, " inter=", inter));
  }
  if (tokens == 0) return absl::OkStatus();
  const auto* in = reinterpret_cast<const __nv_bfloat16*>(gate_up);
  auto* o = reinterpret_cast<__nv_bfloat16*>(out);
  const bool vec =
      inter % 8 == 0 && model_internal::IsAligned16(gate_up) && model_internal::IsAligned16(out);
  const int64_t work = static_cast<int64_t>(tokens) * (vec ? inter / 8 : inter);
  // Enough blocks to fill the GPU several times over; the grid-stride loop
  // covers the rest.
  const int blocks = static_cast<int>(std::min<int64_t>((work + kThreads - 1) / kThreads, 8192));
  if (vec) {
    VERDICT_CUDA_RETURN_IF_ERROR(model_internal::LaunchDependent(
        SiluAndMulKernel<true>, blocks, kThreads, 0, stream, in, o, tokens, inter));
  } else {
    VERDICT_CUDA_RETURN_IF_ERROR(model_internal::LaunchDependent(
        SiluAndMulKernel<false>, blocks, kThreads, 0, stream, in, o, tokens, inter));
  }
  VERDICT_CUDA_RETURN_IF_ERROR(cudaGetLastError());
  return absl::OkStatus();
}

}  // namespace verdict
