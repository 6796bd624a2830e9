// The model's linear layers for a handful of tokens: C[m, n] = A[m, k] *
// W[n, k]^T (+ bias[n]) for m <= kSkinnyGemmMaxRows, the shape of a draft
// model's decode passes. At such m a product only streams its weight, and
// cuBLASLt's kernels leave the smaller weights well under the copy bandwidth
// (a 1B model's 2048 x 2048 projection at 1.7 TB/s on the H200,
// docs/PERF.md); this kernel keeps many 16-byte weight loads in flight per
// warp instead.
//
// Same operands and semantics as Gemm (kernels/model/gemm.h), with the same
// CPU twin, GemmCpu. Each output sums its k products in float32 in a fixed
// order that depends on neither m nor the other rows, so a row's result is
// the same in any batch; the order differs from cuBLASLt's, so the two agree
// to float rounding, not bit for bit.
#ifndef VERDICT_KERNELS_MODEL_SKINNY_GEMM_H_
#define VERDICT_KERNELS_MODEL_SKINNY_GEMM_H_

#include <cstdint>

#include "absl/status/status.h"
#include "kernels/model/cuda_stream.h"

namespace verdict {

inline constexpr int kSkinnyGemmMaxRows = 4;

// Whether InvokeSkinnyGemm takes these operands: 1 <= m <= kSkinnyGemmMaxRows,
// k a multiple of 8, and A and W 16-byte aligned.
bool SkinnyGemmFits(int m, int k, const void* a, const void* w);

// Device pointers; bf16 as raw bits; bias may be null. The bf16 output is
// rounded once, after the bias.
absl::Status InvokeSkinnyGemm(const uint16_t* a, const uint16_t* w, const uint16_t* bias,
                              uint16_t* c, int m, int n, int k, cudaStream_t stream);
absl::Status InvokeSkinnyGemm(const uint16_t* a, const uint16_t* w, const uint16_t* bias, float* c,
                              int m, int n, int k, cudaStream_t stream);

}  // namespace verdict

#endif  // VERDICT_KERNELS_MODEL_SKINNY_GEMM_H_
