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
//
// InvokeSkinnyGateUpSilu fuses the Llama MLP's first half for the same few
// rows: the gate_up projection (gate rows, then up rows, no bias) and
// SiLU-and-mul (kernels/model/silu_and_mul.h) in one kernel, each warp
// reading gate row i and up row i together. The [m, 2 * inter] gate_up
// intermediate then never goes through memory and one launch replaces two,
// and the result is the unfused pair's (InvokeSkinnyGemm, then
// InvokeSiluAndMul) bit for bit. Its CPU twin is GemmCpu then SiluAndMulCpu.
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

// act[m, inter] = silu(gate) * up, where [gate | up] = A[m, k] *
// w_gate_up[2 * inter, k]^T, for the operands SkinnyGemmFits(m, k, a,
// w_gate_up) takes (the up rows start inter * k elements in, 16-byte
// aligned with w_gate_up) and inter >= 1. Device pointers; bf16 as raw
// bits. gate and up are rounded to bf16 as InvokeSkinnyGemm's bf16 output
// is, and act once more after the product, so act equals InvokeSkinnyGemm
// (n = 2 * inter, no bias) followed by InvokeSiluAndMul bit for bit.
absl::Status InvokeSkinnyGateUpSilu(const uint16_t* a, const uint16_t* w_gate_up, uint16_t* act,
                                    int m, int inter, int k, cudaStream_t stream);

}  // namespace verdict

#endif  // VERDICT_KERNELS_MODEL_SKINNY_GEMM_H_
