#include "runtime/text/jinja/parser.h"

#include <set>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace verdict::jinja {
namespace {

const absl::flat_hash_set<std::string>& SupportedFilters() {
  static const auto* names = new absl::flat_hash_set<std::string>{
      "abs",   "capitalize", "count",  "d",      "default",    "first",   "float",
      "indent", "int",       "items",  "join",   "last",       "length",  "list",
      "lower", "map",        "reject", "rejectattr", "replace", "reverse", "safe",
      "select", "selectattr", "string", "title", "tojson",     "trim",    "upper",
      "sort",  "dictsort",   "unique", "min",    "max",        "sum",
  };
  return *names;
}

const absl::flat_hash_set<std::string>& SupportedTests() {
  static const auto* names = new absl::flat_hash_set<std::string>{
      "defined", "undefined", "none",    "string",  "mapping", "iterable", "sequence",
      "number",  "integer",   "float",   "boolean", "true",    "false",    "equalto",
      "eq",      "==",        "ne",      "!=",      "lt",      "<",        "le",
      "<=",      "gt",        ">",       "ge",      ">=",      "odd",      "even",
      "divisibleby", "in",    "lower",   "upper",   "callable", "sameas",
  };
  return *names;
}

const absl::flat_hash_set<std::string>& SupportedMethods() {
  static const auto* names = new absl::flat_hash_set<std::string>{
      // str
      "startswith", "endswith", "strip", "lstrip", "rstrip", "split", "replace", "upper",
      "lower", "title", "capitalize", "join",
      // dict
      "items", "keys", "values", "get",
      // loop
      "cycle",
  };
  return *names;
}

// Methods that modify a list, and a dict. transformers' sandbox refuses
// them (SecurityError) only when a call runs, so a template that calls one
// in a branch it does not take still renders: they parse, and fail at
// render.
const absl::flat_hash_set<std::string>& ListModifyingMethods() {
  static const auto* names = new absl::flat_hash_set<std::string>{
      "append", "extend", "insert", "remove", "pop", "clear", "sort", "reverse"};
  return *names;
}
const absl::flat_hash_set<std::string>& DictModifyingMethods() {
  static const auto* names =
      new absl::flat_hash_set<std::string>{"update", "setdefault", "pop", "popitem", "clear"};
  return *names;
}

// Functions a template may call without defining them: transformers'
// globals and the jinja2 builtins the evaluator implements.
const absl::flat_hash_set<std::string>& GlobalFunctions() {
  static const auto* names = new absl::flat_hash_set<std::string>{
      "range", "namespace", "dict", "raise_exception", "strftime_now", "caller",
  };
  return *names;
}

// Tags of jinja2 that the evaluator does not implement: named as such.
const absl::flat_hash_set<std::string>& UnsupportedTags() {
  static const auto* names = new absl::flat_hash_set<std::string>{
      "include", "import", "from", "extends", "block", "with", "autoescape", "do", "trans",
      "pluralize",
  };
  return *names;
}

class Parser {
 public:
  explicit Parser(const std::vector<Token>& tokens) : t_(tokens) {}

  absl::StatusOr<Body> Run() {
    Body body = ParseBody({});
    if (!error_.ok()) return error_;
    if (Peek().kind != TokenKind::kEnd) {
      return Error(Peek().line, absl::StrCat("unexpected '", TagName(), "'"));
    }
    for (const auto& [name, line] : called_) {
      if (!GlobalFunctions().contains(name) && !bound_.contains(name)) {
        return Error(line, absl::StrCat("unsupported function '", name, "'"));
      }
    }
    return body;
  }

 private:
  const Token& Peek(size_t k = 0) const { return t_[std::min(i_ + k, t_.size() - 1)]; }
  const Token& Next() { return t_[std::min(i_++, t_.size() - 1)]; }
  bool IsOp(const char* op, size_t k = 0) const {
    return Peek(k).kind == TokenKind::kOperator && Peek(k).text == op;
  }
  bool IsName(const char* name, size_t k = 0) const {
    return Peek(k).kind == TokenKind::kName && Peek(k).text == name;
  }
  bool Failed() const { return !error_.ok(); }

