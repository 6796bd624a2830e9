"""Renders chat templates with jinja2, configured as transformers'
apply_chat_template configures it, and with verdict's interpreter
(jinja_render), and requires byte-identical text, or an error from both.

Usage: jinja_parity_test.py JINJA_RENDER TEMPLATE.jinja...
"""

import copy
import datetime
import json
import os
import random
import subprocess
import sys

import jinja2
from jinja2 import nodes
from jinja2.ext import Extension, loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment

NOW = (2026, 3, 14, 9, 26, 53)

# The kPlain format's Jinja (runtime/text/chat_template.cc, the bundled
# models' chat_template).
PLAIN = (
    "{% for message in messages %}{{ message['role'] | capitalize }}: {{ message['content'] }}\n"
    "{% endfor %}{% if add_generation_prompt %}Assistant:{% endif %}"
)

CONVERSATIONS = {
    "system_user": [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "Where is the ship?"},
    ],
    "user_only": [{"role": "user", "content": "Hello?"}],
    "multi_turn": [
        {"role": "system", "content": "  Answer in one line.  \n"},
        {"role": "user", "content": "Hello?"},
        {"role": "assistant", "content": "Hi."},
        {"role": "user", "content": "Where is the ship?"},
        {"role": "assistant", "content": "In the harbour."},
        {"role": "user", "content": "And the crew?"},
    ],
    "empty_content": [
        {"role": "user", "content": ""},
        {"role": "assistant", "content": ""},
        {"role": "user", "content": " "},
    ],
    "unicode": [
        {"role": "system", "content": "Réponds en français, s'il te plaît — «merci»."},
        {"role": "user", "content": "日本語で? 🚢⚓ Ελληνικά, العربية, \"quotes\" and \\backslash\\\ttab"},
        {"role": "assistant", "content": "はい。\u00a0non-breaking\u2028line sep\x7f"},
        {"role": "user", "content": "emoji 👩‍🚀 and combining é\n\nnewlines\r\n"},
    ],
    "reasoning": [
        {"role": "user", "content": "2+2?"},
        {"role": "assistant", "content": "<think>\nAdd them.\n</think>\n\n4"},
        {"role": "user", "content": "<tool_response>x</tool_response>"},
        {"role": "assistant", "content": "<think>\nstill 4\n</think>\nFour."},
    ],
    "consecutive_users": [
        {"role": "user", "content": "one"},
        {"role": "user", "content": "two"},
    ],
}

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Weather at a place — «now».",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
                "required": ["city"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "tag_photos",
            "parameters": {
                "type": "object",
                "properties": {
                    "tags": {"type": "array", "items": {"type": "string"}},
                    "grid": {"type": "array", "items": {"type": "array", "items": {"type": "number"}}},
                    "options": {"type": "object", "properties": {"dpi": {"type": "integer"}}},
                    "strict": {"type": "boolean"},
                },
                "required": ["tags", "strict"],
            },
        },
    },
]

