#include "runtime/text/jinja/evaluator.h"

#include <algorithm>
#include <cmath>
#include <ctime>
#include <optional>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "runtime/text/jinja/lexer.h"

namespace verdict::jinja {
namespace {

using Items = std::vector<Value>;

// Deep enough for any chat template, shallow enough to stop a macro that
// calls itself forever before the stack does.
constexpr int kMaxCallDepth = 200;
// jinja2's sandbox caps range() at this many items.
constexpr int64_t kMaxRange = 100000;

absl::Status LineError(int line, absl::string_view message) {
  return absl::InvalidArgumentError(absl::StrCat("line ", line, ": ", message));
}

class Scope {
 public:
  explicit Scope(std::shared_ptr<Scope> parent) : parent_(std::move(parent)) {}
  const Value* Lookup(const std::string& name) const {
    for (const Scope* s = this; s != nullptr; s = s->parent_.get()) {
      auto it = s->vars_.find(name);
      if (it != s->vars_.end()) return &it->second;
    }
    return nullptr;
  }
  void Set(const std::string& name, Value value) { vars_[name] = std::move(value); }

 private:
  std::shared_ptr<Scope> parent_;
  absl::flat_hash_map<std::string, Value> vars_;
};
using ScopePtr = std::shared_ptr<Scope>;

// Python's case mappings for the scripts chat text commonly holds (ASCII,
// Latin-1, Latin Extended-A, Greek, Cyrillic); other code points have no
// case here. One-to-many mappings (German sharp s) are not applied.
uint32_t UpperCodePoint(uint32_t cp) {
  if (cp >= 'a' && cp <= 'z') return cp - 0x20;
  if (cp < 0x80) return cp;
  if (cp == 0xb5) return 0x39c;
  if ((cp >= 0xe0 && cp <= 0xfe && cp != 0xf7)) return cp - 0x20;
  if (cp == 0xff) return 0x178;
  if ((cp >= 0x100 && cp <= 0x137) || (cp >= 0x14a && cp <= 0x177)) return cp & ~1u;
  if ((cp >= 0x139 && cp <= 0x148) || (cp >= 0x179 && cp <= 0x17e)) {
    return cp % 2 == 0 ? cp - 1 : cp;
  }
  if (cp == 0x3c2) return 0x3a3;
  if (cp >= 0x3b1 && cp <= 0x3c9) return cp - 0x20;
  if (cp == 0x3ac) return 0x386;  // Greek letters with tonos
  if (cp >= 0x3ad && cp <= 0x3af) return cp - 0x25;
  if (cp == 0x3cc) return 0x38c;
  if (cp == 0x3cd || cp == 0x3ce) return cp - 0x3f;
  if (cp >= 0x430 && cp <= 0x44f) return cp - 0x20;
  if (cp >= 0x450 && cp <= 0x45f) return cp - 0x50;
  return cp;
}

uint32_t LowerCodePoint(uint32_t cp) {
  if (cp >= 'A' && cp <= 'Z') return cp + 0x20;
  if (cp < 0x80) return cp;
  if (cp >= 0xc0 && cp <= 0xde && cp != 0xd7) return cp + 0x20;
  if (cp == 0x178) return 0xff;
  if (cp == 0x130) return cp;  // İ lowers to two code points in Python
  if ((cp >= 0x100 && cp <= 0x137) || (cp >= 0x14a && cp <= 0x177)) return cp | 1u;
  if ((cp >= 0x139 && cp <= 0x148) || (cp >= 0x179 && cp <= 0x17e)) {
    return cp % 2 == 1 ? cp + 1 : cp;
  }
  if (cp >= 0x391 && cp <= 0x3a9 && cp != 0x3a2) return cp + 0x20;
  if (cp == 0x386) return 0x3ac;
  if (cp >= 0x388 && cp <= 0x38a) return cp + 0x25;
  if (cp == 0x38c) return 0x3cc;
  if (cp == 0x38e || cp == 0x38f) return cp + 0x3f;
  if (cp >= 0x410 && cp <= 0x42f) return cp + 0x20;
  if (cp >= 0x400 && cp <= 0x40f) return cp + 0x50;
  return cp;
}

bool IsCased(uint32_t cp) {
  return UpperCodePoint(cp) != cp || LowerCodePoint(cp) != cp || cp == 0xdf || cp == 0x131 ||
         cp == 0x138 || cp == 0x149;
}

template <typename Map>
std::string MapCodePoints(absl::string_view s, Map map) {
  std::string out;
  size_t pos = 0;
  while (pos < s.size()) {
    uint32_t cp = DecodeUtf8(s, &pos);
    AppendUtf8(map(cp), &out);
  }
  return out;
}

std::string Upper(absl::string_view s) { return MapCodePoints(s, UpperCodePoint); }
std::string Lower(absl::string_view s) { return MapCodePoints(s, LowerCodePoint); }

// Python's str.capitalize(): the first code point raised, the rest lowered.
std::string Capitalize(absl::string_view s) {
  std::string out;
  size_t pos = 0;
  bool first = true;
  while (pos < s.size()) {
    uint32_t cp = DecodeUtf8(s, &pos);
    AppendUtf8(first ? UpperCodePoint(cp) : LowerCodePoint(cp), &out);
    first = false;
  }
  return out;
}

// Python's str.title(): a cased letter after a cased letter is lowered, any
// other raised.
std::string PythonTitle(absl::string_view s) {
  std::string out;
  size_t pos = 0;
  bool previous_cased = false;
  while (pos < s.size()) {
    uint32_t cp = DecodeUtf8(s, &pos);
    const bool cased = IsCased(cp);
    AppendUtf8(cased ? (previous_cased ? LowerCodePoint(cp) : UpperCodePoint(cp)) : cp, &out);
    previous_cased = cased;
  }
  return out;
}

// jinja2's title filter: words begin after runs of whitespace, '-', '(',
// '{', '[' or '<'; each word is capitalized.
std::string JinjaTitle(absl::string_view s) {
  auto is_break = [](const std::string& cp) {
    return IsPythonSpace(cp) || cp == "-" || cp == "(" || cp == "{" || cp == "[" || cp == "<";
  };
  std::vector<std::string> cps = SplitCodePoints(s);
  std::string out;
  size_t i = 0;
  while (i < cps.size()) {
    size_t j = i;
    const bool breaking = is_break(cps[i]);
    while (j < cps.size() && is_break(cps[j]) == breaking) ++j;
    std::string item;
    for (size_t k = i; k < j; ++k) item += cps[k];
    out += breaking ? item : Capitalize(item);
    i = j;
  }
  return out;
}

std::string StripChars(absl::string_view s, absl::string_view chars, bool left, bool right) {
  std::vector<uint32_t> set;
  for (size_t pos = 0; pos < chars.size();) set.push_back(DecodeUtf8(chars, &pos));
  auto in_set = [&](uint32_t cp) { return std::find(set.begin(), set.end(), cp) != set.end(); };
  // Scans from each end, so a long string is not split into code points.
  size_t begin = 0;
  size_t end = s.size();
  if (left) {
    while (begin < end) {
      size_t next = begin;
      if (!in_set(DecodeUtf8(s, &next))) break;
      begin = next;
    }
  }
  if (right) {
    while (end > begin) {
      size_t start = end - 1;
      while (start > begin && (static_cast<unsigned char>(s[start]) & 0xc0) == 0x80) --start;
      size_t next = start;
      uint32_t cp = DecodeUtf8(s, &next);
      if (next != end || !in_set(cp)) break;
      end = start;
    }
  }
  return std::string(s.substr(begin, end - begin));
}

// Python's str.replace(old, new, count).
std::string Replace(const std::string& s, const std::string& old, const std::string& replacement,
                    int64_t count) {
  std::string out;
  if (old.empty()) {
    // Python inserts the replacement before every code point and at the end.
    std::vector<std::string> cps = SplitCodePoints(s);
    int64_t done = 0;
    for (const std::string& cp : cps) {
      if (count < 0 || done < count) {
        out += replacement;
        ++done;
      }
      out += cp;
    }
    if (count < 0 || done < count) out += replacement;
    return out;
  }
  size_t pos = 0;
  int64_t done = 0;
  while (count < 0 || done < count) {
    size_t hit = s.find(old, pos);
    if (hit == std::string::npos) break;
    out.append(s, pos, hit - pos);
    out += replacement;
    pos = hit + old.size();
    ++done;
  }
  out.append(s, pos, std::string::npos);
  return out;
}

// markupsafe's escape(): the five characters HTML gives meaning to, written
// as markupsafe writes them.
std::string HtmlEscape(absl::string_view s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&#34;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

// What a Markup joins of a value (Markup.escape): a Markup's own text, any
// other value's str() escaped.
std::string MarkupText(const Value& v) {
  return v.is_markup() ? v.as_string() : HtmlEscape(v.Str());
}

// A string result that stays a Markup when its subject is one, as the str
// methods markupsafe overrides (and jinja2's filters built on them) keep it.
Value LikeSubject(const Value& subject, std::string s) {
  return subject.is_markup() ? Value::Markup(std::move(s)) : Value(std::move(s));
}

// Python's str.splitlines(): lines end at \n, \r, \r\n, \v, \f, \x1c to
// \x1e, U+0085, U+2028 and U+2029; the ends are dropped, and a final end
// leaves no empty line after it.
std::vector<std::string> SplitLines(const std::string& s) {
  std::vector<std::string> lines;
  size_t start = 0;
  size_t pos = 0;
  while (pos < s.size()) {
    const size_t at = pos;
    const uint32_t cp = DecodeUtf8(s, &pos);
    // U+0085 only as its two UTF-8 bytes, not a stray 0x85 byte.
    const bool ends_line = cp == '\n' || cp == '\r' || cp == 0x0b || cp == 0x0c ||
                           (cp >= 0x1c && cp <= 0x1e) || (cp == 0x85 && pos - at == 2) ||
                           cp == 0x2028 || cp == 0x2029;
    if (!ends_line) continue;
    lines.push_back(s.substr(start, at - start));
    if (cp == '\r' && pos < s.size() && s[pos] == '\n') ++pos;
    start = pos;
  }
  if (start < s.size()) lines.push_back(s.substr(start));
  return lines;
}

// Python's str.split(sep, maxsplit).
absl::StatusOr<Items> Split(const std::string& s, const Value& sep, int64_t maxsplit) {
  Items out;
  if (sep.is_none() || sep.is_undefined()) {
    std::vector<std::string> cps = SplitCodePoints(s);
    size_t i = 0;
    while (true) {
      while (i < cps.size() && IsPythonSpace(cps[i])) ++i;
      if (i >= cps.size()) break;
      if (maxsplit >= 0 && static_cast<int64_t>(out.size()) == maxsplit) {
        std::string rest;
        for (size_t k = i; k < cps.size(); ++k) rest += cps[k];
        out.push_back(Value(PythonStrip(rest, false, true)));
        break;
      }
      std::string word;
      while (i < cps.size() && !IsPythonSpace(cps[i])) word += cps[i++];
      out.push_back(Value(std::move(word)));
    }
    return out;
  }
  if (!sep.is_string()) {
    return absl::InvalidArgumentError(
        absl::StrCat("must be str or None, not ", sep.TypeName()));
  }
  const std::string& separator = sep.as_string();
  if (separator.empty()) return absl::InvalidArgumentError("empty separator");
  size_t pos = 0;
  while (maxsplit < 0 || static_cast<int64_t>(out.size()) < maxsplit) {
    size_t hit = s.find(separator, pos);
    if (hit == std::string::npos) break;
    out.push_back(Value(s.substr(pos, hit - pos)));
    pos = hit + separator.size();
  }
  out.push_back(Value(s.substr(pos)));
  return out;
}

int64_t CodePointCount(const std::string& s) {
  int64_t n = 0;
  for (size_t pos = 0; pos < s.size(); ++n) DecodeUtf8(s, &pos);
  return n;
}

// Python's floor division and modulo on integers.
int64_t FloorDiv(int64_t a, int64_t b) {
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}
int64_t FloorMod(int64_t a, int64_t b) { return a - FloorDiv(a, b) * b; }

bool IsIntLike(const Value& v) {
  return v.kind() == Value::Kind::kInt || v.kind() == Value::Kind::kBool;
}

// The items a for loop, list() or a filter iterates: a list's items, a
// string's code points, a dict's keys; undefined iterates nothing.
absl::StatusOr<Items> Iterate(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kList:
      return v.items();
    case Value::Kind::kString: {
      Items out;
      for (std::string& cp : SplitCodePoints(v.as_string())) out.push_back(Value(std::move(cp)));
      return out;
    }
    case Value::Kind::kDict: {
      Items out;
      for (const auto& [key, value] : v.dict().entries()) out.push_back(key);
      return out;
    }
    case Value::Kind::kUndefined:
      return Items();
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("'", v.TypeName(), "' object is not iterable"));
  }
}

absl::StatusOr<int64_t> Length(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::kString:
      return CodePointCount(v.as_string());
    case Value::Kind::kList:
      if (v.flavor() != Value::ListFlavor::kGenerator) return static_cast<int64_t>(v.items().size());
      break;
    case Value::Kind::kDict:
      return static_cast<int64_t>(v.dict().size());
    case Value::Kind::kUndefined:
      return 0;
    default:
      break;
  }
  return absl::InvalidArgumentError(absl::StrCat("object of type '", v.TypeName(), "' has no len()"));
}

