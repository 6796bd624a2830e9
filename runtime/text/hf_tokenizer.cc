#include "runtime/text/hf_tokenizer.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <filesystem>
#include <sstream>
#include <utility>

#include "absl/strings/str_cat.h"
#include "runtime/text/json_fields.h"
#include "runtime/text/utf8.h"

namespace verdict {
namespace {

using nlohmann::json;

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot open"));
  std::ostringstream text;
  text << in.rdbuf();
  if (!in.good() && !in.eof()) return absl::DataLossError(absl::StrCat(path, ": read failed"));
  return text.str();
}

// A post-processor's integer id, clamped to int32 rather than wrapped: a
// clamped id is outside every vocabulary, so the range check after parsing
// refuses it, where a wrapped one (2^32 + 1 read as 1) would pass.
int32_t ClampedId(const json& id) {
  const int64_t wide = id.is_number_unsigned() && id.get<uint64_t>() > INT64_MAX
                           ? INT64_MAX
                           : id.get<int64_t>();
  return static_cast<int32_t>(std::clamp<int64_t>(wide, INT32_MIN, INT32_MAX));
}

// The special tokens that a template's "SpecialToken" items name.
absl::StatusOr<std::vector<int32_t>> TemplateIds(const json& special_tokens,
                                                 const std::string& name) {
  if (!special_tokens.is_object() || !special_tokens.contains(name) ||
      !special_tokens[name].contains("ids") || !special_tokens[name]["ids"].is_array()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "post_processor TemplateProcessing: special token \"", name, "\" has no ids"));
  }
  std::vector<int32_t> ids;
  for (const json& id : special_tokens[name]["ids"]) {
    if (!id.is_number_integer()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "post_processor TemplateProcessing: special token \"", name, "\" has a non-integer id"));
    }
    ids.push_back(ClampedId(id));
  }
  return ids;
}

// The ids that add_special_tokens puts around one sequence.
absl::Status ParsePostProcessor(const json& spec, std::vector<int32_t>* prefix,
                                std::vector<int32_t>* suffix) {
  if (spec.is_null()) return absl::OkStatus();
  absl::StatusOr<std::string> type = hf::TypeOf(spec, "post_processor");
  if (!type.ok()) return type.status();
  if (*type == "ByteLevel") return absl::OkStatus();  // offsets only
  if (*type == "Sequence") {
    if (!spec.contains("processors") || !spec["processors"].is_array()) {
      return absl::InvalidArgumentError("post_processor Sequence: \"processors\" is not a list");
    }
    for (const json& p : spec["processors"]) {
      absl::Status s = ParsePostProcessor(p, prefix, suffix);
      if (!s.ok()) return s;
    }
    return absl::OkStatus();
  }
  if (*type == "RobertaProcessing" || *type == "BertProcessing") {
    for (const char* field : {"cls", "sep"}) {
      if (!spec.contains(field) || !spec[field].is_array() || spec[field].size() != 2 ||
          !spec[field][1].is_number_integer()) {
        return absl::InvalidArgumentError(
            absl::StrCat("post_processor ", *type, ": \"", field, "\" is not [token, id]"));
      }
    }
    prefix->push_back(ClampedId(spec["cls"][1]));
    suffix->push_back(ClampedId(spec["sep"][1]));
    return absl::OkStatus();
  }
  if (*type == "TemplateProcessing") {
    if (!spec.contains("single") || !spec["single"].is_array()) {
      return absl::InvalidArgumentError("post_processor TemplateProcessing: \"single\" is not a list");
    }
    bool seen_sequence = false;
    for (const json& item : spec["single"]) {
      if (item.contains("Sequence")) {
        if (seen_sequence) {
          return absl::UnimplementedError(
              "post_processor TemplateProcessing: a single template with two sequences");
        }
        seen_sequence = true;
        continue;
      }
      if (!item.contains("SpecialToken") || !item["SpecialToken"].contains("id") ||
          !item["SpecialToken"]["id"].is_string()) {
        return absl::InvalidArgumentError(
            "post_processor TemplateProcessing: an item is neither Sequence nor SpecialToken");
      }
      // value() rather than operator[]: on a const object, operator[] of a
      // missing key is undefined (an assertion in debug builds).
      absl::StatusOr<std::vector<int32_t>> ids = TemplateIds(
          spec.value("special_tokens", json()), item["SpecialToken"]["id"].get<std::string>());
      if (!ids.ok()) return ids.status();
      std::vector<int32_t>* side = seen_sequence ? suffix : prefix;
      side->insert(side->end(), ids->begin(), ids->end());
    }
    return absl::OkStatus();
  }
  return absl::UnimplementedError(
      absl::StrCat("post_processor type \"", *type, "\" is not supported"));
}

