#include "runtime/text/jinja/value.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace verdict::jinja {
namespace {

bool IsSpaceCodePoint(uint32_t cp) {
  return (cp >= 0x09 && cp <= 0x0d) || (cp >= 0x1c && cp <= 0x20) || cp == 0x85 || cp == 0xa0 ||
         cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200a) || cp == 0x2028 || cp == 0x2029 ||
         cp == 0x202f || cp == 0x205f || cp == 0x3000;
}

// Python's str.isprintable() for the code points chat text is likely to
// hold: controls, separators other than ' ' and common format characters
// are not printable, so repr() escapes them.
bool IsPrintable(uint32_t cp) {
  if (cp < 0x20 || (cp >= 0x7f && cp <= 0xa0) || cp == 0xad) return false;
  if (cp != 0x20 && IsSpaceCodePoint(cp)) return false;
  if ((cp >= 0x200b && cp <= 0x200f) || (cp >= 0x202a && cp <= 0x202e) ||
      (cp >= 0x2060 && cp <= 0x2064) || cp == 0xfeff) {
    return false;
  }
  return true;
}

std::string ReprString(const std::string& s) {
  const bool has_single = s.find('\'') != std::string::npos;
  const bool has_double = s.find('"') != std::string::npos;
  const char quote = has_single && !has_double ? '"' : '\'';
  std::string out(1, quote);
  size_t pos = 0;
  while (pos < s.size()) {
    size_t start = pos;
    uint32_t cp = DecodeUtf8(s, &pos);
    if (cp == '\\') {
      out += "\\\\";
    } else if (cp == static_cast<uint32_t>(quote)) {
      out += '\\';
      out += quote;
    } else if (cp == '\n') {
      out += "\\n";
    } else if (cp == '\r') {
      out += "\\r";
    } else if (cp == '\t') {
      out += "\\t";
    } else if (!IsPrintable(cp)) {
      char buf[16];
      if (cp < 0x100) {
        std::snprintf(buf, sizeof(buf), "\\x%02x", cp);
      } else if (cp < 0x10000) {
        std::snprintf(buf, sizeof(buf), "\\u%04x", cp);
      } else {
        std::snprintf(buf, sizeof(buf), "\\U%08x", cp);
      }
      out += buf;
    } else {
      out.append(s, start, pos - start);
    }
  }
  out += quote;
  return out;
}

std::string JsonString(const std::string& s, bool ensure_ascii) {
  std::string out = "\"";
  for (size_t i = 0; i < s.size(); ++i) {
    const char ch = s[i];
    unsigned char c = ch;
    if (ensure_ascii && c >= 0x80) {
      size_t pos = i;
      uint32_t cp = DecodeUtf8(s, &pos);
      i = pos - 1;
      char buf[16];
      if (cp >= 0x10000) {
        // Outside the BMP: a UTF-16 surrogate pair, as json.dumps writes it.
        cp -= 0x10000;
        std::snprintf(buf, sizeof(buf), "\\u%04x\\u%04x", 0xd800 + (cp >> 10), 0xdc00 + (cp & 0x3ff));
      } else {
        std::snprintf(buf, sizeof(buf), "\\u%04x", cp);
      }
      out += buf;
      continue;
    }
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\u%04x", c);
          out += buf;
        } else {
          out += ch;  // ensure_ascii=False: UTF-8 passes through
        }
    }
  }
  out += '"';
  return out;
}

struct JsonWriter {
  bool ensure_ascii;
  int indent;
  std::string item_separator;
  std::string key_separator;
  bool sort_keys;

  std::string NewLine(int level) const {
    return "\n" + std::string(static_cast<size_t>(indent) * level, ' ');
  }

  absl::StatusOr<std::string> KeyText(const Value& key) const {
    switch (key.kind()) {
      case Value::Kind::kString:
        return key.as_string();
      case Value::Kind::kNone:
        return std::string("null");
      case Value::Kind::kBool:
        return std::string(key.as_bool() ? "true" : "false");
      case Value::Kind::kInt:
        return std::to_string(key.as_int());
      case Value::Kind::kFloat:
        return FormatFloat(key.as_double());
      default:
        return absl::InvalidArgumentError(
            absl::StrCat("keys must be str, int, float, bool or None, not ", key.TypeName()));
    }
  }