# Small templates that each pin one construct, rendered with the
# "multi_turn" conversation. Errors must be errors on both sides.
SNIPPETS = [
    "{{ messages[1].content }}|{{ messages[1]['content'] }}|{{ messages.1.role }}",
    "{{ messages[99] }}|{{ nothing }}|{{ nothing is defined }}|{{ none.attr }}|",
    "{{ nothing.attr }}",
    "{{ nothing + 1 }}",
    "{{ 1 + 'a' }}",
    "{{ raise_exception('bad ' ~ messages|length) }}",
    "{{ [1, 2, 3][1:] }} {{ [1, 2, 3][-2:] }} {{ 'héllo'[1:3] }} {{ 'héllo'[::-1] }} {{ (1, 2)[0] }} {{ (1,) }} {{ () }}",
    "{{ 3 / 2 }} {{ 4 / 2 }} {{ -7 // 2 }} {{ 7 % -3 }} {{ 2.5 // 1 }} {{ 1e20 }} {{ 1.5e-7 }} {{ 0.1 + 0.2 }} {{ 1/3 }} {{ 100.0 }} {{ 1e16 }}",
    "{{ true }} {{ false }} {{ none }} {{ [none, true, 'it\\'s', \"q\\\"\"] }} {{ {'k': [1, {'n': none}]} }}",
    "{{ 'a' < 'b' }} {{ [1, 2] < [1, 3] }} {{ 1 == 1.0 }} {{ true == 1 }} {{ 'a' == 'a' }} {{ [1] == [1] }} {{ 2 != 3 }}",
    "{{ 1 < 'a' }}",
    "{% for a, b in [[1, 2], [3, 4]] %}{{ a }}{{ b }}{% endfor %} {% set x, y = 'ab' %}{{ y }}{{ x }}",
    "{% for c in 'héllo' %}{{ c }}.{% endfor %} {% for k in {'x': 1, 'y': 2} %}{{ k }}{% endfor %} {% for n in nothing %}never{% else %}empty{% endfor %}",
    "{% for i in [1, 2] %}{% set x = i %}{% endfor %}[{{ x }}] {% if true %}{% set y = 5 %}{% endif %}{{ y }}",
    "{% for i in range(3) %}{% for j in range(2) %}{{ loop.index }}{{ loop.cycle('a', 'b') }}{% endfor %}{{ loop.index }};{% endfor %}",
    "{{ messages | map(attribute='role') | join(', ') }} | {{ messages | join('-', attribute='role') }} | {{ [1, 2] | join }}",
    "{{ messages | selectattr('role', 'equalto', 'user') | list | length }} {{ messages | selectattr('content') | list | length }} {{ [0, 1, 2, '', 'x'] | select | list }} {{ [1, 2, 3, 4] | reject('odd') | list }}",
    "{{ messages | selectattr('role', 'eq', 'user') | length }}",
    "{{ {'b': 2, 'a': 1} | items | list }} {{ {'b': 2}.keys() | list }} {{ {'b': 2}.values() | list }} {{ {'b': 2}.get('b') }} {{ {'b': 2}.get('c', 'none') }} {{ {'b': 2}.get('c') }}",
    "{{ 'Hello World' | lower }} {{ 'hello' | upper }} {{ 'hELLO wORLD' | capitalize }} {{ 'a-b (c) [d] <e> {f}' | title }} {{ \"they're bill's\".title() }}",
    "{{ '  x  '.strip() }}|{{ '  x  '.lstrip() }}|{{ '  x  '.rstrip() }}|{{ 'a b  c'.split(' ') }}|{{ 'a b c'.split(' ', 1) }}|{{ '\\u3000 x \\t'.split() }}",
    "{{ 'aaa'.replace('a', 'b', 2) }} {{ 'abc'.replace('', '-') }} {{ 'x' | replace('x', 'y') }} {{ ', '.join(['a', 'b']) }} {{ 'abc'.upper().lower() }}",
    "{{ [1, 'a'] | tojson }} {{ {'a': 'é\\n\"'} | tojson }} {{ {'b': 1, 'a': 2} | tojson(sort_keys=true) }} {{ [] | tojson(indent=2) }} {{ [{}] | tojson(indent=2) }} {{ 'ü' | tojson(true) }} {{ 1.0 | tojson }}",
    "{{ [1, [2, {'k': 'v'}]] | tojson(indent=2) }}",
    "{{ nothing | tojson }}",
    "{{ '5' | int }} {{ '-3' | int }} {{ ' 7 ' | int }} {{ '1.9' | int }} {{ 'z' | int(9) }} {{ '0x1A' | int(0, 16) }} {{ '2.5' | float }} {{ 'q' | float }} {{ true | int }}",
    "{{ nothing | default('d') }} {{ none | default('d') }} {{ '' | default('d') }} {{ '' | default('d', true) }} {{ 0 | d('z', boolean=true) }}",
    "{{ [] | first }}|{{ [4, 5] | first }}|{{ 'ab' | last }}|{{ {'a': 1} | first }}|{{ [1, 2] | length }}|{{ 'héllo' | count }}|{{ {'a': 1} | length }}|{{ nothing | length }}",
    "{{ 'abc' | list }} {{ (1, 2) | list }} {{ 42 | string }} {{ none | string }} {{ [1, 2] | string }} {{ -3 | abs }} {{ 'x' | safe }}",
    "{{ nothing is undefined }} {{ none is none }} {{ 1 is not none }} {{ 'a' is string }} {{ 1 is string }} {{ {} is mapping }} {{ [] is mapping }} {{ 'a' is iterable }} {{ 3 is iterable }} {{ [] is sequence }}",
    "{{ 1 is number }} {{ 1.5 is float }} {{ 1 is integer }} {{ true is integer }} {{ true is boolean }} {{ false is false }} {{ 1 is true }} {{ 2 is even }} {{ 3 is odd }} {{ 9 is divisibleby 3 }}",
    "{{ 2 is equalto 2 }} {{ 2 is eq 3 }} {{ 'a' is in 'cat' }} {{ 'ab' is lower }} {{ 'AB' is upper }} {{ 1 is lt 2 }} {{ 2 is ge 3 }} {{ range is callable }} {{ none is sameas none }}",
    "{{ 'a' if 1 else 'b' }} {{ 'a' if 0 else 'b' }} {{ 'a' if 0 }}| {{ 1 and 2 }} {{ 0 or 'x' }} {{ not 0 }} {{ 1 or nothing.x }} {{ 0 and nothing.x }}",
    "{{ -2 ** 2 }} {{ 2 + 3 * 4 }} {{ (2 + 3) * 4 }} {{ 10 - 2 - 3 }} {{ 2 ** 3 ** 2 }} {{ 1 ~ 2 + 3 }} {{ 'a' ~ none ~ nothing }} {{ -'3' | int if false }}|{{ -x | default(2) }}",
    "{{ -'3' | int }}",
    "{{ 'x' * 3 }} {{ 3 * 'ab' }} {{ [1] * 2 }} {{ [1] + [2] }} {{ 'a' + 'b' }}",
    "{% set ns = namespace(a=1, b=[]) %}{% for i in range(3) %}{% set ns.a = ns.a * 2 %}{% set ns.b = ns.b + [i] %}{% endfor %}{{ ns.a }} {{ ns.b }} {{ ns.missing }}|{{ ns }}",
    "{% set d = dict(a=1, b='x') %}{{ d }} {{ d.a }} {{ d['b'] }} {{ namespace({'k': 2}).k }}",
    "{% macro m(a, b='B', c=none) %}[{{ a }}{{ b }}{{ c }}{{ x }}]{% endmacro %}{% set x = 'X' %}{{ m(1) }}{{ m(1, 2) }}{{ m(a=3, c=4) }}{{ m() }}",
    "{% macro m(a) %}{{ a }}{% endmacro %}{{ m(1, 2) }}",
    "{% macro item(t) %}<{{ t }}>{% if caller is defined %}{{ caller() }}{% endif %}{% endmacro %}{% call item('x') %}inner {{ messages|length }}{% endcall %}{{ item('y') }}",
    "{% set block %}  kept  {% endset %}[{{ block }}] {% set shout | upper %}quiet{% endset %}{{ shout }} {% filter trim | upper %}  abc  {% endfilter %}",
    "{% raw %}{% if %}{{ x }}{% endraw %}|{# gone #}|{#- trimmed -#}  |",
    "a\n  {% if true %}\n  b\n  {% endif %}\nc\n  {%+ if true %}d{% endif %}\n{{ 'e' }}  \n  {{- 'f' -}}  \n g {%- if true -%}  h  {%- endif -%}  i\n{% if true +%}\nj{% endif %}",
    "line1\r\nline2\rline3\n\n",
    "{% for i in [1, 2, 3] %}\n  {{ i }}\n{% endfor %}\n{# comment line #}\n  {# indented comment #}\ntail",
    "  {% raw %}\n  raw {{ }}\n  {% endraw %}\nafter",
    "{{ 'a' }}{{ 'b' -}}\n\n   {{ 'c' }}{{- '\\n' -}}\n{{ 'd' }}",
    "{{ strftime_now('%Y-%m-%d %H:%M:%S %A %B %j %a %b') }}",
    "{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}{% else %}{% set loop_messages = messages %}{% endif %}{% for m in loop_messages %}{{ m.role[0] }}{% endfor %}",
    "{{ messages[-1].content.split(' ')[-1] }} {{ messages[-1]['content'][:-1] }} {{ messages | length > 2 }} {{ messages[0].role in ['system', 'developer'] }}",
    "{% for m in messages %}{% if loop.index > 2 %}{% break %}{% endif %}{{ m.role }} {% endfor %}",
    "{{ '%s and %d%%' % ('x', 2.7) }} {{ '%r' % 'q' }} {{ '%s' % [1] }} {{ '' % {} }} {{ 'n=%i' % true }}",
    "{{ '%s %s' % ('one',) }}",
    "{{ '' % 5 }}",
    "{{ 'a' 'b' }} {{ \"x\\ty\" }} {{ '\\u00e9\\x41' }} {{ 1_000 }} {{ 1.5e3 }}",
    "{{ add_generation_prompt }} {{ tools }} {{ documents }} {{ bos_token }}",
    "{%- for m in messages -%}\n\t  {%- if m.role == 'user' %}\n\t<u>{{ m.content }}</u>\n  {% elif m.role == 'assistant' -%}\n  <a>{{ m.content }}</a>\n{%- endif %}\n{% endfor %}",
    'x  {%- if true %} y {% endif -%}  z\n  {%- for i in [1,2] +%}\n {{ i }}\n{%- endfor %}',
    '\t\t{% if true %}\t\n\tA{% endif %}\n \t {# c #} \nB',
    '{% macro inner(x) %}({{ x }}){% endmacro %}{% macro outer(xs) %}{% for x in xs %}{{ inner(x) }}{{ loop.index }}{% endfor %}{% endmacro %}{{ outer([1, 2]) }}{% for y in [3] %}{{ outer([y]) }}{% endfor %}',
    '{% macro m() %}{% set leak = 1 %}{% endmacro %}{{ m() }}{{ leak is defined }}',
    "{% for (k, v) in {'a': 1}.items() %}{{ k }}{{ v }}{% endfor %}{% for k, v in messages[0].items() if k == 'role' %}{{ v }}{% endfor %}",
    "{{ messages | length - 1 }} {{ (messages | length) - 1 }} {{ messages|length > 1 and messages[0].role == 'system' }}",
    "{{ messages[0] | tojson }} {{ messages | map(attribute='role') | list | tojson }} {{ {'u': '\\u2028\\x00\\x1f\\x7f'} | tojson }} {{ 1e-7 | tojson }} {{ 12345678901234 | tojson }} {{ -0.0 | tojson }}",
    "{{ 'é' < 'z' }} {{ 'Z' < 'a' }} {{ 'ab' < 'abc' }} {{ (1, 2) < (1, 2, 0) }}",
    "{% set user_messages = messages | selectattr('role', 'equalto', 'user') | list %}{% for m in messages %}{% if m == user_messages[-1] %}LAST{% endif %}{% endfor %}",
    "{%- set ns = namespace(found=false) -%}{%- for m in messages -%}{%- if m['role'] == 'system' -%}{%- set ns.found = true -%}{%- endif -%}{%- endfor -%}{{ ns.found }}",
    "{{ messages[1].get('missing', 'dflt') }} {{ messages[1].get('role') }} {{ messages[1].items() | list }} {{ messages[1].keys() | list }}",
    "{{ '<｜User｜>' + messages[1]['content'] }} {{ '日本'[0] }} {{ '日本' | length }} {{ '日本' | reverse }}",
    "{{ 'a\\nb\\n' | indent(3, first=true, blank=true) }}|{{ '\\nx' | indent }}|{{ 'x\\n\\ny' | indent(1) }}",
    "{{ [3, 1, 2] | reverse | join }} {{ 'x' | first }} {{ '' | first }}| {{ [[1, 2]] | first | last }}",
    '{% if messages %}{% set x = 1 %}{% for i in [1] %}{% set x = 2 %}{{ x }}{% endfor %}{{ x }}{% endif %}',
    '{{ 10 // 3 * 3 + 10 % 3 }} {{ 2 * -1 }} {{ -(1 + 2) }} {{ +3 }} {{ 5 - -2 }} {{ 2.0 * 3 }} {{ 7 // 2.0 }} {{ -7.5 % 2 }} {{ 2 ** -1 }}',
    '{{ true + 1 }} {{ true * 3 }} {{ 1 == true }} {{ none == false }} {{ [] == [] }} {{ {} == {} }}',
    '{{ loop }}|{% for i in [1] %}{{ loop.depth }}{{ loop.depth0 }}{% endfor %}',
    "{% set a = [1, 2, 3] %}{{ a[1:2] }} {{ a[:-1] }} {{ a[5:] }} {{ a[-10:2] }} {{ a[::2] }} {{ a[2:0:-1] }} {{ 'abcdef'[-2:] }} {{ 'abcdef'[1:-1:2] }}",
    '{% filter replace(\'a\', \'b\') %}banana{% endfilter %} {% filter tojson %}q"{% endfilter %}',
    "{{ 'Hello' ~ ' ' ~ messages|length ~ '!' }} {{ 'a' 'b' ~ 'c' }}",
    '{% set x %}\n  line\n{% endset %}[{{ x }}]',
    "{{ '   ' | trim | length }} {{ 'xxaxx' | trim('x') }} {{ '\\u00a0a\\u00a0' | trim }}",
    "{% for m in messages %}{{ loop.index0 % 2 == 0 }}{{ (m.role == 'user') != (loop.index0 % 2 == 0) }} {% endfor %}",
    "{{ 'abc' is in ['abc'] }} {{ none is not defined }} {{ nothing is not none }} {{ not nothing is defined }}",
    "{{ messages[0].content is string and messages[0].content.startswith('  ') }} {{ messages[0]['content'].strip() }}",
    '{{ range(2, 10, 3) | list }} {{ range(5, 0, -2) | list }} {{ range(0) | list }}',
    "{% macro kw(a, b) %}{{ a }}-{{ b }}{% endmacro %}{{ kw(b=1, a=2) }} {{ kw('x') }}",
    "{%- if add_generation_prompt -%}\n    {{- '<|assistant|>\\n' -}}\n{%- endif -%}\n",
    "{{ messages | selectattr('role', 'in', ['user', 'system']) | map(attribute='role') | join(',') }} {{ messages | map(attribute='nope', default='d') | join }}",
    "{{ messages | selectattr('role', '==', 'user') | list | length }} {{ [1, 5, 3] | select('>', 2) | list }} {{ [1, 2] | reject('==', 1) | list }}",
    "{{ 'a b c'.split(none, 1) }} {{ ''.split() }} {{ ''.split(',') }} {{ 'a,'.split(',') }} {{ '  a  b  '.split(' ') }}",
    "{{ 'ÉCOLE été Ωμέγα ДОМ дом ĳ' | lower }} {{ 'école été ωμέγα дом ς' | upper }} {{ 'émile zola' | title }} {{ 'émile ZOLA'.title() }} {{ 'éA' | capitalize }} {{ 'é' is lower }} {{ 'É日' is upper }} {{ '日' is lower }}",
    "{{ 'Hello World Foo'.title() }} {{ 'hello-world foo_bar'.title() }} {{ 'HELLO' | title }} {{ 'o\\'neil' | title }}",
    "{{ 3 | float }} {{ '3.0' | int }} {{ '1e3' | float }} {{ 'nan' | float }} {{ '-0' | int }} {{ '+5' | int }} {{ '1_000' | int }}",
    "{{ ['b', 'A', 'a', 'C'] | sort }} {{ ['b', 'A', 'a'] | sort(case_sensitive=true) }} {{ [3, 1, 2] | sort(reverse=true) }} {{ messages | sort(attribute='role') | map(attribute='role') | join(',') }} {{ {'b': 1, 'A': 3, 'c': 2} | dictsort }} {{ {'b': 1, 'a': 3} | dictsort(by='value') }}",
    "{{ ['a', 'A', 'b', 'a'] | unique | list }} {{ [3, 1, 2] | min }} {{ [3, 1, 2] | max }} {{ ['b', 'A'] | min }} {{ [] | max }}| {{ [1, 2.5] | sum }} {{ messages | map(attribute='content') | map('length') | sum }} {{ messages | max(attribute='role') }}",
    "{{ -2 | abs }} {{ -2.5 | abs }} {{ 'AbC' | lower }} {{ 'AbC' | upper }} {{ none | lower }}",
    # safe gives a Markup: plain text joined to it is HTML-escaped (tool
    # lists built as `'...' | safe + name + ... + x | tojson`, Mistral's
    # `arguments | tojson | safe`), and what derives from it stays a Markup.
    "{{ '<a>' | safe }}|{{ \"'\" | safe + messages[1].content + '\"&<>' + {'k': \"'\"} | tojson }}|{{ 'x<' + ('<a>' | safe) }}|{{ ('<a>' | safe) ~ '<' }}",
    "{{ ('a' | safe).upper() + '<' }}|{{ (' a ' | safe).strip() + '<' }}|{{ ('ab' | safe)[0] + '<' }}|{{ ('ab' | safe)[1:] + '<' }}|{{ ('a b' | safe).split()[1] + '<' }}|{{ ('a' | safe) * 2 + '<' }}|{{ ('a' | safe).replace('a', '<') }}|{{ ('-' | safe).join(['<', 1, none]) }}",
    "{{ ('<%s%r>' | safe) % ('&', \"'\") }}|{{ ('a' | safe) | trim + '<' }}|{{ ('a' | safe) | string + '<' }}|{{ ('a' | safe) | upper + '<' }}|{{ ('a\\nb' | safe) | indent(2, true) + '<' }}|{{ ('ab' | safe) | reverse + '<' }}|{{ 5 | safe + '<' }}|{{ nothing | safe + '<' }}",
    "{{ ('a' | safe) | replace('a', 'b') + '<' }}|{{ ('a' | safe) | join + '<' }}|{{ ('a' | safe) | title + '<' }}|{{ ('a' | safe) | tojson + '<' }}|{{ ('a' | safe) | first + '<' }}|{{ [('a' | safe)] }}|{{ ('a' | safe) == 'a' }}|{{ {'a': 1}['a' | safe] }}",
    "{{ ('a' | safe) + 1 }}",
    # The sandbox refuses list and dict methods that modify, when called.
    "{% set xs = [1] %}{% set d = {'a': 1} %}{% if false %}{% set _ = xs.append(2) %}{{ d.update({'b': 2}) }}{% endif %}{{ xs }}{{ d }}",
    "{% set xs = [1] %}{% set _ = xs.append(2) %}",
    "{% set d = {'a': 1} %}{{ d.setdefault('b', 2) }}",
    "{{ messages[0].pop('role') }}",
    # indent splits lines as str.splitlines() does.
    "{{ 'a\\u2028b\\x0bc\\x1cd\\x85e\\u2029' | indent(2) }}|{{ 'x\\x0cy' | indent(1, true, true) }}",
    "a{% generation %}b{{ messages | length }}{% endgeneration %}c",
]


