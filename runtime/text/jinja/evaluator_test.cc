#include "runtime/text/jinja/evaluator.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace verdict::jinja {
namespace {

using ::testing::HasSubstr;

// Renders `source` with `context_json` as its variables; "ERROR: ..." on
// failure.
std::string Render(absl::string_view source, const char* context_json = "{}") {
  absl::StatusOr<Template> t = Template::Compile(source);
  if (!t.ok()) return "ERROR: " + std::string(t.status().message());
  Value context = Value::FromJson(nlohmann::ordered_json::parse(context_json));
  RenderOptions options;
  options.strftime_now = [](const std::string& format) { return "<" + format + ">"; };
  absl::StatusOr<std::string> text = t->Render(context.dict(), options);
  if (!text.ok()) return "ERROR: " + std::string(text.status().message());
  return *text;
}

constexpr char kChat[] = R"({"messages": [
  {"role": "system", "content": "Be brief."},
  {"role": "user", "content": "Hi"},
  {"role": "assistant", "content": "Hello"}], "add_generation_prompt": true})";

TEST(EvaluatorTest, TextOutputAndVariables) {
  EXPECT_EQ(Render("a{{ x }}b", R"({"x": 1})"), "a1b");
  EXPECT_EQ(Render("{{ missing }}|{{ none }}|{{ true }}|{{ 2.0 }}"), "|None|True|2.0");
  EXPECT_EQ(Render("{{ messages[1].content }}{{ messages[1]['role'] }}", kChat), "Hiuser");
}

TEST(EvaluatorTest, IfElifElse) {
  EXPECT_EQ(Render("{% if n > 1 %}a{% elif n == 1 %}b{% else %}c{% endif %}", R"({"n": 1})"), "b");
  EXPECT_EQ(Render("{% if missing %}a{% else %}b{% endif %}"), "b");
  EXPECT_EQ(Render("{% if [] or '' or 0 %}a{% else %}b{% endif %}"), "b");
}

TEST(EvaluatorTest, ForLoopVariables) {
  EXPECT_EQ(Render("{% for x in 'abc' %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}"
                   "{{ loop.revindex0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }};{% endfor %}"),
            "1032TrueFalse3;2121FalseFalse3;3210FalseTrue3;");
  EXPECT_EQ(Render("{% for x in [1, 2, 3] %}{{ loop.previtem }}-{{ loop.nextitem }} {% endfor %}"),
            "-2 1-3 2- ");
  EXPECT_EQ(Render("{% for m in messages if m.role != 'system' %}{{ loop.index }}{{ m.role }}"
                   "{% endfor %}", kChat),
            "1user2assistant");
  EXPECT_EQ(Render("{% for x in [] %}a{% else %}empty{% endfor %}"), "empty");
  EXPECT_EQ(Render("{% for k, v in {'a': 1, 'b': 2}.items() %}{{ k }}{{ v }}{% endfor %}"), "a1b2");
  EXPECT_EQ(Render("{% for i in range(5) %}{% if i == 1 %}{% continue %}{% endif %}"
                   "{% if i == 3 %}{% break %}{% endif %}{{ i }}{% endfor %}"),
            "02");
}

TEST(EvaluatorTest, ScopingAndNamespace) {
  // A set inside a loop does not leak, nor survive to the next iteration.
  EXPECT_EQ(Render("{% set x = 0 %}{% for i in [1, 2] %}{{ x }}{% set x = i %}{% endfor %}{{ x }}"),
            "000");
  // `if` is not a scope.
  EXPECT_EQ(Render("{% if true %}{% set y = 5 %}{% endif %}{{ y }}"), "5");
  EXPECT_EQ(Render("{% set ns = namespace(n=0) %}{% for i in [1, 2, 3] %}{% set ns.n = ns.n + i %}"
                   "{% endfor %}{{ ns.n }}"),
            "6");
  EXPECT_THAT(Render("{% set s = 'x' %}{% set s.a = 1 %}"), HasSubstr("non-namespace"));
  // Set blocks, filter blocks and a loop's else are scopes too.
  EXPECT_EQ(Render("{% set t %}{% set z = 1 %}{% endset %}{% filter upper %}{% set w = 2 %}"
                   "{% endfilter %}{% for i in [] %}{% else %}{% set v = 3 %}{% endfor %}"
                   "{{ z is defined }}{{ w is defined }}{{ v is defined }}"),
            "FalseFalseFalse");
}

