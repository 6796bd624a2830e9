#include "runtime/model/model_config.h"

#include <charconv>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <fstream>
#include <limits>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "nlohmann/json.hpp"
#include "runtime/base/json_number.h"

namespace verdict {
namespace {

using json = nlohmann::json;

// Most integer fields land in an int of ModelConfig.
constexpr int64_t kIntMax = std::numeric_limits<int>::max();
constexpr int64_t kInt64Max = std::numeric_limits<int64_t>::max();

// Builds errors that start with the file and the field, so a user can fix
// config.json without reading code.
class FieldReader {
 public:
  FieldReader(const json& object, absl::string_view source, absl::string_view prefix = "")
      : object_(object), source_(source), prefix_(prefix) {}

  absl::Status Error(absl::string_view field, absl::string_view reason) const {
    return absl::InvalidArgumentError(
        absl::StrCat(source_, ": field '", prefix_, field, "': ", reason));
  }

  bool Has(absl::string_view field) const {
    auto it = object_.find(std::string(field));
    return it != object_.end() && !it->is_null();
  }

  const json* Get(absl::string_view field) const {
    auto it = object_.find(std::string(field));
    if (it == object_.end() || it->is_null()) return nullptr;
    return &*it;
  }

  // An integer in [min_value, max_value]; max_value is the range of the
  // field it is stored in (an int unless said otherwise), so that a value
  // like 2^32 + 1 is refused rather than truncated.
  absl::StatusOr<int64_t> Int(absl::string_view field, std::optional<int64_t> fallback,
                              int64_t min_value, int64_t max_value = kIntMax) const {
    const json* v = Get(field);
    if (v == nullptr) {
      if (fallback.has_value()) return *fallback;
      return Error(field, "missing");
    }
    if (!v->is_number_integer()) {
      return Error(field, absl::StrCat("expected an integer, got ", JsonForMessage(*v)));
    }
    absl::StatusOr<int64_t> value = JsonInteger(*v, "", min_value, max_value);
    if (!value.ok()) {
      return Error(field, absl::StrCat("must be at least ", min_value, " and at most ", max_value,
                                       ", got ", JsonForMessage(*v)));
    }
    return *value;
  }

  absl::StatusOr<double> Number(absl::string_view field, std::optional<double> fallback,
                                bool positive) const {
    const json* v = Get(field);
    if (v == nullptr) {
      if (fallback.has_value()) return *fallback;
      return Error(field, "missing");
    }
    if (!v->is_number()) {
      return Error(field, absl::StrCat("expected a number, got ", JsonForMessage(*v)));
    }
    absl::StatusOr<double> value = JsonFiniteNumber(*v, "");
    if (!value.ok() || (positive && *value <= 0)) {
      return Error(field, absl::StrCat("must be a positive finite number, got ", v->dump()));
    }
    return *value;
  }

  absl::StatusOr<bool> Bool(absl::string_view field, bool fallback) const {
    const json* v = Get(field);
    if (v == nullptr) return fallback;
    if (!v->is_boolean()) return Error(field, absl::StrCat("expected true or false, got ", v->dump()));
    return v->get<bool>();
  }

  absl::StatusOr<std::string> String(absl::string_view field, std::optional<std::string> fallback) const {
    const json* v = Get(field);
    if (v == nullptr) {
      if (fallback.has_value()) return *fallback;
      return Error(field, "missing");
    }
    if (!v->is_string()) return Error(field, absl::StrCat("expected a string, got ", v->dump()));
    return v->get<std::string>();
  }