  absl::Status Error(int line, absl::string_view message) {
    return absl::InvalidArgumentError(absl::StrCat("line ", line, ": ", message));
  }
  // Records the first error; the parse unwinds by returning null.
  std::nullptr_t Fail(int line, absl::string_view message) {
    if (error_.ok()) error_ = Error(line, message);
    return nullptr;
  }
  std::string Describe(const Token& token) const {
    switch (token.kind) {
      case TokenKind::kEnd:
        return "end of template";
      case TokenKind::kBlockEnd:
        return "'%}'";
      case TokenKind::kVariableEnd:
        return "'}}'";
      case TokenKind::kString:
        return "a string";
      default:
        return absl::StrCat("'", token.text, "'");
    }
  }
  bool ExpectOp(const char* op) {
    if (IsOp(op)) {
      Next();
      return true;
    }
    Fail(Peek().line, absl::StrCat("expected '", op, "', got ", Describe(Peek())));
    return false;
  }
  bool ExpectBlockEnd() {
    if (Peek().kind == TokenKind::kBlockEnd) {
      Next();
      return true;
    }
    Fail(Peek().line, absl::StrCat("expected '%}', got ", Describe(Peek())));
    return false;
  }
  // The tag name after a `{%`, for messages.
  std::string TagName() const { return Peek(1).kind == TokenKind::kName ? Peek(1).text : "{%"; }

  ExprPtr MakeExpr(Expr::Kind kind, int line) {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->line = line;
    return e;
  }

  std::string TooDeep() const {
    return absl::StrCat("the template nests deeper than ", kMaxNesting, " levels");
  }
  // Appends `child` (may be null) to parent's arguments; the parse fails
  // when that makes the tree deeper than kMaxNesting, and the loops that
  // build chains (a + b + ..., a.b.c..., x | f | g ...) stop there.
  void Adopt(Expr* parent, ExprPtr child) {
    Deepen(parent, child.get());
    parent->args.push_back(std::move(child));
  }
  void Adopt(const ExprPtr& parent, ExprPtr child) { Adopt(parent.get(), std::move(child)); }
  void AdoptKeyword(Expr* parent, std::string key, ExprPtr value) {
    Deepen(parent, value.get());
    parent->kwargs.emplace_back(std::move(key), std::move(value));
  }
  // parent's depth once `child` (may be null) is one of its arguments.
  void Deepen(Expr* parent, const Expr* child) {
    if (child == nullptr || child->depth < parent->depth) return;
    parent->depth = child->depth + 1;
    if (parent->depth > kMaxNesting) Fail(parent->line, TooDeep());
  }

  // One level of the parser's recursion for its scope (a block's body, an
  // expression inside another, a unary operator or an else branch); past
  // kMaxNesting the parse fails, before the stack runs out.
  class Nested {
   public:
    explicit Nested(Parser& parser) : parser_(parser) {
      if (++parser_.nesting_ > kMaxNesting) parser_.Fail(parser_.Peek().line, parser_.TooDeep());
    }
    ~Nested() { --parser_.nesting_; }
    Nested(const Nested&) = delete;
    Nested& operator=(const Nested&) = delete;

   private:
    Parser& parser_;
  };

  // Statements up to a `{% name %}` with name in `ends` (left unconsumed),
  // or to the end of the template when `ends` is empty.
  Body ParseBody(const std::set<std::string>& ends) {
    Body body;
    const Nested level(*this);
    while (!Failed()) {
      const Token& token = Peek();
      if (token.kind == TokenKind::kEnd) {
        if (!ends.empty()) {
          Fail(token.line, absl::StrCat("unexpected end of template, expected '",
                                        *ends.begin(), "'"));
        }
        break;
      }
      if (token.kind == TokenKind::kText) {
        auto node = std::make_unique<Node>();
        node->kind = Node::Kind::kText;
        node->line = token.line;
        node->text = token.text;
        body.push_back(std::move(node));
        Next();
      } else if (token.kind == TokenKind::kVariableBegin) {
        Next();
        auto node = std::make_unique<Node>();
        node->kind = Node::Kind::kOutput;
        node->line = token.line;
        node->expr = ParseTuple(true);
        if (Failed()) break;
        if (Peek().kind != TokenKind::kVariableEnd) {
          Fail(Peek().line, absl::StrCat("expected '}}', got ", Describe(Peek())));
          break;
        }
        Next();
        body.push_back(std::move(node));
      } else if (token.kind == TokenKind::kBlockBegin) {
        if (Peek(1).kind == TokenKind::kName && ends.contains(Peek(1).text)) break;
        if (IsName("generation", 1)) {
          // transformers' {% generation %} marks assistant text; it renders its body.
          Next();
          Next();
          if (!ExpectBlockEnd()) break;
          Body inner = ParseBody({"endgeneration"});
          if (!EndTag("endgeneration")) break;
          for (NodePtr& n : inner) body.push_back(std::move(n));
          continue;
        }
        NodePtr node = ParseStatement();
        if (node == nullptr) break;
        body.push_back(std::move(node));
      } else {
        Fail(token.line, absl::StrCat("unexpected ", Describe(token)));
      }
    }
    return body;
  }

