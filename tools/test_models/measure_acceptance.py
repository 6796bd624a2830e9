#!/usr/bin/env python3
"""Measures the bundled pair's acceptance with verdict itself.

Starts `verdict serve` on the bundled models, sends held-out prompts (64
tokens each, from tools/test_models/data/heldout.bin, evenly spaced) at
temperature 0 and 1, 64 generated tokens each, and reports from the usage
verdict returns: tokens committed per verify step, accepted drafts per
step, and the per-token acceptance a that gives that many accepted drafts
per step with gamma drafts: a (1 - a^gamma) / (1 - a).

    python3 tools/test_models/measure_acceptance.py VERDICT_BINARY [--prompts 64]
"""

import argparse
import array
import http.client
import json
import socket
import subprocess
import sys
import time


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def implied_acceptance(accepted_per_step, gamma):
    lo, hi = 0.0, 1.0
    for _ in range(60):
        a = (lo + hi) / 2
        expected = sum(a ** k for k in range(1, gamma + 1))
        lo, hi = (a, hi) if expected < accepted_per_step else (lo, a)
    return (lo + hi) / 2


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("binary")
    parser.add_argument("--prompts", type=int, default=64)
    parser.add_argument("--gamma", type=int, default=5)
    args = parser.parse_args()

    ids = array.array("H")
    with open("tools/test_models/data/heldout.bin", "rb") as f:
        ids.frombytes(f.read())
    stride = len(ids) // args.prompts
    prompts = [[1] + ids[i * stride:i * stride + 64].tolist() for i in range(args.prompts)]

    port = free_port()
    server = subprocess.Popen([args.binary, "serve", f"--port={port}",
                               f"--num-draft-tokens={args.gamma}"],
                              stderr=subprocess.DEVNULL)
    try:
        for _ in range(300):
            try:
                c = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
                c.request("GET", "/health")
                if c.getresponse().status == 200:
                    break
            except OSError:
                time.sleep(0.1)
        print("| temperature | prompts | tokens per verify step | accepted drafts per step "
              "| implied per-token acceptance |")
        print("|---|---|---|---|---|")
        for temperature in (0.0, 1.0):
            steps = accepted = 0
            for i, prompt in enumerate(prompts):
                c = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
                c.request("POST", "/v1/completions", json.dumps({
                    "model": "verdict-default", "prompt": prompt, "max_tokens": 64,
                    "temperature": temperature, "seed": i, "ignore_eos": True}),
                    {"Content-Type": "application/json"})
                usage = json.loads(c.getresponse().read())["usage"]["speculative"]
                steps += usage["verify_steps"]
                accepted += usage["accepted_tokens"]
            per_step = accepted / steps
            print(f"| {temperature:g} | {len(prompts)} | {1 + per_step:.3f} | {per_step:.3f} "
                  f"| {implied_acceptance(per_step, args.gamma):.3f} |")
    finally:
        server.terminate()
        server.wait()


if __name__ == "__main__":
    sys.exit(main())