  // A token id field: an integer, a list of integers, or null. An error in
  // a list names the entry (eos_token_id[2]).
  absl::StatusOr<std::vector<int>> TokenIds(absl::string_view field) const {
    std::vector<int> ids;
    const json* v = Get(field);
    if (v == nullptr) return ids;
    auto one = [&](const json& item, absl::string_view name) -> absl::Status {
      absl::StatusOr<int64_t> id = JsonInteger(item, "", 0, kIntMax);
      if (!id.ok()) {
        return Error(name, absl::StrCat("expected a non-negative integer token id (at most ",
                                        kIntMax, "), got ", JsonForMessage(item)));
      }
      ids.push_back(static_cast<int>(*id));
      return absl::OkStatus();
    };
    if (v->is_array()) {
      for (size_t i = 0; i < v->size(); ++i) {
        if (absl::Status s = one((*v)[i], absl::StrCat(field, "[", i, "]")); !s.ok()) return s;
      }
    } else if (absl::Status s = one(*v, field); !s.ok()) {
      return s;
    }
    return ids;
  }

 private:
  const json& object_;
  std::string source_;
  std::string prefix_;
};

#define VERDICT_ASSIGN_OR_RETURN_CFG(lhs, expr) \
  do {                                          \
    auto _r = (expr);                           \
    if (!_r.ok()) return _r.status();           \
    lhs = *std::move(_r);                       \
  } while (0)

absl::Status ParseRopeScaling(const json& rope, absl::string_view source,
                              absl::string_view prefix, RopeScaling* out) {
  const std::string dotted = absl::StrCat(prefix, ".");
  FieldReader r(rope, source, dotted);
  if (!rope.is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": field '", prefix, "': expected an object or null"));
  }
  std::string type;
  if (r.Has("rope_type")) {
    VERDICT_ASSIGN_OR_RETURN_CFG(type, r.String("rope_type", std::nullopt));
  } else {
    VERDICT_ASSIGN_OR_RETURN_CFG(type, r.String("type", "default"));
  }
  if (type == "default") {
    out->type = RopeScaling::Type::kNone;
    return absl::OkStatus();
  }
  if (type == "linear") {
    out->type = RopeScaling::Type::kLinear;
    VERDICT_ASSIGN_OR_RETURN_CFG(out->factor, r.Number("factor", std::nullopt, true));
    return absl::OkStatus();
  }
  if (type == "llama3") {
    out->type = RopeScaling::Type::kLlama3;
    VERDICT_ASSIGN_OR_RETURN_CFG(out->factor, r.Number("factor", std::nullopt, true));
    VERDICT_ASSIGN_OR_RETURN_CFG(out->low_freq_factor,
                                 r.Number("low_freq_factor", std::nullopt, true));
    VERDICT_ASSIGN_OR_RETURN_CFG(out->high_freq_factor,
                                 r.Number("high_freq_factor", std::nullopt, true));
    VERDICT_ASSIGN_OR_RETURN_CFG(
        out->original_max_position_embeddings,
        r.Int("original_max_position_embeddings", std::nullopt, 1, kInt64Max));
    if (out->high_freq_factor <= out->low_freq_factor) {
      return r.Error("high_freq_factor", "must be greater than low_freq_factor");
    }
    return absl::OkStatus();
  }
  return r.Error("rope_type", absl::StrCat("'", type,
                                           "' is not supported (supported: default, linear, llama3)"));
}

}  // namespace

bool ModelConfig::HasSlidingLayers() const {
  if (sliding_window <= 0) return false;
  for (bool b : layer_uses_sliding_window) {
    if (b) return true;
  }
  return false;
}

bool ModelConfig::HasFullLayers() const {
  if (sliding_window <= 0) return num_layers > 0;
  for (bool b : layer_uses_sliding_window) {
    if (!b) return true;
  }
  return false;
}

