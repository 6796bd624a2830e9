#!/usr/bin/env python3
"""Smoke run of the benchmark tools on the bundled model (CPU backend).

Runs tools/bench/sweep.py for TP 1 and TP 2 (under mpirun), static
verification and the speculation-off baseline, at concurrency 1 and 4 with
8 requests of 16 tokens per point (64 requests in all), then checks that:
  - every request completed with exactly the tokens asked for;
  - the token counts add up: per request, the streamed chunks, the usage and
    (speculative) accepted drafts plus verify steps; per point, the requests
    and the server's generated-token counter;
  - the JSON, CSV and Markdown reports and the comparison table are written
    and parse, and agree with each other; the chart too, where matplotlib is
    installed.

    bench_smoke_test.py SWEEP_PY VERDICT_BINARY
"""

import csv
import json
import os
import subprocess
import sys
import time

CONCURRENCY = [1, 4]
REQUESTS_PER_POINT = 8
MAX_TOKENS = 16
CONFIGS = ["static-tp1", "spec-off-tp1", "static-tp2", "spec-off-tp2"]

failures = []


def check(condition, message):
    if not condition:
        failures.append(message)
        print(f"FAIL {message}")
    return condition


def check_report(out, name):
    paths = {ext: os.path.join(out, f"{name}.{ext}") for ext in ("json", "csv", "md")}
    for ext, path in paths.items():
        if not check(os.path.exists(path), f"{name}: {path} was not written"):
            return
    with open(paths["json"]) as f:
        report = json.load(f)
    with open(paths["csv"]) as f:
        rows = list(csv.DictReader(f))
    with open(paths["md"]) as f:
        markdown = f.read()
    speculative = not name.startswith("spec-off")
    check(report["label"] == name, f"{name}: label {report['label']!r}")
    check([p["concurrency"] for p in report["points"]] == CONCURRENCY,
          f"{name}: points {[p['concurrency'] for p in report['points']]}")
    check(len(rows) == len(CONCURRENCY), f"{name}: {len(rows)} CSV rows")
    for point, row in zip(report["points"], rows):
        c = point["concurrency"]
        where = f"{name} c{c}"
        check(point["num_requests"] == REQUESTS_PER_POINT and
              point["completed"] == REQUESTS_PER_POINT and point["failed"] == 0,
              f"{where}: {point['completed']} of {point['num_requests']} completed")
        check(len(point["requests"]) == REQUESTS_PER_POINT, f"{where}: request records")
        for r in point["requests"]:
            check(r["ok"], f"{where} request {r['index']}: {r['error']}")
            check(r["completion_tokens"] == MAX_TOKENS and r["streamed_tokens"] == MAX_TOKENS,
                  f"{where} request {r['index']}: {r['streamed_tokens']} streamed, "
                  f"{r['completion_tokens']} in usage, {MAX_TOKENS} asked for")
            if speculative:
                # Each verify step commits its accepted drafts plus one token,
                # each plain step (no drafts: the request's last token) one.
                check(r["verify_steps"] > 0 and
                      r["accepted_tokens"] + r["verify_steps"] + r["plain_steps"] ==
                      r["completion_tokens"],
                      f"{where} request {r['index']}: {r['accepted_tokens']} accepted + "
                      f"{r['verify_steps']} verify steps + {r['plain_steps']} plain steps "
                      f"!= {r['completion_tokens']} tokens")
            else:
                check(r["verify_steps"] == 0 and r["draft_tokens"] == 0,
                      f"{where} request {r['index']}: speculative usage with speculation off")
        total = sum(r["completion_tokens"] for r in point["requests"])
        check(point["completion_tokens"] == total == REQUESTS_PER_POINT * MAX_TOKENS,
              f"{where}: point total {point['completion_tokens']}, requests {total}")
        check(point["streamed_tokens"] == total, f"{where}: streamed {point['streamed_tokens']}")
        check(point["server_generated_tokens"] == total,
              f"{where}: the server counted {point['server_generated_tokens']} tokens, "
              f"the clients {total}")
        check(point["decode_tokens_per_s"] > 0 and point["requests_per_s"] > 0 and
              point["ttft_p50_ms"] > 0 and point["itl_p50_ms"] > 0,
              f"{where}: rates and latencies {point}")
        if speculative:
            check(point["acceptance_length"] >= 1 and point["verify_tokens_source"] == "server"
                  and 1 <= point["verify_tokens_per_step"] <= 6,
                  f"{where}: acceptance {point['acceptance_length']}, verify tokens "
                  f"{point['verify_tokens_per_step']} ({point['verify_tokens_source']})")
        else:
            check(point["acceptance_length"] is None, f"{where}: acceptance without speculation")
        check(int(row["concurrency"]) == c and int(row["completed"]) == REQUESTS_PER_POINT and
              int(row["completion_tokens"]) == total and
              abs(float(row["decode_tokens_per_s"]) - point["decode_tokens_per_s"]) <=
              1e-4 * point["decode_tokens_per_s"], f"{where}: CSV row {row}")
        check(f"\n| {c} | {REQUESTS_PER_POINT} | " in markdown, f"{where}: no Markdown row")