# What jinja2 renders but verdict refuses, by design, with an error rather
# than different text: a generator's repr holds a memory address, and
# printf-style formatting beyond %s, %r, %d and %i is not implemented.
REFUSED = [
    "{{ [1, 2] | map('string') }}",
    "{{ '%5.2f' % 3 }}",
    "{{ '%(k)s' % {'k': 1} }}",
]



def whitespace_templates(count, seed=20261202):
    """Random mixes of text, newlines and indents with block, variable and
    comment tags under every whitespace modifier: the rules (trim_blocks,
    lstrip_blocks, '-', '+', the final newline) interact in ways no list of
    hand-written cases covers. The seed fixes them."""
    rng = random.Random(seed)
    texts = ["", "a", " ", "  ", "\t", "\n", "\n\n", " \n", "\n  ", "\t\n\t", "b \n  c"]

    def opener(name):
        return "{%" + rng.choice(["", "-", "+"]) + " " + name + " " + rng.choice(["", "-", "+"]) + "%}"

    def piece(depth):
        r = rng.random()
        if depth < 3 and r < 0.25:
            cond = rng.choice(["true", "false", "messages"])
            inner = "".join(piece(depth + 1) for _ in range(rng.randint(0, 3)))
            other = ""
            if rng.random() < 0.4:
                other = opener("else") + "".join(piece(depth + 1) for _ in range(rng.randint(0, 2)))
            return opener("if " + cond) + inner + other + opener("endif")
        if depth < 2 and r < 0.35:
            inner = "".join(piece(depth + 1) for _ in range(rng.randint(0, 3)))
            return opener("for i in [1, 2]") + inner + opener("endfor")
        if r < 0.5:
            return "{{" + rng.choice(["", "-"]) + " " + rng.choice(["'x'", "i", "'\\n'"]) + " " + rng.choice(["", "-"]) + "}}"
        if r < 0.58:
            return "{#" + rng.choice(["", "-", "+"]) + " c " + rng.choice(["", "-", "+"]) + "#}"
        if r < 0.62:
            # jinja2 reads `raw +%}` as an unknown tag "raw": no '+' there.
            raw = "{%" + rng.choice(["", "-", "+"]) + " raw " + rng.choice(["", "-"]) + "%}"
            return raw + rng.choice(texts) + "{{ y }}" + rng.choice(texts) + opener("endraw")
        if r < 0.66:
            return opener("set v = 1")
        return rng.choice(texts)

    return ["".join(piece(0) for _ in range(rng.randint(1, 8))) for _ in range(count)]