TEST(EvaluatorTest, LoopElseRunsUnlessAnIterationCompleted) {
  // jinja2 marks the loop as having run at the end of the body, so a loop
  // whose iterations all break or continue runs its else block too.
  EXPECT_EQ(Render("{% for i in [1, 2] %}{% break %}{% else %}E{% endfor %}"), "E");
  EXPECT_EQ(Render("{% for i in [1, 2] %}{% continue %}{% else %}E{% endfor %}"), "E");
  EXPECT_EQ(Render("{% for i in [1, 2] %}{% if i == 2 %}{% break %}{% endif %}{% else %}E{% endfor %}"),
            "");
  // A break inside a filter block drops the block's output.
  EXPECT_EQ(Render("{% for i in [1, 2] %}{% filter upper %}x{% break %}{% endfilter %}{% endfor %}"), "");
}

TEST(EvaluatorTest, MacrosCallAndFilterBlocks) {
  EXPECT_EQ(Render("{% macro m(a, b='B') %}{{ a }}{{ b }}{% endmacro %}{{ m(1) }}{{ m(1, 2) }}"
                   "{{ m(b=3, a=4) }}"),
            "1B1243");
  EXPECT_EQ(Render("{% macro w(tag) %}<{{ tag }}>{{ caller() }}</{{ tag }}>{% endmacro %}"
                   "{% call w('b') %}bold{% endcall %}"),
            "<b>bold</b>");
  EXPECT_EQ(Render("{% macro w() %}{{ caller(7) }}{% endmacro %}{% call(n) w() %}n={{ n }}{% endcall %}"),
            "n=7");
  EXPECT_EQ(Render("{% filter upper %}ab{{ 'c' }}{% endfilter %}"), "ABC");
  EXPECT_EQ(Render("{% set t | trim %}  x  {% endset %}[{{ t }}]"), "[x]");
  EXPECT_THAT(Render("{% macro m(a) %}{% endmacro %}{{ m(1, 2) }}"), HasSubstr("takes not more"));
  EXPECT_THAT(Render("{% macro m() %}{{ m() }}{% endmacro %}{{ m() }}"), HasSubstr("too deeply"));
}

TEST(EvaluatorTest, Operators) {
  EXPECT_EQ(Render("{{ 7 // 2 }} {{ -7 // 2 }} {{ 7 / 2 }} {{ 4 / 2 }} {{ -7 % 3 }} {{ 2 ** 10 }}"),
            "3 -4 3.5 2.0 2 1024");
  EXPECT_EQ(Render("{{ 'a' ~ 1 ~ none }} {{ 'ab' * 2 }} {{ [1] + [2] }} {{ 1 + 2.5 }}"),
            "a1None abab [1, 2] 3.5");
  EXPECT_EQ(Render("{{ 'b' in 'abc' }} {{ 2 not in [1] }} {{ 'k' in {'k': 1} }} {{ 1 < 2 < 2 }}"),
            "True True True False");
  EXPECT_EQ(Render("{{ 0 or 'x' }} {{ 1 and 'y' }} {{ not none }} {{ 'a' if 0 else 'b' }}"),
            "x y True b");
  EXPECT_THAT(Render("{{ 1 + 'a' }}"), HasSubstr("unsupported operand"));
  EXPECT_THAT(Render("{{ 1 / 0 }}"), HasSubstr("division by zero"));
}

TEST(EvaluatorTest, PythonArithmeticCorners) {
  EXPECT_EQ(Render("{{ 1000 // 0.1 }} {{ -7.5 % 2 }} {{ 7 % -3 }} {{ 2 ** -1 }} {{ true + 1 }}"),
            "9999.0 0.5 -2 0.5 2");
  EXPECT_EQ(Render("{{ '%s=%d%%' % ('n', 2.7) }} {{ '%r' % 'q' }} {{ 'plain' % {} }}"),
            "n=2% 'q' plain");
  EXPECT_THAT(Render("{{ '%s %s' % ('one',) }}"), HasSubstr("not enough arguments"));
  EXPECT_THAT(Render("{{ 'x' % 5 }}"), HasSubstr("not all arguments converted"));
  EXPECT_THAT(Render("{{ '%5.1f' % 5 }}"), HasSubstr("unsupported format"));
}

TEST(EvaluatorTest, CaseMappingBeyondAscii) {
  EXPECT_EQ(Render("{{ 'Été Ωμέγα Дом' | upper }}"), "ÉTÉ ΩΜΈΓΑ ДОМ");
  EXPECT_EQ(Render("{{ 'ÉCOLE' | lower }} {{ 'émile zola' | title }} {{ 'é日x'.title() }}"),
            "école Émile Zola É日X");
}