  // Consumes `{% name %}`.
  bool EndTag(const char* name) {
    if (Peek().kind != TokenKind::kBlockBegin || !IsName(name, 1)) {
      Fail(Peek().line, absl::StrCat("expected '", name, "'"));
      return false;
    }
    Next();
    Next();
    return ExpectBlockEnd();
  }

  NodePtr ParseStatement() {
    const int line = Next().line;  // {%
    const Token& tag = Peek();
    if (tag.kind != TokenKind::kName) return Fail(line, "expected a tag name after '{%'");
    const std::string name = tag.text;
    Next();
    auto node = std::make_unique<Node>();
    node->line = line;
    if (name == "if") return ParseIf(std::move(node));
    if (name == "for") return ParseFor(std::move(node));
    if (name == "set") return ParseSet(std::move(node));
    if (name == "macro") return ParseMacro(std::move(node));
    if (name == "call") return ParseCallBlock(std::move(node));
    if (name == "filter") return ParseFilterBlock(std::move(node));
    if (name == "break" || name == "continue") {
      if (loop_depth_ == 0) return Fail(line, absl::StrCat("'", name, "' outside of a loop"));
      node->kind = name == "break" ? Node::Kind::kBreak : Node::Kind::kContinue;
      if (!ExpectBlockEnd()) return nullptr;
      return node;
    }
    if (absl::StartsWith(name, "end") || name == "else" || name == "elif") {
      return Fail(line, absl::StrCat("unexpected '", name, "'"));
    }
    if (UnsupportedTags().contains(name)) {
      return Fail(line, absl::StrCat("unsupported tag '", name, "'"));
    }
    return Fail(line, absl::StrCat("unknown tag '", name, "'"));
  }

  NodePtr ParseIf(NodePtr node) {
    node->kind = Node::Kind::kIf;
    while (true) {
      ExprPtr condition = ParseTuple(false);
      if (condition == nullptr || !ExpectBlockEnd()) return nullptr;
      node->conditions.push_back(std::move(condition));
      node->bodies.push_back(ParseBody({"elif", "else", "endif"}));
      if (Failed()) return nullptr;
      Next();  // {%
      const std::string tag = Next().text;
      if (tag == "elif") continue;
      if (tag == "else") {
        if (!ExpectBlockEnd()) return nullptr;
        node->else_body = ParseBody({"endif"});
        if (!EndTag("endif")) return nullptr;
      } else if (!ExpectBlockEnd()) {
        return nullptr;
      }
      return node;
    }
  }

  NodePtr ParseFor(NodePtr node) {
    node->kind = Node::Kind::kFor;
    node->target = ParseAssignTarget(/*allow_attribute=*/false);
    if (node->target == nullptr) return nullptr;
    if (!IsName("in")) return Fail(Peek().line, "expected 'in' in a for loop");
    Next();
    node->expr = ParseTuple(false);
    if (node->expr == nullptr) return nullptr;
    if (IsName("if")) {
      Next();
      node->condition = ParseExpression(true);
      if (node->condition == nullptr) return nullptr;
    }
    if (IsName("recursive")) return Fail(Peek().line, "unsupported loop modifier 'recursive'");
    if (!ExpectBlockEnd()) return nullptr;
    ++loop_depth_;
    node->body = ParseBody({"else", "endfor"});
    --loop_depth_;
    if (Failed()) return nullptr;
    if (IsName("else", 1)) {
      Next();
      Next();
      if (!ExpectBlockEnd()) return nullptr;
      node->else_body = ParseBody({"endfor"});
    }
    if (!EndTag("endfor")) return nullptr;
    return node;
  }

  NodePtr ParseSet(NodePtr node) {
    node->target = ParseAssignTarget(/*allow_attribute=*/true);
    if (node->target == nullptr) return nullptr;
    if (IsOp("=")) {
      Next();
      node->kind = Node::Kind::kSet;
      node->expr = ParseTuple(true);
      if (node->expr == nullptr || !ExpectBlockEnd()) return nullptr;
      return node;
    }
    node->kind = Node::Kind::kSetBlock;
    if (IsOp("|")) {
      node->filter = ParseFilterChain(nullptr);
      if (node->filter == nullptr) return nullptr;
    }
    if (!ExpectBlockEnd()) return nullptr;
    node->body = ParseBody({"endset"});
    if (!EndTag("endset")) return nullptr;
    return node;
  }

