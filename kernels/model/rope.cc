#include "kernels/model/rope.h"

#include <cmath>

namespace verdict {

std::vector<float> ComputeRopeInvFreq(const RopeFrequencyConfig& config) {
  const int half = config.head_dim / 2;
  std::vector<float> out(half);
  constexpr double kPi = 3.14159265358979323846;
  for (int i = 0; i < half; ++i) {
    double inv_freq = 1.0 / std::pow(config.theta, (2.0 * i) / config.head_dim);
    switch (config.scaling) {
      case RopeFrequencyConfig::Scaling::kNone:
        break;
      case RopeFrequencyConfig::Scaling::kLinear:
        inv_freq /= config.factor;
        break;
      case RopeFrequencyConfig::Scaling::kLlama3: {
        const double old_len = config.original_max_position_embeddings;
        const double low_freq_wavelen = old_len / config.low_freq_factor;
        const double high_freq_wavelen = old_len / config.high_freq_factor;
        const double wavelen = 2.0 * kPi / inv_freq;
        if (wavelen > low_freq_wavelen) {
          inv_freq /= config.factor;
        } else if (!(wavelen < high_freq_wavelen)) {
          // Medium band (HF: neither < high nor > low wavelength).
          const double smooth = (old_len / wavelen - config.low_freq_factor) /
                                (config.high_freq_factor - config.low_freq_factor);
          inv_freq = (1.0 - smooth) * inv_freq / config.factor + smooth * inv_freq;
        }
        break;
      }
    }
    out[i] = static_cast<float>(inv_freq);
  }
  return out;
}

namespace {

void RotateHeads(float* x, int heads, int head_dim, float pos, const float* inv_freq) {
  const int half = head_dim / 2;
  for (int i = 0; i < half; ++i) {
    const float angle = pos * inv_freq[i];
    const float c = std::cos(angle), s = std::sin(angle);
    for (int h = 0; h < heads; ++h) {
      float* head = x + static_cast<int64_t>(h) * head_dim;
      const float a = head[i], b = head[i + half];
      head[i] = a * c - b * s;
      head[i + half] = b * c + a * s;
    }
  }
}

}  // namespace

void RopeCpu(float* q, float* k, const int32_t* positions, const float* inv_freq,
             const RopeShape& shape) {
  for (int t = 0; t < shape.tokens; ++t) {
    const float pos = static_cast<float>(positions[t]);
    RotateHeads(q + t * shape.q_token_stride, shape.num_heads, shape.head_dim, pos, inv_freq);
    RotateHeads(k + t * shape.k_token_stride, shape.num_kv_heads, shape.head_dim, pos, inv_freq);
  }
}

}  // namespace verdict
