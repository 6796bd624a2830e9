#include "runtime/model/rope.h"

namespace verdict {
namespace {

RopeFrequencyConfig::Scaling ScalingOf(RopeScaling::Type type) {
  switch (type) {
    case RopeScaling::Type::kLinear:
      return RopeFrequencyConfig::Scaling::kLinear;
    case RopeScaling::Type::kLlama3:
      return RopeFrequencyConfig::Scaling::kLlama3;
    case RopeScaling::Type::kNone:
      break;
  }
  return RopeFrequencyConfig::Scaling::kNone;
}

}  // namespace

RopeFrequencyConfig RopeFrequencyConfigOf(const ModelConfig& config) {
  const RopeScaling& s = config.rope_scaling;
  RopeFrequencyConfig out;
  out.head_dim = config.head_dim;
  out.theta = config.rope_theta;
  out.scaling = ScalingOf(s.type);
  out.factor = s.factor;
  out.low_freq_factor = s.low_freq_factor;
  out.high_freq_factor = s.high_freq_factor;
  out.original_max_position_embeddings = static_cast<double>(s.original_max_position_embeddings);
  return out;
}

std::vector<float> RopeInvFrequencies(const ModelConfig& config) {
  return ComputeRopeInvFreq(RopeFrequencyConfigOf(config));
}

}  // namespace verdict
