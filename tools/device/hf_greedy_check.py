#!/usr/bin/env python3
"""Greedy decoding of verdict against Hugging Face transformers (GPU machine).

For each prompt, `verdict generate` runs at temperature 0 on the CPU backend
and on the CUDA backend, autoregressive and speculative in every verify
mode with overlap scheduling off and on; transformers decodes the same
prompt token ids greedily with the same weights, in float32 (the CPU backend's precision) and in bfloat16 (the CUDA
backend's). Checks, per prompt:
  - CPU backend == transformers float32, token for token;
  - CUDA backend == transformers bfloat16 up to the first step where the
    two top logits of transformers are closer than bf16 rounding can
    separate (reported, not failed: either choice is a correct argmax);
  - on each backend, speculative output == autoregressive output, in every
    mode, with overlap off and on.
Writes a JSON report and exits 1 on any failed check.

  python3 tools/device/hf_greedy_check.py --verdict .bundle/bin/runtime/cli/verdict
"""
import argparse
import json
import os
import subprocess
import sys

import torch
import transformers

PROMPTS = [
    "Once upon a time",
    "The capital of France is",
    "def fibonacci(n):",
    "In the beginning the universe was created.",
    "Speculative decoding verifies several draft tokens",
    "A quick brown fox",
]


def run_verdict(binary, prompt, max_tokens, backend, speculation, mode="static", overlap="off"):
    cmd = [binary, "generate", f"--backend={backend}", f"--speculation={speculation}",
           f"--verify-mode={mode}", f"--overlap={overlap}", "--temperature=0",
           f"--max-tokens={max_tokens}",
           "--print-token-ids", f"--prompt={prompt}"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{proc.stderr[-4000:]}")
    ids = {}
    for line in proc.stderr.splitlines():
        for key in ("prompt_token_ids", "completion_token_ids"):
            if line.startswith(key + "="):
                value = line[len(key) + 1:]
                ids[key] = [int(x) for x in value.split(",")] if value else []
    stats = [l for l in proc.stderr.splitlines() if l.startswith("finish_reason=")]
    return ids["prompt_token_ids"], ids["completion_token_ids"], stats[-1] if stats else ""


@torch.no_grad()
def hf_greedy(model, prompt_ids, max_tokens, eos_ids):
    """Greedy tokens, and each step's gap between the two top logits."""
    input_ids = torch.tensor([prompt_ids], device="cuda")
    past = None
    tokens, gaps = [], []
    for _ in range(max_tokens):
        out = model(input_ids=input_ids, past_key_values=past, use_cache=True)
        past = out.past_key_values
        logits = out.logits[0, -1].float()
        top = torch.topk(logits, 2)
        token = int(top.indices[0])
        tokens.append(token)
        gaps.append(float(top.values[0] - top.values[1]))
        if token in eos_ids:
            break
        input_ids = torch.tensor([[token]], device="cuda")
    return tokens, gaps


def first_difference(a, b):
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--verdict", required=True)
    parser.add_argument("--model", default="models/target")
    parser.add_argument("--max-tokens", type=int, default=48)
    parser.add_argument("--out", default=os.path.join(os.environ.get("OUT", "/tmp"),
                                                      "hf_greedy_check.json"))
    args = parser.parse_args()

    models = {
        "float32": transformers.AutoModelForCausalLM.from_pretrained(
            args.model, dtype=torch.float32).cuda().eval(),
        "bfloat16": transformers.AutoModelForCausalLM.from_pretrained(
            args.model, dtype=torch.bfloat16).cuda().eval(),
    }
    config = json.load(open(os.path.join(args.model, "config.json")))
    eos = config.get("eos_token_id", [])
    eos_ids = set(eos if isinstance(eos, list) else [eos])

    failures = []
    report = []
    for prompt in PROMPTS:
        entry = {"prompt": prompt}
        prompt_ids, cpu_ar, _ = run_verdict(args.verdict, prompt, args.max_tokens, "cpu", "off")
        _, cuda_ar, _ = run_verdict(args.verdict, prompt, args.max_tokens, "cuda", "off")
        hf32, _ = hf_greedy(models["float32"], prompt_ids, args.max_tokens, eos_ids)
        hf16, gaps16 = hf_greedy(models["bfloat16"], prompt_ids, args.max_tokens, eos_ids)
        entry.update(prompt_ids=prompt_ids, cpu=cpu_ar, cuda=cuda_ar, hf_float32=hf32,
                     hf_bfloat16=hf16)
        d = first_difference(cpu_ar, hf32)
        entry["cpu_vs_hf_float32_first_difference"] = d
        if d is not None:
            failures.append(f"{prompt!r}: CPU backend differs from transformers float32 at token {d}")
        d = first_difference(cuda_ar, hf16)
        entry["cuda_vs_hf_bfloat16_first_difference"] = d
        if d is not None:
            # A difference is only a failure where transformers' own choice was
            # clear: a gap between its top two logits wider than bf16 noise.
            gap = gaps16[d] if d < len(gaps16) else None
            entry["hf_bfloat16_top2_gap_at_difference"] = gap
            if gap is None or gap > 0.125:
                failures.append(f"{prompt!r}: CUDA backend differs from transformers bfloat16 "
                                f"at token {d} (transformers' top-2 gap {gap})")
        for backend, reference in (("cpu", cpu_ar), ("cuda", cuda_ar)):
            for mode in ("static", "cap-accept", "compact"):
                for overlap in ("off", "on"):
                    _, spec, stats = run_verdict(args.verdict, prompt, args.max_tokens, backend,
                                                 "on", mode, overlap)
                    name = f"{backend}_speculative_{mode}_overlap_{overlap}"
                    entry[name] = spec
                    entry[name + "_stats"] = stats
                    if spec != reference:
                        failures.append(
                            f"{prompt!r}: {backend} speculative ({mode}, overlap {overlap}) "
                            f"differs from autoregressive at token "
                            f"{first_difference(spec, reference)}")
        report.append(entry)
        print(f"{prompt!r}: cpu==hf32 {entry['cpu_vs_hf_float32_first_difference'] is None}, "
              f"cuda==hf16 {entry['cuda_vs_hf_bfloat16_first_difference'] is None}, "
              f"{len(cuda_ar)} tokens", flush=True)

    with open(args.out, "w") as f:
        json.dump({"prompts": report, "failures": failures}, f, indent=1)
    for line in failures:
        print("FAIL:", line)
    print(f"hf_greedy_check: {len(PROMPTS)} prompts, {len(failures)} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
