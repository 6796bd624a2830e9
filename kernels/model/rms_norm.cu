#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "absl/strings/str_cat.h"
#include "kernels/cuda_check.h"
#include "kernels/model/internal/device_utils.cuh"
#include "kernels/model/rms_norm.h"

namespace verdict {
namespace {

using model_internal::BlockSum;
using model_internal::LoadAsFloat;
using model_internal::LoadBf16x8;
using model_internal::LoadF32x8;
using model_internal::LoadX8;
using model_internal::StoreBf16x8;
using model_internal::StoreF32x8;

constexpr int kRowThreads = 256;

// One CTA per row. kAdd: residual += x first, and the norm reads the
// residual. kVec: every row start is 16-byte aligned and width % 8 == 0, so
// each thread moves 8 values per access. The second pass re-reads what the
// first pass touched; a row is at most tens of KB, so it comes from cache.
template <typename TIn, bool kAdd, bool kVec>
__global__ void __launch_bounds__(kRowThreads)
    RmsNormKernel(const TIn* __restrict__ x, float* __restrict__ residual,
                  const __nv_bfloat16* __restrict__ weight, __nv_bfloat16* __restrict__ out,
                  int width, float eps) {
  model_internal::WaitForPredecessor();  // LaunchDependent's contract
  model_internal::AllowDependents();
  __shared__ float scratch[32];
  const int64_t row_offset = static_cast<int64_t>(blockIdx.x) * width;
  const TIn* x_row = x + row_offset;
  float* res_row = kAdd ? residual + row_offset : nullptr;
  __nv_bfloat16* out_row = out + row_offset;

  float sum_sq = 0.0f;
  if constexpr (kVec) {
    for (int i = threadIdx.x * 8; i < width; i += kRowThreads * 8) {
      float v[8];
      LoadX8(x_row + i, v);
      if constexpr (kAdd) {
        float r[8];
        LoadF32x8(res_row + i, r);
#pragma unroll
        for (int j = 0; j < 8; ++j) v[j] += r[j];
        StoreF32x8(res_row + i, v);
      }
#pragma unroll
      for (int j = 0; j < 8; ++j) sum_sq += v[j] * v[j];
    }
  } else {
    for (int i = threadIdx.x; i < width; i += kRowThreads) {
      float v = LoadAsFloat(x_row + i);
      if constexpr (kAdd) {
        v += res_row[i];
        res_row[i] = v;
      }
      sum_sq += v * v;
    }
  }
  sum_sq = BlockSum<kRowThreads>(sum_sq, scratch);
  const float inv_rms = rsqrtf(sum_sq / static_cast<float>(width) + eps);

  if constexpr (kVec) {
    for (int i = threadIdx.x * 8; i < width; i += kRowThreads * 8) {
      float v[8], w[8];
      if constexpr (kAdd) {
        LoadF32x8(res_row + i, v);
      } else {
        LoadX8(x_row + i, v);
      }
      LoadBf16x8(weight + i, w);
#pragma unroll
      for (int j = 0; j < 8; ++j) v[j] = v[j] * inv_rms * w[j];
      StoreBf16x8(out_row + i, v);
    }
  } else {
    for (int i = threadIdx.x; i < width; i += kRowThreads) {
      const float v = kAdd ? res_row[i] : LoadAsFloat(x_row + i);
      out_row[i] = __float2bfloat16(v * inv_rms * __bfloat162float(weight[i]));
    }
  }
}

// One warp per (token, head); in place. Each lane keeps its values in
// registers between the two passes (head_dim <= 32 * kMaxPerLane).
constexpr int kHeadWarps = 4;
constexpr int kMaxPerLane = 8;

__global__ void __launch_bounds__(kHeadWarps * 32)
    HeadRmsNormKernel(__nv_bfloat16* __restrict__ x, int tokens, int heads, int head_dim,
                      int64_t token_stride, const __nv_bfloat16* __restrict__ weight, float eps) {
  model_internal::WaitForPredecessor();  // LaunchDependent's contract
  model_internal::AllowDependents();
  const int64_t unit = static_cast<int64_t>(blockIdx.x) * kHeadWarps + threadIdx.x / 32;
  if (unit >= static_cast<int64_t>(tokens) * heads) return;
  const int lane = threadIdx.x % 32;
  const int64_t token = unit / heads;
  const int head = static_cast<int>(unit % heads);
  __nv_bfloat16* row = x + token * token_stride + static_cast<int64_t>(head) * head_dim;
  float v[kMaxPerLane];
  float sum_sq = 0.0f;
#pragma unroll
  for (int j = 0; j < kMaxPerLane; ++j) {
    const int i = lane + 32 * j;
    v[j] = i < head_dim ? __bfloat162float(row[i]) : 0.0f;
    sum_sq += v[j] * v[j];
  }
  sum_sq = model_internal::WarpSum(sum_sq);
  const float inv_rms = rsqrtf(sum_sq / static_cast<float>(head_dim) + eps);
#pragma unroll
  for (int j = 0; j < kMaxPerLane; ++j) {
    const int i = lane + 32 * j;
    if (i < head_dim) row[i] = __float2bfloat16(v[j] * inv_rms * __bfloat162float(weight[i]));
  }
}

absl::Status CheckShape(int rows, int width) {
  if (rows < 0 || width <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("rms_norm: bad shape rows=", rows, " width=", width));
  }
  return absl::OkStatus();
}

template <typename TIn, bool kAdd>
absl::Status Launch(const TIn* x, float* residual, const uint16_t* weight, uint16_t* out, int rows,
                    int width, float eps, cudaStream_t stream) {
  if (absl::Status s = CheckShape(rows, width); !s.ok()) return s;
  if (rows == 0) return absl::OkStatus();
  const auto* w = reinterpret_cast<const __nv_bfloat16*>(weight);
  auto* o = reinterpret_cast<__nv_bfloat16*>(out);
  // 16-byte vectors need every row start aligned: width % 8 == 0 keeps bf16
  // and float rows aligned when the base pointers are.
  const bool vec = width % 8 == 0 && model_internal::IsAligned16(x) &&
                   model_internal::IsAligned16(weight) && model_internal::IsAligned16(out) &&
                   (!kAdd || model_internal::IsAligned16(residual));
  if (vec) {
    VERDICT_CUDA_RETURN_IF_ERROR(model_internal::LaunchDependent(RmsNormKernel<TIn, kAdd, true>,
                                                                 rows, kRowThreads, 0, stream, x,
                                                                 residual, w, o, width, eps));
  } else {
    VERDICT_CUDA_RETURN_IF_ERROR(model_internal::LaunchDependent(RmsNormKernel<TIn, kAdd, false>,
                                                                 rows, kRowThreads, 0, stream, x,
                                                                 residual, w, o, width, eps));
  }
  VERDICT_CUDA_RETURN_IF_ERROR(cudaGetLastError());
  return absl::OkStatus();
}

}  // namespace