WHITESPACE = whitespace_templates(400)


def expression_templates(count, seed=20261203):
    """Random expressions over literals, the conversation and an undefined
    name, through operators, filters, tests, slices and methods: Python's
    arithmetic, comparisons, str() and repr() must agree everywhere, errors
    included. The seed fixes them."""
    rng = random.Random(seed)
    atoms = ["0", "1", "-3", "7", "2.5", "0.1", "1e3", "'ab'", "'Ab c'", "''", "' x '", "'é日'",
             "none", "true", "false", "[1, 2]", "['a', 'b']", "[]", "{'k': 1, 'j': 'v'}", "(1, 'a')",
             "messages", "messages[0]", "messages[1].content", "messages[-1]['role']", "x"]
    binary = ["+", "-", "*", "/", "//", "%", "~", "and", "or", "==", "!=", "<", ">=", "in", "not in"]
    filters = ["length", "string", "first", "last", "list", "trim", "upper", "lower", "int",
               "float", "default('d')", "default('d', true)", "tojson", "join(',')",
               "reverse | list", "title", "capitalize", "abs", "items | list", "count",
               "map('string') | list", "select | list", "reject | list", "replace('a', 'X')",
               "indent(2)", "tojson(sort_keys=true)", "sort", "sort(reverse=true)",
               "sort(case_sensitive=true)", "sort(attribute='role')", "dictsort",
               "dictsort(by='value', reverse=true)", "unique | list", "min", "max", "sum",
               "sum(attribute='k')", "max(attribute='role')", "safe"]
    tests = ["defined", "undefined", "none", "string", "mapping", "iterable", "number", "integer",
             "float", "boolean", "odd", "even", "sequence", "true", "false", "callable",
             "divisibleby 2", "equalto 1", "in 'abc'", "lower", "upper"]
    methods = ["upper()", "lower()", "strip()", "split()", "split('b')", "startswith('a')",
               "endswith('c')", "replace('b', 'z')", "title()", "items() | list", "keys() | list",
               "get('k')", "get('zz', 0)"]

    def expr(depth):
        r = rng.random()
        if depth >= 3 or r < 0.25:
            return rng.choice(atoms)
        if r < 0.45:
            return f"({expr(depth + 1)} {rng.choice(binary)} {expr(depth + 1)})"
        if r < 0.6:
            return f"({expr(depth + 1)} | {rng.choice(filters)})"
        if r < 0.7:
            return f"({expr(depth + 1)} is {rng.choice(['', 'not '])}{rng.choice(tests)})"
        if r < 0.77:
            return f"({expr(depth + 1)} if {expr(depth + 1)} else {expr(depth + 1)})"
        if r < 0.84:
            # A slice of a constant is folded by jinja2's optimizer through its
            # forgiving getitem (undefined), unlike a slice at run time
            # (Python's error); templates slice variables, so slice those.
            subject = f"({expr(depth + 1)} if messages else none)"
            return f"{subject}[{rng.choice(['0', '-1', '1:', ':1', '::-1', '1:3', '::2'])}]"
        if r < 0.92:
            return f"({expr(depth + 1)}.{rng.choice(methods)})"
        return f"({rng.choice(['not ', '-'])}{expr(depth + 1)})"

    return ["{{ " + expr(0) + " }}" for _ in range(count)]