absl::StatusOr<ModelConfig> ParseModelConfig(absl::string_view json_text, absl::string_view source) {
  json root = json::parse(json_text.begin(), json_text.end(), nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded()) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": not valid JSON"));
  }
  if (!root.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": expected a JSON object"));
  }
  FieldReader r(root, source);
  ModelConfig c;

  VERDICT_ASSIGN_OR_RETURN_CFG(c.model_type, r.String("model_type", std::nullopt));
  if (c.model_type == "llama") {
    c.family = ModelFamily::kLlama;
  } else if (c.model_type == "qwen2") {
    c.family = ModelFamily::kQwen2;
  } else if (c.model_type == "qwen3") {
    c.family = ModelFamily::kQwen3;
  } else {
    return r.Error("model_type", absl::StrCat("'", c.model_type,
                                              "' is not supported (supported: llama, qwen2, qwen3)"));
  }

  int64_t v = 0;
  VERDICT_ASSIGN_OR_RETURN_CFG(v, r.Int("hidden_size", std::nullopt, 1));
  c.hidden_size = static_cast<int>(v);
  VERDICT_ASSIGN_OR_RETURN_CFG(v, r.Int("intermediate_size", std::nullopt, 1));
  c.intermediate_size = static_cast<int>(v);
  VERDICT_ASSIGN_OR_RETURN_CFG(v, r.Int("num_hidden_layers", std::nullopt, 1));
  c.num_layers = static_cast<int>(v);
  VERDICT_ASSIGN_OR_RETURN_CFG(v, r.Int("num_attention_heads", std::nullopt, 1));
  c.num_heads = static_cast<int>(v);
  VERDICT_ASSIGN_OR_RETURN_CFG(v, r.Int("num_key_value_heads", c.num_heads, 1));
  c.num_kv_heads = static_cast<int>(v);
  VERDICT_ASSIGN_OR_RETURN_CFG(v, r.Int("vocab_size", std::nullopt, 1));
  c.vocab_size = static_cast<int>(v);

  if (c.num_heads % c.num_kv_heads != 0) {
    return r.Error("num_key_value_heads",
                   absl::StrCat(c.num_kv_heads, " does not divide num_attention_heads (",
                                c.num_heads, ")"));
  }
  if (r.Has("head_dim")) {
    VERDICT_ASSIGN_OR_RETURN_CFG(v, r.Int("head_dim", std::nullopt, 1));
    c.head_dim = static_cast<int>(v);
  } else {
    if (c.hidden_size % c.num_heads != 0) {
      return r.Error("num_attention_heads",
                     absl::StrCat(c.num_heads, " does not divide hidden_size (", c.hidden_size,
                                  ") and head_dim is not given"));
    }
    c.head_dim = c.hidden_size / c.num_heads;
  }
  if (c.head_dim % 2 != 0) {
    return r.Error("head_dim", absl::StrCat("RoPE needs an even head_dim, got ", c.head_dim));
  }

  const int64_t default_max_pos = c.family == ModelFamily::kLlama ? 2048 : 32768;
  VERDICT_ASSIGN_OR_RETURN_CFG(c.max_position_embeddings,
                               r.Int("max_position_embeddings", default_max_pos, 1, kInt64Max));
  double eps = 0;
  VERDICT_ASSIGN_OR_RETURN_CFG(eps, r.Number("rms_norm_eps", 1e-6, true));
  c.rms_norm_eps = static_cast<float>(eps);

  std::string act;
  VERDICT_ASSIGN_OR_RETURN_CFG(act, r.String("hidden_act", "silu"));
  if (act != "silu") {
    return r.Error("hidden_act", absl::StrCat("'", act, "' is not supported (supported: silu)"));
  }
  bool mlp_bias = false;
  VERDICT_ASSIGN_OR_RETURN_CFG(mlp_bias, r.Bool("mlp_bias", false));
  if (mlp_bias) return r.Error("mlp_bias", "true is not supported");

  // RoPE: transformers 4.x writes rope_theta and rope_scaling at the top
  // level; newer versions nest both in rope_parameters.
  if (const json* params = r.Get("rope_parameters")) {
    if (!params->is_object()) return r.Error("rope_parameters", "expected an object");
    FieldReader pr(*params, source, "rope_parameters.");
    VERDICT_ASSIGN_OR_RETURN_CFG(c.rope_theta, pr.Number("rope_theta", 10000.0, true));
    if (absl::Status s = ParseRopeScaling(*params, source, "rope_parameters", &c.rope_scaling);
        !s.ok()) {
      return s;
    }
  } else {
    VERDICT_ASSIGN_OR_RETURN_CFG(c.rope_theta, r.Number("rope_theta", 10000.0, true));
    if (const json* rope = r.Get("rope_scaling")) {
      if (absl::Status s = ParseRopeScaling(*rope, source, "rope_scaling", &c.rope_scaling);
          !s.ok()) {
        return s;
      }
    }
  }

  VERDICT_ASSIGN_OR_RETURN_CFG(c.tie_word_embeddings, r.Bool("tie_word_embeddings", false));
  bool attention_bias = false;
  VERDICT_ASSIGN_OR_RETURN_CFG(attention_bias, r.Bool("attention_bias", false));
  switch (c.family) {
    case ModelFamily::kLlama:
      c.qkv_bias = c.o_bias = attention_bias;
      break;
    case ModelFamily::kQwen2:
      // Qwen2 hard-codes bias on q/k/v and none on o_proj.
      c.qkv_bias = true;
      c.o_bias = false;
      break;
    case ModelFamily::kQwen3:
      c.qkv_bias = c.o_bias = attention_bias;
      c.qk_norm = true;
      break;
  }

  // Sliding window. An explicit layer_types list wins; otherwise Qwen2/Qwen3
  // follow transformers: with use_sliding_window, layers from
  // max_window_layers on use the window. Llama has no sliding window unless
  // layer_types asks for one.
  c.layer_uses_sliding_window.assign(c.num_layers, false);
  int64_t window = 0;
  if (const json* types = r.Get("layer_types")) {
    if (!types->is_array() || static_cast<int>(types->size()) != c.num_layers) {
      return r.Error("layer_types",
                     absl::StrCat("expected a list of num_hidden_layers (", c.num_layers,
                                  ") strings"));
    }
    bool any_sliding = false;
    for (int i = 0; i < c.num_layers; ++i) {
      const json& t = (*types)[i];
      if (t == "sliding_attention") {
        c.layer_uses_sliding_window[i] = true;
        any_sliding = true;
      } else if (t != "full_attention") {
        return r.Error("layer_types", absl::StrCat("entry ", i, " is ", t.dump(),
                                                   " (expected full_attention or sliding_attention)"));
      }
    }
    if (any_sliding) {
      VERDICT_ASSIGN_OR_RETURN_CFG(window, r.Int("sliding_window", std::nullopt, 1));
    }
  } else if (c.family != ModelFamily::kLlama) {
    bool use_sliding = false;
    VERDICT_ASSIGN_OR_RETURN_CFG(use_sliding, r.Bool("use_sliding_window", false));
    if (use_sliding) {
      VERDICT_ASSIGN_OR_RETURN_CFG(window, r.Int("sliding_window", std::nullopt, 1));
      int64_t max_window_layers = 0;
      VERDICT_ASSIGN_OR_RETURN_CFG(max_window_layers, r.Int("max_window_layers", 28, 0));
      for (int i = static_cast<int>(max_window_layers); i < c.num_layers; ++i) {
        c.layer_uses_sliding_window[i] = true;
      }
    }
  }
  c.sliding_window = static_cast<int>(window);
  if (!c.HasSlidingLayers()) {
    c.sliding_window = 0;
    c.layer_uses_sliding_window.assign(c.num_layers, false);
  }

  VERDICT_ASSIGN_OR_RETURN_CFG(c.bos_token_ids, r.TokenIds("bos_token_id"));
  VERDICT_ASSIGN_OR_RETURN_CFG(c.eos_token_ids, r.TokenIds("eos_token_id"));
  for (int id : c.bos_token_ids) {
    if (id >= c.vocab_size) {
      return r.Error("bos_token_id", absl::StrCat(id, " is outside the vocabulary (",
                                                  c.vocab_size, ")"));
    }
  }
  for (int id : c.eos_token_ids) {
    if (id >= c.vocab_size) {
      return r.Error("eos_token_id", absl::StrCat(id, " is outside the vocabulary (",
                                                  c.vocab_size, ")"));
    }
  }
  if (r.Has("torch_dtype")) {
    VERDICT_ASSIGN_OR_RETURN_CFG(c.torch_dtype, r.String("torch_dtype", std::nullopt));
  } else if (r.Has("dtype")) {
    VERDICT_ASSIGN_OR_RETURN_CFG(c.torch_dtype, r.String("dtype", std::nullopt));
  }
  return c;
}

