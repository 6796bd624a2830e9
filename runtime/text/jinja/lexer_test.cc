#include "runtime/text/jinja/lexer.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace verdict::jinja {
namespace {

using ::testing::HasSubstr;

// The text tokens, joined: what the template outputs around its tags.
std::string Texts(absl::string_view source) {
  absl::StatusOr<std::vector<Token>> tokens = Tokenize(source);
  EXPECT_TRUE(tokens.ok()) << tokens.status();
  std::string out;
  if (!tokens.ok()) return out;
  for (const Token& t : *tokens) {
    if (t.kind == TokenKind::kText) out += "[" + t.text + "]";
  }
  return out;
}

TEST(LexerTest, TokenKindsInsideTags) {
  absl::StatusOr<std::vector<Token>> tokens = Tokenize("{{ a.b[0] ~ 'x\\n' // 2.5e1 }}");
  ASSERT_TRUE(tokens.ok());
  std::vector<TokenKind> kinds;
  for (const Token& t : *tokens) kinds.push_back(t.kind);
  EXPECT_THAT(kinds, ::testing::ElementsAre(
                         TokenKind::kVariableBegin, TokenKind::kName, TokenKind::kOperator,
                         TokenKind::kName, TokenKind::kOperator, TokenKind::kInteger,
                         TokenKind::kOperator, TokenKind::kOperator, TokenKind::kString,
                         TokenKind::kOperator, TokenKind::kFloat, TokenKind::kVariableEnd,
                         TokenKind::kEnd));
  EXPECT_EQ((*tokens)[8].text, "x\n");
  EXPECT_EQ((*tokens)[10].float_value, 25.0);
}

TEST(LexerTest, TrimBlocksRemovesOneNewlineAfterBlockTags) {
  EXPECT_EQ(Texts("{% if x %}\n\nA{% endif %}\n"), "[\nA]");
  // Not after a variable tag.
  EXPECT_EQ(Texts("{{ x }}\nA"), "[\nA]");
  // Comments count as blocks.
  EXPECT_EQ(Texts("{# c #}\nA"), "[A]");
  // `+%}` keeps the newline.
  EXPECT_EQ(Texts("{% if x +%}\nA"), "[\nA]");
}

TEST(LexerTest, LstripBlocksRemovesIndentBeforeBlockTags) {
  EXPECT_EQ(Texts("A\n    {% if x %}B"), "[A\n][B]");
  EXPECT_EQ(Texts("  {% if x %}B"), "[B]");             // at the start of the template
  EXPECT_EQ(Texts("A  {% if x %}B"), "[A  ][B]");       // not alone on its line
  EXPECT_EQ(Texts("A\n  {{ x }}"), "[A\n  ]");           // not for variables
  EXPECT_EQ(Texts("A\n  {%+ if x %}B"), "[A\n  ][B]");   // `{%+` keeps it
  EXPECT_EQ(Texts("{{ x }}\n  {# c #}\nB"), "[\n][B]");
}

TEST(LexerTest, MinusStripsAllWhitespace) {
  EXPECT_EQ(Texts("A \n\t {%- if x -%} \n B"), "[A][B]");
  EXPECT_EQ(Texts("A \n {{- x -}} \n B"), "[A][B]");
  EXPECT_EQ(Texts("A {#- c -#} B"), "[A][B]");
}

TEST(LexerTest, RawBlocksAreText) {
  EXPECT_EQ(Texts("{% raw %}{{ x }}{% if %}{% endraw %}"), "[{{ x }}{% if %}]");
  // The opening tag keeps its newline (jinja2's raw rule has no trim).
  EXPECT_EQ(Texts("{% raw %}\nA{% endraw %}\nB"), "[\nA][B]");
}

TEST(LexerTest, NewlinesNormalizedAndFinalOneDropped) {
  EXPECT_EQ(Texts("a\r\nb\rc\n"), "[a\nb\nc]");
  EXPECT_EQ(Texts("a\n\n"), "[a\n]");
}

TEST(LexerTest, StringEscapes) {
  absl::StatusOr<std::vector<Token>> tokens = Tokenize(R"({{ "a\tb\\c\u00e9\x41\'" }})");
  ASSERT_TRUE(tokens.ok());
  EXPECT_EQ((*tokens)[1].text, "a\tb\\c\xc3\xa9" "A'");
}

TEST(LexerTest, LinesAreCounted) {
  absl::StatusOr<std::vector<Token>> tokens = Tokenize("a\nb\n{{ x }}");
  ASSERT_TRUE(tokens.ok());
  EXPECT_EQ((*tokens)[1].line, 3);
}

TEST(LexerTest, Errors) {
  EXPECT_THAT(std::string(Tokenize("a\n{{ x").status().message()), HasSubstr("line 2"));
  EXPECT_THAT(std::string(Tokenize("{# open").status().message()), HasSubstr("comment"));
  EXPECT_THAT(std::string(Tokenize("{{ 'open }}").status().message()),
              HasSubstr("unterminated string"));
  EXPECT_THAT(std::string(Tokenize("{{ a ? b }}").status().message()),
              HasSubstr("unexpected character '?'"));
  EXPECT_THAT(std::string(Tokenize("{% raw %}x").status().message()), HasSubstr("raw"));
}

}  // namespace
}  // namespace verdict::jinja