absl::StatusOr<bool> Contains(const Value& container, const Value& item) {
  switch (container.kind()) {
    case Value::Kind::kString:
      if (!item.is_string()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "'in <string>' requires string as left operand, not ", item.TypeName()));
      }
      return absl::StrContains(container.as_string(), item.as_string());
    case Value::Kind::kList:
      for (const Value& v : container.items()) {
        if (Equals(v, item)) return true;
      }
      return false;
    case Value::Kind::kDict:
      if (item.is_list() && item.flavor() != Value::ListFlavor::kGenerator &&
          item.flavor() != Value::ListFlavor::kTuple) {
        return absl::InvalidArgumentError("unhashable type: 'list'");
      }
      if (item.is_dict() || item.kind() == Value::Kind::kNamespace) {
        return absl::InvalidArgumentError(absl::StrCat("unhashable type: '", item.TypeName(), "'"));
      }
      return container.dict().Find(item) != nullptr;
    case Value::Kind::kUndefined:
      return false;
    default:
      return absl::InvalidArgumentError(absl::StrCat(
          "argument of type '", container.TypeName(), "' is not iterable"));
  }
}

// Python's slice indices for a sequence of `size` items.
std::vector<size_t> SliceIndices(int64_t size, std::optional<int64_t> start,
                                 std::optional<int64_t> stop, int64_t step) {
  auto clamp = [&](std::optional<int64_t> v, int64_t fallback, int64_t low, int64_t high) {
    if (!v) return fallback;
    int64_t x = *v < 0 ? *v + size : *v;
    return std::clamp(x, low, high);
  };
  std::vector<size_t> out;
  if (step > 0) {
    int64_t b = clamp(start, 0, 0, size);
    int64_t e = clamp(stop, size, 0, size);
    for (int64_t i = b; i < e; i += step) out.push_back(static_cast<size_t>(i));
  } else {
    int64_t b = clamp(start, size - 1, -1, size - 1);
    int64_t e = clamp(stop, -1, -1, size - 1);
    if (stop && *stop < 0 && *stop + size < 0) e = -1;
    for (int64_t i = b; i > e; i += step) out.push_back(static_cast<size_t>(i));
  }
  return out;
}

// Positional-or-keyword arguments of a builtin.
class Args {
 public:
  Args(const CallArgs& call, std::vector<std::string> names, std::string function)
      : call_(call), names_(std::move(names)), function_(std::move(function)) {}

  absl::Status Check() const {
    if (call_.positional.size() > names_.size()) {
      return absl::InvalidArgumentError(absl::StrCat(function_, "() takes at most ",
                                                     names_.size(), " arguments"));
    }
    for (const auto& [key, value] : call_.keyword) {
      if (std::find(names_.begin(), names_.end(), key) == names_.end()) {
        return absl::InvalidArgumentError(
            absl::StrCat(function_, "() got an unexpected keyword argument '", key, "'"));
      }
    }
    return absl::OkStatus();
  }
  // The argument, or undefined when not given.
  Value Get(size_t index) const {
    if (index < call_.positional.size()) return call_.positional[index];
    for (const auto& [key, value] : call_.keyword) {
      if (key == names_[index]) return value;
    }
    return Value::Undefined(names_[index]);
  }
  bool Has(size_t index) const { return !Get(index).is_undefined(); }

 private:
  const CallArgs& call_;
  std::vector<std::string> names_;
  std::string function_;
};

Value MakeTuple(Items items) { return Value::List(std::move(items), Value::ListFlavor::kTuple); }

Value DictItems(const Dict& dict) {
  Items out;
  for (const auto& [key, value] : dict.entries()) out.push_back(MakeTuple({key, value}));
  return Value::List(std::move(out));
}

class Renderer {
 public:
  explicit Renderer(const RenderOptions& options) : options_(options) {}

  absl::Status RenderBody(const Body& body, const ScopePtr& scope, std::string* out) {
    for (const NodePtr& node : body) {
      if (absl::Status s = RenderNode(*node, scope, out); !s.ok()) return s;
      if (flow_ != Flow::kNormal) return absl::OkStatus();
    }
    return absl::OkStatus();
  }

  ScopePtr MakeGlobals(const Dict& context) {
    auto globals = std::make_shared<Scope>(nullptr);
    DefineBuiltins(globals.get());
    // Render's variables shadow the globals, as jinja2's render() kwargs do.
    for (const auto& [key, value] : context.entries()) {
      if (key.is_string()) globals->Set(key.as_string(), value);
    }
    return globals;
  }

 private:
  enum class Flow { kNormal, kBreak, kContinue };

  absl::Status RenderNode(const Node& node, const ScopePtr& scope, std::string* out) {
    switch (node.kind) {
      case Node::Kind::kText:
        *out += node.text;
        return absl::OkStatus();
      case Node::Kind::kOutput: {
        absl::StatusOr<Value> v = Eval(*node.expr, scope);
        if (!v.ok()) return v.status();
        if (v->is_list() && v->flavor() == Value::ListFlavor::kGenerator) {
          return LineError(node.line, "printing a generator (add '| list')");
        }
        *out += v->Str();
        return absl::OkStatus();
      }
      case Node::Kind::kIf:
        for (size_t i = 0; i < node.conditions.size(); ++i) {
          absl::StatusOr<Value> c = Eval(*node.conditions[i], scope);
          if (!c.ok()) return c.status();
          if (c->Truthy()) return RenderBody(node.bodies[i], scope, out);
        }
        return RenderBody(node.else_body, scope, out);
      case Node::Kind::kFor:
        return RenderFor(node, scope, out);
      case Node::Kind::kSet: {
        absl::StatusOr<Value> v = Eval(*node.expr, scope);
        if (!v.ok()) return v.status();
        return Assign(*node.target, *std::move(v), scope);
      }
      case Node::Kind::kSetBlock: {
        // The body is a scope of its own: what it sets stays inside.
        std::string text;
        if (absl::Status s = RenderBody(node.body, std::make_shared<Scope>(scope), &text); !s.ok()) {
          return s;
        }
        // A break or continue inside leaves before the assignment, as in jinja2.
        if (flow_ != Flow::kNormal) return absl::OkStatus();
        absl::StatusOr<Value> v = Value(std::move(text));
        if (node.filter != nullptr) v = EvalOnBlock(*node.filter, *v, scope);
        if (!v.ok()) return v.status();
        return Assign(*node.target, *std::move(v), scope);
      }
      case Node::Kind::kMacro:
        scope->Set(node.name, MakeMacro(node, scope));
        return absl::OkStatus();
      case Node::Kind::kCallBlock:
        return RenderCallBlock(node, scope, out);
      case Node::Kind::kFilterBlock: {
        std::string text;
        if (absl::Status s = RenderBody(node.body, std::make_shared<Scope>(scope), &text); !s.ok()) {
          return s;
        }
        // A break or continue inside leaves before the output, as in jinja2.
        if (flow_ != Flow::kNormal) return absl::OkStatus();
        absl::StatusOr<Value> v = EvalOnBlock(*node.filter, Value(std::move(text)), scope);
        if (!v.ok()) return v.status();
        *out += v->Str();
        return absl::OkStatus();
      }
      case Node::Kind::kBreak:
        flow_ = Flow::kBreak;
        return absl::OkStatus();
      case Node::Kind::kContinue:
        flow_ = Flow::kContinue;
        return absl::OkStatus();
    }
    return absl::OkStatus();
  }