EXPRESSIONS = expression_templates(1500)


def statement_templates(count, seed=20261204):
    """Random nestings of set, namespace assignment, for (with a filter and
    else), if/elif/else, break/continue, macros, call blocks, set blocks and
    filter blocks: which assignments are visible where (loops, macros and
    blocks are scopes, `if` is not) and when a loop's else runs must agree.
    The seed fixes them."""
    rng = random.Random(seed)

    def expr(in_loop):
        choices = ["a", "b", "1", "'x'", "ns.n", "a ~ b", "(a is defined)", "undefined_v",
                   "messages|length", "c"]
        if in_loop:
            choices += ["i", "loop.index", "loop.last", "loop.previtem", "i * 2"]
        return rng.choice(choices)

    def body(depth, in_loop, in_macro):
        out = []
        for _ in range(rng.randint(0, 3)):
            r = rng.random()
            if r < 0.2:
                out.append(f"{{% set {rng.choice(['a', 'b'])} = {expr(in_loop)} %}}")
            elif r < 0.3:
                out.append("{% set ns.n = ns.n ~ '+' %}")
            elif r < 0.45 and depth < 3:
                condition = rng.choice(["", " if i != 2", " if a"])
                otherwise = ""
                if rng.random() < 0.3:
                    otherwise = "{% else %}E" + body(depth + 1, in_loop, in_macro)
                out.append(f"{{% for i in [1, 2, 3]{condition} %}}" +
                           body(depth + 1, True, in_macro) + otherwise + "{% endfor %}")
            elif r < 0.58 and depth < 3:
                text = f"{{% if {expr(in_loop)} %}}" + body(depth + 1, in_loop, in_macro)
                if rng.random() < 0.4:
                    text += f"{{% elif {expr(in_loop)} %}}" + body(depth + 1, in_loop, in_macro)
                if rng.random() < 0.4:
                    text += "{% else %}" + body(depth + 1, in_loop, in_macro)
                out.append(text + "{% endif %}")
            elif r < 0.63 and in_loop:
                out.append(rng.choice(["{% break %}", "{% continue %}"]))
            elif r < 0.68 and not in_macro:
                out.append(f"{{{{ m({expr(in_loop)}) }}}}")
            elif r < 0.72 and depth < 2:
                out.append("{% set c %}" + body(depth + 1, in_loop, in_macro) + "{% endset %}[{{ c }}]")
            elif r < 0.75 and depth < 2:
                out.append("{% filter upper %}" + body(depth + 1, in_loop, in_macro) + "{% endfilter %}")
            elif r < 0.78 and depth < 2 and not in_macro:
                out.append("{% call(z) w() %}<{{ z }}" + body(depth + 1, False, True) + ">{% endcall %}")
            else:
                out.append(f"{{{{ {expr(in_loop)} }}}}")
        return "".join(out)

    head = ("{% set ns = namespace(n='') %}{% macro m(p) %}(" + "{body}" + "{{ p }}){% endmacro %}"
            "{% macro w() %}{{ caller(a) }}{{ caller(2) }}{% endmacro %}")
    return [head.replace("{body}", body(1, False, True)) + body(0, False, False) +
            "|{{ a }}|{{ b }}|{{ ns.n }}|{{ c }}" for _ in range(count)]