  absl::Status Write(const Value& v, int level, std::string* out) const {
    switch (v.kind()) {
      case Value::Kind::kNone:
        *out += "null";
        return absl::OkStatus();
      case Value::Kind::kBool:
        *out += v.as_bool() ? "true" : "false";
        return absl::OkStatus();
      case Value::Kind::kInt:
        *out += std::to_string(v.as_int());
        return absl::OkStatus();
      case Value::Kind::kFloat: {
        double d = v.as_double();
        if (std::isnan(d)) {
          *out += "NaN";
        } else if (std::isinf(d)) {
          *out += d > 0 ? "Infinity" : "-Infinity";
        } else {
          *out += FormatFloat(d);
        }
        return absl::OkStatus();
      }
      case Value::Kind::kString:
        *out += JsonString(v.as_string(), ensure_ascii);
        return absl::OkStatus();
      case Value::Kind::kList:
        return WriteList(v.items(), level, out);
      case Value::Kind::kDict:
        return WriteDict(v.dict(), level, out);
      default:
        return absl::InvalidArgumentError(
            absl::StrCat("Object of type ", v.TypeName(), " is not JSON serializable"));
    }
  }

  absl::Status WriteList(const std::vector<Value>& items, int level, std::string* out) const {
    if (items.empty()) {
      *out += "[]";
      return absl::OkStatus();
    }
    *out += '[';
    for (size_t i = 0; i < items.size(); ++i) {
      if (i > 0) *out += item_separator;
      if (indent >= 0) *out += NewLine(level + 1);
      if (absl::Status s = Write(items[i], level + 1, out); !s.ok()) return s;
    }
    if (indent >= 0) *out += NewLine(level);
    *out += ']';
    return absl::OkStatus();
  }

  absl::Status WriteDict(const Dict& dict, int level, std::string* out) const {
    if (dict.size() == 0) {
      *out += "{}";
      return absl::OkStatus();
    }
    std::vector<std::pair<std::string, const Value*>> entries;
    for (const auto& [key, value] : dict.entries()) {
      absl::StatusOr<std::string> text = KeyText(key);
      if (!text.ok()) return text.status();
      entries.emplace_back(*std::move(text), &value);
    }
    if (sort_keys) {
      std::stable_sort(entries.begin(), entries.end(),
                       [](const auto& a, const auto& b) { return a.first < b.first; });
    }
    *out += '{';
    for (size_t i = 0; i < entries.size(); ++i) {
      if (i > 0) *out += item_separator;
      if (indent >= 0) *out += NewLine(level + 1);
      *out += JsonString(entries[i].first, ensure_ascii);
      *out += key_separator;
      if (absl::Status s = Write(*entries[i].second, level + 1, out); !s.ok()) return s;
    }
    if (indent >= 0) *out += NewLine(level);
    *out += '}';
    return absl::OkStatus();
  }
};

}  // namespace

uint32_t DecodeUtf8(absl::string_view s, size_t* pos) {
  unsigned char c = s[*pos];
  int extra = c < 0x80 ? 0 : (c >> 5) == 0x6 ? 1 : (c >> 4) == 0xe ? 2 : (c >> 3) == 0x1e ? 3 : -1;
  if (extra <= 0 || *pos + extra >= s.size()) {
    ++*pos;
    return c;
  }
  uint32_t cp = c & (0x3f >> extra);
  for (int i = 1; i <= extra; ++i) {
    unsigned char next = s[*pos + i];
    if ((next & 0xc0) != 0x80) {
      ++*pos;
      return c;
    }
    cp = (cp << 6) | (next & 0x3f);
  }
  *pos += extra + 1;
  return cp;
}

void AppendUtf8(uint32_t cp, std::string* out) {
  if (cp < 0x80) {
    *out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    *out += static_cast<char>(0xc0 | (cp >> 6));
    *out += static_cast<char>(0x80 | (cp & 0x3f));
  } else if (cp < 0x10000) {
    *out += static_cast<char>(0xe0 | (cp >> 12));
    *out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
    *out += static_cast<char>(0x80 | (cp & 0x3f));
  } else {
    *out += static_cast<char>(0xf0 | (cp >> 18));
    *out += static_cast<char>(0x80 | ((cp >> 12) & 0x3f));
    *out += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
    *out += static_cast<char>(0x80 | (cp & 0x3f));
  }
}