  absl::StatusOr<Value> EvalOnBlock(const Expr& filter, Value body, const ScopePtr& scope) {
    Value saved = std::move(block_value_);
    block_value_ = std::move(body);
    absl::StatusOr<Value> v = Eval(filter, scope);
    block_value_ = std::move(saved);
    return v;
  }

  absl::Status Assign(const Expr& target, Value value, const ScopePtr& scope) {
    if (target.kind == Expr::Kind::kName) {
      scope->Set(target.name, std::move(value));
      return absl::OkStatus();
    }
    if (target.kind == Expr::Kind::kAttribute) {
      const Value* ns = scope->Lookup(target.args[0]->name);
      if (ns == nullptr || ns->kind() != Value::Kind::kNamespace) {
        return LineError(target.line, "cannot assign attribute on non-namespace object");
      }
      ns->ns().attributes.Set(Value(target.name), std::move(value));
      return absl::OkStatus();
    }
    // A tuple of names: unpack.
    absl::StatusOr<Items> items = Iterate(value);
    if (!items.ok() || value.is_undefined()) {
      return LineError(target.line, absl::StrCat("cannot unpack non-iterable ", value.TypeName(),
                                                 " object"));
    }
    if (items->size() != target.args.size()) {
      return LineError(target.line,
                       absl::StrCat(items->size() < target.args.size() ? "not enough" : "too many",
                                    " values to unpack (expected ", target.args.size(), ")"));
    }
    for (size_t i = 0; i < items->size(); ++i) {
      scope->Set(target.args[i]->name, (*items)[i]);
    }
    return absl::OkStatus();
  }

  absl::Status RenderFor(const Node& node, const ScopePtr& scope, std::string* out) {
    absl::StatusOr<Value> iterable = Eval(*node.expr, scope);
    if (!iterable.ok()) return iterable.status();
    absl::StatusOr<Items> all = Iterate(*iterable);
    if (!all.ok()) return LineError(node.line, all.status().message());
    Items items;
    if (node.condition == nullptr) {
      items = *std::move(all);
    } else {
      // The loop's `if` sees the item but not `loop`.
      for (Value& item : *all) {
        auto filter_scope = std::make_shared<Scope>(scope);
        if (absl::Status s = Assign(*node.target, item, filter_scope); !s.ok()) return s;
        absl::StatusOr<Value> keep = Eval(*node.condition, filter_scope);
        if (!keep.ok()) return keep.status();
        if (keep->Truthy()) items.push_back(std::move(item));
      }
    }
    // jinja2 runs the else block unless some iteration reached the end of
    // the body: not only for an empty loop, but also when every iteration
    // ended in break or continue.
    bool completed_an_iteration = false;
    const int64_t n = static_cast<int64_t>(items.size());
    for (int64_t i = 0; i < n; ++i) {
      auto body_scope = std::make_shared<Scope>(scope);
      if (absl::Status s = Assign(*node.target, items[i], body_scope); !s.ok()) return s;
      body_scope->Set("loop", LoopValue(items, i));
      if (absl::Status s = RenderBody(node.body, body_scope, out); !s.ok()) return s;
      const Flow flow = flow_;
      flow_ = Flow::kNormal;
      if (flow == Flow::kNormal) completed_an_iteration = true;
      if (flow == Flow::kBreak) break;
    }
    if (completed_an_iteration) return absl::OkStatus();
    // The else block is inside the loop's scope too.
    return RenderBody(node.else_body, std::make_shared<Scope>(scope), out);
  }

  static Value LoopValue(const Items& items, int64_t i) {
    const int64_t n = static_cast<int64_t>(items.size());
    Dict loop;
    loop.Set("index", Value(i + 1));
    loop.Set("index0", Value(i));
    loop.Set("revindex", Value(n - i));
    loop.Set("revindex0", Value(n - i - 1));
    loop.Set("first", Value(i == 0));
    loop.Set("last", Value(i == n - 1));
    loop.Set("length", Value(n));
    loop.Set("depth", Value(1));
    loop.Set("depth0", Value(0));
    if (i > 0) loop.Set("previtem", items[i - 1]);
    if (i + 1 < n) loop.Set("nextitem", items[i + 1]);
    loop.Set("cycle", Value::FromFunction("cycle", [i](const CallArgs& args) -> absl::StatusOr<Value> {
      if (args.positional.empty()) return absl::InvalidArgumentError("no items for cycling given");
      return args.positional[static_cast<size_t>(i) % args.positional.size()];
    }));
    return Value::FromDict(std::move(loop));
  }

  // A macro: a function that renders its body in a scope under the one it
  // was defined in, with its parameters bound.
  Value MakeMacro(const Node& node, const ScopePtr& scope) {
    retained_.push_back(scope);  // the macro refers to its scope without owning it
    Scope* defining = scope.get();
    return Value::FromFunction(node.name, [this, &node, defining](const CallArgs& args) {
      return CallMacro(node, defining, args);
    });
  }

  absl::StatusOr<Value> CallMacro(const Node& node, Scope* defining, const CallArgs& args) {
    if (args.positional.size() > node.params.size()) {
      return LineError(node.line, absl::StrCat("macro '", node.name, "' takes not more than ",
                                               node.params.size(), " argument(s)"));
    }
    ScopePtr parent = FindRetained(defining);
    auto scope = std::make_shared<Scope>(parent);
    std::vector<bool> bound(node.params.size(), false);
    for (size_t i = 0; i < args.positional.size(); ++i) {
      scope->Set(node.params[i].name, args.positional[i]);
      bound[i] = true;
    }
    for (const auto& keyword : args.keyword) {
      // Named, not a structured binding: the lambda below captures it.
      const std::string& key = keyword.first;
      const Value& value = keyword.second;
      if (key == "caller") {
        scope->Set("caller", value);
        continue;
      }
      auto it = std::find_if(node.params.begin(), node.params.end(),
                             [&](const MacroParam& p) { return p.name == key; });
      if (it == node.params.end()) {
        return LineError(node.line, absl::StrCat("macro '", node.name,
                                                 "' has no argument named '", key, "'"));
      }
      scope->Set(key, value);
      bound[it - node.params.begin()] = true;
    }
    for (size_t i = 0; i < node.params.size(); ++i) {
      if (bound[i]) continue;
      Value v = Value::Undefined(node.params[i].name);
      if (node.params[i].default_value != nullptr) {
        absl::StatusOr<Value> d = Eval(*node.params[i].default_value, scope);
        if (!d.ok()) return d.status();
        v = *std::move(d);
      }
      scope->Set(node.params[i].name, std::move(v));
    }
    if (++depth_ > kMaxCallDepth) {
      --depth_;
      return LineError(node.line, absl::StrCat("macro '", node.name, "' nests too deeply"));
    }
    std::string out;
    const Flow saved = flow_;
    flow_ = Flow::kNormal;
    absl::Status s = RenderBody(node.body, scope, &out);
    flow_ = saved;
    --depth_;
    if (!s.ok()) return s;
    return Value(std::move(out));
  }

  ScopePtr FindRetained(Scope* scope) const {
    for (const ScopePtr& s : retained_) {
      if (s.get() == scope) return s;
    }
    return nullptr;
  }

  absl::Status RenderCallBlock(const Node& node, const ScopePtr& scope, std::string* out) {
    retained_.push_back(scope);
    Value caller = Value::FromFunction(
        "caller", [this, &node, scope](const CallArgs& args) -> absl::StatusOr<Value> {
          auto body_scope = std::make_shared<Scope>(scope);
          for (size_t i = 0; i < node.params.size(); ++i) {
            Value v = i < args.positional.size() ? args.positional[i]
                                                 : Value::Undefined(node.params[i].name);
            for (const auto& [key, value] : args.keyword) {
              if (key == node.params[i].name) v = value;
            }
            if (v.is_undefined() && node.params[i].default_value != nullptr) {
              absl::StatusOr<Value> d = Eval(*node.params[i].default_value, body_scope);
              if (!d.ok()) return d.status();
              v = *std::move(d);
            }
            body_scope->Set(node.params[i].name, std::move(v));
          }
          std::string text;
          if (absl::Status s = RenderBody(node.body, body_scope, &text); !s.ok()) return s;
          return Value(std::move(text));
        });
    const Expr& call = *node.expr;
    absl::StatusOr<Value> callee = Eval(*call.args[0], scope);
    if (!callee.ok()) return callee.status();
    absl::StatusOr<CallArgs> args = EvalArgs(call, 1, scope);
    if (!args.ok()) return args.status();
    args->keyword.emplace_back("caller", std::move(caller));
    absl::StatusOr<Value> v = CallValue(call, *callee, *args);
    if (!v.ok()) return v.status();
    *out += v->Str();
    return absl::OkStatus();
  }

  absl::StatusOr<CallArgs> EvalArgs(const Expr& e, size_t first, const ScopePtr& scope) {
    CallArgs args;
    for (size_t i = first; i < e.args.size(); ++i) {
      absl::StatusOr<Value> v = Eval(*e.args[i], scope);
      if (!v.ok()) return v.status();
      args.positional.push_back(*std::move(v));
    }
    for (const auto& [key, expr] : e.kwargs) {
      absl::StatusOr<Value> v = Eval(*expr, scope);
      if (!v.ok()) return v.status();
      args.keyword.emplace_back(key, *std::move(v));
    }
    return args;
  }

  absl::StatusOr<Value> CallValue(const Expr& e, const Value& callee, const CallArgs& args) {
    if (callee.kind() != Value::Kind::kFunction) {
      if (callee.is_undefined()) return Undefined(e, callee);
      return LineError(e.line, absl::StrCat("'", callee.TypeName(), "' object is not callable"));
    }
    absl::StatusOr<Value> v = callee.function().call(args);
    if (!v.ok() && !absl::StartsWith(v.status().message(), "line ")) {
      return LineError(e.line, v.status().message());
    }
    return v;
  }

  absl::Status Undefined(const Expr& e, const Value& v) {
    if (v.undefined_name().empty()) return LineError(e.line, "value is undefined");
    return LineError(e.line, absl::StrCat("'", v.undefined_name(), "' is undefined"));
  }

