"""Renders conversations with jinja2 the way transformers' apply_chat_template
does, including its continue_final_message cut, and through verdict's
ChatTemplate (chat_template_render), and requires byte-identical text, or an
error from both.

Usage: chat_template_parity_test.py CHAT_TEMPLATE_RENDER JINJA_PARITY_TEST.py TEMPLATE.jinja...

The jinja2 environment is the one of jinja_parity_test.py (transformers'
configuration); only the clock differs: both sides read the real one here.
"""

import datetime
import importlib.util
import json
import os
import subprocess
import sys


def load_module(path):
    spec = importlib.util.spec_from_file_location("jinja_parity", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


SPECIAL_TOKENS = {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>",
                  "pad_token": "<pad>"}

# Conversations that end with the message to continue: prefilled replies
# with and without surrounding whitespace (templates that trim content
# and ones that keep it), a reasoning prefix, Unicode and empty content, and
# a final user message (transformers continues any role).
CONVERSATIONS = {
    "prefill": [
        {"role": "user", "content": "Where is the ship?"},
        {"role": "assistant", "content": "The ship is"},
    ],
    "prefill_trailing_space": [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "Where is the ship?"},
        {"role": "assistant", "content": "The ship is "},
    ],
    "prefill_both_sides": [
        {"role": "user", "content": "Count."},
        {"role": "assistant", "content": "  one, two,\n"},
    ],
    "multi_turn": [
        {"role": "user", "content": "Hello?"},
        {"role": "assistant", "content": "Hi."},
        {"role": "user", "content": "And the crew?"},
        {"role": "assistant", "content": "Hi. The crew"},
    ],
    "reasoning": [
        {"role": "user", "content": "2+2?"},
        {"role": "assistant", "content": "<think>\nAdd them.\n</think>\n\n"},
    ],
    "unicode": [
        {"role": "user", "content": "日本語で? 🚢"},
        {"role": "assistant", "content": "はい\u00a0"},
    ],
    "empty_final": [
        {"role": "user", "content": "Go on."},
        {"role": "assistant", "content": ""},
    ],
    "final_user": [
        {"role": "user", "content": "Finish this sentence: the whale"},
    ],
}


def continue_final_message(rendered, final):
    """transformers' cut: after the last occurrence of the stripped content,
    keeping its trailing whitespace where the text has it."""
    if final.strip() not in rendered:
        raise ValueError("the final message does not appear in the rendered chat")
    at = rendered.rindex(final.strip())
    if rendered[at:at + len(final.lstrip())] == final:
        return rendered[:at + len(final.lstrip())]
    return rendered[:at + len(final.strip())]


def render_reference(env, source, messages, add_generation_prompt, continue_final, kwargs):
    try:
        if add_generation_prompt and continue_final:
            raise ValueError("continue_final_message and add_generation_prompt are exclusive")
        context = {"messages": messages, "tools": None, "documents": None,
                   "add_generation_prompt": add_generation_prompt, **SPECIAL_TOKENS, **kwargs}
        text = env.from_string(source).render(**context)
        if continue_final:
            text = continue_final_message(text, messages[-1]["content"])
        return {"text": text}
    except Exception as e:  # every failure must be a failure of ours too
        return {"error": f"{type(e).__name__}: {e}"}


def main():
    renderer, parity_module = sys.argv[1], load_module(sys.argv[2])
    templates = [("plain", parity_module.PLAIN)]
    for path in sys.argv[3:]:
        with open(path, encoding="utf-8") as f:
            templates.append((os.path.splitext(os.path.basename(path))[0], f.read()))
    env = parity_module.make_environment()
    env.globals["strftime_now"] = lambda fmt: datetime.datetime.now().strftime(fmt)
    cases = []
    for name, source in templates:
        for conversation, messages in CONVERSATIONS.items():
            for agp, cont in ((True, False), (False, False), (False, True), (True, True)):
                for kwargs in ({}, {"enable_thinking": False}):
                    label = f"{name} x {conversation} agp={agp} continue={cont} {list(kwargs)}"
                    cases.append((label, source, messages, agp, cont, kwargs))
    lines = [json.dumps({"config": {"chat_template": source, **SPECIAL_TOKENS},
                         "messages": messages, "add_generation_prompt": agp,
                         "continue_final_message": cont, "kwargs": kwargs},
                        ensure_ascii=False) for _, source, messages, agp, cont, kwargs in cases]
    proc = subprocess.run([renderer], input="\n".join(lines) + "\n", capture_output=True,
                          text=True, encoding="utf-8", check=True)
    results = [json.loads(line) for line in proc.stdout.split("\n") if line]
    assert len(results) == len(cases), (len(results), len(cases))
    mismatches = texts = cut = 0
    for (label, source, messages, agp, cont, kwargs), ours in zip(cases, results):
        reference = render_reference(env, source, messages, agp, cont, kwargs)
        if "text" in reference:
            texts += 1
            cut += cont
            ok = ours.get("text") == reference["text"]
        else:
            ok = "error" in ours
        if not ok:
            mismatches += 1
            print(f"MISMATCH {label}\n  transformers-style: {reference!r}\n  verdict: {ours!r}")
    print(f"chat template parity: {len(templates)} templates x {len(CONVERSATIONS)} "
          f"conversations x 4 (add_generation_prompt, continue_final_message) x 2 kwargs = "
          f"{len(cases)} comparisons ({texts} texts, {cut} of them continued), "
          f"{mismatches} mismatches")
    return 1 if mismatches else 0


if __name__ == "__main__":
    sys.exit(main())
