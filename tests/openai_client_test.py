#!/usr/bin/env python3
"""Checks a running OpenAI-compatible server with the official `openai` client.

    python3 tests/openai_client_test.py --base-url http://127.0.0.1:8000/v1 \
        [--api-key KEY] [--model NAME] [--clients 32]

Covers: /v1/models; completions and chat, plain and streamed (the streamed
text and usage match the plain answer under greedy sampling); 32 concurrent
clients, each answered with exactly the completion token count it asked for
(ignore_eos); verdict's speculative usage counts; malformed requests answered
4xx with the server still healthy afterwards. Exits 0 when every check
passes; prints one line per check.
"""

import argparse
import concurrent.futures
import json
import sys
import urllib.request

import openai

PROMPT = "Once upon a time, in a small village by the sea,"
MESSAGES = [
    {"role": "system", "content": "You tell short stories."},
    {"role": "user", "content": "Tell me about the lighthouse keeper."},
]


class Checks:
    def __init__(self):
        self.failures = 0

    def run(self, name, fn):
        try:
            detail = fn()
            print(f"PASS {name}" + (f": {detail}" if detail else ""))
        except Exception as e:  # one failed check must not hide the others
            self.failures += 1
            print(f"FAIL {name}: {type(e).__name__}: {e}")


def expect(condition, message):
    if not condition:
        raise AssertionError(message)