  absl::StatusOr<Value> Eval(const Expr& e, const ScopePtr& scope) {
    switch (e.kind) {
      case Expr::Kind::kLiteral:
        return e.literal;
      case Expr::Kind::kName: {
        const Value* v = scope->Lookup(e.name);
        return v != nullptr ? *v : Value::Undefined(e.name);
      }
      case Expr::Kind::kList:
      case Expr::Kind::kTuple: {
        Items items;
        for (const ExprPtr& arg : e.args) {
          absl::StatusOr<Value> v = Eval(*arg, scope);
          if (!v.ok()) return v.status();
          items.push_back(*std::move(v));
        }
        return Value::List(std::move(items), e.kind == Expr::Kind::kTuple
                                                 ? Value::ListFlavor::kTuple
                                                 : Value::ListFlavor::kList);
      }
      case Expr::Kind::kDict: {
        Dict dict;
        for (size_t i = 0; i + 1 < e.args.size(); i += 2) {
          absl::StatusOr<Value> k = Eval(*e.args[i], scope);
          if (!k.ok()) return k.status();
          absl::StatusOr<Value> v = Eval(*e.args[i + 1], scope);
          if (!v.ok()) return v.status();
          dict.Set(*std::move(k), *std::move(v));
        }
        return Value::FromDict(std::move(dict));
      }
      case Expr::Kind::kAttribute: {
        absl::StatusOr<Value> subject = Eval(*e.args[0], scope);
        if (!subject.ok()) return subject.status();
        if (subject->is_undefined()) return Undefined(e, *subject);
        return GetAttribute(*subject, e.name);
      }
      case Expr::Kind::kItem:
        return EvalItem(e, scope);
      case Expr::Kind::kSlice:
        return EvalSlice(e, scope);
      case Expr::Kind::kCall: {
        absl::StatusOr<Value> callee = Eval(*e.args[0], scope);
        if (!callee.ok()) return callee.status();
        absl::StatusOr<CallArgs> args = EvalArgs(e, 1, scope);
        if (!args.ok()) return args.status();
        return CallValue(e, *callee, *args);
      }
      case Expr::Kind::kFilter: {
        Value subject = block_value_;
        if (e.args[0] != nullptr) {
          absl::StatusOr<Value> v = Eval(*e.args[0], scope);
          if (!v.ok()) return v.status();
          subject = *std::move(v);
        }
        absl::StatusOr<CallArgs> args = EvalArgs(e, 1, scope);
        if (!args.ok()) return args.status();
        absl::StatusOr<Value> v = ApplyFilter(e.name, subject, *args);
        if (!v.ok() && !absl::StartsWith(v.status().message(), "line ")) {
          return LineError(e.line, absl::StrCat("filter '", e.name, "': ", v.status().message()));
        }
        return v;
      }
      case Expr::Kind::kTest: {
        absl::StatusOr<Value> subject = Eval(*e.args[0], scope);
        if (!subject.ok()) return subject.status();
        absl::StatusOr<CallArgs> args = EvalArgs(e, 1, scope);
        if (!args.ok()) return args.status();
        absl::StatusOr<bool> r = ApplyTest(e.name, *subject, args->positional);
        if (!r.ok()) {
          return LineError(e.line, absl::StrCat("test '", e.name, "': ", r.status().message()));
        }
        return Value(*r != e.negated);
      }
      case Expr::Kind::kUnary:
        return EvalUnary(e, scope);
      case Expr::Kind::kBinary:
        return EvalBinary(e, scope);
      case Expr::Kind::kCompare:
        return EvalCompare(e, scope);
      case Expr::Kind::kCondition: {
        absl::StatusOr<Value> test = Eval(*e.args[1], scope);
        if (!test.ok()) return test.status();
        if (test->Truthy()) return Eval(*e.args[0], scope);
        if (e.args[2] == nullptr) return Value::Undefined();
        return Eval(*e.args[2], scope);
      }
    }
    return LineError(e.line, "unknown expression");
  }

  // jinja2's getattr: a method of the value first, then its item.
  absl::StatusOr<Value> GetAttribute(const Value& subject, const std::string& name) {
    if (std::optional<Value> method = Method(subject, name)) return *method;
    if (subject.is_dict()) {
      const Value* v = subject.dict().FindString(name);
      return v != nullptr ? *v : Value::Undefined(name);
    }
    if (subject.kind() == Value::Kind::kNamespace) {
      const Value* v = subject.ns().attributes.FindString(name);
      return v != nullptr ? *v : Value::Undefined(name);
    }
    return Value::Undefined(name);
  }

  absl::StatusOr<Value> EvalItem(const Expr& e, const ScopePtr& scope) {
    absl::StatusOr<Value> subject = Eval(*e.args[0], scope);
    if (!subject.ok()) return subject.status();
    absl::StatusOr<Value> key = Eval(*e.args[1], scope);
    if (!key.ok()) return key.status();
    if (subject->is_undefined()) return Undefined(e, *subject);
    // jinja2's getitem: the item first, then (for a string key) the attribute.
    if (subject->is_dict()) {
      if (const Value* v = subject->dict().Find(*key)) return *v;
    } else if ((subject->is_list() && subject->flavor() != Value::ListFlavor::kGenerator) ||
               subject->is_string()) {
      if (IsIntLike(*key)) {
        Items items = subject->is_list() ? subject->items() : *Iterate(*subject);
        int64_t i = key->as_int();
        const int64_t n = static_cast<int64_t>(items.size());
        if (i < 0) i += n;
        if (i >= 0 && i < n) {
          const Value& item = items[static_cast<size_t>(i)];
          return subject->is_string() ? LikeSubject(*subject, item.as_string()) : item;
        }
        return Value::Undefined();
      }
    }
    if (key->is_string()) return GetAttribute(*subject, key->as_string());
    return Value::Undefined();
  }

  // jinja2 compiles a slice to Python's own subscript (not its forgiving
  // getitem), so slicing what is not a list, tuple or string is an error.
  absl::StatusOr<Value> EvalSlice(const Expr& e, const ScopePtr& scope) {
    absl::StatusOr<Value> subject = Eval(*e.args[0], scope);
    if (!subject.ok()) return subject.status();
    std::optional<int64_t> bounds[3];
    bool integers = true;
    for (int i = 0; i < 3; ++i) {
      if (e.args[i + 1] == nullptr) continue;
      absl::StatusOr<Value> b = Eval(*e.args[i + 1], scope);
      if (!b.ok()) return b.status();
      if (b->is_none()) continue;
      if (IsIntLike(*b)) {
        bounds[i] = b->as_int();
      } else {
        integers = false;
      }
    }
    if (subject->is_undefined()) return Undefined(e, *subject);
    const bool is_string = subject->is_string();
    const bool is_sequence =
        is_string || (subject->is_list() && subject->flavor() != Value::ListFlavor::kGenerator);
    if (!is_sequence) {
      return LineError(e.line, absl::StrCat("'", subject->TypeName(), "' object is not subscriptable"));
    }
    if (!integers) return LineError(e.line, "slice indices must be integers or None");
    const int64_t step = bounds[2].value_or(1);
    if (step == 0) return LineError(e.line, "slice step cannot be zero");
    Items items = is_string ? *Iterate(*subject) : subject->items();
    std::vector<size_t> picked =
        SliceIndices(static_cast<int64_t>(items.size()), bounds[0], bounds[1], step);
    if (is_string) {
      std::string out;
      for (size_t i : picked) out += items[i].as_string();
      return LikeSubject(*subject, std::move(out));
    }
    Items out;
    for (size_t i : picked) out.push_back(items[i]);
    return Value::List(std::move(out), subject->flavor());
  }

  absl::StatusOr<Value> EvalUnary(const Expr& e, const ScopePtr& scope) {
    absl::StatusOr<Value> v = Eval(*e.args[0], scope);
    if (!v.ok()) return v.status();
    if (e.name == "not") return Value(!v->Truthy());
    if (v->is_undefined()) return Undefined(e, *v);
    if (!v->is_number()) {
      return LineError(e.line, absl::StrCat("bad operand type for unary ", e.name, ": '",
                                            v->TypeName(), "'"));
    }
    if (e.name == "+") return IsIntLike(*v) ? Value(v->as_int()) : *v;
    if (IsIntLike(*v)) return Value(-v->as_int());
    return Value(-v->as_double());
  }

  absl::StatusOr<Value> EvalBinary(const Expr& e, const ScopePtr& scope) {
    absl::StatusOr<Value> left = Eval(*e.args[0], scope);
    if (!left.ok()) return left.status();
    if (e.name == "and") return left->Truthy() ? Eval(*e.args[1], scope) : left;
    if (e.name == "or") return left->Truthy() ? left : Eval(*e.args[1], scope);
    absl::StatusOr<Value> right = Eval(*e.args[1], scope);
    if (!right.ok()) return right.status();
    if (e.name == "~") return Value(left->Str() + right->Str());
    if (e.name == "%" && left->is_string()) {
      // Python formats with any right operand, undefined included.
      absl::StatusOr<Value> v = PercentFormat(*left, *right);
      if (!v.ok()) return LineError(e.line, v.status().message());
      return v;
    }
    if (left->is_undefined()) return Undefined(e, *left);
    if (right->is_undefined()) return Undefined(e, *right);
    absl::StatusOr<Value> v = Arithmetic(e.name, *left, *right);
    if (!v.ok()) return LineError(e.line, v.status().message());
    return v;
  }

  static absl::StatusOr<Value> Arithmetic(const std::string& op, const Value& a, const Value& b) {
    if (a.is_number() && b.is_number()) {
      const bool ints = IsIntLike(a) && IsIntLike(b);
      const double x = a.as_double();
      const double y = b.as_double();
      if (op == "+") return ints ? Value(a.as_int() + b.as_int()) : Value(x + y);
      if (op == "-") return ints ? Value(a.as_int() - b.as_int()) : Value(x - y);
      if (op == "*") return ints ? Value(a.as_int() * b.as_int()) : Value(x * y);
      if (op == "/") {
        if (y == 0) return absl::InvalidArgumentError("division by zero");
        return Value(x / y);
      }
      if (op == "//" || op == "%") {
        if (y == 0) return absl::InvalidArgumentError("integer division or modulo by zero");
        if (ints) {
          return Value(op == "//" ? FloorDiv(a.as_int(), b.as_int())
                                  : FloorMod(a.as_int(), b.as_int()));
        }
        // Python's float divmod: floor division from fmod, so that
        // 1000 // 0.1 is 9999.0 as in Python, not floor(1000 / 0.1).
        double m = std::fmod(x, y);
        double div = (x - m) / y;
        if (m != 0 && ((y < 0) != (m < 0))) {
          m += y;
          div -= 1.0;
        }
        if (op == "%") return Value(m != 0 ? m : std::copysign(0.0, y));
        if (div == 0) return Value(std::copysign(0.0, x / y));
        double floor_div = std::floor(div);
        if (div - floor_div > 0.5) floor_div += 1.0;
        return Value(floor_div);
      }
      if (op == "**") {
        if (ints && b.as_int() >= 0) {
          int64_t r = 1;
          for (int64_t i = 0; i < b.as_int(); ++i) r *= a.as_int();
          return Value(r);
        }
        return Value(std::pow(x, y));
      }
    }
    if (op == "+" && a.is_string() && b.is_string()) {
      // Markup's + escapes the plain side, from either side.
      if (a.is_markup() || b.is_markup()) return Value::Markup(MarkupText(a) + MarkupText(b));
      return Value(a.as_string() + b.as_string());
    }
    if (op == "+" && a.is_list() && b.is_list() && a.flavor() == b.flavor() &&
        a.flavor() != Value::ListFlavor::kGenerator) {
      Items items = a.items();
      items.insert(items.end(), b.items().begin(), b.items().end());
      return Value::List(std::move(items), a.flavor());
    }
    if (op == "*" && (a.is_string() || a.is_list()) && IsIntLike(b)) return Repeat(a, b.as_int());
    if (op == "*" && (b.is_string() || b.is_list()) && IsIntLike(a)) return Repeat(b, a.as_int());
    if (op == "%" && a.is_string()) return PercentFormat(a, b);
    return absl::InvalidArgumentError(absl::StrCat("unsupported operand type(s) for ", op, ": '",
                                                   a.TypeName(), "' and '", b.TypeName(), "'"));
  }

