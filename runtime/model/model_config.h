// ModelConfig: the shape of a Llama-family decoder, read from a Hugging Face
// `config.json`. One struct covers Llama (with Llama-3 RoPE scaling), Qwen2
// (q/k/v bias) and Qwen3 (per-head q/k RMSNorm); the model code branches on
// its fields, never on the model type string.
#ifndef VERDICT_RUNTIME_MODEL_MODEL_CONFIG_H_
#define VERDICT_RUNTIME_MODEL_MODEL_CONFIG_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace verdict {

enum class ModelFamily { kLlama, kQwen2, kQwen3 };

// How RoPE frequencies are rescaled for long contexts (HF `rope_scaling`).
struct RopeScaling {
  enum class Type { kNone, kLinear, kLlama3 };
  Type type = Type::kNone;
  double factor = 1.0;
  // Llama 3 only.
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  int64_t original_max_position_embeddings = 8192;
};

struct ModelConfig {
  ModelFamily family = ModelFamily::kLlama;
  std::string model_type;  // as written in config.json

  int hidden_size = 0;
  int intermediate_size = 0;
  int num_layers = 0;
  int num_heads = 0;
  int num_kv_heads = 0;
  int head_dim = 0;  // hidden_size / num_heads unless config.json says otherwise
  int vocab_size = 0;
  int64_t max_position_embeddings = 0;

  float rms_norm_eps = 1e-6f;
  double rope_theta = 10000.0;
  RopeScaling rope_scaling;

  bool tie_word_embeddings = false;
  bool qkv_bias = false;  // Qwen2 always; Llama/Qwen3 when attention_bias
  bool o_bias = false;    // Llama/Qwen3 when attention_bias (never Qwen2)
  bool qk_norm = false;   // Qwen3: RMSNorm over head_dim on q and k before RoPE

  // Sliding-window attention: a query at position p sees keys
  // p - sliding_window + 1 ... p on the layers marked true. 0 = none.
  int sliding_window = 0;
  std::vector<bool> layer_uses_sliding_window;  // num_layers entries

  std::vector<int> bos_token_ids;
  std::vector<int> eos_token_ids;
  std::string torch_dtype;  // informational ("bfloat16", ...)

  bool HasSlidingLayers() const;
  bool HasFullLayers() const;
  int q_size() const { return num_heads * head_dim; }
  int kv_size() const { return num_kv_heads * head_dim; }
};

// Parses config.json text. `source` names the file in error messages.
// Accepted model_type: llama, qwen2, qwen3. Every required field is checked
// for presence, type and range; unsupported features (another activation,
// mlp_bias, an unknown rope_type) are refused by name.
absl::StatusOr<ModelConfig> ParseModelConfig(absl::string_view json_text,
                                             absl::string_view source = "config.json");

// Reads `path`, or `path`/config.json when `path` is a directory.
absl::StatusOr<ModelConfig> LoadModelConfig(const std::string& path);

// Shapes of public models, for dummy-weight benchmarks without a checkpoint
// directory: "llama-3.1-8b", "llama-3.2-1b", "qwen3-0.6b". NotFound lists
// the known names.
absl::StatusOr<ModelConfig> BuiltinModelConfig(absl::string_view name);

// The fields that set a forward pass's cost, as one line: "llama h4096
// i14336 l32 q32 kv8 d128 v128256" (and "sw4096" with sliding layers). Two
// checkpoints of one architecture share it whatever their weights, so a
// cost table measured on dummy weights serves the real ones.
std::string ModelShapeName(const ModelConfig& config);

// Serialises the fields ParseModelConfig reads (used to write test models).
std::string ModelConfigToJson(const ModelConfig& config);

// The tensor-parallel degree must divide the attention heads, the KV heads
// (KV heads are never replicated across ranks) and the MLP width. The
// vocabulary is padded instead (see PaddedVocabSize).
absl::Status ValidateTensorParallel(const ModelConfig& config, int tp);

// Vocabulary rounded up to a multiple of tp, so each rank owns an equal
// slice of embedding and LM-head rows; padded rows are zero and dropped from
// the gathered logits.
int PaddedVocabSize(int vocab_size, int tp);

}  // namespace verdict

#endif  // VERDICT_RUNTIME_MODEL_MODEL_CONFIG_H_
