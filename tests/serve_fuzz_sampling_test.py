#!/usr/bin/env python3
"""Sampling parameters at their extremes cannot hurt anyone else's request.

Starts `verdict serve` on the bundled model and, while a set of ordinary
sampled requests runs, sends requests whose temperature, top_k, top_p,
seed, stop and max_tokens are drawn (with a fixed seed) from values at and
beyond their limits, streamed or not. Every such request gets a 200 or a 4xx
with a JSON error naming a parameter; none gets a 5xx; every ordinary
request completes with all its tokens; and the server is healthy after.

    serve_fuzz_sampling_test.py VERDICT
"""

import http.client
import json
import os
import random
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from server_probe import free_port, health, wait_healthy  # noqa: E402

VERDICT = os.path.abspath(sys.argv[1])
SEED = 20261202
FUZZ_REQUESTS = 300
ORDINARY_REQUESTS = 24
ORDINARY_TOKENS = 24

EXTREMES = {
    "temperature": [0, -0.0, 5e-324, 1e-45, 1e-30, 1e-5, 9.99e-5, 1e-4, 0.5, 1, 2, 2.0000001,
                    1e308, -1e-300, -1, "0.7", None, True, [], {}],
    "top_k": [-2, -1, 0, 1, 2, 50, 2**31 - 1, 2**31, 2**32 + 1, 2**63, 2**64 + 1, -2**63,
              1.0, 1.5, "5", None, False],
    "top_p": [0, -0.0, 5e-324, 1e-45, 1e-7, 0.5, 0.9, 1, 1.0000001, 2, 1e308, -1, "1", None],
    "seed": [0, 1, -1, 2**63 - 1, 2**63, 2**64 - 1, 2**64, -2**63, -2**63 - 1, 1.5, "7", None],
    "stop": [None, [], "", "a", ["e"], [""], ["x"] * 16, ["x"] * 17, ["x" * 10000], 5, [5],
             [None], ["\u0000"], ["\ud7ff"]],
    "max_tokens": [None, 0, 1, 2, 16, 2**31, -1, 1.0, "3"],
}


def request(port, body, timeout=300):
    """(status, parsed body or text); streamed bodies are returned as text."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    payload = body if isinstance(body, str) else json.dumps(body, allow_nan=True)
    conn.request("POST", "/v1/completions", payload, {"Content-Type": "application/json"})
    response = conn.getresponse()
    text = response.read().decode("utf-8", "replace")
    try:
        return response.status, json.loads(text)
    except ValueError:
        return response.status, text


def fuzz_body(rng):
    body = {"prompt": "It was the best of times", "max_tokens": 8}
    for name, values in EXTREMES.items():
        if rng.random() < 0.35:
            value = rng.choice(values)
            if value is None:
                body.pop(name, None)
            else:
                body[name] = value
    body["stream"] = rng.random() < 0.5
    # Some bodies carry a NaN or an infinity, which JSON does not allow.
    if rng.random() < 0.05:
        return json.dumps(dict(body, temperature=float(rng.choice(["nan", "inf"]))))
    return body


def check_fuzz_answer(body, status, answer, failures):
    if 400 <= status < 500:
        error = answer.get("error") if isinstance(answer, dict) else None
        if not isinstance(error, dict) or not error.get("message"):
            failures.append(f"{status} without a JSON error for {body}: {answer!r:.300}")
    elif status == 200:
        stream = isinstance(body, dict) and body.get("stream")
        if stream and (not isinstance(answer, str) or not answer.rstrip().endswith("[DONE]")):
            failures.append(f"stream without [DONE] for {body}: {answer!r:.300}")
        if stream and '"error"' in answer:
            failures.append(f"stream with an error event for {body}: {answer!r:.300}")
    else:
        failures.append(f"status {status} for {body}: {answer!r:.300}")


def main():
    port = free_port()
    log = tempfile.NamedTemporaryFile("w+", suffix=".log", delete=False)
    proc = subprocess.Popen([VERDICT, "serve", f"--port={port}", "--cpu-threads=2",
                             "--max-running-requests=32"],
                            stdout=log, stderr=subprocess.STDOUT)
    failures = []
    try:
        wait_healthy(port, proc)

        ordinary = [None] * ORDINARY_REQUESTS

        def run_ordinary(i):
            ordinary[i] = request(port, {
                "prompt": "It is a truth universally acknowledged", "max_tokens": ORDINARY_TOKENS,
                "ignore_eos": True, "temperature": 0.8, "top_p": 0.9, "top_k": 40, "seed": i})

        threads = [threading.Thread(target=run_ordinary, args=(i,))
                   for i in range(ORDINARY_REQUESTS)]
        for t in threads:
            t.start()

        rng = random.Random(SEED)
        bodies = [fuzz_body(rng) for _ in range(FUZZ_REQUESTS)]
        answers = [None] * FUZZ_REQUESTS

        def run_fuzz(worker):
            for i in range(worker, FUZZ_REQUESTS, 8):
                answers[i] = request(port, bodies[i])

        fuzzers = [threading.Thread(target=run_fuzz, args=(w,)) for w in range(8)]
        for t in fuzzers:
            t.start()
        for t in fuzzers + threads:
            t.join()

        statuses = {}
        for body, (status, answer) in zip(bodies, answers):
            statuses[status] = statuses.get(status, 0) + 1
            check_fuzz_answer(body, status, answer, failures)
        for i, (status, answer) in enumerate(ordinary):
            usage = answer.get("usage", {}) if isinstance(answer, dict) else {}
            if status != 200 or usage.get("completion_tokens") != ORDINARY_TOKENS:
                failures.append(f"ordinary request {i}: {status} {answer!r:.300}")
        if health(port) != 200:
            failures.append("the server is not healthy after the fuzzing")
        if proc.poll() is not None:
            failures.append(f"the server exited with {proc.returncode}")
        print(f"fuzz requests by status: {dict(sorted(statuses.items()))}; "
              f"{ORDINARY_REQUESTS} ordinary requests of {ORDINARY_TOKENS} tokens")
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.seek(0)
        tail = log.read()[-3000:]
    if failures:
        print("\n".join(failures[:30]))
        print(tail)
        sys.exit(1)
    print(f"PASS {FUZZ_REQUESTS} fuzzed requests answered 200 or 4xx with a JSON error, every "
          f"ordinary request completed, the server stayed healthy")


if __name__ == "__main__":
    main()
