#include "runtime/model/generation_config.h"

#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "runtime/base/json_number.h"

namespace verdict {
namespace {

using json = nlohmann::json;

absl::Status Prefixed(absl::string_view source, const absl::Status& status) {
  return absl::InvalidArgumentError(absl::StrCat(source, ": ", status.message()));
}

// A token id: a non-negative int.
absl::StatusOr<int> TokenId(const json& v, const std::string& path) {
  return JsonIntegerAs<int>(v, path, 0, std::numeric_limits<int>::max());
}

}  // namespace

absl::StatusOr<GenerationConfig> ParseGenerationConfig(absl::string_view json_text,
                                                       absl::string_view source) {
  const json root = json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded() || !root.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": not a JSON object"));
  }
  GenerationConfig config;
  auto field = [&](const char* name) -> const json* {
    auto it = root.find(name);
    return it == root.end() || it->is_null() ? nullptr : &*it;
  };
  if (const json* eos = field("eos_token_id")) {
    if (eos->is_array()) {
      for (size_t i = 0; i < eos->size(); ++i) {
        absl::StatusOr<int> id = TokenId((*eos)[i], absl::StrCat("eos_token_id[", i, "]"));
        if (!id.ok()) return Prefixed(source, id.status());
        config.eos_token_ids.push_back(*id);
      }
    } else {
      absl::StatusOr<int> id = TokenId(*eos, "eos_token_id");
      if (!id.ok()) return Prefixed(source, id.status());
      config.eos_token_ids.push_back(*id);
    }
  }
  for (auto [name, out] : {std::pair{"bos_token_id", &config.bos_token_id},
                           std::pair{"pad_token_id", &config.pad_token_id}}) {
    if (const json* v = field(name)) {
      absl::StatusOr<int> id = TokenId(*v, name);
      if (!id.ok()) return Prefixed(source, id.status());
      *out = *id;
    }
  }
  if (const json* v = field("temperature")) {
    absl::StatusOr<float> t = JsonFiniteFloat(*v, "temperature");
    if (!t.ok()) return Prefixed(source, t.status());
    if (*t < 0) return absl::InvalidArgumentError(absl::StrCat(source, ": temperature is negative"));
    config.temperature = *t;
  }
  if (const json* v = field("top_p")) {
    absl::StatusOr<float> p = JsonFiniteFloat(*v, "top_p");
    if (!p.ok()) return Prefixed(source, p.status());
    if (!(*p > 0 && *p <= 1)) {
      return absl::InvalidArgumentError(absl::StrCat(source, ": top_p must be in (0, 1]"));
    }
    config.top_p = *p;
  }
  if (const json* v = field("top_k")) {
    absl::StatusOr<int> k = JsonIntegerAs<int>(*v, "top_k", 0, std::numeric_limits<int>::max());
    if (!k.ok()) return Prefixed(source, k.status());
    config.top_k = *k;
  }
  if (const json* v = field("min_p")) {
    absl::StatusOr<float> m = JsonFiniteFloat(*v, "min_p");
    if (!m.ok()) return Prefixed(source, m.status());
    if (!(*m >= 0 && *m <= 1)) {
      return absl::InvalidArgumentError(absl::StrCat(source, ": min_p must be in [0, 1]"));
    }
    config.min_p = *m;
  }
  return config;
}

absl::StatusOr<GenerationConfig> LoadGenerationConfig(const std::string& model_dir) {
  const std::string path = model_dir + "/generation_config.json";
  if (!std::filesystem::exists(path)) return GenerationConfig();
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot open"));
  std::stringstream text;
  text << in.rdbuf();
  return ParseGenerationConfig(text.str(), path);
}

}  // namespace verdict