// tokenizer_config.json's bos_token / eos_token: a string or {"content"}.
std::string ConfigToken(const json& config, const char* field) {
  if (!config.is_object() || !config.contains(field)) return "";
  const json& v = config[field];
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content") && v["content"].is_string()) {
    return v["content"].get<std::string>();
  }
  return "";
}

}  // namespace

HfTokenizer::HfTokenizer() = default;
HfTokenizer::~HfTokenizer() = default;

absl::StatusOr<std::unique_ptr<HfTokenizer>> HfTokenizer::Load(const std::string& path) {
  absl::StatusOr<std::string> text = ReadFile(path);
  if (!text.ok()) return text.status();
  std::string config;
  const std::filesystem::path config_path =
      std::filesystem::path(path).parent_path() / "tokenizer_config.json";
  std::error_code ec;
  if (std::filesystem::exists(config_path, ec)) {
    absl::StatusOr<std::string> c = ReadFile(config_path.string());
    if (!c.ok()) return c.status();
    config = *std::move(c);
  }
  return FromJson(*text, path, config);
}

absl::StatusOr<std::unique_ptr<HfTokenizer>> HfTokenizer::FromJson(absl::string_view json_text,
                                                                   absl::string_view name,
                                                                   absl::string_view config_json) {
  auto tokenizer = std::unique_ptr<HfTokenizer>(new HfTokenizer());
  absl::Status s = tokenizer->Init(json_text, config_json);
  if (!s.ok()) return absl::Status(s.code(), absl::StrCat(name, ": ", s.message()));
  return tokenizer;
}