  // Names, `a, b` or `(a, b)`, or (for set) `ns.attr`.
  ExprPtr ParseAssignTarget(bool allow_attribute) {
    const int line = Peek().line;
    bool parens = false;
    if (IsOp("(")) {
      Next();
      parens = true;
    }
    std::vector<ExprPtr> names;
    while (true) {
      const Token& token = Peek();
      if (token.kind != TokenKind::kName) {
        return Fail(token.line, absl::StrCat("expected a name to assign, got ", Describe(token)));
      }
      Next();
      auto name = MakeExpr(Expr::Kind::kName, token.line);
      name->name = token.text;
      bound_.insert(token.text);
      if (allow_attribute && IsOp(".") && names.empty()) {
        Next();
        const Token& attr = Peek();
        if (attr.kind != TokenKind::kName) return Fail(attr.line, "expected an attribute name");
        Next();
        auto target = MakeExpr(Expr::Kind::kAttribute, token.line);
        target->name = attr.text;
        Adopt(target, std::move(name));
        return target;
      }
      names.push_back(std::move(name));
      if (!IsOp(",")) break;
      Next();
      if (parens && IsOp(")")) break;
    }
    if (parens && !ExpectOp(")")) return nullptr;
    if (names.size() == 1 && !parens) return std::move(names[0]);
    auto tuple = MakeExpr(Expr::Kind::kTuple, line);
    tuple->args = std::move(names);
    return tuple;
  }

  bool ParseParams(std::vector<MacroParam>* params) {
    if (!ExpectOp("(")) return false;
    while (!IsOp(")")) {
      if (!params->empty() && !ExpectOp(",")) return false;
      if (IsOp(")")) break;
      const Token& token = Peek();
      if (token.kind != TokenKind::kName) {
        Fail(token.line, absl::StrCat("expected a parameter name, got ", Describe(token)));
        return false;
      }
      Next();
      MacroParam param{token.text, nullptr};
      bound_.insert(token.text);
      if (IsOp("=")) {
        Next();
        param.default_value = ParseExpression(true);
        if (param.default_value == nullptr) return false;
      }
      params->push_back(std::move(param));
    }
    Next();  // )
    return true;
  }

  NodePtr ParseMacro(NodePtr node) {
    node->kind = Node::Kind::kMacro;
    const Token& name = Peek();
    if (name.kind != TokenKind::kName) return Fail(name.line, "expected a macro name");
    Next();
    node->name = name.text;
    bound_.insert(name.text);
    if (!ParseParams(&node->params) || !ExpectBlockEnd()) return nullptr;
    const int saved_depth = loop_depth_;
    loop_depth_ = 0;  // a loop around the definition is not the macro's loop
    node->body = ParseBody({"endmacro"});
    loop_depth_ = saved_depth;
    if (!EndTag("endmacro")) return nullptr;
    return node;
  }

  NodePtr ParseCallBlock(NodePtr node) {
    node->kind = Node::Kind::kCallBlock;
    if (IsOp("(") && !ParseParams(&node->params)) return nullptr;
    node->expr = ParseExpression(true);
    if (node->expr == nullptr) return nullptr;
    if (node->expr->kind != Expr::Kind::kCall) {
      return Fail(node->line, "expected a call after 'call'");
    }
    if (!ExpectBlockEnd()) return nullptr;
    const int saved_depth = loop_depth_;
    loop_depth_ = 0;  // the body is the caller function: no loop of its own
    node->body = ParseBody({"endcall"});
    loop_depth_ = saved_depth;
    if (!EndTag("endcall")) return nullptr;
    return node;
  }

  NodePtr ParseFilterBlock(NodePtr node) {
    node->kind = Node::Kind::kFilterBlock;
    node->filter = ParseFilterChain(nullptr, /*leading_pipe=*/false);
    if (node->filter == nullptr || !ExpectBlockEnd()) return nullptr;
    node->body = ParseBody({"endfilter"});
    if (!EndTag("endfilter")) return nullptr;
    return node;
  }

  // `| f(args) | g` applied to `subject` (null: the body of a block).
  ExprPtr ParseFilterChain(ExprPtr subject, bool leading_pipe = true) {
    bool first = true;
    while (!Failed() && ((first && !leading_pipe) || IsOp("|"))) {
      if (!(first && !leading_pipe)) Next();
      first = false;
      subject = ParseFilter(std::move(subject));
      if (subject == nullptr) return nullptr;
    }
    return subject;
  }

