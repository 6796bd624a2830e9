// make_random_model: writes a model directory in Hugging Face layout
// (config.json + safetensors) with seeded random weights, for tests and
// benchmarks that need no trained checkpoint.
//
//   make_random_model --out=/tmp/tiny --family=qwen3 --dtype=bfloat16
//   make_random_model --out=/tmp/shape --config=/models/llama/config.json
//
// With --config the shape comes from that config.json; otherwise from the
// tiny defaults adjusted by the shape flags.
#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "runtime/base/command_line.h"
#include "runtime/model/model_config.h"
#include "runtime/model/random_model.h"
#include "runtime/model/safetensors.h"

ABSL_FLAG(std::string, out, "", "directory to write (created if missing)");
ABSL_FLAG(std::string, config, "", "config.json (or its directory) giving the shape");
ABSL_FLAG(std::string, family, "llama", "llama, qwen2 or qwen3 (without --config)");
ABSL_FLAG(int, hidden_size, 64, "hidden size (without --config)");
ABSL_FLAG(int, intermediate_size, 128, "MLP width (without --config)");
ABSL_FLAG(int, num_layers, 2, "decoder layers (without --config)");
ABSL_FLAG(int, num_heads, 4, "attention heads (without --config)");
ABSL_FLAG(int, num_kv_heads, 2, "key/value heads (without --config)");
ABSL_FLAG(int, head_dim, 16, "head dimension (without --config)");
ABSL_FLAG(int, vocab_size, 100, "vocabulary size (without --config)");
ABSL_FLAG(bool, tie_word_embeddings, false, "share embedding and LM head (without --config)");
ABSL_FLAG(int, sliding_window, 0,
          "window of every odd layer; 0 = full attention everywhere (without --config)");
ABSL_FLAG(uint64_t, seed, 0, "random seed; equals --load-format dummy with this seed");
ABSL_FLAG(double, stddev, 0.02, "standard deviation of the weights");
ABSL_FLAG(std::string, dtype, "bfloat16", "float32, bfloat16 or float16");
ABSL_FLAG(int, num_files, 1, "more than 1 writes a sharded checkpoint with an index");

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage("writes a random model directory in Hugging Face layout");
  std::vector<std::string> storage = verdict::NormalizeFlagNames(argc, argv);
  std::vector<char*> args;
  for (std::string& s : storage) args.push_back(s.data());
  absl::ParseCommandLine(static_cast<int>(args.size()), args.data());

  const std::string out = absl::GetFlag(FLAGS_out);
  if (out.empty()) {
    std::fprintf(stderr, "make_random_model: --out is required\n");
    return 2;
  }
  verdict::ModelConfig config;
  if (!absl::GetFlag(FLAGS_config).empty()) {
    absl::StatusOr<verdict::ModelConfig> read = verdict::LoadModelConfig(absl::GetFlag(FLAGS_config));
    if (!read.ok()) {
      std::fprintf(stderr, "make_random_model: %s\n", std::string(read.status().message()).c_str());
      return 1;
    }
    config = *read;
  } else {
    const std::string family = absl::GetFlag(FLAGS_family);
    verdict::ModelFamily f;
    if (family == "llama") {
      f = verdict::ModelFamily::kLlama;
    } else if (family == "qwen2") {
      f = verdict::ModelFamily::kQwen2;
    } else if (family == "qwen3") {
      f = verdict::ModelFamily::kQwen3;
    } else {
      std::fprintf(stderr, "make_random_model: unknown --family=%s\n", family.c_str());
      return 2;
    }
    config = verdict::TinyModelConfig(f);
    config.hidden_size = absl::GetFlag(FLAGS_hidden_size);
    config.intermediate_size = absl::GetFlag(FLAGS_intermediate_size);
    config.num_layers = absl::GetFlag(FLAGS_num_layers);
    config.num_heads = absl::GetFlag(FLAGS_num_heads);
    config.num_kv_heads = absl::GetFlag(FLAGS_num_kv_heads);
    config.head_dim = absl::GetFlag(FLAGS_head_dim);
    config.vocab_size = absl::GetFlag(FLAGS_vocab_size);
    config.tie_word_embeddings = absl::GetFlag(FLAGS_tie_word_embeddings);
    config.layer_uses_sliding_window.assign(config.num_layers, false);
    config.sliding_window = absl::GetFlag(FLAGS_sliding_window);
    if (config.sliding_window > 0) {
      for (int i = 1; i < config.num_layers; i += 2) config.layer_uses_sliding_window[i] = true;
    }
    // Round-trip through the parser so that a bad shape is refused with
    // the same messages as a bad config.json.
    absl::StatusOr<verdict::ModelConfig> checked =
        verdict::ParseModelConfig(verdict::ModelConfigToJson(config), "flags");
    if (!checked.ok()) {
      std::fprintf(stderr, "make_random_model: %s\n",
                   std::string(checked.status().message()).c_str());
      return 2;
    }
    config = *checked;
  }

  verdict::RandomModelOptions options;
  options.seed = absl::GetFlag(FLAGS_seed);
  options.stddev = static_cast<float>(absl::GetFlag(FLAGS_stddev));
  options.num_files = absl::GetFlag(FLAGS_num_files);
  const std::string dtype = absl::GetFlag(FLAGS_dtype);
  if (dtype == "float32") {
    options.dtype = verdict::TensorDType::kF32;
  } else if (dtype == "bfloat16") {
    options.dtype = verdict::TensorDType::kBF16;
  } else if (dtype == "float16") {
    options.dtype = verdict::TensorDType::kF16;
  } else {
    std::fprintf(stderr, "make_random_model: unknown --dtype=%s\n", dtype.c_str());
    return 2;
  }
  if (absl::Status s = verdict::WriteRandomModel(out, config, options); !s.ok()) {
    std::fprintf(stderr, "make_random_model: %s\n", std::string(s.message()).c_str());
    return 1;
  }
  std::printf("wrote %s (%s, %d layers, hidden %d, vocab %d, %s)\n", out.c_str(),
              config.model_type.c_str(), config.num_layers, config.hidden_size, config.vocab_size,
              dtype.c_str());
  return 0;
}
