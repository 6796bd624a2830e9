"""Parity of verdict's tokenizer.json tokenizer with the `tokenizers` library.

For every fixture under runtime/text/testdata and every line of
parity_lines.jsonl, runs hf_tokenizer_tool (verdict) and the library on the
same text, and requires the same ids (with and without special tokens), the
same decoded text (special tokens kept, and skipped), decode(encode(x)) == x
wherever the library round-trips, and streaming detokenization that emits
whole UTF-8 pieces adding up to the library's decoded text. A second set of
lines sweeps code points (the first 13,312, the compatibility ideographs and
forms, emoji), each in a few regex contexts, for the character classes that
PCRE2 and the library's Oniguruma must agree on.

  python3 hf_parity_test.py TOOL TESTDATA_DIR [FIXTURE ...]
"""

import json
import os
import subprocess
import sys
import time

from tokenizers import Tokenizer

FIXTURES = ["gpt2", "llama3", "qwen2", "metaspace", "metaspace_split"]


def code_point_lines():
  cps = (list(range(1, 0x3400)) + list(range(0xF900, 0x10000)) + list(range(0x1F000, 0x1FB00, 2)))
  return [f"a{c}{c}b {c}x'{c}s 1{c}2  {c}\n"
          for c in map(chr, cps) if not 0xD800 <= ord(c) < 0xE000]


def check(tool, testdata, name, lines, label):
  folder = os.path.join(testdata, name)
  tok = Tokenizer.from_file(os.path.join(folder, "tokenizer.json"))
  start = time.time()
  proc = subprocess.run([tool, folder], input="".join(json.dumps(l) + "\n" for l in lines),
                        capture_output=True, text=True)
  if proc.returncode != 0:
    print(f"{name} {label}: tool failed ({proc.returncode}): {proc.stderr}")
    return 1
  outs = [json.loads(l) for l in proc.stdout.split("\n") if l]
  if len(outs) != len(lines):
    print(f"{name} {label}: tool printed {len(outs)} results for {len(lines)} lines")
    return 1
  counts = dict(ids=0, ids_special=0, decoded=0, decoded_skip=0, stream=0, roundtrip=0)
  roundtrips = 0
  shown = 0
  for line, out in zip(lines, outs):
    ids = tok.encode(line, add_special_tokens=False).ids
    ids_special = tok.encode(line, add_special_tokens=True).ids
    decoded = tok.decode(ids, skip_special_tokens=False)
    decoded_skip = tok.decode(ids_special, skip_special_tokens=True)
    bad = []
    if "error" in out:
      bad = ["error"]
      counts["ids"] += 1
    else:
      if out["ids"] != ids:
        bad.append("ids")
      if out["ids_special"] != ids_special:
        bad.append("ids_special")
      if out["decoded"] != decoded:
        bad.append("decoded")
      if out["decoded_skip"] != decoded_skip:
        bad.append("decoded_skip")
      if out["stream"] != decoded_skip or not out["stream_pieces_valid"]:
        bad.append("stream")
      if decoded == line:
        roundtrips += 1
        if out["decoded"] != line:
          bad.append("roundtrip")
      for b in bad:
        counts[b] += 1
    if bad and shown < 5:
      shown += 1
      print(f"{name} {label}: MISMATCH {bad} for {json.dumps(line, ensure_ascii=False)[:200]}")
      if "error" in out:
        print(f"  verdict error: {out['error']}")
      else:
        if "ids" in bad:
          print(f"  verdict: {out['ids'][:40]}\n  library: {ids[:40]}")
        if "ids_special" in bad:
          print(f"  verdict: {out['ids_special'][:40]}\n  library: {ids_special[:40]}")
        if "decoded" in bad or "decoded_skip" in bad or "roundtrip" in bad:
          print(f"  verdict: {json.dumps(out['decoded'], ensure_ascii=False)[:200]}"
                f"\n  library: {json.dumps(decoded, ensure_ascii=False)[:200]}")
        if "stream" in bad:
          print(f"  stream:  {json.dumps(out['stream'], ensure_ascii=False)[:200]}"
                f" valid={out['stream_pieces_valid']}"
                f"\n  library: {json.dumps(decoded_skip, ensure_ascii=False)[:200]}")
  mismatched = sum(counts.values())
  print(f"{name} {label}: {len(lines)} lines, {roundtrips} round-trip in the library; mismatches: "
        + ", ".join(f"{k} {v}" for k, v in counts.items())
        + f" ({time.time() - start:.1f} s)")
  return 1 if mismatched else 0


def main():
  tool, testdata = sys.argv[1], sys.argv[2]
  names = sys.argv[3:] or FIXTURES
  with open(os.path.join(testdata, "parity_lines.jsonl"), encoding="utf-8") as f:
    lines = [json.loads(l) for l in f.read().split("\n") if l]
  sweep = code_point_lines()
  failed = 0
  for name in names:
    failed += check(tool, testdata, name, lines, "corpus")
    failed += check(tool, testdata, name, sweep, "code points")
  print("PASS" if failed == 0 else f"FAIL: {failed} line sets differ")
  return 1 if failed else 0


if __name__ == "__main__":
  sys.exit(main())
