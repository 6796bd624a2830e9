// RMSNorm of the Llama family: out = x * rsqrt(mean(x^2) + eps) * weight,
// one row at a time, computed in float and rounded once.
//
// The residual stream is kept in float32 on the device (and in float on the
// CPU): each sub-layer's bf16 output is added to it in float, so the stream
// is never re-rounded to bf16 between layers and stays close to the CPU
// oracle. AddRmsNorm fuses that add with the next norm.
//
// HeadRmsNorm is Qwen3's q/k norm: an independent RMSNorm over head_dim for
// every head of every token, in place, on q or k inside a token-strided
// buffer (the fused qkv projection output).
#ifndef VERDICT_KERNELS_MODEL_RMS_NORM_H_
#define VERDICT_KERNELS_MODEL_RMS_NORM_H_

#include <cstdint>

#include "absl/status/status.h"
#include "kernels/model/cuda_stream.h"

namespace verdict {

// ---- CPU twins (float) ----

// out[r] = RmsNorm(x[r]) for rows x width, both contiguous. out may equal x.
void RmsNormCpu(const float* x, const float* weight, float* out, int rows, int width, float eps);

// residual[r] += x[r]; out[r] = RmsNorm(residual[r]).
void AddRmsNormCpu(const float* x, float* residual, const float* weight, float* out, int rows,
                   int width, float eps);

// For every token t < tokens and head h < heads, normalises the head_dim
// values at x + t * token_stride + h * head_dim in place.
void HeadRmsNormCpu(float* x, int tokens, int heads, int head_dim, int64_t token_stride,
                    const float* weight, float eps);

// ---- CUDA launchers (device pointers; bf16 as raw bits) ----

// x float32 (the residual stream) -> out bf16.
absl::Status InvokeRmsNorm(const float* x, const uint16_t* weight, uint16_t* out, int rows,
                           int width, float eps, cudaStream_t stream);

// x bf16 -> out bf16.
absl::Status InvokeRmsNorm(const uint16_t* x, const uint16_t* weight, uint16_t* out, int rows,
                           int width, float eps, cudaStream_t stream);

// x bf16 (a sub-layer's output), residual float32 updated in place, out bf16.
absl::Status InvokeAddRmsNorm(const uint16_t* x, float* residual, const uint16_t* weight,
                              uint16_t* out, int rows, int width, float eps, cudaStream_t stream);

// In place on bf16 heads, as HeadRmsNormCpu.
absl::Status InvokeHeadRmsNorm(uint16_t* x, int tokens, int heads, int head_dim,
                               int64_t token_stride, const uint16_t* weight, float eps,
                               cudaStream_t stream);

}  // namespace verdict

#endif  // VERDICT_KERNELS_MODEL_RMS_NORM_H_
