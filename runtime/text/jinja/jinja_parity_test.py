"""Renders chat templates with jinja2, configured as transformers'
apply_chat_template configures it, and with verdict's interpreter
(jinja_render), and requires byte-identical text, or an error from both.

Usage: jinja_parity_test.py JINJA_RENDER TEMPLATE.jinja...
"""

import datetime
import json
import os
import subprocess
import sys

import jinja2
from jinja2.ext import loopcontrols
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
    }
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
    "{{ 'a' 'b' }} {{ \"x\\ty\" }} {{ '\\u00e9\\x41' }} {{ 1_000 }} {{ 1.5e3 }}",
    "{{ add_generation_prompt }} {{ tools }} {{ documents }} {{ bos_token }}",
]


# What jinja2 renders but verdict refuses, by design, with an error rather
# than different text: a generator's repr holds a memory address, and
# printf-style formatting is not implemented.
REFUSED = [
    "{{ [1, 2] | map('string') }}",
    "{{ '%d' % 3 }}",
]


def make_environment():
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[loopcontrols])

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
    for i, source in enumerate(REFUSED):
        yield "refused", f"refused {i}: {source!r}", source, context_for(
            CONVERSATIONS["multi_turn"], True, {})


def render_reference(env, source, context):
    try:
        return {"text": env.from_string(source).render(**context)}
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
          f"add_generation_prompt x 4 extras + {len(SNIPPETS)} snippets + {len(REFUSED)} refused "
          f"= {len(all_cases)} "
          f"comparisons ({rendered} texts, {errors} errors on both sides), {mismatches} mismatches")
    return 1 if mismatches else 0


if __name__ == "__main__":
    sys.exit(main())
