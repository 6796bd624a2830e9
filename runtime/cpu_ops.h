// Float32 reference implementations of the operations the model is built
// from. They define the semantics that device kernels must reproduce; each
// output element is computed in a fixed order, so results do not depend on
// the number of threads.
#ifndef VERDICT_RUNTIME_CPU_OPS_H_
#define VERDICT_RUNTIME_CPU_OPS_H_

#include <cstdint>
#include <functional>

namespace verdict {

// Calls fn(begin, end) over [0, n) split into at most `threads` ranges.
void ParallelFor(int64_t n, int threads, const std::function<void(int64_t, int64_t)>& fn);

// y[r, o] = sum_i x[r, i] * w[o, i] (+ bias[o]): x is [rows, in], w is the
// [out, in] weight of a Hugging Face Linear, y is [rows, out].
void LinearCpu(const float* x, int64_t rows, int64_t in, const float* w, int64_t out,
               const float* bias, float* y, int threads);

// y = x / sqrt(mean(x^2) + eps) * weight, row by row; y may alias x.
void RmsNormCpu(const float* x, const float* weight, int64_t rows, int64_t dim, float eps,
                float* y);

// out[i] = silu(gate[i]) * up[i]; out may alias gate.
void SiluMulCpu(const float* gate, const float* up, int64_t n, float* out);

}  // namespace verdict

#endif  // VERDICT_RUNTIME_CPU_OPS_H_