absl::Status HfTokenizer::Init(absl::string_view json_text, absl::string_view config_json) {
  json spec = json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (spec.is_discarded() || !spec.is_object()) {
    return absl::InvalidArgumentError("not a JSON object");
  }
  if (spec.contains("truncation") && !spec["truncation"].is_null()) {
    return absl::UnimplementedError("truncation is not supported");
  }
  if (spec.contains("padding") && !spec["padding"].is_null()) {
    return absl::UnimplementedError("padding is not supported");
  }
  absl::StatusOr<std::vector<hf::AddedToken>> added =
      hf::ParseAddedTokens(spec.value("added_tokens", json()));
  if (!added.ok()) return added.status();
  if (!spec.contains("model")) return absl::InvalidArgumentError("no \"model\"");
  absl::StatusOr<std::unique_ptr<hf::BpeModel>> model =
      hf::BpeModel::Parse(spec["model"], added->size());
  if (!model.ok()) return model.status();
  model_ = *std::move(model);
  absl::StatusOr<std::unique_ptr<hf::Normalizer>> normalizer =
      hf::ParseNormalizer(spec.value("normalizer", json()));
  if (!normalizer.ok()) return normalizer.status();
  normalizer_ = *std::move(normalizer);
  absl::StatusOr<std::unique_ptr<hf::PreTokenizer>> pre =
      hf::ParsePreTokenizer(spec.value("pre_tokenizer", json()));
  if (!pre.ok()) return pre.status();
  pre_tokenizer_ = *std::move(pre);
  absl::StatusOr<std::unique_ptr<hf::Decoder>> decoder = hf::ParseDecoder(spec.value("decoder", json()));
  if (!decoder.ok()) return decoder.status();
  decoder_ = *std::move(decoder);
  absl::Status post =
      ParsePostProcessor(spec.value("post_processor", json()), &template_prefix_, &template_suffix_);
  if (!post.ok()) return post;

  vocab_size_ = model_->id_limit();
  // Added tokens follow the model's ids densely, as the model's own ids are
  // bounded (BpeModel::Parse): an id far beyond would make the vocabulary,
  // and what is sized by it, as large as the file says.
  const int64_t id_bound = static_cast<int64_t>(model_->id_limit()) + static_cast<int64_t>(added->size());
  std::vector<hf::AddedToken> raw, normalized;
  for (const hf::AddedToken& t : *added) {
    if (t.id >= id_bound) {
      return absl::InvalidArgumentError(absl::StrCat("added token \"", t.content, "\" has id ", t.id,
                                                     ", beyond the model's ", model_->id_limit(),
                                                     " ids and the ", added->size(), " added tokens"));
    }
    const std::string* model_token = model_->IdToToken(t.id);
    if (model_token != nullptr && *model_token != t.content) {
      return absl::InvalidArgumentError(absl::StrCat("added token \"", t.content, "\" has id ", t.id,
                                                     ", which the model gives to \"",
                                                     *model_token, "\""));
    }
    vocab_size_ = std::max(vocab_size_, t.id + 1);
    added_by_id_.emplace(t.id, t);
    (t.normalized ? normalized : raw).push_back(t);
  }
  raw_tokens_ = std::make_unique<hf::AddedTokenMatcher>(std::move(raw));
  normalized_tokens_ = std::make_unique<hf::AddedTokenMatcher>(std::move(normalized));
  // The template's ids must be tokens, not merely in range: the ids may
  // have gaps, and an id without a token would be encoded into every
  // prompt and then fail to decode.
  for (const std::vector<int32_t>* side : {&template_prefix_, &template_suffix_}) {
    for (int32_t id : *side) {
      if (id < 0 || id >= vocab_size_) {
        return absl::InvalidArgumentError(
            absl::StrCat("post_processor: id ", id, " is outside the vocabulary"));
      }
      if (TokenOf(id) == nullptr) {
        return absl::InvalidArgumentError(
            absl::StrCat("post_processor: id ", id, " names no token"));
      }
    }
  }

  // Byte pieces matter to streaming only where a decoder turns them into
  // bytes.
  byte_piece_.assign(vocab_size_, false);
  if (spec.contains("decoder") && spec["decoder"].dump().find("\"ByteFallback\"") != std::string::npos) {
    for (int b = 0; b < 256; ++b) {
      char name[8];
      std::snprintf(name, sizeof(name), "<0x%02X>", b);
      const int32_t id = model_->TokenToId(name);
      if (id >= 0 && added_by_id_.find(id) == added_by_id_.end()) byte_piece_[id] = true;
    }
  }

  // BOS and EOS: the config's names, else the template's, else by name.
  const auto id_of = [&](const std::string& content) -> int32_t {
    if (content.empty()) return -1;
    for (const auto& [id, t] : added_by_id_) {
      if (t.content == content) return id;
    }
    return model_->TokenToId(content);
  };
  json config;
  if (!config_json.empty()) {
    config = json::parse(config_json, nullptr, /*allow_exceptions=*/false);
    if (config.is_discarded()) return absl::InvalidArgumentError("tokenizer_config.json: not JSON");
  }
  bos_id_ = id_of(ConfigToken(config, "bos_token"));
  eos_id_ = id_of(ConfigToken(config, "eos_token"));
  if (bos_id_ < 0 && !template_prefix_.empty()) bos_id_ = template_prefix_.front();
  if (eos_id_ < 0 && !template_suffix_.empty()) eos_id_ = template_suffix_.back();
  for (const char* name : {"<s>", "<|begin_of_text|>", "<bos>"}) {
    if (bos_id_ < 0) bos_id_ = id_of(name);
  }
  for (const char* name : {"</s>", "<|end_of_text|>", "<|endoftext|>", "<eos>", "<|eot_id|>",
                           "<|im_end|>"}) {
    if (eos_id_ < 0) eos_id_ = id_of(name);
  }
  return absl::OkStatus();
}

