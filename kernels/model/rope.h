// Rotary position embedding, Hugging Face Llama convention ("rotate_half"):
// within a head, value i pairs with value i + head_dim / 2 and the pair is
// rotated by the angle position * inv_freq[i]:
//   x'[i]       = x[i] * cos - x[i + d/2] * sin
//   x'[i + d/2] = x[i + d/2] * cos + x[i] * sin
// The frequencies are computed once on the host in double precision
// (ComputeRopeInvFreq, HF's default, linear and Llama-3 rules) and handed to
// both the CPU twin and the kernel, so the two backends rotate by the same
// float angles: angle = float(position) * inv_freq[i], as HF computes it.
#ifndef VERDICT_KERNELS_MODEL_ROPE_H_
#define VERDICT_KERNELS_MODEL_ROPE_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "kernels/model/cuda_stream.h"

namespace verdict {

struct RopeFrequencyConfig {
  enum class Scaling { kNone, kLinear, kLlama3 };
  int head_dim = 128;
  double theta = 10000.0;
  Scaling scaling = Scaling::kNone;
  double factor = 1.0;  // kLinear and kLlama3
  // kLlama3 only (HF rope_scaling fields).
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  double original_max_position_embeddings = 8192.0;
};

// head_dim / 2 inverse frequencies: theta^(-2i/head_dim), then rescaled as
// HF's _compute_linear_scaling_rope_parameters (divide by factor) or
// _compute_llama3_parameters (divide the low frequencies by factor, keep the
// high ones, interpolate in between).
std::vector<float> ComputeRopeInvFreq(const RopeFrequencyConfig& config);

// Where q and k live: q [tokens, num_heads, head_dim] and k [tokens,
// num_kv_heads, head_dim], each with its own distance between tokens (in
// elements), so both can sit inside the fused qkv projection output.
struct RopeShape {
  int tokens = 0;
  int num_heads = 0;
  int num_kv_heads = 0;
  int head_dim = 0;  // even
  int64_t q_token_stride = 0;
  int64_t k_token_stride = 0;
};

// CPU twin: rotates q and k in place; positions [tokens].
void RopeCpu(float* q, float* k, const int32_t* positions, const float* inv_freq,
             const RopeShape& shape);

// CUDA launcher: bf16 q and k in place (device pointers); inv_freq is a
// device copy of ComputeRopeInvFreq's head_dim / 2 floats.
absl::Status InvokeRope(uint16_t* q, uint16_t* k, const int32_t* positions, const float* inv_freq,
                        const RopeShape& shape, cudaStream_t stream);

}  // namespace verdict

#endif  // VERDICT_KERNELS_MODEL_ROPE_H_