  ExprPtr ParseFilter(ExprPtr subject) {
    const Token& name = Peek();
    if (name.kind != TokenKind::kName) return Fail(name.line, "expected a filter name");
    Next();
    if (!SupportedFilters().contains(name.text)) {
      return Fail(name.line, absl::StrCat("unsupported filter '", name.text, "'"));
    }
    auto filter = MakeExpr(Expr::Kind::kFilter, name.line);
    filter->name = name.text;
    Adopt(filter, std::move(subject));
    if (IsOp("(") && !ParseCallArgs(filter.get())) return nullptr;
    return filter;
  }

  // Arguments after '(' up to ')', appended to e->args / e->kwargs.
  bool ParseCallArgs(Expr* e) {
    Next();  // (
    bool first = true;
    while (!IsOp(")")) {
      if (!first && !ExpectOp(",")) return false;
      first = false;
      if (IsOp(")")) break;
      if (IsOp("*") || IsOp("**")) {
        Fail(Peek().line, "unsupported argument unpacking");
        return false;
      }
      if (Peek().kind == TokenKind::kName && IsOp("=", 1)) {
        std::string key = Next().text;
        Next();  // =
        ExprPtr value = ParseExpression(true);
        if (value == nullptr) return false;
        AdoptKeyword(e, std::move(key), std::move(value));
      } else {
        if (!e->kwargs.empty()) {
          Fail(Peek().line, "positional argument after keyword argument");
          return false;
        }
        ExprPtr value = ParseExpression(true);
        if (value == nullptr) return false;
        Adopt(e, std::move(value));
      }
    }
    Next();  // )
    return true;
  }

  // expression (',' expression)* as a tuple when there is a comma.
  ExprPtr ParseTuple(bool with_condition) {
    const int line = Peek().line;
    ExprPtr first = ParseExpression(with_condition);
    if (first == nullptr || !IsOp(",")) return first;
    auto tuple = MakeExpr(Expr::Kind::kTuple, line);
    Adopt(tuple, std::move(first));
    while (IsOp(",")) {
      Next();
      if (!StartsExpression()) break;
      ExprPtr item = ParseExpression(with_condition);
      if (item == nullptr) return nullptr;
      Adopt(tuple, std::move(item));
    }
    return tuple;
  }

  bool StartsExpression() const {
    const Token& t = Peek();
    switch (t.kind) {
      case TokenKind::kName:
      case TokenKind::kString:
      case TokenKind::kInteger:
      case TokenKind::kFloat:
        return true;
      case TokenKind::kOperator:
        return t.text == "(" || t.text == "[" || t.text == "{" || t.text == "-" || t.text == "+";
      default:
        return false;
    }
  }

  ExprPtr ParseExpression(bool with_condition) {
    const Nested level(*this);
    if (Failed()) return nullptr;
    return with_condition ? ParseCondition() : ParseOr();
  }

  ExprPtr ParseCondition() {
    ExprPtr expr = ParseOr();
    while (expr != nullptr && !Failed() && IsName("if")) {
      const int line = Next().line;
      ExprPtr test = ParseOr();
      if (test == nullptr) return nullptr;
      ExprPtr otherwise;
      if (IsName("else")) {
        Next();
        const Nested level(*this);
        if (Failed()) return nullptr;
        otherwise = ParseCondition();
        if (otherwise == nullptr) return nullptr;
      }
      auto cond = MakeExpr(Expr::Kind::kCondition, line);
      Adopt(cond, std::move(expr));
      Adopt(cond, std::move(test));
      Adopt(cond, std::move(otherwise));
      expr = std::move(cond);
    }
    return expr;
  }

  ExprPtr Binary(const std::string& op, ExprPtr left, ExprPtr right, int line) {
    auto e = MakeExpr(Expr::Kind::kBinary, line);
    e->name = op;
    Adopt(e, std::move(left));
    Adopt(e, std::move(right));
    if (Failed()) return nullptr;
    return e;
  }

  ExprPtr ParseOr() {
    ExprPtr left = ParseAnd();
    while (left != nullptr && !Failed() && IsName("or")) {
      const int line = Next().line;
      ExprPtr right = ParseAnd();
      if (right == nullptr) return nullptr;
      left = Binary("or", std::move(left), std::move(right), line);
    }
    return left;
  }