TEST(EvaluatorTest, Slicing) {
  EXPECT_THAT(Render("{{ (1 if x is undefined else 2)[1:] }}"), HasSubstr("not subscriptable"));
  EXPECT_EQ(Render("{{ [1, 2, 3, 4][1:3] }} {{ [1, 2, 3][::-1] }} {{ 'h\xc3\xa9llo'[1:3] }} "
                   "{{ [1, 2, 3][-1] }}"),
            "[2, 3] [3, 2, 1] \xc3\xa9l 3");
  EXPECT_EQ(Render("{% for m in messages[1:] %}{{ m.role }} {% endfor %}", kChat), "user assistant ");
}

TEST(EvaluatorTest, StringMethods) {
  EXPECT_EQ(Render("{{ 'ab'.startswith('a') }} {{ 'ab'.endswith(('x', 'b')) }} {{ ' x '.strip() }}"
                   " {{ 'xax'.strip('x') }} {{ 'a,b'.split(',') }} {{ 'a b'.split() }}"),
            "True True x a ['a', 'b'] ['a', 'b']");
  EXPECT_EQ(Render("{{ 'aXa'.replace('a', 'b') }} {{ 'Ab'.upper() }} {{ 'Ab'.lower() }} "
                   "{{ \"it's ok\".title() }} {{ '-'.join(['a', 'b']) }}"),
            "bXb AB ab It'S Ok a-b");
}

TEST(EvaluatorTest, Filters) {
  EXPECT_EQ(Render("{{ '  x  ' | trim }}|{{ 'abc' | length }}|{{ [1, 2] | length }}|"
                   "{{ missing | default('d') }}|{{ '' | default('d', true) }}"),
            "x|3|2|d|d");
  EXPECT_EQ(Render("{{ [1, 2] | join(', ') }}|{{ [3, 4] | first }}|{{ [3, 4] | last }}|"
                   "{{ {'a': 1} | items | list }}|{{ 'ab' | list }}|{{ 5 | string }}|{{ '7' | int }}"),
            "1, 2|3|4|[('a', 1)]|['a', 'b']|5|7");
  EXPECT_EQ(Render("{{ messages | selectattr('role', 'equalto', 'user') | map(attribute='content')"
                   " | join }}|{{ messages | rejectattr('role', 'equalto', 'user') | list | length }}",
                   kChat),
            "Hi|2");
  EXPECT_EQ(Render("{{ ['a', 'b'] | map('upper') | list }} {{ [0, 1, 2] | select | list }}"),
            "['A', 'B'] [1, 2]");
  EXPECT_EQ(Render("{{ 'user' | capitalize }} {{ 'a-b c' | title }} {{ 'ab' | upper }}"),
            "User A-B C AB");
  EXPECT_EQ(Render("{{ 'a\nb' | indent(2) }}|{{ 'a\nb' | indent(2, true) }}"), "a\n  b|  a\n  b");
  // indent splits lines as str.splitlines() does: at U+2028, \v, \r\n too.
  EXPECT_EQ(Render("{{ s | indent(1) }}", R"({"s": "a\u2028b\u000bc\r\nd\u0085e"})"),
            "a\n b\n c\n d\n e");
  // select/map give generators: no length, always truthy, printed refused.
  EXPECT_THAT(Render("{{ [1] | select | length }}"), HasSubstr("has no len()"));
  EXPECT_THAT(Render("{{ [1] | select }}"), HasSubstr("generator"));
}