STATEMENTS = statement_templates(600)


class AssistantTracker(Extension):
    """transformers' {% generation %} block (it records where assistant text
    is; the rendered text is the body's)."""

    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        call = self.call_method("_generation_support")
        return nodes.CallBlock(call, [], [], body).set_lineno(lineno)

    def _generation_support(self, caller):
        return caller()


def make_environment():
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[AssistantTracker, loopcontrols])

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                          sort_keys=sort_keys)

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def strftime_now(format):
        return datetime.datetime(*NOW).strftime(format)

    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def context_for(messages, add_generation_prompt, extra):
    # What apply_chat_template passes: the conversation, tools and documents
    # (None unless given), the tokenizer's special tokens, extra kwargs.
    context = {
        "messages": messages,
        "tools": None,
        "documents": None,
        "add_generation_prompt": add_generation_prompt,
        "bos_token": "<s>",
        "eos_token": "</s>",
        "unk_token": "<unk>",
        "pad_token": "<pad>",
    }
    context.update(extra)
    return context


def cases(templates):
    extras = [{}, {"enable_thinking": False}, {"enable_thinking": True}, {"tools": TOOLS}]
    for name, source in templates:
        for conversation, messages in CONVERSATIONS.items():
            for add_generation_prompt in (True, False):
                for extra in extras:
                    label = f"{name} x {conversation} agp={add_generation_prompt} {extra and list(extra)}"
                    yield name, label, source, context_for(messages, add_generation_prompt, extra)
    for i, source in enumerate(SNIPPETS):
        yield "snippets", f"snippet {i}: {source!r}", source, context_for(
            CONVERSATIONS["multi_turn"], True, {})
    for i, source in enumerate(WHITESPACE):
        yield "whitespace", f"whitespace {i}: {source!r}", source, context_for(
            CONVERSATIONS["user_only"], True, {})
    for i, source in enumerate(EXPRESSIONS):
        yield "expressions", f"expression {i}: {source!r}", source, context_for(
            CONVERSATIONS["multi_turn"], True, {})
    for i, source in enumerate(STATEMENTS):
        yield "statements", f"statement {i}: {source!r}", source, context_for(
            CONVERSATIONS["system_user"], True, {})
    for i, source in enumerate(REFUSED):
        yield "refused", f"refused {i}: {source!r}", source, context_for(
            CONVERSATIONS["multi_turn"], True, {})