size_t Dict::size() const { return entries_.size(); }

const Value* Dict::Find(const Value& key) const {
  for (const auto& [k, v] : entries_) {
    if (Equals(k, key)) return &v;
  }
  return nullptr;
}

const Value* Dict::FindString(absl::string_view key) const {
  for (const auto& [k, v] : entries_) {
    if (k.is_string() && k.as_string() == key) return &v;
  }
  return nullptr;
}

void Dict::Set(Value key, Value value) {
  for (auto& [k, v] : entries_) {
    if (Equals(k, key)) {
      v = std::move(value);
      return;
    }
  }
  entries_.emplace_back(std::move(key), std::move(value));
}

Value Value::Undefined(std::string name) {
  Value v;
  v.data_ = UndefinedData{std::move(name)};
  return v;
}

Value Value::Markup(std::string s) {
  Value v(std::move(s));
  v.markup_ = true;
  return v;
}

Value Value::None() {
  Value v;
  v.data_ = NoneData{};
  return v;
}

Value Value::List(std::vector<Value> items, ListFlavor flavor) {
  Value v;
  v.data_ = std::make_shared<const ListData>(ListData{std::move(items), flavor});
  return v;
}

Value Value::FromDict(Dict dict) {
  Value v;
  v.data_ = std::make_shared<const Dict>(std::move(dict));
  return v;
}

Value Value::FromFunction(std::string name,
                          std::function<absl::StatusOr<Value>(const CallArgs&)> call) {
  Value v;
  v.data_ = std::make_shared<const Function>(Function{std::move(name), std::move(call)});
  return v;
}

Value Value::NewNamespace(Dict attributes) {
  Value v;
  v.data_ = std::make_shared<Namespace>(Namespace{std::move(attributes)});
  return v;
}

