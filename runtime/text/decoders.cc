#include "runtime/text/decoders.h"

#include <optional>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "runtime/text/json_fields.h"
#include "runtime/text/pretokenizers.h"
#include "runtime/text/text_pattern.h"
#include "runtime/text/utf8.h"

namespace verdict::hf {
namespace {

using nlohmann::json;

// Inverse of ByteLevelChar: the byte behind each of the 256 characters.
const absl::flat_hash_map<uint32_t, unsigned char>& ByteOfChar() {
  static const auto* const kBytes = [] {
    auto* bytes = new absl::flat_hash_map<uint32_t, unsigned char>();
    for (int b = 0; b < 256; ++b) {
      bytes->emplace(utf8::Decode(ByteLevelChar(static_cast<unsigned char>(b)), 0),
                     static_cast<unsigned char>(b));
    }
    return bytes;
  }();
  return *kBytes;
}

// All tokens' bytes in one string, decoded lossily. A token with a
// character outside the byte map (an added token such as "<|im_start|>"
// with a space, say) contributes its own UTF-8 unchanged.
class ByteLevel : public Decoder {
 public:
  void DecodeChain(std::vector<std::string>* tokens) const override {
    const auto& byte_of = ByteOfChar();
    std::string bytes;
    std::string token_bytes;
    for (const std::string& t : *tokens) {
      token_bytes.clear();
      bool mapped = true;
      for (size_t i = 0; i < t.size();) {
        const auto it = byte_of.find(utf8::Decode(t, i));
        if (it == byte_of.end()) {
          mapped = false;
          break;
        }
        token_bytes.push_back(static_cast<char>(it->second));
        i += utf8::CharLength(static_cast<unsigned char>(t[i]));
      }
      bytes += mapped ? token_bytes : t;
    }
    *tokens = {utf8::FromLossy(bytes)};
  }
};

// Replacement characters become spaces, except in the first token when a
// prefix was prepended at encoding (there they are dropped).
class Metaspace : public Decoder {
 public:
  Metaspace(std::string replacement, PrependScheme scheme)
      : replacement_(std::move(replacement)), scheme_(scheme) {}
  void DecodeChain(std::vector<std::string>* tokens) const override {
    for (size_t i = 0; i < tokens->size(); ++i) {
      const absl::string_view with = (i == 0 && scheme_ != PrependScheme::kNever) ? "" : " ";
      (*tokens)[i] = TextPattern::Literal(replacement_).ReplaceAll((*tokens)[i], with);
    }
  }

 private:
  std::string replacement_;
  PrependScheme scheme_;
};

// Runs of <0xXX> tokens become their bytes when those are valid UTF-8, and
// one U+FFFD per byte otherwise.
class ByteFallback : public Decoder {
 public:
  void DecodeChain(std::vector<std::string>* tokens) const override {
    std::vector<std::string> out;
    out.reserve(tokens->size());
    std::string bytes;
    size_t count = 0;
    const auto flush = [&] {
      if (count == 0) return;
      if (utf8::IsValid(bytes)) {
        out.push_back(bytes);
      } else {
        for (size_t k = 0; k < count; ++k) out.emplace_back(utf8::kReplacement);
      }
      bytes.clear();
      count = 0;
    };
    for (std::string& t : *tokens) {
      const std::optional<unsigned char> byte = ByteToken(t);
      if (byte.has_value()) {
        bytes.push_back(static_cast<char>(*byte));
        ++count;
      } else {
        flush();
        out.push_back(std::move(t));
      }
    }
    flush();
    *tokens = std::move(out);
  }

