"""Encode throughput of verdict's tokenizer.json tokenizer and of the Hugging
Face `tokenizers` library, on one core, on the same lines, in one run.

    bazel build //runtime/text:hf_tokenizer_benchmark
    /opt/verdict/python/bin/python3 tools/bench/tokenizer_throughput.py \\
        [--repeats 5] [--core 0] [--lines runtime/text/testdata/parity_lines.jsonl] \\
        [FIXTURE | PATH/tokenizer.json ...]

Each side encodes every line without special tokens, `--repeats` times; the
first repeat starts with empty word caches on both sides. Both processes are
pinned to one core (taskset), and the library runs with RAYON_NUM_THREADS=1
so that encode_batch stays on it. The library is timed two ways: one
encode() call per line (Python's call overhead included) and encode_batch
over all lines. The token counts of both sides must agree. A FIXTURE is a
folder name under runtime/text/testdata; an argument ending in .json is a
tokenizer.json anywhere (a checkpoint's, for a production vocabulary).
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

FIXTURES = ["gpt2", "llama3", "qwen2", "metaspace", "metaspace_split"]


def library(path, lines_path, repeats, core):
  code = f"""
import json, sys, time
from tokenizers import Tokenizer
tok = Tokenizer.from_file({path!r})
lines = [json.loads(l) for l in open({lines_path!r}, encoding="utf-8").read().split("\\n") if l]
out = {{"per_line": [], "batch": []}}
for r in range({repeats}):
  t = time.perf_counter(); n = 0
  for l in lines:
    n += len(tok.encode(l, add_special_tokens=False).ids)
  out["per_line"].append(time.perf_counter() - t)
  out["tokens"] = n
tok = Tokenizer.from_file({path!r})  # empty caches again
for r in range({repeats}):
  t = time.perf_counter()
  n = sum(len(e.ids) for e in tok.encode_batch(lines, add_special_tokens=False))
  out["batch"].append(time.perf_counter() - t)
  out["batch_tokens"] = n
print(json.dumps(out))
"""
  env = dict(os.environ, RAYON_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false")
  proc = subprocess.run(["taskset", "-c", str(core), sys.executable, "-c", code],
                        capture_output=True, text=True, env=env, check=True)
  return json.loads(proc.stdout)


def main():
  ap = argparse.ArgumentParser()
  ap.add_argument("--repeats", type=int, default=5)
  ap.add_argument("--core", type=int, default=0)
  ap.add_argument("--lines", default="runtime/text/testdata/parity_lines.jsonl")
  ap.add_argument("--binary", default="bazel-bin/runtime/text/hf_tokenizer_benchmark")
  ap.add_argument("fixtures", nargs="*", default=FIXTURES)
  args = ap.parse_args()
  print(f"lines: {args.lines}; repeats: {args.repeats}; one core ({args.core})")
  print("| fixture | MB | verdict MB/s first / median | library encode() MB/s first / median "
        "| library encode_batch MB/s first / median | verdict / batch (median) |")
  print("|---|---:|---:|---:|---:|---:|")
  for name in args.fixtures:
    path = name if name.endswith(".json") else os.path.join("runtime/text/testdata", name,
                                                            "tokenizer.json")
    proc = subprocess.run(["taskset", "-c", str(args.core), args.binary, path, args.lines,
                           str(args.repeats)], capture_output=True, text=True, check=True)
    ours = json.loads(proc.stdout)
    lib = library(path, args.lines, args.repeats, args.core)
    if not ours["tokens"] == lib["tokens"] == lib["batch_tokens"]:
      print(f"{name}: token counts differ: verdict {ours['tokens']}, library {lib['tokens']}")
      return 1
    mb = ours["bytes"] / 1e6
    rate = lambda secs: [mb / s for s in secs]
    v, p, b = rate(ours["seconds"]), rate(lib["per_line"]), rate(lib["batch"])
    print(f"| {name} | {mb:.2f} | {v[0]:.1f} / {statistics.median(v):.1f} "
          f"| {p[0]:.1f} / {statistics.median(p):.1f} | {b[0]:.1f} / {statistics.median(b):.1f} "
          f"| {statistics.median(v) / statistics.median(b):.2f}x |")
  return 0


if __name__ == "__main__":
  sys.exit(main())
