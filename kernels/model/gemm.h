// The model's linear layers: C[m, n] = A[m, k] * W[n, k]^T (+ bias[n]).
// A holds activations row-major (one token per row); W is a weight in the
// Hugging Face layout, out_features x in_features, row-major. Products are
// accumulated in float32.
//
// GemmCpu is the CPU twin (float). Gemm runs the same product on the device
// through cuBLASLt: bf16 A and W, bf16 or float32 C, optional bf16 bias
// (folded into cuBLASLt's epilogue for bf16 outputs, added by AddBias
// otherwise). It owns the cuBLASLt handle and a workspace, and caches one
// plan (descriptors and the heuristic's algorithm) per shape and pointer
// alignment, so after the first call of a shape a call only enqueues the
// matmul: safe to capture in a CUDA graph once warmed up.
#ifndef VERDICT_KERNELS_MODEL_GEMM_H_
#define VERDICT_KERNELS_MODEL_GEMM_H_

#include <cstddef>
#include <cstdint>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/model/cuda_stream.h"

namespace verdict {

// CPU twin. bias may be null. num_threads 0 uses the hardware's threads.
void GemmCpu(const float* a, const float* w, const float* bias, float* c, int m, int n, int k,
             int num_threads = 0);

struct GemmOptions {
  size_t workspace_bytes = 32u << 20;
  // 0 or 1: use the cuBLASLt heuristic's first algorithm (deterministic for a
  // given GPU and library). N > 1: on a shape's first call outside graph
  // capture, time the heuristic's top N algorithms on the caller's buffers
  // and keep the fastest. Faster for some small-m shapes, but the choice
  // rests on timings, so two processes may pick algorithms that sum in
  // different orders (results then differ in the last bits).
  int autotune_candidates = 0;
  // Products of at most kSkinnyGemmMaxRows rows with k <= 4096 run the
  // skinny kernel (kernels/model/skinny_gemm.h), which reads such weights
  // closer to the copy bandwidth than cuBLASLt does at such m. Its summation order is not
  // cuBLASLt's, so a model whose outputs must not depend on the batch shape
  // (a target whose verify rows must equal its decode rows) leaves it off.
  bool skinny_small_m = false;
};

class Gemm {
 public:
  // Creates the cuBLASLt handle and allocates the workspace on the current
  // device.
  static absl::StatusOr<std::unique_ptr<Gemm>> Create(const GemmOptions& options = {});
  ~Gemm();
  Gemm(const Gemm&) = delete;
  Gemm& operator=(const Gemm&) = delete;

  // Device pointers; bf16 as raw bits; bias may be null. Calls on one Gemm
  // are serialised (it shares one workspace), so give each concurrently
  // used stream its own Gemm.
  absl::Status Run(const uint16_t* a, const uint16_t* w, const uint16_t* bias, uint16_t* c, int m,
                   int n, int k, cudaStream_t stream);
  absl::Status Run(const uint16_t* a, const uint16_t* w, const uint16_t* bias, float* c, int m,
                   int n, int k, cudaStream_t stream);

  // The Llama MLP's gate_up projection and its activation: act[m, inter] =
  // silu(gate) * up from a[m, k] and w_gate_up[2 * inter, k] (gate rows,
  // then up rows; no bias). Where Run would take the skinny kernel
  // (GemmOptions::skinny_small_m) one fused kernel does both
  // (InvokeSkinnyGateUpSilu: a launch fewer and no gate_up round trip
  // through memory) and gate_up_scratch is left alone; otherwise Run writes
  // gate_up [m, 2 * inter] to gate_up_scratch and InvokeSiluAndMul
  // (kernels/model/silu_and_mul.h) reads it. Either way act holds the bits
  // of Run followed by InvokeSiluAndMul.
  absl::Status RunGateUpSilu(const uint16_t* a, const uint16_t* w_gate_up,
                             uint16_t* gate_up_scratch, uint16_t* act, int m, int inter, int k,
                             cudaStream_t stream);

  // Number of cached plans (one per distinct shape/dtype/alignment seen).
  size_t cached_plans() const;

 private:
  struct Impl;
  explicit Gemm(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace verdict

#endif  // VERDICT_KERNELS_MODEL_GEMM_H_