void HfTokenizer::EncodeText(absl::string_view text, bool at_start, std::vector<int32_t>* ids) const {
  std::string normalized(text);
  if (normalizer_ != nullptr) normalizer_->Normalize(&normalized);
  std::vector<hf::Segment> segments;
  if (normalized_tokens_->empty()) {
    if (!normalized.empty()) segments.push_back({0, normalized.size(), -1});
  } else {
    normalized_tokens_->Split(normalized, &segments);
  }
  std::vector<hf::Piece> pieces;
  for (const hf::Segment& seg : segments) {
    if (seg.id >= 0) {
      ids->push_back(seg.id);
      continue;
    }
    pieces.clear();
    pieces.push_back({normalized.substr(seg.begin, seg.end - seg.begin), at_start && seg.begin == 0});
    if (pre_tokenizer_ != nullptr) pre_tokenizer_->PreTokenize(&pieces);
    for (const hf::Piece& p : pieces) model_->Tokenize(p.text, ids);
  }
}

absl::StatusOr<std::vector<int32_t>> HfTokenizer::Encode(std::string_view input,
                                                         bool add_bos) const {
  const absl::string_view text(input.data(), input.size());
  if (!utf8::IsValid(text)) return absl::InvalidArgumentError("text is not valid UTF-8");
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + template_prefix_.size() + template_suffix_.size() + 1);
  if (add_bos) ids = template_prefix_;
  std::vector<hf::Segment> segments;
  raw_tokens_->Split(text, &segments);
  for (const hf::Segment& seg : segments) {
    if (seg.id >= 0) {
      ids.push_back(seg.id);
    } else {
      EncodeText(text.substr(seg.begin, seg.end - seg.begin), seg.begin == 0, &ids);
    }
  }
  if (add_bos) ids.insert(ids.end(), template_suffix_.begin(), template_suffix_.end());
  return ids;
}

const std::string* HfTokenizer::TokenOf(int32_t id) const {
  auto it = added_by_id_.find(id);
  if (it != added_by_id_.end()) return &it->second.content;
  return model_->IdToToken(id);
}

absl::StatusOr<std::string> HfTokenizer::Decode(absl::Span<const int32_t> ids) const {
  return Decode(ids, /*skip_special_tokens=*/true);
}

absl::StatusOr<std::string> HfTokenizer::Decode(absl::Span<const int32_t> ids,
                                                bool skip_special_tokens) const {
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (int32_t id : ids) {
    const std::string* token = TokenOf(id);
    if (token == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("token id ", id, " outside the vocabulary (", vocab_size_, ")"));
    }
    if (skip_special_tokens && IsSkippedInDecode(id)) continue;
    tokens.push_back(*token);
  }
  if (decoder_ == nullptr) {
    std::string text;
    for (size_t i = 0; i < tokens.size(); ++i) {
      if (i > 0) text += ' ';
      text += tokens[i];
    }
    return text;
  }
  decoder_->DecodeChain(&tokens);
  std::string text;
  for (const std::string& t : tokens) text += t;
  return text;
}

std::string HfTokenizer::IdToPiece(int32_t id) const {
  const std::string* token = TokenOf(id);
  return token == nullptr ? "" : *token;
}

bool HfTokenizer::IsBytePiece(int32_t id) const {
  return id >= 0 && id < static_cast<int32_t>(byte_piece_.size()) && byte_piece_[id];
}

bool HfTokenizer::IsSkippedInDecode(int32_t id) const {
  auto it = added_by_id_.find(id);
  return it != added_by_id_.end() && it->second.special;
}

std::vector<int32_t> HfTokenizer::special_token_ids() const {
  std::vector<int32_t> ids;
  for (const auto& [id, t] : added_by_id_) {
    if (t.special) ids.push_back(id);
  }
  std::sort(ids.begin(), ids.end());
  return ids;
}

}  // namespace verdict
