// The model's rotary embedding frequencies. kernels/model/rope.h holds the
// formulas (HF's default, linear and Llama-3 rules) and the rotation; this
// only reads the model's config.json fields into its RopeFrequencyConfig, so
// every backend rotates by the same frequencies.
#ifndef VERDICT_RUNTIME_MODEL_ROPE_H_
#define VERDICT_RUNTIME_MODEL_ROPE_H_

#include <vector>

#include "kernels/model/rope.h"
#include "runtime/model/model_config.h"

namespace verdict {

RopeFrequencyConfig RopeFrequencyConfigOf(const ModelConfig& config);

// head_dim / 2 inverse frequencies, scaling applied:
// ComputeRopeInvFreq(RopeFrequencyConfigOf(config)).
std::vector<float> RopeInvFrequencies(const ModelConfig& config);

}  // namespace verdict

#endif  // VERDICT_RUNTIME_MODEL_ROPE_H_
