#include "runtime/text/jinja/lexer.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "runtime/text/jinja/value.h"

namespace verdict::jinja {
namespace {

// jinja2 reads the source through str.splitlines() and joins the lines with
// "\n": every line boundary Python knows becomes "\n", and (without
// keep_trailing_newline) one final line break disappears.
std::string NormalizeNewlines(absl::string_view source) {
  std::string out;
  out.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    unsigned char c = source[i];
    if (c == '\r') {
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
      out += '\n';
    } else if (c == '\n' || c == 0x0b || c == 0x0c || (c >= 0x1c && c <= 0x1e)) {
      out += '\n';
    } else if (c == 0xc2 && i + 1 < source.size() &&
               static_cast<unsigned char>(source[i + 1]) == 0x85) {
      out += '\n';
      ++i;
    } else if (c == 0xe2 && i + 2 < source.size() &&
               static_cast<unsigned char>(source[i + 1]) == 0x80 &&
               (static_cast<unsigned char>(source[i + 2]) == 0xa8 ||
                static_cast<unsigned char>(source[i + 2]) == 0xa9)) {
      out += '\n';
      i += 2;
    } else {
      out += static_cast<char>(c);
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

bool IsAsciiSpace(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

class Lexer {
 public:
  explicit Lexer(std::string source) : src_(std::move(source)) {
    for (size_t i = 0; i < src_.size(); ++i) {
      if (src_[i] == '\n') newlines_.push_back(i);
    }
  }

  absl::StatusOr<std::vector<Token>> Run() {
    while (pos_ < src_.size()) {
      size_t at = FindTagStart(pos_);
      if (at == std::string::npos) {
        AddText(src_.substr(pos_), pos_);
        pos_ = src_.size();
        break;
      }
      if (absl::Status s = LexTag(at); !s.ok()) return s;
    }
    tokens_.push_back(Token{TokenKind::kEnd, "", LineAt(src_.size())});
    return std::move(tokens_);
  }

 private:
  int LineAt(size_t pos) const {
    return 1 + static_cast<int>(std::lower_bound(newlines_.begin(), newlines_.end(), pos) -
                                newlines_.begin());
  }

  absl::Status Error(size_t pos, absl::string_view message) const {
    return absl::InvalidArgumentError(absl::StrCat("line ", LineAt(pos), ": ", message));
  }

  size_t FindTagStart(size_t from) const {
    for (size_t i = from; i + 1 < src_.size(); ++i) {
      if (src_[i] == '{' && (src_[i + 1] == '{' || src_[i + 1] == '%' || src_[i + 1] == '#')) {
        return i;
      }
    }
    return std::string::npos;
  }

  void AddText(std::string text, size_t at) {
    if (!text.empty()) tokens_.push_back(Token{TokenKind::kText, std::move(text), LineAt(at)});
  }

  // Index just past the Python whitespace that starts at `from`.
  size_t SkipPythonSpace(size_t from) const {
    std::string rest = src_.substr(from);
    std::string stripped = PythonStrip(rest, /*left=*/true, /*right=*/false);
    return from + (rest.size() - stripped.size());
  }

  // The text before a tag, after the tag's whitespace rules: `-` strips all
  // whitespace before it; otherwise lstrip_blocks removes the spaces and tabs
  // that begin the tag's line, for block and comment tags not marked `+`.
  std::string TextBeforeTag(std::string text, char sign, bool is_variable) const {
    if (sign == '-') return PythonStrip(text, /*left=*/false, /*right=*/true);
    if (sign == '+' || is_variable) return text;
    size_t line_start = text.rfind('\n');
    line_start = line_start == std::string::npos ? 0 : line_start + 1;
    if (line_start == 0 && !line_starting_) return text;
    std::string tail = text.substr(line_start);
    if (!tail.empty() && PythonStrip(tail, true, true).empty()) text.resize(line_start);
    return text;
  }

  // After a block or comment end: `-` strips the whitespace that follows,
  // `+` keeps it, and trim_blocks removes one newline.
  size_t AfterBlockEnd(size_t end, char sign) const {
    if (sign == '-') return SkipPythonSpace(end);
    if (sign == '+') return end;
    return end < src_.size() && src_[end] == '\n' ? end + 1 : end;
  }

  void FinishTag(size_t next) {
    line_starting_ = next > 0 && src_[next - 1] == '\n';
    pos_ = next;
  }

  absl::Status LexTag(size_t at) {
    const char type = src_[at + 1];
    size_t p = at + 2;
    char sign = 0;
    if (p < src_.size() && (src_[p] == '-' || src_[p] == '+')) sign = src_[p++];
    AddText(TextBeforeTag(src_.substr(pos_, at - pos_), sign, type == '{'), pos_);
    if (type == '#') return LexComment(at, p);
    if (type == '%') {
      size_t raw_end = MatchRawBegin(p);
      if (raw_end != std::string::npos) return LexRaw(at, raw_end);
    }
    return LexExpressionTag(at, p, type == '%');
  }

  absl::Status LexComment(size_t at, size_t p) {
    size_t close = src_.find("#}", p);
    if (close == std::string::npos) return Error(at, "missing end of comment tag");
    char sign = 0;
    if (close > p && (src_[close - 1] == '-' || src_[close - 1] == '+')) sign = src_[close - 1];
    FinishTag(AfterBlockEnd(close + 2, sign));
    return absl::OkStatus();
  }

  // `{% raw %}`: the index after the tag, or npos when the tag is another.
  size_t MatchRawBegin(size_t p) const {
    while (p < src_.size() && IsAsciiSpace(src_[p])) ++p;
    if (src_.compare(p, 3, "raw") != 0) return std::string::npos;
    p += 3;
    while (p < src_.size() && IsAsciiSpace(src_[p])) ++p;
    if (src_.compare(p, 3, "-%}") == 0) return SkipPythonSpace(p + 3);
    if (src_.compare(p, 2, "%}") == 0) return p + 2;  // trim_blocks does not apply here
    return std::string::npos;
  }

  absl::Status LexRaw(size_t at, size_t body) {
    line_starting_ = body > 0 && src_[body - 1] == '\n';
    for (size_t k = src_.find("{%", body); k != std::string::npos; k = src_.find("{%", k + 1)) {
      size_t p = k + 2;
      char sign = 0;
      if (p < src_.size() && (src_[p] == '-' || src_[p] == '+')) sign = src_[p++];
      while (p < src_.size() && IsAsciiSpace(src_[p])) ++p;
      if (src_.compare(p, 6, "endraw") != 0) continue;
      p += 6;
      while (p < src_.size() && IsAsciiSpace(src_[p])) ++p;
      char end_sign = 0;
      if (p < src_.size() && (src_[p] == '-' || src_[p] == '+')) end_sign = src_[p++];
      if (src_.compare(p, 2, "%}") != 0) continue;
      AddText(TextBeforeTag(src_.substr(body, k - body), sign, false), body);
      FinishTag(AfterBlockEnd(p + 2, end_sign));
      return absl::OkStatus();
    }
    return Error(at, "missing end of raw directive");
  }

  absl::Status LexExpressionTag(size_t at, size_t p, bool block) {
    tokens_.push_back(
        Token{block ? TokenKind::kBlockBegin : TokenKind::kVariableBegin, "", LineAt(at)});
    while (true) {
      while (p < src_.size() && IsAsciiSpace(src_[p])) ++p;
      if (p >= src_.size()) {
        return Error(at, block ? "unexpected end of template, expected '%}'"
                               : "unexpected end of template, expected '}}'");
      }
      if (block) {
        for (char s : {'-', '+', '\0'}) {
          std::string end = s ? std::string(1, s) + "%}" : "%}";
          if (src_.compare(p, end.size(), end) == 0) {
            tokens_.push_back(Token{TokenKind::kBlockEnd, "", LineAt(p)});
            FinishTag(AfterBlockEnd(p + end.size(), s));
            return absl::OkStatus();
          }
        }
      } else {
        if (src_.compare(p, 3, "-}}") == 0 || src_.compare(p, 2, "}}") == 0) {
          bool strip = src_[p] == '-';
          tokens_.push_back(Token{TokenKind::kVariableEnd, "", LineAt(p)});
          FinishTag(strip ? SkipPythonSpace(p + 3) : p + 2);
          return absl::OkStatus();
        }
      }
      absl::StatusOr<size_t> next = LexOne(p);
      if (!next.ok()) return next.status();
      p = *next;
    }
  }

  // One token inside a tag; returns the index after it.
  absl::StatusOr<size_t> LexOne(size_t p) {
    const char c = src_[p];
    const int line = LineAt(p);
    if (c == '\'' || c == '"') return LexString(p);
    if (std::isdigit(static_cast<unsigned char>(c))) return LexNumber(p);
    if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      size_t e = p;
      while (e < src_.size() && (std::isalnum(static_cast<unsigned char>(src_[e])) || src_[e] == '_')) ++e;
      tokens_.push_back(Token{TokenKind::kName, src_.substr(p, e - p), line});
      return e;
    }
    for (const char* op : {"//", "**", "==", "!=", "<=", ">="}) {
      if (src_.compare(p, 2, op) == 0) {
        tokens_.push_back(Token{TokenKind::kOperator, op, line});
        return p + 2;
      }
    }
    if (absl::StrContains("+-*/%~<>=()[]{}.,:|", c)) {
      tokens_.push_back(Token{TokenKind::kOperator, std::string(1, c), line});
      return p + 1;
    }
    return Error(p, absl::StrCat("unexpected character '", std::string(1, c), "'"));
  }

  // Digits with optional single underscores between them; npos if none.
  size_t ScanDigits(size_t p) const {
    if (p >= src_.size() || !std::isdigit(static_cast<unsigned char>(src_[p]))) {
      return std::string::npos;
    }
    while (p < src_.size()) {
      if (std::isdigit(static_cast<unsigned char>(src_[p]))) {
        ++p;
      } else if (src_[p] == '_' && p + 1 < src_.size() &&
                 std::isdigit(static_cast<unsigned char>(src_[p + 1]))) {
        ++p;
      } else {
        break;
      }
    }
    return p;
  }

  absl::StatusOr<size_t> LexNumber(size_t p) {
    const int line = LineAt(p);
    size_t e = ScanDigits(p);
    bool is_float = false;
    // jinja2 does not read a float right after '.', so `x.0.1` stays items.
    const bool after_dot = p > 0 && src_[p - 1] == '.';
    if (!after_dot) {
      size_t f = e;
      if (f < src_.size() && src_[f] == '.') {
        size_t frac = ScanDigits(f + 1);
        if (frac != std::string::npos) {
          f = frac;
          is_float = true;
        }
      }
      if (f < src_.size() && (src_[f] == 'e' || src_[f] == 'E')) {
        size_t x = f + 1;
        if (x < src_.size() && (src_[x] == '+' || src_[x] == '-')) ++x;
        size_t exp = ScanDigits(x);
        if (exp != std::string::npos) {
          f = exp;
          is_float = true;
        }
      }
      if (is_float) e = f;
    }
    std::string text;
    for (size_t i = p; i < e; ++i) {
      if (src_[i] != '_') text += src_[i];
    }
    Token token{is_float ? TokenKind::kFloat : TokenKind::kInteger, text, line};
    if (is_float) {
      token.float_value = std::strtod(text.c_str(), nullptr);
    } else {
      token.int_value = std::strtoll(text.c_str(), nullptr, 10);
    }
    tokens_.push_back(std::move(token));
    return e;
  }

  // A quoted string with Python's escapes (jinja2 decodes "unicode-escape").
  absl::StatusOr<size_t> LexString(size_t p) {
    const char quote = src_[p];
    const int line = LineAt(p);
    std::string value;
    size_t i = p + 1;
    while (i < src_.size() && src_[i] != quote) {
      if (src_[i] != '\\' || i + 1 >= src_.size()) {
        value += src_[i++];
        continue;
      }
      const char e = src_[i + 1];
      i += 2;
      switch (e) {
        case 'n': value += '\n'; break;
        case 't': value += '\t'; break;
        case 'r': value += '\r'; break;
        case 'a': value += '\a'; break;
        case 'b': value += '\b'; break;
        case 'f': value += '\f'; break;
        case 'v': value += '\v'; break;
        case '\\': value += '\\'; break;
        case '\'': value += '\''; break;
        case '"': value += '"'; break;
        case '\n': break;  // a line continuation
        case 'x':
        case 'u':
        case 'U': {
          const size_t n = e == 'x' ? 2 : e == 'u' ? 4 : 8;
          if (i + n > src_.size()) return Error(p, "truncated escape in string");
          std::string hex = src_.substr(i, n);
          if (!std::all_of(hex.begin(), hex.end(), [](char h) { return std::isxdigit(static_cast<unsigned char>(h)); })) {
            return Error(p, "truncated escape in string");
          }
          AppendUtf8(static_cast<uint32_t>(std::strtoul(hex.c_str(), nullptr, 16)), &value);
          i += n;
          break;
        }
        default:
          if (e >= '0' && e <= '7') {
            uint32_t cp = e - '0';
            for (int k = 0; k < 2 && i < src_.size() && src_[i] >= '0' && src_[i] <= '7'; ++k) {
              cp = cp * 8 + (src_[i++] - '0');
            }
            AppendUtf8(cp, &value);
          } else {
            // Python keeps an unknown escape as written.
            value += '\\';
            value += e;
          }
      }
    }
    if (i >= src_.size()) return Error(p, "unterminated string");
    tokens_.push_back(Token{TokenKind::kString, std::move(value), line});
    return i + 1;
  }

  std::string src_;
  std::vector<size_t> newlines_;
  size_t pos_ = 0;
  bool line_starting_ = true;
  std::vector<Token> tokens_;
};

}  // namespace

absl::StatusOr<std::vector<Token>> Tokenize(absl::string_view source) {
  return Lexer(NormalizeNewlines(source)).Run();
}

}  // namespace verdict::jinja
