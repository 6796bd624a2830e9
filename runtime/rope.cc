#include "runtime/rope.h"

#include <cmath>

namespace verdict {

std::vector<float> RopeInvFrequencies(const ModelConfig& config) {
  const int half = config.head_dim / 2;
  std::vector<float> inv_freq(half);
  const RopeScaling& s = config.rope_scaling;
  for (int i = 0; i < half; ++i) {
    double f = 1.0 / std::pow(config.rope_theta, (2.0 * i) / config.head_dim);
    switch (s.type) {
      case RopeScaling::Type::kNone:
        break;
      case RopeScaling::Type::kLinear:
        f /= s.factor;
        break;
      case RopeScaling::Type::kLlama3: {
        // transformers' _compute_llama3_parameters.
        const double old_len = static_cast<double>(s.original_max_position_embeddings);
        const double low_freq_wavelen = old_len / s.low_freq_factor;
        const double high_freq_wavelen = old_len / s.high_freq_factor;
        const double wavelen = 2.0 * M_PI / f;
        if (wavelen > low_freq_wavelen) {
          f /= s.factor;
        } else if (wavelen >= high_freq_wavelen) {
          const double smooth = (old_len / wavelen - s.low_freq_factor) /
                                (s.high_freq_factor - s.low_freq_factor);
          f = (1.0 - smooth) * f / s.factor + smooth * f;
        }
        break;
      }
    }
    inv_freq[i] = static_cast<float>(f);
  }
  return inv_freq;
}

void ApplyRope(const std::vector<float>& inv_freq, int64_t position, float* head) {
  const size_t half = inv_freq.size();
  for (size_t i = 0; i < half; ++i) {
    const float angle = static_cast<float>(position) * inv_freq[i];
    const float c = static_cast<float>(std::cos(static_cast<double>(angle)));
    const float s = static_cast<float>(std::sin(static_cast<double>(angle)));
    const float x0 = head[i];
    const float x1 = head[i + half];
    head[i] = x0 * c - x1 * s;
    head[i + half] = x1 * c + x0 * s;
  }
}

}  // namespace verdict
