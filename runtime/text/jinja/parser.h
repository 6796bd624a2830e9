// Parses the tokens of a Jinja template into a tree of statements (Node)
// and expressions (Expr), with jinja2's operator precedence. Parsing also
// rejects what the evaluator does not implement (unknown tags, filters,
// tests, methods, functions), so an unsupported template fails when it is
// loaded, naming its line and the construct.
#ifndef VERDICT_RUNTIME_TEXT_JINJA_PARSER_H_
#define VERDICT_RUNTIME_TEXT_JINJA_PARSER_H_

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "runtime/text/jinja/lexer.h"
#include "runtime/text/jinja/value.h"

namespace verdict::jinja {

// How deep a template may nest: blocks inside blocks, expressions inside
// expressions (parentheses, operators, filters, attribute chains). Deeper
// templates are refused while parsing, so that neither the parser, the
// renderer nor a tree's destructor recurses without bound (a 5 KB template
// of unary operators overflowed the stack). Chat templates nest a few levels.
inline constexpr int kMaxNesting = 128;

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  enum class Kind {
    kLiteral,    // literal
    kName,       // name
    kList,       // args
    kTuple,      // args
    kDict,       // args: key, value, key, value, ...
    kAttribute,  // args[0].name
    kItem,       // args[0][args[1]]
    kSlice,      // args[0][args[1]:args[2]:args[3]]; a missing bound is null
    kCall,       // args[0](args[1:], kwargs)
    kFilter,     // args[0] | name(args[1:], kwargs); args[0] null in a filter block
    kTest,       // args[0] is [not] name(args[1:]); negated
    kUnary,      // name ("-", "+", "not") args[0]
    kBinary,     // args[0] name args[1]: + - * / // % ** ~ and or
    kCompare,    // args[0] ops[0] args[1] ops[1] args[2] ...
    kCondition,  // args[0] if args[1] else args[2] (args[2] may be null)
  };
  Kind kind;
  int line;
  Value literal;
  std::string name;
  bool negated = false;
  std::vector<ExprPtr> args;  // entries may be null where noted
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  std::vector<std::string> ops;
  // Levels of the tree from this node down (1: no arguments); the parser
  // refuses a tree deeper than kMaxNesting.
  int depth = 1;
};

struct Node;
using NodePtr = std::unique_ptr<Node>;
using Body = std::vector<NodePtr>;

struct MacroParam {
  std::string name;
  ExprPtr default_value;  // may be null
};

struct Node {
  enum class Kind {
    kText,      // text
    kOutput,    // {{ expr }}
    kIf,        // conditions[i] -> bodies[i]; else_body
    kFor,       // for target in expr [if condition]: body; else_body
    kSet,       // set target = expr
    kSetBlock,  // set target: body (rendered, then filtered by filter if any)
    kMacro,     // macro name(params): body
    kCallBlock, // call(params) expr: body is the caller
    kFilterBlock,  // filter (a kFilter chain on null): body
    kBreak,
    kContinue,
  };
  Kind kind;
  int line;
  std::string text;
  std::string name;
  ExprPtr target;
  ExprPtr expr;
  ExprPtr condition;
  ExprPtr filter;
  std::vector<ExprPtr> conditions;
  std::vector<Body> bodies;
  Body body;
  Body else_body;
  std::vector<MacroParam> params;
};

// Errors (InvalidArgument, "line N: ..."): syntax errors and unsupported
// constructs.
absl::StatusOr<Body> Parse(const std::vector<Token>& tokens);

// The filters, tests and methods the evaluator implements (the parser
// checks names against these).
bool IsSupportedFilter(const std::string& name);
bool IsSupportedTest(const std::string& name);
bool IsSupportedMethod(const std::string& name);
// The methods that modify a list, and a dict: the sandbox refuses them
// when called (the evaluator); a call of either parses.
bool IsListModifyingMethod(const std::string& name);
bool IsDictModifyingMethod(const std::string& name);
bool IsSandboxRefusedMethod(const std::string& name);  // either

}  // namespace verdict::jinja

#endif  // VERDICT_RUNTIME_TEXT_JINJA_PARSER_H_