Value Value::FromJson(const nlohmann::ordered_json& j) {
  switch (j.type()) {
    case nlohmann::ordered_json::value_t::null:
      return None();
    case nlohmann::ordered_json::value_t::boolean:
      return Value(j.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer:
      return Value(j.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_unsigned:
      return Value(static_cast<int64_t>(j.get<uint64_t>()));
    case nlohmann::ordered_json::value_t::number_float:
      return Value(j.get<double>());
    case nlohmann::ordered_json::value_t::string:
      return Value(j.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      std::vector<Value> items;
      for (const auto& item : j) items.push_back(FromJson(item));
      return List(std::move(items));
    }
    case nlohmann::ordered_json::value_t::object: {
      Dict dict;
      for (const auto& [key, item] : j.items()) dict.Set(Value(key), FromJson(item));
      return FromDict(std::move(dict));
    }
    default:
      return None();
  }
}

Value::Kind Value::kind() const { return static_cast<Kind>(data_.index()); }

bool Value::is_number() const {
  Kind k = kind();
  return k == Kind::kBool || k == Kind::kInt || k == Kind::kFloat;
}

int64_t Value::as_int() const {
  if (kind() == Kind::kBool) return std::get<bool>(data_) ? 1 : 0;
  return std::get<int64_t>(data_);
}

double Value::as_double() const {
  if (kind() == Kind::kFloat) return std::get<double>(data_);
  return static_cast<double>(as_int());
}

const std::vector<Value>& Value::items() const {
  return std::get<std::shared_ptr<const ListData>>(data_)->items;
}

Value::ListFlavor Value::flavor() const {
  return std::get<std::shared_ptr<const ListData>>(data_)->flavor;
}

const Dict& Value::dict() const { return *std::get<std::shared_ptr<const Dict>>(data_); }

const Function& Value::function() const {
  return *std::get<std::shared_ptr<const Function>>(data_);
}

Namespace& Value::ns() const { return *std::get<std::shared_ptr<Namespace>>(data_); }

const std::string& Value::undefined_name() const {
  return std::get<UndefinedData>(data_).name;
}

bool Value::Truthy() const {
  switch (kind()) {
    case Kind::kUndefined:
    case Kind::kNone:
      return false;
    case Kind::kBool:
      return as_bool();
    case Kind::kInt:
      return as_int() != 0;
    case Kind::kFloat:
      return as_double() != 0.0;
    case Kind::kString:
      return !as_string().empty();
    case Kind::kList:
      return flavor() == ListFlavor::kGenerator || !items().empty();
    case Kind::kDict:
      return dict().size() > 0;
    case Kind::kFunction:
    case Kind::kNamespace:
      return true;
  }
  return false;
}

std::string Value::Str() const {
  switch (kind()) {
    case Kind::kUndefined:
      return "";
    case Kind::kString:
      return as_string();
    default:
      return Repr();
  }
}

std::string Value::Repr() const {
  switch (kind()) {
    case Kind::kUndefined:
      return "Undefined";
    case Kind::kNone:
      return "None";
    case Kind::kBool:
      return as_bool() ? "True" : "False";
    case Kind::kInt:
      return std::to_string(as_int());
    case Kind::kFloat:
      return FormatFloat(as_double());
    case Kind::kString:
      return markup_ ? absl::StrCat("Markup(", ReprString(as_string()), ")")
                     : ReprString(as_string());
    case Kind::kList: {
      if (flavor() == ListFlavor::kGenerator) return "<generator object>";
      std::string inner = absl::StrJoin(items(), ", ", [](std::string* out, const Value& v) {
        out->append(v.Repr());
      });
      if (flavor() == ListFlavor::kTuple) {
        return absl::StrCat("(", inner, items().size() == 1 ? "," : "", ")");
      }
      return absl::StrCat("[", inner, "]");
    }
    case Kind::kDict: {
      std::string out = "{";
      bool first = true;
      for (const auto& [k, v] : dict().entries()) {
        if (!first) out += ", ";
        first = false;
        absl::StrAppend(&out, k.Repr(), ": ", v.Repr());
      }
      return out + "}";
    }
    case Kind::kFunction:
      return absl::StrCat("<function ", function().name, ">");
    case Kind::kNamespace:
      return absl::StrCat("<Namespace ", FromDict(ns().attributes).Repr(), ">");
  }
  return "";
}

std::string Value::TypeName() const {
  switch (kind()) {
    case Kind::kUndefined:
      return "Undefined";
    case Kind::kNone:
      return "NoneType";
    case Kind::kBool:
      return "bool";
    case Kind::kInt:
      return "int";
    case Kind::kFloat:
      return "float";
    case Kind::kString:
      return markup_ ? "Markup" : "str";
    case Kind::kList:
      return flavor() == ListFlavor::kTuple       ? "tuple"
             : flavor() == ListFlavor::kGenerator ? "generator"
                                                  : "list";
    case Kind::kDict:
      return "dict";
    case Kind::kFunction:
      return "function";
    case Kind::kNamespace:
      return "Namespace";
  }
  return "object";
}

absl::StatusOr<std::string> Value::ToJson(bool ensure_ascii, int indent,
                                          const std::string& item_separator,
                                          const std::string& key_separator,
                                          bool sort_keys) const {
  JsonWriter writer{ensure_ascii, indent, item_separator, key_separator, sort_keys};
  std::string out;
  if (absl::Status s = writer.Write(*this, 0, &out); !s.ok()) return s;
  return out;
}

bool Equals(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.kind() != Value::Kind::kFloat && b.kind() != Value::Kind::kFloat) {
      return a.as_int() == b.as_int();
    }
    return a.as_double() == b.as_double();
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case Value::Kind::kUndefined:
    case Value::Kind::kNone:
      return true;
    case Value::Kind::kString:
      return a.as_string() == b.as_string();
    case Value::Kind::kList: {
      if (a.flavor() != b.flavor() || a.flavor() == Value::ListFlavor::kGenerator) {
        return &a.items() == &b.items();
      }
      const auto& x = a.items();
      const auto& y = b.items();
      if (x.size() != y.size()) return false;
      for (size_t i = 0; i < x.size(); ++i) {
        if (!Equals(x[i], y[i])) return false;
      }
      return true;
    }
    case Value::Kind::kDict: {
      if (a.dict().size() != b.dict().size()) return false;
      for (const auto& [k, v] : a.dict().entries()) {
        const Value* other = b.dict().Find(k);
        if (other == nullptr || !Equals(v, *other)) return false;
      }
      return true;
    }
    case Value::Kind::kFunction:
      return &a.function() == &b.function();
    case Value::Kind::kNamespace:
      return &a.ns() == &b.ns();
    default:
      return false;
  }
}