def check_usage(usage, max_tokens=None, exact=False):
    expect(usage is not None, "no usage")
    expect(usage.total_tokens == usage.prompt_tokens + usage.completion_tokens,
           f"total_tokens {usage.total_tokens} != prompt + completion")
    if max_tokens is not None:
        expect(usage.completion_tokens <= max_tokens,
               f"completion_tokens {usage.completion_tokens} > max_tokens {max_tokens}")
        if exact:
            expect(usage.completion_tokens == max_tokens,
                   f"completion_tokens {usage.completion_tokens} != max_tokens {max_tokens}")
    speculative = (usage.model_extra or {}).get("speculative")
    expect(isinstance(speculative, dict), "usage lacks verdict's 'speculative' counts")
    expect(0 <= speculative["accepted_tokens"] <= speculative["draft_tokens"],
           f"accepted > drafted: {speculative}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base-url", required=True, help="e.g. http://127.0.0.1:8000/v1")
    parser.add_argument("--api-key", default="none")
    parser.add_argument("--model", default=None, help="default: the first served model")
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--max-tokens", type=int, default=12)
    args = parser.parse_args()

    client = openai.OpenAI(base_url=args.base_url, api_key=args.api_key, max_retries=0,
                           timeout=120)
    root = args.base_url.rstrip("/")
    root = root[: -len("/v1")] if root.endswith("/v1") else root
    checks = Checks()
    model = args.model

    def models():
        nonlocal model
        served = [m.id for m in client.models.list().data]
        expect(served, "no models")
        model = model or served[0]
        expect(model in served, f"{model} not in {served}")
        return f"serving {served}"

    checks.run("models", models)
    if model is None:
        return 1
    greedy = {"temperature": 0, "max_tokens": args.max_tokens}

    plain = {}

    def completion():
        r = client.completions.create(model=model, prompt=PROMPT, **greedy)
        expect(r.object == "text_completion", r.object)
        expect(len(r.choices) == 1, "one choice")
        expect(r.choices[0].finish_reason in ("stop", "length"), r.choices[0].finish_reason)
        check_usage(r.usage, args.max_tokens)
        plain["completion"] = (r.choices[0].text, r.usage.completion_tokens)
        return repr(r.choices[0].text)

    def completion_stream():
        text, usage, finish = "", None, None
        for chunk in client.completions.create(model=model, prompt=PROMPT, stream=True,
                                               stream_options={"include_usage": True}, **greedy):
            if chunk.usage is not None:
                usage = chunk.usage
            for choice in chunk.choices:
                text += choice.text
                finish = choice.finish_reason or finish
        expect(finish in ("stop", "length"), f"finish_reason {finish}")
        check_usage(usage, args.max_tokens)
        if "completion" in plain:
            expect((text, usage.completion_tokens) == plain["completion"],
                   f"stream {text!r}/{usage.completion_tokens} != plain {plain['completion']}")
        return repr(text)

    def chat():
        r = client.chat.completions.create(model=model, messages=MESSAGES, **greedy)
        expect(r.object == "chat.completion", r.object)
        expect(r.choices[0].message.role == "assistant", r.choices[0].message.role)
        expect(isinstance(r.choices[0].message.content, str), "content")
        check_usage(r.usage, args.max_tokens)
        plain["chat"] = r.choices[0].message.content
        return repr(r.choices[0].message.content)

    def chat_stream():
        text, usage, roles = "", None, []
        for chunk in client.chat.completions.create(model=model, messages=MESSAGES, stream=True,
                                                    stream_options={"include_usage": True},
                                                    **greedy):
            if chunk.usage is not None:
                usage = chunk.usage
            for choice in chunk.choices:
                if choice.delta.role:
                    roles.append(choice.delta.role)
                text += choice.delta.content or ""
        expect(roles == ["assistant"], f"roles {roles}")
        check_usage(usage, args.max_tokens)
        if "chat" in plain:
            expect(text == plain["chat"], f"stream {text!r} != plain {plain['chat']!r}")
        return repr(text)

    def logprobs():
        r = client.completions.create(model=model, prompt=PROMPT, logprobs=1, **greedy)
        lp = r.choices[0].logprobs
        expect(len(lp.tokens) == r.usage.completion_tokens or r.choices[0].finish_reason == "stop",
               f"{len(lp.tokens)} logprob tokens for {r.usage.completion_tokens} tokens")
        expect(all(v is None or v <= 0 for v in lp.token_logprobs), "logprobs must be <= 0")
        return f"{len(lp.tokens)} tokens"

    def many_clients():
        def one(i):
            n = 1 + i % args.max_tokens + i // args.max_tokens
            r = client.completions.create(model=model, prompt=f"{PROMPT} ({i})", max_tokens=n,
                                          temperature=0.8, seed=i, extra_body={"ignore_eos": True})
            check_usage(r.usage, n, exact=True)
            expect(r.choices[0].finish_reason == "length", r.choices[0].finish_reason)
            return n

        with concurrent.futures.ThreadPoolExecutor(args.clients) as pool:
            done = list(pool.map(one, range(args.clients)))
        return f"{len(done)} clients, {sum(done)} tokens"

    def errors():
        cases = [
            (openai.BadRequestError, {"temperature": 5}),
            (openai.BadRequestError, {"top_p": 0}),
            (openai.BadRequestError, {"max_tokens": 0}),
            (openai.BadRequestError, {"n": 2}),
            (openai.BadRequestError, {"extra_body": {"speculation": "maybe"}}),
            (openai.NotFoundError, {"model": "no-such-model"}),
        ]
        for error, kwargs in cases:
            params = {"model": model, "prompt": PROMPT, "max_tokens": 2, **kwargs}
            try:
                client.completions.create(**params)
            except error as e:
                expect(e.status_code < 500, f"{kwargs}: {e.status_code}")
                continue
            raise AssertionError(f"{kwargs} was accepted")
        with urllib.request.urlopen(f"{root}/health", timeout=10) as r:
            expect(r.status == 200, f"/health {r.status}")
        client.completions.create(model=model, prompt=PROMPT, max_tokens=2)
        return f"{len(cases)} rejected, still healthy"

    def speculation_switch():
        r = client.completions.create(model=model, prompt=PROMPT, max_tokens=4,
                                      extra_body={"speculation": False})
        speculative = r.usage.model_extra["speculative"]
        expect(speculative["draft_tokens"] == 0, f"drafts with speculation off: {speculative}")
        return json.dumps(speculative)

    def chat_template_arguments():
        # The official client sends them in extra_body, as it does for vLLM.
        prefilled = MESSAGES + [{"role": "assistant", "content": "It was"}]
        continued = client.chat.completions.create(
            model=model, messages=prefilled, extra_body={"continue_final_message": True},
            **greedy).choices[0].message.content
        # The same ids as a completion's prompt: the same greedy text, up to
        # where the chat's end-of-turn stop strings cut it.
        request = urllib.request.Request(
            f"{root}/tokenize", method="POST",
            data=json.dumps({"model": model, "messages": prefilled, "add_special_tokens": True,
                             "continue_final_message": True}).encode(),
            headers={"Content-Type": "application/json",
                     "Authorization": f"Bearer {args.api_key}"})
        with urllib.request.urlopen(request, timeout=60) as r:
            ids = json.loads(r.read())["tokens"]
        text = client.completions.create(model=model, prompt=ids, **greedy).choices[0].text
        expect(text.startswith(continued), f"chat {continued!r} vs completion {text!r}")
        client.chat.completions.create(
            model=model, messages=MESSAGES, max_tokens=2,
            extra_body={"chat_template_kwargs": {"enable_thinking": False},
                        "add_generation_prompt": True})
        try:
            client.chat.completions.create(
                model=model, messages=prefilled, max_tokens=2,
                extra_body={"continue_final_message": True, "add_generation_prompt": True})
        except openai.BadRequestError as e:
            expect(e.status_code == 400, f"both true: {e.status_code}")
            return f"continued {continued!r}; both true is a 400"
        raise AssertionError("continue_final_message with add_generation_prompt was accepted")

    for name, fn in [("completion", completion), ("completion stream", completion_stream),
                     ("chat", chat), ("chat stream", chat_stream), ("logprobs", logprobs),
                     (f"{args.clients} concurrent clients", many_clients), ("errors", errors),
                     ("speculation off", speculation_switch),
                     ("chat template arguments", chat_template_arguments)]:
        checks.run(name, fn)
    print("all checks passed" if checks.failures == 0 else f"{checks.failures} check(s) failed")
    return 0 if checks.failures == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
