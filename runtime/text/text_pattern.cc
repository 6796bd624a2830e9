#include "runtime/text/text_pattern.h"

#include <unictype.h>

#include "absl/strings/str_cat.h"
#include "runtime/text/utf8.h"

namespace verdict::hf {
namespace {

using nlohmann::json;

// The White_Space characters, as the class body that Oniguruma (the
// `tokenizers` library's regex engine) gives \s. PCRE2's \s also takes
// U+180E MONGOLIAN VOWEL SEPARATOR, which Unicode no longer counts as a
// space.
constexpr char kWhiteSpaceClass[] =
    R"(\t-\r\x{20}\x{85}\x{A0}\x{1680}\x{2000}-\x{200A}\x{2028}\x{2029}\x{202F}\x{205F}\x{3000})";

// `regex` with \s and \S spelled out as kWhiteSpaceClass (inside a
// character class too, where only \s can be; a \S there stays PCRE2's).
std::string WithOnigurumaSpaces(absl::string_view regex) {
  std::string out;
  out.reserve(regex.size() + 64);
  bool in_class = false;
  size_t class_start = 0;  // index in `regex` just after the class's "[" or "[^"
  for (size_t i = 0; i < regex.size(); ++i) {
    const char c = regex[i];
    if (c == '\\' && i + 1 < regex.size()) {
      const char e = regex[i + 1];
      if (e == 's') {
        out += in_class ? kWhiteSpaceClass : absl::StrCat("[", kWhiteSpaceClass, "]");
      } else if (e == 'S' && !in_class) {
        out += absl::StrCat("[^", kWhiteSpaceClass, "]");
      } else {
        out += c;
        out += e;
      }
      ++i;
      continue;
    }
    if (!in_class && c == '[') {
      in_class = true;
      class_start = i + 1 < regex.size() && regex[i + 1] == '^' ? i + 2 : i + 1;
    } else if (in_class && c == '[' && i + 1 < regex.size() && regex[i + 1] == ':') {
      // A POSIX class such as [:alpha:] inside the class: copy it whole.
      const size_t end = regex.find(":]", i + 2);
      if (end != absl::string_view::npos) {
        out.append(regex.data() + i, end + 2 - i);
        i = end + 1;
        continue;
      }
    } else if (in_class && c == ']' && i != class_start) {
      in_class = false;
    }
    out += c;
  }
  return out;
}

}  // namespace

absl::StatusOr<TextPattern> TextPattern::Parse(const json& spec, absl::string_view where) {
  if (!spec.contains("pattern") || !spec["pattern"].is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": \"pattern\" is not an object"));
  }
  const json& p = spec["pattern"];
  if (p.contains("String") && p["String"].is_string()) {
    return Literal(p["String"].get<std::string>());
  }
  if (p.contains("Regex") && p["Regex"].is_string()) {
    absl::StatusOr<TextPattern> regex = Regex(p["Regex"].get<std::string>());
    if (!regex.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": ", regex.status().message()));
    }
    return regex;
  }
  return absl::InvalidArgumentError(
      absl::StrCat(where, ": \"pattern\" has neither \"String\" nor \"Regex\""));
}

TextPattern TextPattern::Literal(std::string literal) {
  TextPattern p;
  p.literal_ = std::move(literal);
  return p;
}

absl::StatusOr<TextPattern> TextPattern::Regex(absl::string_view regex) {
  absl::StatusOr<std::unique_ptr<Pcre2Regex>> compiled =
      Pcre2Regex::Compile(WithOnigurumaSpaces(regex));
  if (!compiled.ok()) return compiled.status();
  TextPattern p;
  p.regex_ = *std::move(compiled);
  return p;
}

void TextPattern::FindAll(absl::string_view text, std::vector<Pcre2Regex::Match>* matches) const {
  if (regex_ != nullptr) {
    regex_->FindAll(text, matches);
    return;
  }
  if (literal_.empty()) return;
  size_t pos = 0;
  while ((pos = text.find(literal_, pos)) != absl::string_view::npos) {
    matches->emplace_back(pos, pos + literal_.size());
    pos += literal_.size();
  }
}

std::string TextPattern::ReplaceAll(absl::string_view text, absl::string_view content) const {
  std::vector<Pcre2Regex::Match> matches;
  FindAll(text, &matches);
  if (matches.empty()) return std::string(text);
  std::string out;
  out.reserve(text.size() + matches.size() * content.size());
  size_t last = 0;
  for (const auto& [begin, end] : matches) {
    out.append(text.data() + last, begin - last);
    out.append(content.data(), content.size());
    last = end;
  }
  out.append(text.data() + last, text.size() - last);
  return out;
}

bool IsWhitespace(uint32_t c) {
  if (c < 0x80) return c == ' ' || (c >= 0x09 && c <= 0x0D);
  return uc_is_property_white_space(c);
}

bool IsWordChar(uint32_t c) {
  if (c < 0x80) {
    return c == '_' || (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
  }
  if (c == 0x200C || c == 0x200D) return true;
  return uc_is_property_alphabetic(c) || uc_is_general_category(c, UC_CATEGORY_M) ||
         uc_is_general_category(c, UC_CATEGORY_Nd) || uc_is_general_category(c, UC_CATEGORY_Pc);
}

absl::string_view TrimLeadingWhitespace(absl::string_view text) {
  size_t i = 0;
  while (i < text.size()) {
    const size_t n = utf8::CharLength(static_cast<unsigned char>(text[i]));
    if (!IsWhitespace(utf8::Decode(text, i))) break;
    i += n;
  }
  return text.substr(i);
}

absl::string_view TrimTrailingWhitespace(absl::string_view text) {
  size_t end = text.size();
  while (end > 0) {
    size_t start = end - 1;
    while (start > 0 && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) --start;
    if (!IsWhitespace(utf8::Decode(text, start))) break;
    end = start;
  }
  return text.substr(0, end);
}

}  // namespace verdict::hf