  ExprPtr ParseAnd() {
    ExprPtr left = ParseNot();
    while (left != nullptr && !Failed() && IsName("and")) {
      const int line = Next().line;
      ExprPtr right = ParseNot();
      if (right == nullptr) return nullptr;
      left = Binary("and", std::move(left), std::move(right), line);
    }
    return left;
  }

  ExprPtr ParseNot() {
    if (IsName("not")) {
      const int line = Next().line;
      const Nested level(*this);
      if (Failed()) return nullptr;
      ExprPtr operand = ParseNot();
      if (operand == nullptr) return nullptr;
      auto e = MakeExpr(Expr::Kind::kUnary, line);
      e->name = "not";
      Adopt(e, std::move(operand));
      return e;
    }
    return ParseCompare();
  }

  ExprPtr ParseCompare() {
    const int line = Peek().line;
    ExprPtr first = ParseMath1();
    if (first == nullptr) return nullptr;
    ExprPtr compare;
    while (true) {
      std::string op;
      if (Peek().kind == TokenKind::kOperator &&
          (Peek().text == "==" || Peek().text == "!=" || Peek().text == "<" ||
           Peek().text == ">" || Peek().text == "<=" || Peek().text == ">=")) {
        op = Next().text;
      } else if (IsName("in")) {
        Next();
        op = "in";
      } else if (IsName("not") && IsName("in", 1)) {
        Next();
        Next();
        op = "not in";
      } else {
        break;
      }
      ExprPtr operand = ParseMath1();
      if (operand == nullptr) return nullptr;
      if (compare == nullptr) {
        compare = MakeExpr(Expr::Kind::kCompare, line);
        Adopt(compare, std::move(first));
      }
      compare->ops.push_back(op);
      Adopt(compare, std::move(operand));
    }
    return compare != nullptr ? std::move(compare) : std::move(first);
  }

  ExprPtr ParseMath1() {
    ExprPtr left = ParseConcat();
    while (left != nullptr && !Failed() && (IsOp("+") || IsOp("-"))) {
      const Token& op = Next();
      ExprPtr right = ParseConcat();
      if (right == nullptr) return nullptr;
      left = Binary(op.text, std::move(left), std::move(right), op.line);
    }
    return left;
  }

  ExprPtr ParseConcat() {
    ExprPtr left = ParseMath2();
    while (left != nullptr && !Failed() && IsOp("~")) {
      const int line = Next().line;
      ExprPtr right = ParseMath2();
      if (right == nullptr) return nullptr;
      left = Binary("~", std::move(left), std::move(right), line);
    }
    return left;
  }

  ExprPtr ParseMath2() {
    ExprPtr left = ParsePow();
    while (left != nullptr && !Failed() && (IsOp("*") || IsOp("/") || IsOp("//") || IsOp("%"))) {
      const Token& op = Next();
      ExprPtr right = ParsePow();
      if (right == nullptr) return nullptr;
      left = Binary(op.text, std::move(left), std::move(right), op.line);
    }
    return left;
  }

  ExprPtr ParsePow() {
    ExprPtr left = ParseUnary(true);
    while (left != nullptr && !Failed() && IsOp("**")) {
      const int line = Next().line;
      ExprPtr right = ParseUnary(true);
      if (right == nullptr) return nullptr;
      left = Binary("**", std::move(left), std::move(right), line);
    }
    return left;
  }

  ExprPtr ParseUnary(bool with_filter) {
    ExprPtr node;
    if (IsOp("-") || IsOp("+")) {
      const Token& op = Next();
      const Nested level(*this);
      if (Failed()) return nullptr;
      ExprPtr operand = ParseUnary(false);
      if (operand == nullptr) return nullptr;
      node = MakeExpr(Expr::Kind::kUnary, op.line);
      node->name = op.text;
      Adopt(node, std::move(operand));
    } else {
      node = ParsePrimary();
    }
    node = ParsePostfix(std::move(node));
    if (with_filter) node = ParseFilterExpr(std::move(node));
    return node;
  }