// `safe` gives markupsafe's Markup: it prints as it is, but plain text
// joined to it (+, join(), %) is HTML-escaped, and the str methods and
// filters built on them keep it a Markup. `~` and the replace, join and
// title filters give plain text.
TEST(EvaluatorTest, SafeMakesAMarkupThatEscapesWhatJoinsIt) {
  EXPECT_EQ(Render("{{ '<a>' | safe }}|{{ ('<a>' | safe) + \"\\\"b'&\" }}|"
                   "{{ 'x>' + ('<a>' | safe) }}"),
            "<a>|<a>&#34;b&#39;&amp;|x&gt;<a>");
  EXPECT_EQ(Render("{{ ('<a>' | safe) ~ '<b>' }}|{{ ('<' | safe) + ('>' | safe) }}"), "<a><b>|<>");
  // A value derived from a Markup stays one.
  EXPECT_EQ(Render("{{ (' a ' | safe).strip() + '<' }}|{{ ('a' | safe).upper() + '<' }}|"
                   "{{ ('ab' | safe)[0] + '<' }}|{{ ('ab' | safe)[1:] + '<' }}|"
                   "{{ ('a b' | safe).split()[1] + '<' }}|{{ ('a' | safe) * 2 + '<' }}"),
            "a&lt;|A&lt;|a&lt;|b&lt;|b&lt;|aa&lt;");
  EXPECT_EQ(Render("{{ ('a' | safe) | trim + '<' }}|{{ ('a' | safe) | string + '<' }}|"
                   "{{ ('a' | safe) | upper + '<' }}|{{ ('a' | safe) | indent(2) + '<' }}|"
                   "{{ ('ab' | safe) | reverse + '<' }}"),
            "a&lt;|a&lt;|A&lt;|a&lt;|ba&lt;");
  // replace() escapes its replacement, join() its items, % its arguments.
  EXPECT_EQ(Render("{{ ('a' | safe).replace('a', '<') }}|{{ ('-' | safe).join(['<', 1]) }}|"
                   "{{ ('<%s>' | safe) % '&' }}"),
            "&lt;|&lt;-1|<&amp;>");
  // Plain text from the replace, join, title and tojson filters and `~`.
  EXPECT_EQ(Render("{{ ('a' | safe) | replace('a', 'b') + '<' }}|{{ ('a' | safe) | join + '<' }}|"
                   "{{ ('a' | safe) | title + '<' }}|{{ ('a' | safe) | tojson + '<' }}|"
                   "{{ (('a' | safe) ~ '') + '<' }}|{{ ('a' | safe) | first + '<' }}"),
            "b<|a<|A<|\"a\"<|a<|a<");
  EXPECT_EQ(Render("{{ [('a' | safe)] }} {{ ('a' | safe) == 'a' }} {{ ('a' | safe) is string }}"),
            "[Markup('a')] True True");
  EXPECT_THAT(Render("{{ ('a' | safe) + 1 }}"), HasSubstr("unsupported operand"));
}

// transformers' sandbox refuses a list's or dict's modifying methods when a
// call runs, not when the template loads.
TEST(EvaluatorTest, ModifyingMethodsFailOnlyWhenCalled) {
  EXPECT_EQ(Render("{% set xs = [1] %}{% if false %}{% set _ = xs.append(2) %}{% endif %}{{ xs }}"),
            "[1]");
  EXPECT_THAT(Render("{% set xs = [1] %}{{ xs.append(2) }}"),
              HasSubstr("access to attribute 'append' of 'list' object is unsafe"));
  EXPECT_THAT(Render("{% set d = {} %}{% set _ = d.update({'a': 1}) %}"),
              HasSubstr("access to attribute 'update' of 'dict' object is unsafe"));
  // Where the value has no such method, it is undefined, and calling fails.
  EXPECT_THAT(Render("{{ (1, 2).append(3) }}"), HasSubstr("ERROR"));
  EXPECT_THAT(Render("{{ 'ab'.pop() }}"), HasSubstr("ERROR"));
}

TEST(EvaluatorTest, SortingAndAggregates) {
  EXPECT_EQ(Render("{{ ['b', 'A', 'a'] | sort }} {{ ['b', 'A'] | sort(case_sensitive=true) }} "
                   "{{ [1, 3, 2] | sort(reverse=true) }} {{ {'b': 1, 'a': 2} | dictsort }}"),
            "['A', 'a', 'b'] ['A', 'b'] [3, 2, 1] [('a', 2), ('b', 1)]");
  EXPECT_EQ(Render("{{ messages | sort(attribute='role') | map(attribute='role') | join(',') }}", kChat),
            "assistant,system,user");
  EXPECT_EQ(Render("{{ ['a', 'A', 'b'] | unique | list }} {{ [3, 1] | min }} {{ [3, 1] | max }} "
                   "{{ [1, 2.5] | sum }} {{ [] | max }}|"),
            "['a', 'b'] 1 3 3.5 |");
  EXPECT_THAT(Render("{{ [1, 'a'] | sort }}"), HasSubstr("not supported between"));
}