absl::StatusOr<bool> LessThan(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.kind() != Value::Kind::kFloat && b.kind() != Value::Kind::kFloat) {
      return a.as_int() < b.as_int();
    }
    return a.as_double() < b.as_double();
  }
  if (a.is_string() && b.is_string()) return a.as_string() < b.as_string();  // UTF-8 order is code point order
  if (a.is_list() && b.is_list() && a.flavor() == b.flavor() &&
      a.flavor() != Value::ListFlavor::kGenerator) {
    const auto& x = a.items();
    const auto& y = b.items();
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (Equals(x[i], y[i])) continue;
      return LessThan(x[i], y[i]);
    }
    return x.size() < y.size();
  }
  return absl::InvalidArgumentError(absl::StrCat("'<' not supported between instances of '",
                                                 a.TypeName(), "' and '", b.TypeName(), "'"));
}

std::string FormatFloat(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  char buf[64];
  // Shortest round-trip digits, as Python's repr chooses them.
  auto result = std::to_chars(buf, buf + sizeof(buf), d, std::chars_format::scientific);
  std::string s(buf, result.ptr);
  std::string sign;
  if (s[0] == '-') {
    sign = "-";
    s.erase(0, 1);
  }
  size_t e = s.find('e');
  int exponent = std::stoi(s.substr(e + 1));
  std::string digits;
  for (char c : s.substr(0, e)) {
    if (c != '.') digits += c;
  }
  std::string out;
  if (exponent < -4 || exponent >= 16) {
    out = digits.substr(0, 1);
    if (digits.size() > 1) absl::StrAppend(&out, ".", digits.substr(1));
    char exp_text[16];
    std::snprintf(exp_text, sizeof(exp_text), "e%c%02d", exponent < 0 ? '-' : '+',
                  std::abs(exponent));
    out += exp_text;
  } else if (exponent >= 0) {
    size_t point = static_cast<size_t>(exponent) + 1;
    if (digits.size() <= point) {
      out = digits + std::string(point - digits.size(), '0') + ".0";
    } else {
      out = digits.substr(0, point) + "." + digits.substr(point);
    }
  } else {
    out = "0." + std::string(static_cast<size_t>(-exponent - 1), '0') + digits;
  }
  return sign + out;
}

std::vector<std::string> SplitCodePoints(absl::string_view s) {
  std::vector<std::string> out;
  size_t pos = 0;
  while (pos < s.size()) {
    size_t start = pos;
    DecodeUtf8(s, &pos);
    out.emplace_back(s.substr(start, pos - start));
  }
  return out;
}

bool IsPythonSpace(absl::string_view code_point) {
  if (code_point.empty()) return false;
  size_t pos = 0;
  uint32_t cp = DecodeUtf8(code_point, &pos);
  return pos == code_point.size() && IsSpaceCodePoint(cp);
}

std::string PythonStrip(absl::string_view s, bool left, bool right) {
  // Scans from each end, so a long string is not split into code points.
  size_t begin = 0;
  size_t end = s.size();
  if (left) {
    while (begin < end) {
      size_t next = begin;
      uint32_t cp = DecodeUtf8(s, &next);
      if (!IsSpaceCodePoint(cp)) break;
      begin = next;
    }
  }
  if (right) {
    while (end > begin) {
      size_t start = end - 1;
      // Back to the first byte of the last code point.
      while (start > begin && (static_cast<unsigned char>(s[start]) & 0xc0) == 0x80) --start;
      size_t next = start;
      uint32_t cp = DecodeUtf8(s, &next);
      if (next != end || !IsSpaceCodePoint(cp)) break;
      end = start;
    }
  }
  return std::string(s.substr(begin, end - begin));
}

}  // namespace verdict::jinja
