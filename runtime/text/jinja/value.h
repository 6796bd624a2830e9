// The dynamic value of the Jinja interpreter, with Python's semantics where
// templates can observe them: truthiness, equality and ordering, str() and
// repr() text, and json.dumps output (what transformers' tojson writes).
#ifndef VERDICT_RUNTIME_TEXT_JINJA_VALUE_H_
#define VERDICT_RUNTIME_TEXT_JINJA_VALUE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "nlohmann/json.hpp"

namespace verdict::jinja {

class Value;

// A dict that keeps insertion order, like Python's. Dicts in templates are
// small (a message, a tool schema), so lookup is a linear scan.
class Dict {
 public:
  const Value* Find(const Value& key) const;
  const Value* FindString(absl::string_view key) const;
  // Replaces the value of an existing key in place, else appends.
  void Set(Value key, Value value);
  const std::vector<std::pair<Value, Value>>& entries() const { return entries_; }
  size_t size() const;  // out of line: Value is incomplete here

 private:
  std::vector<std::pair<Value, Value>> entries_;
};

// Arguments of a call: positional, then keyword in the order written.
struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;
};

// A builtin global, a bound method or a macro.
struct Function {
  std::string name;
  std::function<absl::StatusOr<Value>(const CallArgs&)> call;
};

// namespace(): the one mutable object, whose attributes `set ns.x = ...`
// assigns from inside loops.
struct Namespace {
  Dict attributes;
};

class Value {
 public:
  enum class Kind {
    kUndefined,
    kNone,
    kBool,
    kInt,
    kFloat,
    kString,
    kList,
    kDict,
    kFunction,
    kNamespace,
  };

  // Lists are immutable once built (the sandbox forbids append), so copies
  // share them. A tuple prints as (a, b); a generator (what select, map and
  // reverse return in jinja2) is always truthy and has no length.
  enum class ListFlavor { kList, kTuple, kGenerator };

  Value() = default;  // undefined
  static Value Undefined(std::string name = "");
  static Value None();
  Value(bool b) : data_(b) {}
  Value(int v) : data_(static_cast<int64_t>(v)) {}
  Value(int64_t v) : data_(v) {}
  Value(double v) : data_(v) {}
  Value(std::string s) : data_(std::move(s)) {}
  Value(const char* s) : data_(std::string(s)) {}
  // markupsafe's Markup, what the `safe` filter returns: a str that prints
  // as it is, but HTML-escapes plain strings joined to it (`+`, join(),
  // `%`). Templates concatenate `x | safe` with plain text (functionary's
  // tool list, Mistral's tool calls), so the escaping shows in the prompt.
  static Value Markup(std::string s);
  static Value List(std::vector<Value> items, ListFlavor flavor = ListFlavor::kList);
  static Value FromDict(Dict dict);
  static Value FromFunction(std::string name,
                            std::function<absl::StatusOr<Value>(const CallArgs&)> call);
  static Value NewNamespace(Dict attributes);
  // JSON as Python's json.loads gives it: integers stay int, objects keep
  // their order (hence ordered_json).
  static Value FromJson(const nlohmann::ordered_json& j);

  Kind kind() const;
  bool is_undefined() const { return kind() == Kind::kUndefined; }
  bool is_none() const { return kind() == Kind::kNone; }
  bool is_string() const { return kind() == Kind::kString; }
  bool is_list() const { return kind() == Kind::kList; }
  bool is_dict() const { return kind() == Kind::kDict; }
  // A string that is a Markup (see Markup()).
  bool is_markup() const { return markup_; }
  // int or bool (Python's bool is an int) or float.
  bool is_number() const;

  bool as_bool() const { return std::get<bool>(data_); }
  int64_t as_int() const;  // bool or int
  double as_double() const;  // bool, int or float
  const std::string& as_string() const { return std::get<std::string>(data_); }
  const std::vector<Value>& items() const;
  ListFlavor flavor() const;
  const Dict& dict() const;
  const Function& function() const;
  Namespace& ns() const;
  // The name an undefined value was looked up by, for error messages.
  const std::string& undefined_name() const;

  // Python's bool(x); undefined is false.
  bool Truthy() const;
  // Python's str(x); undefined is "".
  std::string Str() const;
  // Python's repr(x); a Markup is Markup('...').
  std::string Repr() const;
  // Python's type name, for error messages.
  std::string TypeName() const;

  // json.dumps(x, ensure_ascii=..., indent=..., separators=..., sort_keys=...);
  // indent < 0 means None. Errors: values JSON cannot hold.
  absl::StatusOr<std::string> ToJson(bool ensure_ascii, int indent,
                                     const std::string& item_separator,
                                     const std::string& key_separator, bool sort_keys) const;

 private:
  struct UndefinedData {
    std::string name;
  };
  struct NoneData {};
  struct ListData {
    std::vector<Value> items;
    ListFlavor flavor;
  };
  std::variant<UndefinedData, NoneData, bool, int64_t, double, std::string,
               std::shared_ptr<const ListData>, std::shared_ptr<const Dict>,
               std::shared_ptr<const Function>, std::shared_ptr<Namespace>>
      data_;
  bool markup_ = false;  // only for a string
};

// Python's ==, across int, float and bool too.
bool Equals(const Value& a, const Value& b);
// Python's <; errors for types that do not order.
absl::StatusOr<bool> LessThan(const Value& a, const Value& b);
// Python's repr(float): the shortest text that reads back the same double.
std::string FormatFloat(double d);

// UTF-8 helpers: strings are bytes, but length, slicing and iteration count
// code points as Python does.
std::vector<std::string> SplitCodePoints(absl::string_view s);
// Python's str.isspace() for one code point's UTF-8 bytes.
bool IsPythonSpace(absl::string_view code_point);
// Python's str.strip() / lstrip() / rstrip() with no argument.
std::string PythonStrip(absl::string_view s, bool left, bool right);
// Decodes the code point at s[*pos] and advances past it; a byte that does
// not start valid UTF-8 counts as a code point of its own value.
uint32_t DecodeUtf8(absl::string_view s, size_t* pos);
void AppendUtf8(uint32_t code_point, std::string* out);

}  // namespace verdict::jinja

#endif  // VERDICT_RUNTIME_TEXT_JINJA_VALUE_H_
