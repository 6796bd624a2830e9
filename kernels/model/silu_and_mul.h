// The Llama MLP activation: out[t, i] = silu(gate[t, i]) * up[t, i], where
// gate and up are the two halves of the fused gate_up projection's output
// row ([tokens, 2 * inter]: gate first, then up). silu(g) = g / (1 + e^-g).
// Computed in float, rounded once to bf16 on the device.
#ifndef VERDICT_KERNELS_MODEL_SILU_AND_MUL_H_
#define VERDICT_KERNELS_MODEL_SILU_AND_MUL_H_

#include <cstdint>

#include "absl/status/status.h"
#include "kernels/model/cuda_stream.h"

namespace verdict {

// CPU twin: gate_up [tokens, 2 * inter] -> out [tokens, inter].
void SiluAndMulCpu(const float* gate_up, float* out, int tokens, int inter);

// CUDA launcher: bf16 in, bf16 out (device pointers).
absl::Status InvokeSiluAndMul(const uint16_t* gate_up, uint16_t* out, int tokens, int inter,
                              cudaStream_t stream);

}  // namespace verdict

#endif  // VERDICT_KERNELS_MODEL_SILU_AND_MUL_H_