  ExprPtr ParsePrimary() {
    const Token& token = Peek();
    switch (token.kind) {
      case TokenKind::kName: {
        Next();
        auto e = MakeExpr(Expr::Kind::kLiteral, token.line);
        if (token.text == "true" || token.text == "True") {
          e->literal = Value(true);
        } else if (token.text == "false" || token.text == "False") {
          e->literal = Value(false);
        } else if (token.text == "none" || token.text == "None") {
          e->literal = Value::None();
        } else {
          // jinja2's implicit macro arguments and template self-reference.
          if (token.text == "varargs" || token.text == "kwargs" || token.text == "self") {
            return Fail(token.line, absl::StrCat("unsupported special name '", token.text, "'"));
          }
          e->kind = Expr::Kind::kName;
          e->name = token.text;
        }
        return e;
      }
      case TokenKind::kString: {
        std::string text;
        while (Peek().kind == TokenKind::kString) text += Next().text;  // adjacent strings join
        auto e = MakeExpr(Expr::Kind::kLiteral, token.line);
        e->literal = Value(std::move(text));
        return e;
      }
      case TokenKind::kInteger: {
        Next();
        auto e = MakeExpr(Expr::Kind::kLiteral, token.line);
        e->literal = Value(token.int_value);
        return e;
      }
      case TokenKind::kFloat: {
        Next();
        auto e = MakeExpr(Expr::Kind::kLiteral, token.line);
        e->literal = Value(token.float_value);
        return e;
      }
      case TokenKind::kOperator:
        if (token.text == "(") return ParseParenthesized();
        if (token.text == "[") return ParseList();
        if (token.text == "{") return ParseDict();
        break;
      default:
        break;
    }
    return Fail(token.line, absl::StrCat("unexpected ", Describe(token)));
  }

  ExprPtr ParseParenthesized() {
    const int line = Next().line;  // (
    if (IsOp(")")) {
      Next();
      return MakeExpr(Expr::Kind::kTuple, line);
    }
    ExprPtr first = ParseExpression(true);
    if (first == nullptr) return nullptr;
    if (IsOp(")")) {
      Next();
      return first;
    }
    auto tuple = MakeExpr(Expr::Kind::kTuple, line);
    Adopt(tuple, std::move(first));
    while (IsOp(",")) {
      Next();
      if (IsOp(")")) break;
      ExprPtr item = ParseExpression(true);
      if (item == nullptr) return nullptr;
      Adopt(tuple, std::move(item));
    }
    if (!ExpectOp(")")) return nullptr;
    return tuple;
  }

  ExprPtr ParseList() {
    auto list = MakeExpr(Expr::Kind::kList, Next().line);  // [
    while (!IsOp("]")) {
      if (!list->args.empty() && !ExpectOp(",")) return nullptr;
      if (IsOp("]")) break;
      ExprPtr item = ParseExpression(true);
      if (item == nullptr) return nullptr;
      Adopt(list, std::move(item));
    }
    Next();
    return list;
  }

  ExprPtr ParseDict() {
    auto dict = MakeExpr(Expr::Kind::kDict, Next().line);  // {
    while (!IsOp("}")) {
      if (!dict->args.empty() && !ExpectOp(",")) return nullptr;
      if (IsOp("}")) break;
      ExprPtr key = ParseExpression(true);
      if (key == nullptr || !ExpectOp(":")) return nullptr;
      ExprPtr value = ParseExpression(true);
      if (value == nullptr) return nullptr;
      Adopt(dict, std::move(key));
      Adopt(dict, std::move(value));
    }
    Next();
    return dict;
  }

  ExprPtr ParsePostfix(ExprPtr node) {
    while (node != nullptr && !Failed()) {
      if (IsOp(".")) {
        const int line = Next().line;
        const Token& attr = Peek();
        if (attr.kind == TokenKind::kName) {
          Next();
          auto e = MakeExpr(Expr::Kind::kAttribute, line);
          e->name = attr.text;
          Adopt(e, std::move(node));
          node = std::move(e);
        } else if (attr.kind == TokenKind::kInteger) {
          Next();
          auto index = MakeExpr(Expr::Kind::kLiteral, line);
          index->literal = Value(attr.int_value);
          auto e = MakeExpr(Expr::Kind::kItem, line);
          Adopt(e, std::move(node));
          Adopt(e, std::move(index));
          node = std::move(e);
        } else {
          return Fail(attr.line, "expected an attribute name after '.'");
        }
      } else if (IsOp("[")) {
        node = ParseSubscript(std::move(node));
      } else if (IsOp("(")) {
        node = ParseCall(std::move(node));
      } else {
        break;
      }
    }
    return node;
  }