absl::StatusOr<ModelConfig> LoadModelConfig(const std::string& path) {
  std::filesystem::path p(path);
  std::error_code ec;
  if (std::filesystem::is_directory(p, ec)) p /= "config.json";
  std::ifstream in(p, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(p.string(), ": cannot open"));
  std::stringstream buffer;
  buffer << in.rdbuf();
  return ParseModelConfig(buffer.str(), p.string());
}

namespace {

struct Builtin {
  const char* name;
  const char* json;
};

// The shape fields of each model's published config.json.
constexpr Builtin kBuiltins[] = {
    {"llama-3.1-8b", R"({"model_type": "llama", "hidden_size": 4096,
      "intermediate_size": 14336, "num_hidden_layers": 32, "num_attention_heads": 32,
      "num_key_value_heads": 8, "max_position_embeddings": 131072, "rms_norm_eps": 1e-05,
      "rope_theta": 500000.0, "rope_scaling": {"rope_type": "llama3", "factor": 8.0,
      "low_freq_factor": 1.0, "high_freq_factor": 4.0,
      "original_max_position_embeddings": 8192}, "tie_word_embeddings": false,
      "vocab_size": 128256, "bos_token_id": 128000,
      "eos_token_id": [128001, 128008, 128009], "torch_dtype": "bfloat16"})"},
    {"llama-3.2-1b", R"({"model_type": "llama", "hidden_size": 2048,
      "intermediate_size": 8192, "num_hidden_layers": 16, "num_attention_heads": 32,
      "num_key_value_heads": 8, "head_dim": 64, "max_position_embeddings": 131072,
      "rms_norm_eps": 1e-05, "rope_theta": 500000.0, "rope_scaling": {"rope_type": "llama3",
      "factor": 32.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
      "original_max_position_embeddings": 8192}, "tie_word_embeddings": true,
      "vocab_size": 128256, "bos_token_id": 128000,
      "eos_token_id": [128001, 128008, 128009], "torch_dtype": "bfloat16"})"},
    {"qwen3-0.6b", R"({"model_type": "qwen3", "hidden_size": 1024,
      "intermediate_size": 3072, "num_hidden_layers": 28, "num_attention_heads": 16,
      "num_key_value_heads": 8, "head_dim": 128, "max_position_embeddings": 40960,
      "rms_norm_eps": 1e-06, "rope_theta": 1000000, "tie_word_embeddings": true,
      "vocab_size": 151936, "bos_token_id": 151643, "eos_token_id": 151645,
      "torch_dtype": "bfloat16"})"},
};

}  // namespace

