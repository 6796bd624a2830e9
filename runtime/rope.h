// Rotary position embedding tables shared by every backend. Frequencies
// follow transformers: inv_freq[i] = theta^(-2i / head_dim), then the
// configured scaling (linear: / factor; Llama 3: low frequencies / factor,
// high ones kept, a smooth blend between). Rotation pairs element i with
// i + head_dim / 2 ("rotate_half" layout of Hugging Face checkpoints).
#ifndef VERDICT_RUNTIME_ROPE_H_
#define VERDICT_RUNTIME_ROPE_H_

#include <cstdint>
#include <vector>

#include "runtime/model_config.h"

namespace verdict {

// head_dim / 2 inverse frequencies, scaling applied.
std::vector<float> RopeInvFrequencies(const ModelConfig& config);

// Rotates one head vector of length 2 * inv_freq.size() in place for
// `position`. The angle is float(position) * inv_freq[i] in float32, as
// transformers computes it; cos and sin are evaluated in double.
void ApplyRope(const std::vector<float>& inv_freq, int64_t position, float* head);

}  // namespace verdict

#endif  // VERDICT_RUNTIME_ROPE_H_