def main():
    sweep, verdict = sys.argv[1], sys.argv[2]
    out = os.path.join(os.environ.get("TEST_UNDECLARED_OUTPUTS_DIR")
                       or os.environ.get("TEST_TMPDIR", "/tmp"), "sweep")
    command = [
        sys.executable, sweep, f"--verdict={verdict}", f"--out={out}", "--tp=1,2",
        "--modes=static", f"--concurrency={','.join(map(str, CONCURRENCY))}",
        f"--num-requests={REQUESTS_PER_POINT}", f"--max-tokens={MAX_TOKENS}",
        "--server-args=--cpu-threads=1 --drain-seconds=10",
        "--bench-args=--bench-warmup-max-tokens=4 --bench-progress=false",
        "--startup-timeout=60", "--stop-timeout=20",
    ]
    start = time.time()
    result = subprocess.run(command, capture_output=True, text=True, timeout=240)
    print(result.stdout)
    print(result.stderr, file=sys.stderr)
    print(f"sweep took {time.time() - start:.1f} s")
    check(result.returncode == 0, f"sweep.py exited with {result.returncode}")

    for name in CONFIGS:
        check_report(out, name)
    comparison = os.path.join(out, "comparison.json")
    if check(os.path.exists(comparison), "comparison.json was not written"):
        with open(comparison) as f:
            configs = json.load(f)["configurations"]
        check([c["name"] for c in configs] == CONFIGS, f"configurations {configs}")
        for c in configs:
            check(c["ok"] and c["server_exit"] == 0,
                  f"{c['name']}: {c['status']}, server exit {c['server_exit']}")
            # The server's own counters, read before it stopped: it ran decode
            # steps, and its ranks never planned differently.
            counters = c["server_counters"]
            check(counters.get("verdict_decode_steps_total", 0) > 0,
                  f"{c['name']}: server counters {counters}")
            check(counters.get("verdict_plan_mismatches_total", -1) == 0,
                  f"{c['name']}: plan mismatches in {counters}")
    table = os.path.join(out, "comparison.md")
    if check(os.path.exists(table), "comparison.md was not written"):
        with open(table) as f:
            text = f.read()
        for heading in ("## TP1", "## TP2"):
            check(heading in text, f"comparison.md has no {heading} section")
        check("| concurrency | static | speculation off | change |" in text,
              "comparison.md has no decode tok/s table with the change against static")
    try:
        import matplotlib  # noqa: F401  (only to know whether a chart is expected)
        chart = os.path.join(out, "decode_tokens_per_s.png")
        if check(os.path.exists(chart), "no chart although matplotlib is installed"):
            with open(chart, "rb") as f:
                check(f.read(8) == b"\x89PNG\r\n\x1a\n", "the chart is not a PNG")
    except ImportError:
        print("matplotlib is not installed here: no chart expected")

    print("bench smoke:", "FAILED" if failures else "PASSED")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