absl::StatusOr<ModelConfig> BuiltinModelConfig(absl::string_view name) {
  std::vector<std::string> names;
  for (const Builtin& b : kBuiltins) {
    if (name == b.name) return ParseModelConfig(b.json, absl::StrCat("builtin:", b.name));
    names.push_back(b.name);
  }
  return absl::NotFoundError(absl::StrCat("no built-in model shape '", name,
                                          "' (known: ", absl::StrJoin(names, ", "), ")"));
}

std::string ModelShapeName(const ModelConfig& config) {
  std::string name = absl::StrCat(config.model_type, " h", config.hidden_size, " i",
                                  config.intermediate_size, " l", config.num_layers, " q",
                                  config.num_heads, " kv", config.num_kv_heads, " d",
                                  config.head_dim, " v", config.vocab_size);
  if (config.HasSlidingLayers()) absl::StrAppend(&name, " sw", config.sliding_window);
  return name;
}

std::string ModelConfigToJson(const ModelConfig& c) {
  json j;
  j["model_type"] = c.model_type.empty()
                        ? (c.family == ModelFamily::kLlama   ? "llama"
                           : c.family == ModelFamily::kQwen2 ? "qwen2"
                                                             : "qwen3")
                        : c.model_type;
  j["architectures"] = {c.family == ModelFamily::kLlama   ? "LlamaForCausalLM"
                        : c.family == ModelFamily::kQwen2 ? "Qwen2ForCausalLM"
                                                          : "Qwen3ForCausalLM"};
  j["hidden_size"] = c.hidden_size;
  j["intermediate_size"] = c.intermediate_size;
  j["num_hidden_layers"] = c.num_layers;
  j["num_attention_heads"] = c.num_heads;
  j["num_key_value_heads"] = c.num_kv_heads;
  j["head_dim"] = c.head_dim;
  j["vocab_size"] = c.vocab_size;
  j["max_position_embeddings"] = c.max_position_embeddings;
  // The shortest decimal that reads back as the same float (1e-06, not
  // 9.99999997e-07).
  char eps[32];
  const std::to_chars_result eps_end = std::to_chars(eps, eps + sizeof(eps), c.rms_norm_eps);
  j["rms_norm_eps"] = std::strtod(std::string(eps, eps_end.ptr).c_str(), nullptr);
  j["rope_theta"] = c.rope_theta;
  j["hidden_act"] = "silu";
  switch (c.rope_scaling.type) {
    case RopeScaling::Type::kNone:
      j["rope_scaling"] = nullptr;
      break;
    case RopeScaling::Type::kLinear:
      j["rope_scaling"] = {{"rope_type", "linear"}, {"factor", c.rope_scaling.factor}};
      break;
    case RopeScaling::Type::kLlama3:
      j["rope_scaling"] = {
          {"rope_type", "llama3"},
          {"factor", c.rope_scaling.factor},
          {"low_freq_factor", c.rope_scaling.low_freq_factor},
          {"high_freq_factor", c.rope_scaling.high_freq_factor},
          {"original_max_position_embeddings", c.rope_scaling.original_max_position_embeddings}};
      break;
  }
  j["tie_word_embeddings"] = c.tie_word_embeddings;
  if (c.family != ModelFamily::kQwen2) j["attention_bias"] = c.qkv_bias;
  if (c.HasSlidingLayers()) {
    j["sliding_window"] = c.sliding_window;
    json types = json::array();
    for (bool b : c.layer_uses_sliding_window) types.push_back(b ? "sliding_attention" : "full_attention");
    j["layer_types"] = types;
    if (c.family != ModelFamily::kLlama) j["use_sliding_window"] = true;
  }
  auto ids = [](const std::vector<int>& v) -> json {
    if (v.empty()) return nullptr;
    if (v.size() == 1) return v[0];
    return v;
  };
  j["bos_token_id"] = ids(c.bos_token_ids);
  j["eos_token_id"] = ids(c.eos_token_ids);
  j["torch_dtype"] = c.torch_dtype.empty() ? "float32" : c.torch_dtype;
  return j.dump(2);
}

absl::Status ValidateTensorParallel(const ModelConfig& c, int tp) {
  if (tp < 1) return absl::InvalidArgumentError(absl::StrCat("tensor parallel degree ", tp, " < 1"));
  if (c.num_heads % tp != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor parallel degree ", tp, " does not divide num_attention_heads (",
                     c.num_heads, ")"));
  }
  if (c.num_kv_heads % tp != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tensor parallel degree ", tp, " does not divide num_key_value_heads (", c.num_kv_heads,
        "); replicating KV heads across ranks is not supported"));
  }
  if (c.intermediate_size % tp != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor parallel degree ", tp, " does not divide intermediate_size (",
                     c.intermediate_size, ")"));
  }
  return absl::OkStatus();
}

int PaddedVocabSize(int vocab_size, int tp) {
  return (vocab_size + tp - 1) / tp * tp;
}

}  // namespace verdict