  // Python's `format % args` for the conversions templates use: %s, %r, %d,
  // %i and %%. A tuple gives the arguments; any other value is the one
  // argument, and a dict or list (which Python treats as a mapping) may go
  // unused. Other conversions, flags and widths are refused. A Markup format
  // escapes what %s and %r insert, and the result is a Markup.
  static absl::StatusOr<Value> PercentFormat(const Value& format_value, const Value& args) {
    const std::string& format = format_value.as_string();
    const bool markup = format_value.is_markup();
    const bool tuple = args.is_list() && args.flavor() == Value::ListFlavor::kTuple;
    const Items positional = tuple ? args.items() : Items{args};
    // jinja2's Undefined has __getitem__, so Python treats it as a mapping too.
    const bool mapping_like = !tuple && (args.is_dict() || args.is_list() || args.is_undefined());
    size_t next = 0;
    std::string out;
    for (size_t i = 0; i < format.size(); ++i) {
      if (format[i] != '%') {
        out += format[i];
        continue;
      }
      if (i + 1 >= format.size()) return absl::InvalidArgumentError("incomplete format");
      const char conversion = format[++i];
      if (conversion == '%') {
        out += '%';
        continue;
      }
      if (conversion != 's' && conversion != 'r' && conversion != 'd' && conversion != 'i') {
        return absl::InvalidArgumentError(
            absl::StrCat("unsupported format conversion '%", std::string(1, conversion), "'"));
      }
      if (next >= positional.size()) {
        return absl::InvalidArgumentError("not enough arguments for format string");
      }
      const Value& v = positional[next++];
      if (conversion == 's') {
        out += markup ? MarkupText(v) : v.Str();
      } else if (conversion == 'r') {
        out += markup ? HtmlEscape(v.Repr()) : v.Repr();
      } else if (IsIntLike(v)) {
        out += std::to_string(v.as_int());
      } else if (v.kind() == Value::Kind::kFloat && std::isfinite(v.as_double())) {
        out += std::to_string(static_cast<int64_t>(v.as_double()));
      } else {
        return absl::InvalidArgumentError(absl::StrCat(
            "%", std::string(1, conversion), " format: a real number is required, not ",
            v.TypeName()));
      }
    }
    if (next < positional.size() && !(mapping_like && next == 0)) {
      return absl::InvalidArgumentError("not all arguments converted during string formatting");
    }
    return LikeSubject(format_value, std::move(out));
  }

  static Value Repeat(const Value& v, int64_t times) {
    if (v.is_string()) {
      std::string out;
      for (int64_t i = 0; i < times; ++i) out += v.as_string();
      return LikeSubject(v, std::move(out));
    }
    Items items;
    for (int64_t i = 0; i < times; ++i) items.insert(items.end(), v.items().begin(), v.items().end());
    return Value::List(std::move(items), v.flavor());
  }

  absl::StatusOr<Value> EvalCompare(const Expr& e, const ScopePtr& scope) {
    absl::StatusOr<Value> left = Eval(*e.args[0], scope);
    if (!left.ok()) return left.status();
    for (size_t i = 0; i < e.ops.size(); ++i) {
      absl::StatusOr<Value> right = Eval(*e.args[i + 1], scope);
      if (!right.ok()) return right.status();
      absl::StatusOr<bool> r = Compare(e.ops[i], *left, *right);
      if (!r.ok()) {
        if (left->is_undefined()) return Undefined(e, *left);
        if (right->is_undefined()) return Undefined(e, *right);
        return LineError(e.line, r.status().message());
      }
      if (!*r) return Value(false);
      left = std::move(right);
    }
    return Value(true);
  }

  static absl::StatusOr<bool> Compare(const std::string& op, const Value& a, const Value& b) {
    if (op == "==") return Equals(a, b);
    if (op == "!=") return !Equals(a, b);
    if (op == "in") return Contains(b, a);
    if (op == "not in") {
      absl::StatusOr<bool> r = Contains(b, a);
      if (!r.ok()) return r;
      return !*r;
    }
    if (a.is_undefined() || b.is_undefined()) {
      return absl::InvalidArgumentError("comparison with an undefined value");
    }
    if (op == "<") return LessThan(a, b);
    if (op == ">") return LessThan(b, a);
    absl::StatusOr<bool> less = op == "<=" ? LessThan(b, a) : LessThan(a, b);
    if (!less.ok()) return less;
    return !*less;  // a <= b is not (b < a); a >= b is not (a < b)
  }

  // ---- methods -------------------------------------------------------

  // The bound method `name` of `subject`, if it has one.
  std::optional<Value> Method(const Value& subject, const std::string& name) {
    if (std::optional<Value> refused = SandboxRefused(subject, name)) return refused;
    if (subject.is_string()) return StringMethod(subject, name);
    if (subject.is_dict()) return DictMethod(subject, name);
    return std::nullopt;
  }

  // A method that would modify a list or dict: transformers' immutable
  // sandbox makes calling it a SecurityError, raised only when it runs.
  static std::optional<Value> SandboxRefused(const Value& subject, const std::string& name) {
    const bool list = subject.is_list() && subject.flavor() == Value::ListFlavor::kList;
    const bool refused = (list && IsListModifyingMethod(name)) ||
                         (subject.is_dict() && IsDictModifyingMethod(name));
    if (!refused) return std::nullopt;
    std::string message = absl::StrCat("access to attribute '", name, "' of '",
                                       subject.TypeName(), "' object is unsafe.");
    return Value::FromFunction(name, [message](const CallArgs&) -> absl::StatusOr<Value> {
      return absl::InvalidArgumentError(message);
    });
  }

  // The str methods; a Markup's keep it a Markup, and its replace() and
  // join() escape what they insert.
  static std::optional<Value> StringMethod(const Value& subject, const std::string& name) {
    using Fn = std::function<absl::StatusOr<Value>(const CallArgs&)>;
    const std::string& s = subject.as_string();
    const bool markup = subject.is_markup();
    Fn fn;
    if (name == "startswith" || name == "endswith") {
      const bool starts = name == "startswith";
      fn = [s, starts, name](const CallArgs& call) -> absl::StatusOr<Value> {
        Args args(call, {"prefix"}, name);
        if (absl::Status st = args.Check(); !st.ok()) return st;
        Value affix = args.Get(0);
        Items options = affix.is_list() ? affix.items() : Items{affix};
        for (const Value& o : options) {
          if (!o.is_string()) {
            return absl::InvalidArgumentError(absl::StrCat(
                name, " first arg must be str or a tuple of str, not ", o.TypeName()));
          }
          if (starts ? absl::StartsWith(s, o.as_string()) : absl::EndsWith(s, o.as_string())) {
            return Value(true);
          }
        }
        return Value(false);
      };
    } else if (name == "strip" || name == "lstrip" || name == "rstrip") {
      const bool left = name != "rstrip";
      const bool right = name != "lstrip";
      fn = [subject, left, right, name](const CallArgs& call) -> absl::StatusOr<Value> {
        Args args(call, {"chars"}, name);
        if (absl::Status st = args.Check(); !st.ok()) return st;
        Value chars = args.Get(0);
        const std::string& s = subject.as_string();
        if (chars.is_undefined() || chars.is_none()) {
          return LikeSubject(subject, PythonStrip(s, left, right));
        }
        if (!chars.is_string()) return absl::InvalidArgumentError("strip arg must be None or str");
        return LikeSubject(subject, StripChars(s, chars.as_string(), left, right));
      };
    } else if (name == "split") {
      fn = [subject](const CallArgs& call) -> absl::StatusOr<Value> {
        Args args(call, {"sep", "maxsplit"}, "split");
        if (absl::Status st = args.Check(); !st.ok()) return st;
        Value maxsplit = args.Get(1);
        absl::StatusOr<Items> parts =
            Split(subject.as_string(), args.Get(0), IsIntLike(maxsplit) ? maxsplit.as_int() : -1);
        if (!parts.ok()) return parts.status();
        for (Value& part : *parts) part = LikeSubject(subject, part.as_string());
        return Value::List(*std::move(parts));
      };
    } else if (name == "replace") {
      fn = [subject, markup](const CallArgs& call) -> absl::StatusOr<Value> {
        Args args(call, {"old", "new", "count"}, "replace");
        if (absl::Status st = args.Check(); !st.ok()) return st;
        // Markup escapes (and so takes any value for) the replacement only.
        if (!args.Get(0).is_string() || (!markup && !args.Get(1).is_string())) {
          return absl::InvalidArgumentError("replace arguments must be str");
        }
        const std::string replacement = markup ? MarkupText(args.Get(1)) : args.Get(1).as_string();
        Value count = args.Get(2);
        return LikeSubject(subject, Replace(subject.as_string(), args.Get(0).as_string(),
                                            replacement, IsIntLike(count) ? count.as_int() : -1));
      };
    } else if (name == "upper" || name == "lower" || name == "title" || name == "capitalize") {
      fn = [subject, name](const CallArgs& call) -> absl::StatusOr<Value> {
        if (!call.positional.empty() || !call.keyword.empty()) {
          return absl::InvalidArgumentError(absl::StrCat(name, "() takes no arguments"));
        }
        const std::string& s = subject.as_string();
        if (name == "upper") return LikeSubject(subject, Upper(s));
        if (name == "lower") return LikeSubject(subject, Lower(s));
        if (name == "title") return LikeSubject(subject, PythonTitle(s));
        return LikeSubject(subject, Capitalize(s));
      };
    } else if (name == "join") {
      fn = [s, markup](const CallArgs& call) -> absl::StatusOr<Value> {
        Args args(call, {"iterable"}, "join");
        if (absl::Status st = args.Check(); !st.ok()) return st;
        absl::StatusOr<Items> items = Iterate(args.Get(0));
        if (!items.ok()) return items.status();
        std::string out;
        if (markup) {
          // Markup.join escapes every item, whatever its type.
          for (size_t i = 0; i < items->size(); ++i) {
            if (i > 0) out += s;
            out += MarkupText((*items)[i]);
          }
          return Value::Markup(std::move(out));
        }
        for (size_t i = 0; i < items->size(); ++i) {
          if (!(*items)[i].is_string()) {
            return absl::InvalidArgumentError(absl::StrCat(
                "sequence item ", i, ": expected str instance, ", (*items)[i].TypeName(), " found"));
          }
          if (i > 0) out += s;
          out += (*items)[i].as_string();
        }
        return Value(std::move(out));
      };
    } else {
      return std::nullopt;
    }
    return Value::FromFunction(name, std::move(fn));
  }