absl::Status InvokeRmsNorm(const float* x, const uint16_t* weight, uint16_t* out, int rows,
                           int width, float eps, cudaStream_t stream) {
  return Launch<float, false>(x, nullptr, weight, out, rows, width, eps, stream);
}

absl::Status InvokeRmsNorm(const uint16_t* x, const uint16_t* weight, uint16_t* out, int rows,
                           int width, float eps, cudaStream_t stream) {
  return Launch<__nv_bfloat16, false>(reinterpret_cast<const __nv_bfloat16*>(x), nullptr, weight,
                                      out, rows, width, eps, stream);
}

absl::Status InvokeAddRmsNorm(const uint16_t* x, float* residual, const uint16_t* weight,
                              uint16_t* out, int rows, int width, float eps, cudaStream_t stream) {
  return Launch<__nv_bfloat16, true>(reinterpret_cast<const __nv_bfloat16*>(x), residual, weight,
                                     out, rows, width, eps, stream);
}

absl::Status InvokeHeadRmsNorm(uint16_t* x, int tokens, int heads, int head_dim,
                               int64_t token_stride, const uint16_t* weight, float eps,
                               cudaStream_t stream) {
  if (tokens < 0 || heads <= 0 || head_dim <= 0 || head_dim > 32 * kMaxPerLane) {
    return absl::InvalidArgumentError(absl::StrCat("head_rms_norm: bad shape tokens=", tokens,
                                                   " heads=", heads, " head_dim=", head_dim));
  }
  if (tokens == 0) return absl::OkStatus();
  const int64_t units = static_cast<int64_t>(tokens) * heads;
  const int blocks = static_cast<int>((units + kHeadWarps - 1) / kHeadWarps);
  VERDICT_CUDA_RETURN_IF_ERROR(model_internal::LaunchDependent(
      HeadRmsNormKernel, blocks, kHeadWarps * 32, 0, stream, reinterpret_cast<__nv_bfloat16*>(x),
      tokens, heads, head_dim, token_stride, reinterpret_cast<const __nv_bfloat16*>(weight), eps));
  VERDICT_CUDA_RETURN_IF_ERROR(cudaGetLastError());
  return absl::OkStatus();
}

}  // namespace verdict
