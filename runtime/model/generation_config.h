// generation_config.json: what a checkpoint says about generating with it.
// Its end-of-sequence ids stop generation (Llama 3.1 lists three, where
// config.json names one); its sampling values (temperature, top_p, top_k, min_p)
// are the defaults for requests that leave them out, as the checkpoint's
// authors tuned them (vLLM's `--generation-config auto`).
#ifndef VERDICT_RUNTIME_MODEL_GENERATION_CONFIG_H_
#define VERDICT_RUNTIME_MODEL_GENERATION_CONFIG_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace verdict {

struct GenerationConfig {
  std::vector<int> eos_token_ids;  // `eos_token_id`: a number or a list
  std::optional<int> bos_token_id;
  std::optional<int> pad_token_id;
  std::optional<float> temperature;  // >= 0
  std::optional<float> top_p;        // (0, 1]
  std::optional<int> top_k;          // >= 0; 0 is off
  std::optional<float> min_p;        // [0, 1]; 0 is off

  bool has_sampling_defaults() const {
    return temperature.has_value() || top_p.has_value() || top_k.has_value() ||
           min_p.has_value();
  }
};

// Parses the file's text; `source` names it in errors. Fields other than the
// ones above are ignored (the file holds many that serving has no use for);
// a field of the wrong type or out of range is an error naming it.
absl::StatusOr<GenerationConfig> ParseGenerationConfig(absl::string_view json_text,
                                                       absl::string_view source);

// `model_dir`/generation_config.json; a folder without one gives an empty
// config.
absl::StatusOr<GenerationConfig> LoadGenerationConfig(const std::string& model_dir);

}  // namespace verdict

#endif  // VERDICT_RUNTIME_MODEL_GENERATION_CONFIG_H_
