#include "runtime/text/jinja/parser.h"

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace verdict::jinja {
namespace {

using ::testing::HasSubstr;

absl::StatusOr<Body> ParseText(absl::string_view source) {
  absl::StatusOr<std::vector<Token>> tokens = Tokenize(source);
  if (!tokens.ok()) return tokens.status();
  return Parse(*tokens);
}

std::string ErrorOf(absl::string_view source) {
  absl::StatusOr<Body> body = ParseText(source);
  EXPECT_FALSE(body.ok()) << source;
  return body.ok() ? "" : std::string(body.status().message());
}

const Expr& OutputExpr(const Body& body) { return *body.at(0)->expr; }

TEST(ParserTest, StatementsBecomeNodes) {
  absl::StatusOr<Body> body = ParseText(
      "{% for m in messages if m.role != 'x' %}{{ m }}{% else %}none{% endfor %}"
      "{% if a %}1{% elif b %}2{% else %}3{% endif %}{% set x = 1 %}{% set ns.y = 2 %}"
      "{% set t %}body{% endset %}{% macro f(a, b=1) %}{% endmacro %}"
      "{% call(z) f(1) %}{{ z }}{% endcall %}{% filter upper %}u{% endfilter %}");
  ASSERT_TRUE(body.ok()) << body.status();
  ASSERT_EQ(body->size(), 8u);
  const Node& loop = *(*body)[0];
  EXPECT_EQ(loop.kind, Node::Kind::kFor);
  EXPECT_NE(loop.condition, nullptr);
  EXPECT_EQ(loop.else_body.size(), 1u);
  EXPECT_EQ((*body)[1]->kind, Node::Kind::kIf);
  EXPECT_EQ((*body)[1]->conditions.size(), 2u);
  EXPECT_EQ((*body)[3]->target->kind, Expr::Kind::kAttribute);
  EXPECT_EQ((*body)[4]->kind, Node::Kind::kSetBlock);
  EXPECT_EQ((*body)[5]->params.size(), 2u);
  EXPECT_EQ((*body)[6]->kind, Node::Kind::kCallBlock);
  EXPECT_EQ((*body)[7]->kind, Node::Kind::kFilterBlock);
}

TEST(ParserTest, PrecedenceFollowsJinja) {
  // Filters bind tighter than arithmetic: a + (b | length).
  absl::StatusOr<Body> body = ParseText("{{ a + b | length }}");
  ASSERT_TRUE(body.ok());
  const Expr& sum = OutputExpr(*body);
  EXPECT_EQ(sum.kind, Expr::Kind::kBinary);
  EXPECT_EQ(sum.args[1]->kind, Expr::Kind::kFilter);
  // `not` covers the test: not (x is defined).
  body = ParseText("{{ not x is defined }}");
  ASSERT_TRUE(body.ok());
  EXPECT_EQ(OutputExpr(*body).kind, Expr::Kind::kUnary);
  EXPECT_EQ(OutputExpr(*body).args[0]->kind, Expr::Kind::kTest);
  // * before +, ~ between them.
  body = ParseText("{{ 1 + 2 * 3 }}");
  ASSERT_TRUE(body.ok());
  EXPECT_EQ(OutputExpr(*body).name, "+");
  // Chained comparisons are one node.
  body = ParseText("{{ 1 < 2 <= 3 }}");
  ASSERT_TRUE(body.ok());
  EXPECT_EQ(OutputExpr(*body).ops.size(), 2u);
  // `is not` negates; a test takes one bare argument.
  body = ParseText("{{ x is not divisibleby 3 }}");
  ASSERT_TRUE(body.ok());
  EXPECT_TRUE(OutputExpr(*body).negated);
  EXPECT_EQ(OutputExpr(*body).args.size(), 2u);
}

TEST(ParserTest, SlicesAndCalls) {
  absl::StatusOr<Body> body = ParseText("{{ m[1:] }}{{ m[::-1] }}{{ s.split(',', 1) }}");
  ASSERT_TRUE(body.ok()) << body.status();
  EXPECT_EQ(OutputExpr(*body).kind, Expr::Kind::kSlice);
  EXPECT_EQ((*body)[1]->expr->args[3]->kind, Expr::Kind::kUnary);
  EXPECT_EQ((*body)[2]->expr->kind, Expr::Kind::kCall);
}

TEST(ParserTest, UnsupportedConstructsNameLineAndConstruct) {
  EXPECT_THAT(ErrorOf("a\n{{ x | wordwrap }}"), HasSubstr("line 2: unsupported filter 'wordwrap'"));
  EXPECT_THAT(ErrorOf("{{ x is escaped }}"), HasSubstr("unsupported test 'escaped'"));
  EXPECT_THAT(ErrorOf("{% include 'x' %}"), HasSubstr("unsupported tag 'include'"));
  EXPECT_THAT(ErrorOf("{% extends 'x' %}"), HasSubstr("unsupported tag 'extends'"));
  EXPECT_THAT(ErrorOf("{% frobnicate %}"), HasSubstr("unknown tag 'frobnicate'"));
  EXPECT_THAT(ErrorOf("{{ xs.index(1) }}"), HasSubstr("unsupported method 'index'"));
  EXPECT_THAT(ErrorOf("\n\n{{ cycler(1) }}"), HasSubstr("line 3: unsupported function 'cycler'"));
  EXPECT_THAT(ErrorOf("{% for x in xs recursive %}{% endfor %}"), HasSubstr("recursive"));
  EXPECT_THAT(ErrorOf("{{ f(*args) }}"), HasSubstr("unpacking"));
  EXPECT_THAT(ErrorOf("{% macro m() %}{{ varargs }}{% endmacro %}"),
              HasSubstr("unsupported special name 'varargs'"));
  EXPECT_THAT(ErrorOf("{{ loop.changed(x) }}"), HasSubstr("unsupported method 'changed'"));
}

// The sandbox refuses a list's or dict's modifying methods only when a call
// runs, so they parse (the evaluator fails the call).
TEST(ParserTest, SandboxRefusedMethodsParse) {
  EXPECT_TRUE(
      ParseText("{% if false %}{{ xs.append(1) }}{% set _ = d.update(e) %}{% endif %}").ok());
  EXPECT_TRUE(IsSandboxRefusedMethod("setdefault"));
  EXPECT_FALSE(IsSandboxRefusedMethod("index"));
}

TEST(ParserTest, DefinedFunctionsMayBeCalled) {
  EXPECT_TRUE(ParseText("{{ m() }}{% macro m() %}{% endmacro %}").ok());
  EXPECT_TRUE(ParseText("{{ raise_exception('x') }}{{ namespace(a=1) }}{{ range(3) }}").ok());
}

// `levels` copies of `open`, then `core`, then `levels` copies of `close`.
std::string Nest(int levels, const std::string& open, const std::string& core,
                 const std::string& close) {
  std::string text;
  for (int i = 0; i < levels; ++i) text += open;
  text += core;
  for (int i = 0; i < levels; ++i) text += close;
  return text;
}

// Every way a template nests, at the limit and one level past it (and far
// past it: the thousands of levels that overflowed the stack). Chains that
// build deep trees without recursing (a + b + ..., a.b.c..., x | f | g ...)
// count too: the renderer and the destructor recurse over the tree.
TEST(ParserTest, NestingPastTheLimitIsRefused) {
  // Each case builds a template that nests about `levels` levels.
  const std::vector<std::pair<std::string, std::function<std::string(int)>>> cases = {
      {"parentheses", [](int n) { return "{{ " + Nest(n, "(", "1", ")") + " }}"; }},
      {"lists", [](int n) { return "{{ " + Nest(n, "[", "1", "]") + " }}"; }},
      {"dicts", [](int n) { return "{{ " + Nest(n, "{'k': ", "1", " }") + " }}"; }},
      {"call arguments", [](int n) { return "{{ " + Nest(n, "range(", "1", ")") + " }}"; }},
      {"unary plus", [](int n) { return "{{ " + Nest(n, "+", "3", "") + " }}"; }},
      {"unary minus", [](int n) { return "{{ " + Nest(n, "- ", "3", "") + " }}"; }},
      {"not", [](int n) { return "{{ " + Nest(n, "not ", "x", "") + " }}"; }},
      {"else branches", [](int n) { return "{{ " + Nest(n, "1 if x else ", "2", "") + " }}"; }},
      {"a sum", [](int n) { return "{{ 1" + Nest(n, " + 1", "", "") + " }}"; }},
      {"a concatenation", [](int n) { return "{{ 'a'" + Nest(n, " ~ 'b'", "", "") + " }}"; }},
      {"attributes", [](int n) { return "{{ m" + Nest(n, ".a", "", "") + " }}"; }},
      {"subscripts", [](int n) { return "{{ m" + Nest(n, "[0]", "", "") + " }}"; }},
      {"filters", [](int n) { return "{{ m" + Nest(n, " | trim", "", "") + " }}"; }},
      {"blocks", [](int n) { return Nest(n, "{% if x %}", "y", "{% endif %}"); }},
      {"loops", [](int n) { return Nest(n, "{% for a in b %}", "y", "{% endfor %}"); }},
  };
  for (const auto& [what, make] : cases) {
    SCOPED_TRACE(what);
    // Well inside the limit (every construct adds at most two levels).
    const absl::StatusOr<Body> inside = ParseText(make(kMaxNesting / 2 - 2));
    EXPECT_TRUE(inside.ok()) << inside.status();
    for (const int levels : {kMaxNesting + 1, 5000}) {
      EXPECT_THAT(ErrorOf(make(levels)),
                  HasSubstr("the template nests deeper than " + std::to_string(kMaxNesting) +
                            " levels"));
    }
  }
}

TEST(ParserTest, SyntaxErrors) {
  EXPECT_THAT(ErrorOf("{% if x %}"), HasSubstr("unexpected end of template"));
  EXPECT_THAT(ErrorOf("{% endif %}"), HasSubstr("unexpected 'endif'"));
  EXPECT_THAT(ErrorOf("{% for x of y %}{% endfor %}"), HasSubstr("expected 'in'"));
  EXPECT_THAT(ErrorOf("{{ (1 }}"), HasSubstr("expected ')'"));
  EXPECT_THAT(ErrorOf("{% break %}"), HasSubstr("outside of a loop"));
  // A call block's body is a function: the loop around it is not its loop.
  EXPECT_THAT(ErrorOf("{% macro w() %}{{ caller() }}{% endmacro %}{% for i in [1] %}"
                      "{% call w() %}{% continue %}{% endcall %}{% endfor %}"),
              HasSubstr("outside of a loop"));
  EXPECT_THAT(ErrorOf("{{ }}"), HasSubstr("unexpected"));
}

}  // namespace
}  // namespace verdict::jinja