TEST(EvaluatorTest, ToJsonIsTransformersTojson) {
  EXPECT_EQ(Render("{{ {'a': 'caf\xc3\xa9', 'b': [1, none]} | tojson }}"),
            "{\"a\": \"caf\xc3\xa9\", \"b\": [1, null]}");
  EXPECT_EQ(Render("{{ {'b': 1, 'a': [2]} | tojson(indent=2, sort_keys=true) }}"),
            "{\n  \"a\": [\n    2\n  ],\n  \"b\": 1\n}");
  EXPECT_EQ(Render("{{ {'a': 1} | tojson(separators=(',', ':')) }}"), "{\"a\":1}");
  EXPECT_EQ(Render("{{ '\xc3\xa9' | tojson(true) }}"), "\"\\u00e9\"");
}

TEST(EvaluatorTest, Tests) {
  EXPECT_EQ(Render("{{ x is defined }} {{ x is undefined }} {{ none is none }} {{ 1 is not none }}"),
            "False True True True");
  EXPECT_EQ(Render("{{ 'a' is string }} {{ {} is mapping }} {{ [] is iterable }} {{ 1 is iterable }}"),
            "True True True False");
  EXPECT_EQ(Render("{{ 2 is equalto 2 }} {{ 3 is odd }} {{ 4 is even }} {{ 9 is divisibleby 3 }}"
                   " {{ false is false }} {{ 1 is number }}"),
            "True True True True True True");
  // jinja2's undefined is callable (calling it raises).
  EXPECT_EQ(Render("{{ x is callable }} {{ range is callable }} {{ 1 is callable }}"),
            "True True False");
}

TEST(EvaluatorTest, GlobalsFromTransformers) {
  EXPECT_EQ(Render("{{ strftime_now('%d %b %Y') }}"), "<%d %b %Y>");
  EXPECT_THAT(Render("{{ raise_exception('roles must alternate') }}"),
              HasSubstr("raise_exception: roles must alternate"));
  EXPECT_EQ(Render("{{ range(3) | list }} {{ dict(a=1) }} {{ namespace(a=2).a }}"),
            "[0, 1, 2] {'a': 1} 2");
}

TEST(EvaluatorTest, GenerationBlockRendersItsBody) {
  // transformers' {% generation %} marks assistant text for masks; rendering
  // is unchanged.
  EXPECT_EQ(Render("a{% generation %}b{{ 1 }}{% endgeneration %}c"), "ab1c");
}

TEST(EvaluatorTest, VariablesShadowGlobals) {
  EXPECT_EQ(Render("{{ range }}", R"({"range": "mine"})"), "mine");
}

TEST(EvaluatorTest, UndefinedSemantics) {
  EXPECT_EQ(Render("{{ missing | length }}{% for x in missing %}x{% endfor %}{{ none.attr }}"
                   "{{ messages[9] }}",
                   kChat),
            "0");
  EXPECT_THAT(Render("{{ missing.attr }}"), HasSubstr("'missing' is undefined"));
  EXPECT_THAT(Render("{{ missing + 1 }}"), HasSubstr("'missing' is undefined"));
  EXPECT_THAT(Render("{{ missing() }}"), HasSubstr("unsupported function"));
}

TEST(EvaluatorTest, RuntimeErrorsNameTheLine) {
  EXPECT_THAT(Render("a\nb\n{{ 1 < 'x' }}"), HasSubstr("line 3"));
  EXPECT_THAT(Render("{% for x in 5 %}{% endfor %}"), HasSubstr("not iterable"));
}

TEST(EvaluatorTest, WhitespaceControlAsTransformersConfiguresIt) {
  EXPECT_EQ(Render("{% for m in messages %}\n  {{ m.role }}\n{% endfor %}\n", kChat),
            "  system\n  user\n  assistant\n");
  EXPECT_EQ(Render("{%- for m in messages -%}\n  {{- m.role -}}\n{%- endfor -%}", kChat),
            "systemuserassistant");
  EXPECT_EQ(Render("{# comment #}\n{% raw %}{{ x }}{% endraw %}"), "{{ x }}");
}

TEST(EvaluatorTest, EveryParserNameHasAnImplementation) {
  for (const char* f : {"abs", "capitalize", "count", "d", "default", "first", "float", "indent",
                        "int", "items", "join", "last", "length", "list", "lower", "map",
                        "reject", "rejectattr", "replace", "reverse", "safe", "select",
                        "selectattr", "string", "title", "tojson", "trim", "upper", "sort",
                        "dictsort", "unique", "min", "max", "sum"}) {
    ASSERT_TRUE(IsSupportedFilter(f)) << f;
    std::string out = Render(absl::StrCat("{{ ['a'] | ", f, " }}"));
    EXPECT_THAT(out, ::testing::Not(HasSubstr("no filter named"))) << f;
  }
}

}  // namespace
}  // namespace verdict::jinja
