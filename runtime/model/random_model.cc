#include "runtime/model/random_model.h"

#include <filesystem>
#include <fstream>
#include <map>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "runtime/model/weights.h"

namespace verdict {

ModelConfig TinyModelConfig(ModelFamily family) {
  ModelConfig c;
  c.family = family;
  c.model_type = family == ModelFamily::kLlama   ? "llama"
                 : family == ModelFamily::kQwen2 ? "qwen2"
                                                 : "qwen3";
  c.hidden_size = 64;
  c.intermediate_size = 128;
  c.num_layers = 2;
  c.num_heads = 4;
  c.num_kv_heads = 2;
  c.head_dim = 16;
  c.vocab_size = 100;
  c.max_position_embeddings = 512;
  c.rms_norm_eps = 1e-6f;
  c.rope_theta = 10000.0;
  c.tie_word_embeddings = false;
  c.qkv_bias = family == ModelFamily::kQwen2;
  c.o_bias = false;
  c.qk_norm = family == ModelFamily::kQwen3;
  c.layer_uses_sliding_window.assign(c.num_layers, false);
  c.bos_token_ids = {1};
  c.eos_token_ids = {2};
  c.torch_dtype = "float32";
  return c;
}

absl::Status WriteRandomModel(const std::string& dir, const ModelConfig& config,
                              const RandomModelOptions& options) {
  namespace fs = std::filesystem;
  if (options.dtype != TensorDType::kF32 && options.dtype != TensorDType::kBF16 &&
      options.dtype != TensorDType::kF16) {
    return absl::InvalidArgumentError(
        absl::StrCat("WriteRandomModel: dtype ", TensorDTypeName(options.dtype),
                     " is not a weight dtype"));
  }
  if (options.num_files < 1) return absl::InvalidArgumentError("WriteRandomModel: num_files < 1");
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return absl::PermissionDeniedError(absl::StrCat(dir, ": ", ec.message()));

  ModelConfig written = config;
  written.torch_dtype = options.dtype == TensorDType::kF32    ? "float32"
                        : options.dtype == TensorDType::kBF16 ? "bfloat16"
                                                              : "float16";
  {
    std::ofstream out(fs::path(dir) / "config.json", std::ios::trunc);
    if (!out) return absl::PermissionDeniedError(absl::StrCat(dir, "/config.json: cannot create"));
    out << ModelConfigToJson(written) << "\n";
    if (!out) return absl::DataLossError(absl::StrCat(dir, "/config.json: write failed"));
  }

  const std::vector<WeightSpec> specs = LlamaWeightSpecs(config);
  std::unique_ptr<WeightSource> source = MakeDummyWeights(options.seed, options.stddev);
  std::vector<SafetensorsWriter> writers(options.num_files);
  for (size_t i = 0; i < specs.size(); ++i) {
    const WeightSpec& spec = specs[i];
    std::vector<float> values(static_cast<size_t>(ShardElements(spec, TensorParallel{})));
    if (absl::Status s = source->ReadShard(spec, TensorParallel{}, TensorDType::kF32,
                                           values.data());
        !s.ok()) {
      return s;
    }
    // Contiguous runs of tensors per file, as Hugging Face shards them.
    SafetensorsWriter& w = writers[i * options.num_files / specs.size()];
    switch (options.dtype) {
      case TensorDType::kF32:
        w.AddFloat32(spec.name, spec.shape, values);
        break;
      case TensorDType::kBF16:
        w.AddBFloat16(spec.name, spec.shape, values);
        break;
      default:
        w.AddFloat16(spec.name, spec.shape, values);
        break;
    }
  }
  for (SafetensorsWriter& w : writers) w.SetMetadata("format", "pt");
  if (options.num_files == 1) {
    return writers[0].Write((fs::path(dir) / "model.safetensors").string());
  }
  std::map<std::string, std::string> weight_map;
  uint64_t total = 0;
  for (int f = 0; f < options.num_files; ++f) {
    const std::string name =
        absl::StrFormat("model-%05d-of-%05d.safetensors", f + 1, options.num_files);
    if (absl::Status s = writers[f].Write((fs::path(dir) / name).string()); !s.ok()) return s;
    for (const SafetensorsWriter::Pending& t : writers[f].pending()) weight_map[t.name] = name;
    total += writers[f].data_bytes();
  }
  return WriteSafetensorsIndex(dir, weight_map, total);
}

}  // namespace verdict