def render_reference(env, source, context):
    try:
        # A copy: jinja2 can mutate the caller's lists (indent's `s += "\n"` on
        # a list extends it), which would leak into later cases.
        return {"text": env.from_string(source).render(**copy.deepcopy(context))}
    except Exception as e:  # every jinja2 failure must be a failure of ours too
        return {"error": f"{type(e).__name__}: {e}"}


def main():
    verbose = os.environ.get("JINJA_PARITY_VERBOSE") == "1"
    renderer = sys.argv[1]
    templates = [("plain", PLAIN)]
    for path in sys.argv[2:]:
        with open(path, encoding="utf-8") as f:
            templates.append((os.path.splitext(os.path.basename(path))[0], f.read()))
    env = make_environment()
    all_cases = list(cases(templates))
    lines = [json.dumps({"template": source, "context": context, "now": list(NOW)},
                        ensure_ascii=False) for _, _, source, context in all_cases]
    proc = subprocess.run([renderer], input="\n".join(lines) + "\n", capture_output=True,
                          text=True, encoding="utf-8", check=True)
    # Not splitlines(): rendered text may hold U+2028, which it splits at.
    results = [json.loads(line) for line in proc.stdout.split("\n") if line]
    assert len(results) == len(all_cases), (len(results), len(all_cases))
    mismatches = 0
    rendered = errors = 0
    per_template = {}
    for (name, label, source, context), ours in zip(all_cases, results):
        reference = render_reference(env, source, context)
        if name == "refused":
            ok = "error" in ours
        else:
            ok = ("text" in reference and ours.get("text") == reference["text"]) or (
                "error" in reference and "error" in ours)
        per_template.setdefault(name, [0, 0])[0] += 1
        if "text" in reference:
            rendered += 1
        else:
            errors += 1
            if verbose:
                print(f"error on both sides: {label}\n  jinja2: {reference['error']}\n  verdict: {ours.get('error')}")
        if not ok:
            mismatches += 1
            per_template[name][1] += 1
            print(f"MISMATCH {label}\n  jinja2: {reference!r}\n  verdict: {ours!r}")
    for name, (count, bad) in per_template.items():
        print(f"{name}: {count} renderings, {bad} mismatches")
    print(f"parity: {len(templates)} templates x {len(CONVERSATIONS)} conversations x 2 "
          f"add_generation_prompt x 4 extras + {len(SNIPPETS)} snippets + {len(WHITESPACE)} "
          f"whitespace mixes + {len(EXPRESSIONS)} expressions + {len(STATEMENTS)} statement "
          f"nestings + {len(REFUSED)} refused "
          f"= {len(all_cases)} "
          f"comparisons ({rendered} texts, {errors} errors on both sides), {mismatches} mismatches")
    return 1 if mismatches else 0


if __name__ == "__main__":
    sys.exit(main())
