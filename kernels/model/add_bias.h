// Adds a per-output-feature bias to a [rows, cols] activation: c[r, j] +=
// bias[j]. The GEMM folds bias into cuBLASLt's epilogue where it can (bf16
// outputs, e.g. Qwen2's q/k/v bias); this op covers the other cases.
#ifndef VERDICT_KERNELS_MODEL_ADD_BIAS_H_
#define VERDICT_KERNELS_MODEL_ADD_BIAS_H_

#include <cstdint>

#include "absl/status/status.h"
#include "kernels/model/cuda_stream.h"

namespace verdict {

// CPU twin.
void AddBiasCpu(float* c, const float* bias, int rows, int cols);

// CUDA launchers: c bf16 or float32, bias bf16 (device pointers).
absl::Status InvokeAddBias(uint16_t* c, const uint16_t* bias, int rows, int cols,
                           cudaStream_t stream);
absl::Status InvokeAddBias(float* c, const uint16_t* bias, int rows, int cols, cudaStream_t stream);

}  // namespace verdict

#endif  // VERDICT_KERNELS_MODEL_ADD_BIAS_H_