  static std::optional<Value> DictMethod(const Value& subject, const std::string& name) {
    if (name != "items" && name != "keys" && name != "values" && name != "get") return std::nullopt;
    return Value::FromFunction(name, [subject, name](const CallArgs& call) -> absl::StatusOr<Value> {
      const Dict& dict = subject.dict();
      if (name == "get") {
        Args args(call, {"key", "default"}, "get");
        if (absl::Status st = args.Check(); !st.ok()) return st;
        if (const Value* v = dict.Find(args.Get(0))) return *v;
        return args.Has(1) ? args.Get(1) : Value::None();
      }
      if (!call.positional.empty() || !call.keyword.empty()) {
        return absl::InvalidArgumentError(absl::StrCat(name, "() takes no arguments"));
      }
      if (name == "items") return DictItems(dict);
      Items out;
      for (const auto& [key, value] : dict.entries()) out.push_back(name == "keys" ? key : value);
      return Value::List(std::move(out));
    });
  }

  // ---- filters -------------------------------------------------------

  absl::StatusOr<Value> ApplyFilter(const std::string& name, const Value& v, const CallArgs& call) {
    if (name == "trim") {
      Args args(call, {"chars"}, name);
      if (absl::Status st = args.Check(); !st.ok()) return st;
      if (args.Has(0) && !args.Get(0).is_none()) {
        return LikeSubject(v, StripChars(v.Str(), args.Get(0).Str(), true, true));
      }
      return LikeSubject(v, PythonStrip(v.Str(), true, true));
    }
    if (name == "length" || name == "count") {
      absl::StatusOr<int64_t> n = Length(v);
      if (!n.ok()) return n.status();
      return Value(*n);
    }
    if (name == "tojson") return ToJsonFilter(v, call);
    if (name == "default" || name == "d") {
      Args args(call, {"default_value", "boolean"}, name);
      if (absl::Status st = args.Check(); !st.ok()) return st;
      const bool boolean = args.Get(1).Truthy();
      if (v.is_undefined() || (boolean && !v.Truthy())) {
        return args.Has(0) ? args.Get(0) : Value("");
      }
      return v;
    }
    if (name == "join") return JoinFilter(v, call);
    if (name == "first") {
      absl::StatusOr<Items> items = Iterate(v);
      if (!items.ok()) return items.status();
      if (items->empty()) return Value::Undefined("first");
      return items->front();
    }
    if (name == "last") {
      if (v.is_list() && v.flavor() == Value::ListFlavor::kGenerator) {
        return absl::InvalidArgumentError("'generator' object is not reversible");
      }
      absl::StatusOr<Items> items = Iterate(v);
      if (!items.ok()) return items.status();
      if (items->empty()) return Value::Undefined("last");
      return items->back();
    }
    if (name == "items") {
      if (v.is_undefined()) return Value::List({});
      if (!v.is_dict()) {
        return absl::InvalidArgumentError(absl::StrCat("can only get item pairs from a mapping, not ",
                                                       v.TypeName()));
      }
      return DictItems(v.dict());
    }
    if (name == "list") {
      absl::StatusOr<Items> items = Iterate(v);
      if (!items.ok()) return items.status();
      return Value::List(*std::move(items));
    }
    // safe makes a Markup; string keeps one (jinja2's soft_str).
    if (name == "safe") return v.is_markup() ? v : Value::Markup(v.Str());
    if (name == "string") return v.is_markup() ? v : Value(v.Str());
    if (name == "int") return IntFilter(v, call);
    if (name == "float") return FloatFilter(v, call);
    if (name == "upper") return LikeSubject(v, Upper(v.Str()));
    if (name == "lower") return LikeSubject(v, Lower(v.Str()));
    if (name == "capitalize") return LikeSubject(v, Capitalize(v.Str()));
    // title and replace build a new str (no autoescape), Markup or not.
    if (name == "title") return Value(JinjaTitle(v.Str()));
    if (name == "replace") {
      Args args(call, {"old", "new", "count"}, name);
      if (absl::Status st = args.Check(); !st.ok()) return st;
      Value count = args.Get(2);
      return Value(Replace(v.Str(), args.Get(0).Str(), args.Get(1).Str(),
                           IsIntLike(count) ? count.as_int() : -1));
    }
    if (name == "reverse") {
      if (v.is_string()) {
        std::vector<std::string> cps = SplitCodePoints(v.as_string());
        std::string out;
        for (auto it = cps.rbegin(); it != cps.rend(); ++it) out += *it;
        return LikeSubject(v, std::move(out));
      }
      absl::StatusOr<Items> items = Iterate(v);
      if (!items.ok()) return items.status();
      std::reverse(items->begin(), items->end());
      return Value::List(*std::move(items), Value::ListFlavor::kGenerator);
    }
    if (name == "abs") {
      if (IsIntLike(v)) return Value(std::abs(v.as_int()));
      if (v.is_number()) return Value(std::fabs(v.as_double()));
      return absl::InvalidArgumentError(absl::StrCat("bad operand type for abs(): '", v.TypeName(), "'"));
    }
    if (name == "indent") return IndentFilter(v, call);
    if (name == "sort") return SortFilter(v, call);
    if (name == "dictsort") return DictSortFilter(v, call);
    if (name == "unique") return UniqueFilter(v, call);
    if (name == "min" || name == "max") return MinMaxFilter(v, call, name == "max");
    if (name == "sum") return SumFilter(v, call);
    if (name == "map") return MapFilter(v, call);
    if (name == "select" || name == "reject") return SelectFilter(v, call, name == "select", false);
    if (name == "selectattr" || name == "rejectattr") {
      return SelectFilter(v, call, name == "selectattr", true);
    }
    return absl::InvalidArgumentError(absl::StrCat("no filter named '", name, "'"));
  }

  // transformers' tojson: json.dumps(x, ensure_ascii=False, indent=None,
  // separators=None, sort_keys=False), in that argument order.
  static absl::StatusOr<Value> ToJsonFilter(const Value& v, const CallArgs& call) {
    Args args(call, {"ensure_ascii", "indent", "separators", "sort_keys"}, "tojson");
    if (absl::Status st = args.Check(); !st.ok()) return st;
    int indent = -1;
    Value indent_arg = args.Get(1);
    if (IsIntLike(indent_arg)) {
      indent = static_cast<int>(std::max<int64_t>(0, indent_arg.as_int()));
    } else if (!indent_arg.is_undefined() && !indent_arg.is_none()) {
      return absl::InvalidArgumentError("indent must be an integer or None");
    }
    std::string item_separator = indent >= 0 ? "," : ", ";
    std::string key_separator = ": ";
    Value separators = args.Get(2);
    if (separators.is_list()) {
      if (separators.items().size() != 2 || !separators.items()[0].is_string() ||
          !separators.items()[1].is_string()) {
        return absl::InvalidArgumentError("separators must be an (item, key) pair of strings");
      }
      item_separator = separators.items()[0].as_string();
      key_separator = separators.items()[1].as_string();
    } else if (!separators.is_undefined() && !separators.is_none()) {
      return absl::InvalidArgumentError("separators must be an (item, key) pair of strings");
    }
    absl::StatusOr<std::string> text = v.ToJson(args.Get(0).Truthy(), indent, item_separator,
                                                 key_separator, args.Get(3).Truthy());
    if (!text.ok()) return text.status();
    return Value(*std::move(text));
  }

  absl::StatusOr<Value> JoinFilter(const Value& v, const CallArgs& call) {
    Args args(call, {"d", "attribute"}, "join");
    if (absl::Status st = args.Check(); !st.ok()) return st;
    absl::StatusOr<Items> items = Iterate(v);
    if (!items.ok()) return items.status();
    const std::string separator = args.Has(0) ? args.Get(0).Str() : "";
    std::string out;
    for (size_t i = 0; i < items->size(); ++i) {
      Value item = (*items)[i];
      if (args.Has(1)) {
        absl::StatusOr<Value> a = AttributePath(item, args.Get(1));
        if (!a.ok()) return a.status();
        item = *std::move(a);
      }
      if (i > 0) out += separator;
      out += item.Str();
    }
    return Value(std::move(out));
  }

  static absl::StatusOr<Value> IntFilter(const Value& v, const CallArgs& call) {
    Args args(call, {"default", "base"}, "int");
    if (absl::Status st = args.Check(); !st.ok()) return st;
    if (v.is_undefined()) return absl::InvalidArgumentError("value is undefined");
    Value fallback = args.Has(0) ? args.Get(0) : Value(0);
    if (IsIntLike(v)) return Value(v.as_int());
    if (v.kind() == Value::Kind::kFloat) return Value(static_cast<int64_t>(v.as_double()));
    if (v.is_string()) {
      std::string s = PythonStrip(v.as_string(), true, true);
      const int base = args.Has(1) && IsIntLike(args.Get(1)) ? static_cast<int>(args.Get(1).as_int()) : 10;
      char* end = nullptr;
      std::string digits;
      for (char c : s) {
        if (c != '_') digits += c;
      }
      long long parsed = std::strtoll(digits.c_str(), &end, base);
      if (!digits.empty() && end != nullptr && *end == '\0') return Value(static_cast<int64_t>(parsed));
      double d = std::strtod(digits.c_str(), &end);
      if (!digits.empty() && end != nullptr && *end == '\0' && std::isfinite(d)) {
        return Value(static_cast<int64_t>(d));
      }
    }
    return fallback;
  }