 private:
  static std::optional<unsigned char> ByteToken(absl::string_view t) {
    if (t.size() != 6 || t.substr(0, 3) != "<0x" || t[5] != '>') return std::nullopt;
    int value = 0;
    for (char c : t.substr(3, 2)) {
      int digit;
      if (c >= '0' && c <= '9') {
        digit = c - '0';
      } else if (c >= 'A' && c <= 'F') {
        digit = c - 'A' + 10;
      } else if (c >= 'a' && c <= 'f') {
        digit = c - 'a' + 10;
      } else {
        return std::nullopt;
      }
      value = value * 16 + digit;
    }
    return static_cast<unsigned char>(value);
  }
};

class Fuse : public Decoder {
 public:
  void DecodeChain(std::vector<std::string>* tokens) const override {
    std::string all;
    for (const std::string& t : *tokens) all += t;
    *tokens = {std::move(all)};
  }
};

// Removes up to `start` leading and `stop` trailing copies of one
// character from every token.
class Strip : public Decoder {
 public:
  Strip(std::string content, size_t start, size_t stop)
      : content_(std::move(content)), start_(start), stop_(stop) {}
  void DecodeChain(std::vector<std::string>* tokens) const override {
    for (std::string& t : *tokens) {
      absl::string_view v(t);
      for (size_t k = 0; k < start_ && v.substr(0, content_.size()) == content_; ++k) {
        v.remove_prefix(content_.size());
      }
      for (size_t k = 0; k < stop_ && v.size() >= content_.size() &&
                         v.substr(v.size() - content_.size()) == content_;
           ++k) {
        v.remove_suffix(content_.size());
      }
      t = std::string(v);
    }
  }

 private:
  std::string content_;
  size_t start_, stop_;
};

class Replace : public Decoder {
 public:
  Replace(TextPattern pattern, std::string content)
      : pattern_(std::move(pattern)), content_(std::move(content)) {}
  void DecodeChain(std::vector<std::string>* tokens) const override {
    for (std::string& t : *tokens) t = pattern_.ReplaceAll(t, content_);
  }

 private:
  TextPattern pattern_;
  std::string content_;
};

class Sequence : public Decoder {
 public:
  explicit Sequence(std::vector<std::unique_ptr<Decoder>> steps) : steps_(std::move(steps)) {}
  void DecodeChain(std::vector<std::string>* tokens) const override {
    for (const auto& step : steps_) step->DecodeChain(tokens);
  }

 private:
  std::vector<std::unique_ptr<Decoder>> steps_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Decoder>> ParseDecoder(const json& spec) {
  if (spec.is_null()) return std::unique_ptr<Decoder>();
  absl::StatusOr<std::string> type = TypeOf(spec, "decoder");
  if (!type.ok()) return type.status();
  const std::string where = absl::StrCat("decoder ", *type);
  if (*type == "ByteLevel") return std::make_unique<ByteLevel>();
  if (*type == "ByteFallback") return std::make_unique<ByteFallback>();
  if (*type == "Fuse") return std::make_unique<Fuse>();
  if (*type == "Metaspace") {
    absl::StatusOr<std::string> replacement = OptionalStringField(spec, "replacement", where, "\u2581");
    if (!replacement.ok()) return replacement.status();
    absl::StatusOr<PrependScheme> scheme = PrependSchemeField(spec, where);
    if (!scheme.ok()) return scheme.status();
    return std::make_unique<Metaspace>(*std::move(replacement), *scheme);
  }
  if (*type == "Strip") {
    absl::StatusOr<std::string> content = StringField(spec, "content", where);
    if (!content.ok()) return content.status();
    absl::StatusOr<int64_t> start = IntField(spec, "start", where, 0);
    if (!start.ok()) return start.status();
    absl::StatusOr<int64_t> stop = IntField(spec, "stop", where, 0);
    if (!stop.ok()) return stop.status();
    if (*start < 0 || *stop < 0 || content->empty()) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": bad content, start or stop"));
    }
    return std::make_unique<Strip>(*std::move(content), *start, *stop);
  }
  if (*type == "Replace") {
    absl::StatusOr<TextPattern> pattern = TextPattern::Parse(spec, where);
    if (!pattern.ok()) return pattern.status();
    absl::StatusOr<std::string> content = StringField(spec, "content", where);
    if (!content.ok()) return content.status();
    return std::make_unique<Replace>(*std::move(pattern), *std::move(content));
  }
  if (*type == "Sequence") {
    absl::StatusOr<std::vector<std::unique_ptr<Decoder>>> steps =
        SequenceSteps<Decoder>(spec, "decoders", where, ParseDecoder);
    if (!steps.ok()) return steps.status();
    return std::make_unique<Sequence>(*std::move(steps));
  }
  return absl::UnimplementedError(absl::StrCat("decoder type \"", *type, "\" is not supported"));
}

}  // namespace verdict::hf
