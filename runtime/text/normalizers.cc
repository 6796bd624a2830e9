#include "runtime/text/normalizers.h"

#include <uninorm.h>

#include <cstdlib>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "runtime/text/json_fields.h"
#include "runtime/text/pcre2_regex.h"
#include "runtime/text/text_pattern.h"

namespace verdict::hf {
namespace {

using nlohmann::json;

// Unicode normalization forms (libunistring). ASCII is in every form, so
// the common case skips the conversion.
class UnicodeForm : public Normalizer {
 public:
  explicit UnicodeForm(uninorm_t form) : form_(form) {}
  void Normalize(std::string* text) const override {
    bool ascii = true;
    for (char c : *text) {
      if (static_cast<unsigned char>(c) >= 0x80) {
        ascii = false;
        break;
      }
    }
    if (ascii) return;
    size_t length = 0;
    uint8_t* out = u8_normalize(form_, reinterpret_cast<const uint8_t*>(text->data()),
                                text->size(), nullptr, &length);
    if (out == nullptr) return;  // out of memory: the text stays as it is
    text->assign(reinterpret_cast<const char*>(out), length);
    std::free(out);
  }

 private:
  uninorm_t form_;
};

class Prepend : public Normalizer {
 public:
  explicit Prepend(std::string prefix) : prefix_(std::move(prefix)) {}
  void Normalize(std::string* text) const override {
    if (!text->empty()) text->insert(0, prefix_);
  }

 private:
  std::string prefix_;
};

class Replace : public Normalizer {
 public:
  Replace(TextPattern pattern, std::string content)
      : pattern_(std::move(pattern)), content_(std::move(content)) {}
  void Normalize(std::string* text) const override { *text = pattern_.ReplaceAll(*text, content_); }

 private:
  TextPattern pattern_;
  std::string content_;
};

// Strip: removes leading and/or trailing whitespace.
class Strip : public Normalizer {
 public:
  Strip(bool left, bool right) : left_(left), right_(right) {}
  void Normalize(std::string* text) const override {
    absl::string_view t(*text);
    if (left_) t = TrimLeadingWhitespace(t);
    if (right_) t = TrimTrailingWhitespace(t);
    *text = std::string(t);
  }

 private:
  bool left_, right_;
};

class Sequence : public Normalizer {
 public:
  explicit Sequence(std::vector<std::unique_ptr<Normalizer>> steps) : steps_(std::move(steps)) {}
  void Normalize(std::string* text) const override {
    for (const auto& step : steps_) step->Normalize(text);
  }

 private:
  std::vector<std::unique_ptr<Normalizer>> steps_;
};

std::unique_ptr<Normalizer> Form(const std::string& type) {
  if (type == "NFD") return std::make_unique<UnicodeForm>(UNINORM_NFD);
  if (type == "NFKC") return std::make_unique<UnicodeForm>(UNINORM_NFKC);
  if (type == "NFKD") return std::make_unique<UnicodeForm>(UNINORM_NFKD);
  return std::make_unique<UnicodeForm>(UNINORM_NFC);
}

}  // namespace

absl::StatusOr<std::unique_ptr<Normalizer>> ParseNormalizer(const json& spec) {
  if (spec.is_null()) return std::unique_ptr<Normalizer>();
  absl::StatusOr<std::string> type = TypeOf(spec, "normalizer");
  if (!type.ok()) return type.status();
  const std::string where = absl::StrCat("normalizer ", *type);
  if (*type == "NFC" || *type == "NFD" || *type == "NFKC" || *type == "NFKD") return Form(*type);
  if (*type == "Prepend") {
    absl::StatusOr<std::string> prefix = StringField(spec, "prepend", where);
    if (!prefix.ok()) return prefix.status();
    return std::make_unique<Prepend>(*std::move(prefix));
  }
  if (*type == "Replace") {
    absl::StatusOr<TextPattern> pattern = TextPattern::Parse(spec, where);
    if (!pattern.ok()) return pattern.status();
    absl::StatusOr<std::string> content = StringField(spec, "content", where);
    if (!content.ok()) return content.status();
    return std::make_unique<Replace>(*std::move(pattern), *std::move(content));
  }
  if (*type == "Strip") {
    absl::StatusOr<bool> left = BoolField(spec, "strip_left", where, true);
    if (!left.ok()) return left.status();
    absl::StatusOr<bool> right = BoolField(spec, "strip_right", where, true);
    if (!right.ok()) return right.status();
    return std::make_unique<Strip>(*left, *right);
  }
  if (*type == "Sequence") {
    absl::StatusOr<std::vector<std::unique_ptr<Normalizer>>> steps =
        SequenceSteps<Normalizer>(spec, "normalizers", where, ParseNormalizer);
    if (!steps.ok()) return steps.status();
    return std::make_unique<Sequence>(*std::move(steps));
  }
  return absl::UnimplementedError(absl::StrCat("normalizer type \"", *type, "\" is not supported"));
}

}  // namespace verdict::hf