  ExprPtr ParseSubscript(ExprPtr subject) {
    const int line = Next().line;  // [
    ExprPtr bounds[3];
    int part = 0;
    bool is_slice = false;
    while (true) {
      if (IsOp(":")) {
        Next();
        is_slice = true;
        if (++part > 2) return Fail(line, "too many ':' in a slice");
        continue;
      }
      if (IsOp("]")) break;
      if (bounds[part] != nullptr) return Fail(Peek().line, "expected ']'");
      bounds[part] = ParseExpression(true);
      if (bounds[part] == nullptr) return nullptr;
    }
    Next();  // ]
    if (!is_slice && bounds[0] == nullptr) return Fail(line, "empty subscript");
    auto e = MakeExpr(is_slice ? Expr::Kind::kSlice : Expr::Kind::kItem, line);
    Adopt(e, std::move(subject));
    if (is_slice) {
      for (ExprPtr& b : bounds) Adopt(e, std::move(b));
    } else {
      Adopt(e, std::move(bounds[0]));
    }
    return e;
  }

  ExprPtr ParseCall(ExprPtr callee) {
    const int line = Peek().line;
    if (callee->kind == Expr::Kind::kAttribute && !SupportedMethods().contains(callee->name) &&
        !IsSandboxRefusedMethod(callee->name)) {
      return Fail(line, absl::StrCat("unsupported method '", callee->name, "'"));
    }
    if (callee->kind == Expr::Kind::kName) called_.emplace_back(callee->name, line);
    auto call = MakeExpr(Expr::Kind::kCall, line);
    Adopt(call, std::move(callee));
    if (!ParseCallArgs(call.get())) return nullptr;
    return call;
  }

  ExprPtr ParseFilterExpr(ExprPtr node) {
    while (node != nullptr && !Failed()) {
      if (IsOp("|")) {
        Next();
        node = ParseFilter(std::move(node));
      } else if (IsName("is")) {
        node = ParseTest(std::move(node));
      } else if (IsOp("(")) {
        node = ParseCall(std::move(node));
      } else {
        break;
      }
    }
    return node;
  }

  ExprPtr ParseTest(ExprPtr subject) {
    const int line = Next().line;  // is
    bool negated = false;
    if (IsName("not")) {
      Next();
      negated = true;
    }
    const Token& token = Peek();
    if (token.kind != TokenKind::kName) return Fail(token.line, "expected a test name after 'is'");
    const std::string name = token.text;
    Next();  // names like none and true are tests here, not literals
    if (!SupportedTests().contains(name)) {
      return Fail(token.line, absl::StrCat("unsupported test '", name, "'"));
    }
    auto test = MakeExpr(Expr::Kind::kTest, line);
    test->name = name;
    test->negated = negated;
    Adopt(test, std::move(subject));
    if (IsOp("(")) {
      if (!ParseCallArgs(test.get())) return nullptr;
    } else if (StartsTestArgument()) {
      if (IsName("is")) return Fail(Peek().line, "tests cannot be chained with 'is'");
      ExprPtr arg = ParsePostfix(ParsePrimary());
      if (arg == nullptr) return nullptr;
      Adopt(test, std::move(arg));
    }
    return test;
  }

  // jinja2 takes one argument without parentheses (`is divisibleby 3`)
  // when a name, literal or bracket follows that does not continue the
  // expression.
  bool StartsTestArgument() const {
    const Token& t = Peek();
    if (t.kind == TokenKind::kName) {
      return t.text != "else" && t.text != "or" && t.text != "and";
    }
    if (t.kind == TokenKind::kString || t.kind == TokenKind::kInteger ||
        t.kind == TokenKind::kFloat) {
      return true;
    }
    return t.kind == TokenKind::kOperator && (t.text == "[" || t.text == "{");
  }

  const std::vector<Token>& t_;
  size_t i_ = 0;
  int loop_depth_ = 0;
  int nesting_ = 0;  // Nested levels open
  absl::Status error_;
  std::vector<std::pair<std::string, int>> called_;
  absl::flat_hash_set<std::string> bound_;
};

}  // namespace

absl::StatusOr<Body> Parse(const std::vector<Token>& tokens) { return Parser(tokens).Run(); }

bool IsSupportedFilter(const std::string& name) { return SupportedFilters().contains(name); }
bool IsSupportedTest(const std::string& name) { return SupportedTests().contains(name); }
bool IsSupportedMethod(const std::string& name) { return SupportedMethods().contains(name); }
bool IsListModifyingMethod(const std::string& name) {
  return ListModifyingMethods().contains(name);
}
bool IsDictModifyingMethod(const std::string& name) {
  return DictModifyingMethods().contains(name);
}
bool IsSandboxRefusedMethod(const std::string& name) {
  return IsListModifyingMethod(name) || IsDictModifyingMethod(name);
}

}  // namespace verdict::jinja
