// Writes a model directory in Hugging Face layout (config.json plus
// model.safetensors, or several files and model.safetensors.index.json)
// filled with seeded random weights. Tests and tools use it so that
// end-to-end runs need no trained checkpoint. The values are the dummy
// weights of the same seed (weights.h), so a float32 directory loads to
// exactly what `--load-format dummy` with that seed generates.
#ifndef VERDICT_RUNTIME_MODEL_RANDOM_MODEL_H_
#define VERDICT_RUNTIME_MODEL_RANDOM_MODEL_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "runtime/model/model_config.h"
#include "runtime/model/safetensors.h"

namespace verdict {

struct RandomModelOptions {
  uint64_t seed = 0;
  float stddev = 0.02f;
  TensorDType dtype = TensorDType::kF32;  // F32, BF16 or F16
  int num_files = 1;  // > 1 writes an index and model-0000i-of-0000n.safetensors
};

// Creates `dir` if needed and writes config.json and the weights.
absl::Status WriteRandomModel(const std::string& dir, const ModelConfig& config,
                              const RandomModelOptions& options = {});

// A small config for tests: 2 layers, hidden 64, 4 heads of 16, 2 KV heads,
// MLP 128, vocab 100, with the family's own features (Qwen2 q/k/v bias,
// Qwen3 q/k norm). Callers adjust fields before use.
ModelConfig TinyModelConfig(ModelFamily family = ModelFamily::kLlama);

}  // namespace verdict

#endif  // VERDICT_RUNTIME_MODEL_RANDOM_MODEL_H_