  static absl::StatusOr<Value> FloatFilter(const Value& v, const CallArgs& call) {
    Args args(call, {"default"}, "float");
    if (absl::Status st = args.Check(); !st.ok()) return st;
    if (v.is_undefined()) return absl::InvalidArgumentError("value is undefined");
    if (v.is_number()) return Value(v.as_double());
    if (v.is_string()) {
      std::string s = PythonStrip(v.as_string(), true, true);
      char* end = nullptr;
      double d = std::strtod(s.c_str(), &end);
      if (!s.empty() && end != nullptr && *end == '\0') return Value(d);
    }
    return args.Has(0) ? args.Get(0) : Value(0.0);
  }

  // jinja2's indent(width=4, first=False, blank=False).
  static absl::StatusOr<Value> IndentFilter(const Value& v, const CallArgs& call) {
    Args args(call, {"width", "first", "blank"}, "indent");
    if (absl::Status st = args.Check(); !st.ok()) return st;
    std::string indention;
    Value width = args.Get(0);
    if (width.is_string()) {
      indention = width.as_string();
    } else {
      indention.assign(IsIntLike(width) ? static_cast<size_t>(std::max<int64_t>(0, width.as_int())) : 4, ' ');
    }
    if (!v.is_string()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "unsupported operand type(s) for +=: '", v.TypeName(), "' and 'str'"));
    }
    // For a Markup, jinja2 makes the indention a Markup too: nothing escapes.
    // jinja2 appends a newline, then splits lines as str.splitlines() does
    // (U+2028 and the other line ends too), so a final line break does not
    // leave an indented empty line.
    std::vector<std::string> lines = SplitLines(v.as_string() + "\n");
    std::string out;
    if (args.Get(2).Truthy()) {
      out = absl::StrJoin(lines, "\n" + indention);
    } else if (!lines.empty()) {
      out = lines[0];
      for (size_t i = 1; i < lines.size(); ++i) {
        out += "\n";
        if (!lines[i].empty()) out += indention;
        out += lines[i];
      }
    }
    if (args.Get(1).Truthy()) out = indention + out;
    return LikeSubject(v, std::move(out));
  }

  // The sort key jinja2 uses: the attribute (if any), lowered when the
  // comparison ignores case.
  absl::StatusOr<Value> SortKey(const Value& item, const Value& attribute, bool case_sensitive) {
    Value key = item;
    if (!attribute.is_undefined() && !attribute.is_none()) {
      if (attribute.is_string() && absl::StrContains(attribute.as_string(), ",")) {
        return absl::InvalidArgumentError("sorting by several attributes is not supported");
      }
      absl::StatusOr<Value> a = AttributePath(item, attribute);
      if (!a.ok()) return a.status();
      key = *std::move(a);
    }
    if (!case_sensitive && key.is_string()) key = Value(Lower(key.as_string()));
    return key;
  }

  // Python's sorted(items, key=...) (stable, also when reversed). jinja2's
  // sort compares one-item lists of keys, so equal keys (undefined ones
  // included) never reach '<': `list_keys` asks for that.
  absl::StatusOr<Items> SortedByKey(Items items, std::vector<Value> keys, bool reverse,
                                    bool list_keys) {
    std::vector<size_t> order(items.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    absl::Status error;
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
      const Value& x = reverse ? keys[b] : keys[a];
      const Value& y = reverse ? keys[a] : keys[b];
      if (list_keys && Equals(x, y)) return false;
      absl::StatusOr<bool> less = LessThan(x, y);
      if (!less.ok()) {
        if (error.ok()) error = less.status();
        return false;
      }
      return *less;
    });
    if (!error.ok()) return error;
    Items out;
    for (size_t i : order) out.push_back(std::move(items[i]));
    return out;
  }

  absl::StatusOr<Value> SortFilter(const Value& v, const CallArgs& call) {
    Args args(call, {"reverse", "case_sensitive", "attribute"}, "sort");
    if (absl::Status st = args.Check(); !st.ok()) return st;
    absl::StatusOr<Items> items = Iterate(v);
    if (!items.ok()) return items.status();
    std::vector<Value> keys;
    for (const Value& item : *items) {
      absl::StatusOr<Value> key = SortKey(item, args.Get(2), args.Get(1).Truthy());
      if (!key.ok()) return key.status();
      keys.push_back(*std::move(key));
    }
    absl::StatusOr<Items> sorted =
        SortedByKey(*std::move(items), std::move(keys), args.Get(0).Truthy(), /*list_keys=*/true);
    if (!sorted.ok()) return sorted.status();
    return Value::List(*std::move(sorted));
  }

  absl::StatusOr<Value> DictSortFilter(const Value& v, const CallArgs& call) {
    Args args(call, {"case_sensitive", "by", "reverse"}, "dictsort");
    if (absl::Status st = args.Check(); !st.ok()) return st;
    if (!v.is_dict()) return absl::InvalidArgumentError("dictsort expects a mapping");
    const std::string by = args.Has(1) ? args.Get(1).Str() : "key";
    if (by != "key" && by != "value") {
      return absl::InvalidArgumentError("You can only sort by either 'key' or 'value'");
    }
    Items items = DictItems(v.dict()).items();
    std::vector<Value> keys;
    for (const Value& pair : items) {
      Value key = pair.items()[by == "key" ? 0 : 1];
      if (!args.Get(0).Truthy() && key.is_string()) key = Value(Lower(key.as_string()));
      keys.push_back(std::move(key));
    }
    absl::StatusOr<Items> sorted =
        SortedByKey(std::move(items), std::move(keys), args.Get(2).Truthy(), /*list_keys=*/false);
    if (!sorted.ok()) return sorted.status();
    return Value::List(*std::move(sorted));
  }

  absl::StatusOr<Value> UniqueFilter(const Value& v, const CallArgs& call) {
    Args args(call, {"case_sensitive", "attribute"}, "unique");
    if (absl::Status st = args.Check(); !st.ok()) return st;
    absl::StatusOr<Items> items = Iterate(v);
    if (!items.ok()) return items.status();
    Items out;
    std::vector<Value> seen;
    for (const Value& item : *items) {
      absl::StatusOr<Value> key = SortKey(item, args.Get(1), args.Get(0).Truthy());
      if (!key.ok()) return key.status();
      // jinja2 keeps the keys in a set.
      if ((key->is_list() && key->flavor() == Value::ListFlavor::kList) || key->is_dict() ||
          key->kind() == Value::Kind::kNamespace) {
        return absl::InvalidArgumentError(absl::StrCat("unhashable type: '", key->TypeName(), "'"));
      }
      if (std::any_of(seen.begin(), seen.end(), [&](const Value& s) { return Equals(s, *key); })) {
        continue;
      }
      seen.push_back(*key);
      out.push_back(item);
    }
    return Value::List(std::move(out), Value::ListFlavor::kGenerator);
  }

  absl::StatusOr<Value> MinMaxFilter(const Value& v, const CallArgs& call, bool max) {
    Args args(call, {"case_sensitive", "attribute"}, max ? "max" : "min");
    if (absl::Status st = args.Check(); !st.ok()) return st;
    absl::StatusOr<Items> items = Iterate(v);
    if (!items.ok()) return items.status();
    if (items->empty()) return Value::Undefined("No aggregated item, sequence was empty.");
    size_t best = 0;
    absl::StatusOr<Value> best_key = SortKey((*items)[0], args.Get(1), args.Get(0).Truthy());
    if (!best_key.ok()) return best_key.status();
    for (size_t i = 1; i < items->size(); ++i) {
      absl::StatusOr<Value> key = SortKey((*items)[i], args.Get(1), args.Get(0).Truthy());
      if (!key.ok()) return key.status();
      // Python's min and max keep the first of equal items.
      absl::StatusOr<bool> better = max ? LessThan(*best_key, *key) : LessThan(*key, *best_key);
      if (!better.ok()) return better.status();
      if (*better) {
        best = i;
        best_key = *std::move(key);
      }
    }
    return (*items)[best];
  }

  absl::StatusOr<Value> SumFilter(const Value& v, const CallArgs& call) {
    Args args(call, {"attribute", "start"}, "sum");
    if (absl::Status st = args.Check(); !st.ok()) return st;
    absl::StatusOr<Items> items = Iterate(v);
    if (!items.ok()) return items.status();
    Value total = args.Has(1) ? args.Get(1) : Value(0);
    for (const Value& item : *items) {
      Value term = item;
      if (args.Has(0)) {
        absl::StatusOr<Value> a = AttributePath(item, args.Get(0));
        if (!a.ok()) return a.status();
        term = *std::move(a);
      }
      if (term.is_undefined()) return absl::InvalidArgumentError("value is undefined");
      absl::StatusOr<Value> next = Arithmetic("+", total, term);
      if (!next.ok()) return next.status();
      total = *std::move(next);
    }
    return total;
  }

  // An attribute path "a.b.0" as jinja2's make_attrgetter reads it.
  absl::StatusOr<Value> AttributePath(const Value& item, const Value& path) {
    std::vector<std::string> parts = absl::StrSplit(path.Str(), '.');
    Value v = item;
    for (const std::string& part : parts) {
      if (v.is_undefined()) break;
      bool digits = !part.empty() && std::all_of(part.begin(), part.end(), absl::ascii_isdigit);
      if (digits && (v.is_list() || v.is_string())) {
        absl::StatusOr<Items> items = Iterate(v);
        int64_t i = std::stoll(part);
        v = items.ok() && i < static_cast<int64_t>(items->size()) ? (*items)[i] : Value::Undefined(part);
        continue;
      }
      const Value* found = v.is_dict() ? v.dict().FindString(part) : nullptr;
      if (found != nullptr) {
        v = *found;
      } else {
        absl::StatusOr<Value> a = GetAttribute(v, part);
        if (!a.ok()) return a.status();
        v = *std::move(a);
      }
    }
    return v;
  }

  absl::StatusOr<Value> MapFilter(const Value& v, const CallArgs& call) {
    // jinja2 iterates only a truthy value: map of 0 or none is empty.
    absl::StatusOr<Items> items = v.Truthy() ? Iterate(v) : Items();
    if (!items.ok()) return items.status();
    Items out;
    bool by_attribute = false;
    Value attribute;
    Value fallback;
    for (const auto& [key, value] : call.keyword) {
      if (key == "attribute") {
        by_attribute = true;
        attribute = value;
      } else if (key == "default") {
        fallback = value;
      }
    }
    if (by_attribute) {
      for (const Value& item : *items) {
        absl::StatusOr<Value> a = AttributePath(item, attribute);
        if (!a.ok()) return a.status();
        out.push_back(a->is_undefined() && !fallback.is_undefined() ? fallback : *a);
      }
      return Value::List(std::move(out), Value::ListFlavor::kGenerator);
    }
    if (call.positional.empty()) return absl::InvalidArgumentError("map requires a filter argument");
    const std::string filter = call.positional[0].Str();
    if (!IsSupportedFilter(filter)) {
      return absl::InvalidArgumentError(absl::StrCat("unsupported filter '", filter, "'"));
    }
    CallArgs rest;
    rest.positional.assign(call.positional.begin() + 1, call.positional.end());
    rest.keyword = call.keyword;
    for (const Value& item : *items) {
      absl::StatusOr<Value> r = ApplyFilter(filter, item, rest);
      if (!r.ok()) return r.status();
      out.push_back(*std::move(r));
    }
    return Value::List(std::move(out), Value::ListFlavor::kGenerator);
  }

  // select / reject (by_attribute false) and selectattr / rejectattr.
  absl::StatusOr<Value> SelectFilter(const Value& v, const CallArgs& call, bool keep_matches,
                                     bool by_attribute) {
    // jinja2 iterates only a truthy value: select of 0 or none is empty.
    absl::StatusOr<Items> items = v.Truthy() ? Iterate(v) : Items();
    if (!items.ok()) return items.status();
    size_t next = 0;
    Value attribute;
    if (by_attribute) {
      if (call.positional.empty()) return absl::InvalidArgumentError("missing attribute");
      attribute = call.positional[next++];
    }
    std::string test;
    if (next < call.positional.size()) test = call.positional[next++].Str();
    if (!test.empty() && !IsSupportedTest(test)) {
      return absl::InvalidArgumentError(absl::StrCat("unsupported test '", test, "'"));
    }
    Items test_args(call.positional.begin() + next, call.positional.end());
    Items out;
    for (const Value& item : *items) {
      Value subject = item;
      if (by_attribute) {
        absl::StatusOr<Value> a = AttributePath(item, attribute);
        if (!a.ok()) return a.status();
        subject = *std::move(a);
      }
      bool match = subject.Truthy();
      if (!test.empty()) {
        absl::StatusOr<bool> r = ApplyTest(test, subject, test_args);
        if (!r.ok()) return r.status();
        match = *r;
      }
      if (match == keep_matches) out.push_back(item);
    }
    return Value::List(std::move(out), Value::ListFlavor::kGenerator);
  }

  // ---- tests ---------------------------------------------------------

  static absl::StatusOr<bool> ApplyTest(const std::string& name, const Value& v, const Items& args) {
    auto arg = [&](size_t i) { return i < args.size() ? args[i] : Value::Undefined(); };
    const Value::Kind k = v.kind();
    if (name == "defined") return !v.is_undefined();
    if (name == "undefined") return v.is_undefined();
    if (name == "none") return v.is_none();
    if (name == "string") return v.is_string();
    if (name == "mapping") return v.is_dict();
    if (name == "iterable") {
      return v.is_list() || v.is_string() || v.is_dict() || v.is_undefined();
    }
    if (name == "sequence") {
      return (v.is_list() && v.flavor() != Value::ListFlavor::kGenerator) || v.is_string() ||
             v.is_dict() || v.is_undefined();
    }
    if (name == "number") return v.is_number();
    if (name == "integer") return k == Value::Kind::kInt;
    if (name == "float") return k == Value::Kind::kFloat;
    if (name == "boolean") return k == Value::Kind::kBool;
    if (name == "true") return k == Value::Kind::kBool && v.as_bool();
    if (name == "false") return k == Value::Kind::kBool && !v.as_bool();
    // jinja2's Undefined defines __call__ (to raise), so it counts as callable.
    if (name == "callable") return k == Value::Kind::kFunction || k == Value::Kind::kUndefined;
    if (name == "equalto" || name == "eq" || name == "==") return Equals(v, arg(0));
    if (name == "ne" || name == "!=") return !Equals(v, arg(0));
    if (name == "lt" || name == "<") return Compare("<", v, arg(0));
    if (name == "le" || name == "<=") return Compare("<=", v, arg(0));
    if (name == "gt" || name == ">") return Compare(">", v, arg(0));
    if (name == "ge" || name == ">=") return Compare(">=", v, arg(0));
    if (name == "in") return Contains(arg(0), v);
    if (name == "sameas") {
      const Value other = arg(0);
      if (k != other.kind()) return false;
      if (k == Value::Kind::kNone || k == Value::Kind::kUndefined) return true;
      if (k == Value::Kind::kBool) return v.as_bool() == other.as_bool();
      return false;
    }
    if (name == "odd" || name == "even" || name == "divisibleby") {
      // value % n == r with Python's arithmetic, floats included.
      if (!v.is_number()) return absl::InvalidArgumentError("expects a number");
      const Value divisor = name == "divisibleby" ? arg(0) : Value(2);
      absl::StatusOr<Value> rest = Arithmetic("%", v, divisor);
      if (!rest.ok()) return rest.status();
      return Equals(*rest, Value(name == "odd" ? 1 : 0));
    }
    if (name == "lower" || name == "upper") {
      // str.islower() / isupper(): some cased letter, and none of the other case.
      const std::string s = v.Str();
      bool cased = false;
      size_t pos = 0;
      while (pos < s.size()) {
        uint32_t cp = DecodeUtf8(s, &pos);
        if (!IsCased(cp)) continue;
        cased = true;
        const bool is_lower = UpperCodePoint(cp) != cp || cp == 0xdf;
        if (name == "lower" ? !is_lower : is_lower) return false;
      }
      return cased;
    }
    return absl::InvalidArgumentError(absl::StrCat("no test named '", name, "'"));
  }

  // ---- globals -------------------------------------------------------

  void DefineBuiltins(Scope* globals) {
    globals->Set("range", Value::FromFunction("range", [](const CallArgs& call) -> absl::StatusOr<Value> {
      if (!call.keyword.empty() || call.positional.empty() || call.positional.size() > 3) {
        return absl::InvalidArgumentError("range expects 1 to 3 integer arguments");
      }
      for (const Value& a : call.positional) {
        if (!IsIntLike(a)) {
          return absl::InvalidArgumentError(absl::StrCat("'", a.TypeName(), "' object cannot be interpreted as an integer"));
        }
      }
      int64_t start = 0, stop = 0, step = 1;
      if (call.positional.size() == 1) {
        stop = call.positional[0].as_int();
      } else {
        start = call.positional[0].as_int();
        stop = call.positional[1].as_int();
        if (call.positional.size() == 3) step = call.positional[2].as_int();
      }
      if (step == 0) return absl::InvalidArgumentError("range() arg 3 must not be zero");
      Items out;
      for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
        if (static_cast<int64_t>(out.size()) >= kMaxRange) {
          return absl::InvalidArgumentError("range too big");
        }
        out.push_back(Value(i));
      }
      return Value::List(std::move(out));
    }));
    globals->Set("namespace", Value::FromFunction("namespace", [](const CallArgs& call) -> absl::StatusOr<Value> {
      Dict attributes;
      for (const Value& a : call.positional) {
        if (!a.is_dict()) return absl::InvalidArgumentError("namespace() takes a mapping");
        for (const auto& [key, value] : a.dict().entries()) attributes.Set(key, value);
      }
      for (const auto& [key, value] : call.keyword) attributes.Set(Value(key), value);
      return Value::NewNamespace(std::move(attributes));
    }));
    globals->Set("dict", Value::FromFunction("dict", [](const CallArgs& call) -> absl::StatusOr<Value> {
      Dict dict;
      for (const Value& a : call.positional) {
        if (!a.is_dict()) return absl::InvalidArgumentError("dict() takes a mapping");
        for (const auto& [key, value] : a.dict().entries()) dict.Set(key, value);
      }
      for (const auto& [key, value] : call.keyword) dict.Set(Value(key), value);
      return Value::FromDict(std::move(dict));
    }));
    globals->Set("raise_exception", Value::FromFunction("raise_exception", [](const CallArgs& call) -> absl::StatusOr<Value> {
      std::string message = call.positional.empty() ? "" : call.positional[0].Str();
      return absl::InvalidArgumentError(absl::StrCat("raise_exception: ", message));
    }));
    RenderOptions options = options_;
    globals->Set("strftime_now", Value::FromFunction("strftime_now", [options](const CallArgs& call) -> absl::StatusOr<Value> {
      if (call.positional.size() != 1 || !call.positional[0].is_string()) {
        return absl::InvalidArgumentError("strftime_now expects one format string");
      }
      const std::string& format = call.positional[0].as_string();
      return Value(options.strftime_now ? options.strftime_now(format) : StrftimeNow(format));
    }));
  }

  const RenderOptions& options_;
  Flow flow_ = Flow::kNormal;
  int depth_ = 0;
  Value block_value_;
  std::vector<ScopePtr> retained_;
};

}  // namespace

absl::StatusOr<Template> Template::Compile(absl::string_view source) {
  absl::StatusOr<std::vector<Token>> tokens = Tokenize(source);
  if (!tokens.ok()) return tokens.status();
  absl::StatusOr<Body> body = Parse(*tokens);
  if (!body.ok()) return body.status();
  return Template(std::make_shared<const Body>(*std::move(body)));
}

absl::StatusOr<std::string> Template::Render(const Dict& context,
                                             const RenderOptions& options) const {
  Renderer renderer(options);
  ScopePtr globals = renderer.MakeGlobals(context);
  auto root = std::make_shared<Scope>(globals);
  std::string out;
  if (absl::Status s = renderer.RenderBody(*body_, root, &out); !s.ok()) return s;
  return out;
}

std::string StrftimeNow(const std::string& format) {
  std::time_t now = std::time(nullptr);
  std::tm local;
  localtime_r(&now, &local);
  char buf[512];
  size_t n = std::strftime(buf, sizeof(buf), format.c_str(), &local);
  return std::string(buf, n);
}

}  // namespace verdict::jinja
