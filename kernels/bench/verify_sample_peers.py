#!/usr/bin/env python3
"""Times the fused verify sampler against its peers on the same inputs.

One process, one set of PyTorch tensors per size, three implementations:

  ours        kernels/verify_sampler.cu through libverdict_verify_sample.so
              (ctypes), from target logits;
  torch       a PyTorch eager reference written here: temperature, top-k,
              min-p and top-p over one sort of the row (as vLLM's fallback
              does), softmax, the accept test min(1, q/p), the accepted
              prefix, the residual max(q - alpha p, 0) of the final row and
              torch.multinomial;
  flashinfer  flashinfer.sampling.chain_speculative_sampling, which takes
              target probabilities: timed on probabilities ("probs in") and
              with the processing in front ("logits in", the same work as
              ours: softmax with the temperature, top_k_renorm_probs,
              top_p_renorm_probs, and min-p in PyTorch, for which FlashInfer
              has no renormalisation). A step of one plain row (no drafts) is
              one sample: sampling_from_logits, or
              top_k_top_p_sampling_from_logits / min_p_sampling_from_probs
              with filters.

Sizes: R requests x (nextn + 1) rows (R = 0: one row, no drafts), dense
draft distributions (random, so most first drafts are rejected and that row
reads its whole p), every request with the same --temperature, --top_k,
--top_p and --min_p. Small sizes rotate among input copies so
that no implementation is timed out of L2. Each time is the median over
repeats of (CUDA events around `launches` back-to-back calls) / launches.

Writes a Markdown table (--out_md) and JSON (--out_json); merges the C++
benchmark's JSON (--cpp_json: its graph-replay times and the copy bandwidth
it measured) when given.
"""

import argparse
import ctypes
import importlib
import importlib.util
import json
import math
import os
import sys
import types

import torch

ALPHA = math.exp(-5e-5)


def load_flashinfer():
    """flashinfer.sampling, importing only what it needs (the package's
    __init__ pulls in modules whose dependencies are not installed here)."""
    try:
        import flashinfer.sampling as sampling  # noqa: F401

        return sampling, None
    except Exception as first:  # pylint: disable=broad-except
        for name in [m for m in sys.modules if m == "flashinfer" or m.startswith("flashinfer.")]:
            del sys.modules[name]
        try:
            spec = importlib.util.find_spec("flashinfer")
            if spec is None or not spec.submodule_search_locations:
                return None, f"flashinfer not installed ({first})"
            stub = types.ModuleType("flashinfer")
            stub.__path__ = list(spec.submodule_search_locations)
            sys.modules["flashinfer"] = stub
            sampling = importlib.import_module("flashinfer.sampling")
            return sampling, None
        except Exception as second:  # pylint: disable=broad-except
            return None, f"flashinfer unavailable: {first!r}; {second!r}"


class Ours:
    """The fused sampler through its C entry point."""

    def __init__(self, path):
        self.lib = ctypes.CDLL(path)
        self.lib.verdict_verify_outputs_bytes.restype = ctypes.c_int64
        self.lib.verdict_verify_outputs_bytes.argtypes = [ctypes.c_int32] * 3
        self.lib.verdict_verify_sample.restype = ctypes.c_int32
        self.lib.verdict_verify_sample.argtypes = (
            [ctypes.c_int32] * 3 + [ctypes.c_void_p] * 11 + [ctypes.c_int32] + [ctypes.c_void_p] * 2
        )
        self.lib.verdict_verify_read_result.restype = ctypes.c_int32
        self.lib.verdict_verify_read_result.argtypes = (
            [ctypes.c_void_p] + [ctypes.c_int32] * 3 + [ctypes.c_void_p] * 3
        )
        self.lib.verdict_verify_last_error.restype = ctypes.c_char_p

    def error(self):
        return self.lib.verdict_verify_last_error().decode()

    def outputs(self, rows, requests, nextn):
        size = self.lib.verdict_verify_outputs_bytes(rows, requests, nextn)
        return torch.zeros(size, dtype=torch.uint8, device="cuda")  # zeroed once: the workspace

    def run(self, case, inputs, outputs):
        stream = torch.cuda.current_stream().cuda_stream
        rc = self.lib.verdict_verify_sample(
            case["requests"], case["rows"], case["vocab"], inputs["logits"].data_ptr(),
            case["ftp"].data_ptr(), case["seqlen"].data_ptr(), case["positions"].data_ptr(),
            case["draft_ids"].data_ptr() if case["drafts"] else None,
            inputs["p"].data_ptr() if case["drafts"] else None,
            case["temperatures"].data_ptr(), ptr(case["top_ks"]), ptr(case["top_ps"]),
            ptr(case["min_ps"]), case["seeds"].data_ptr(), case["nextn"], outputs.data_ptr(),
            stream)
        if rc != 0:
            raise RuntimeError(self.error())

    def check(self, case, outputs):
        lvo = (ctypes.c_int32 * case["requests"])()
        residual_rows = ctypes.c_int32(0)
        stream = torch.cuda.current_stream().cuda_stream
        rc = self.lib.verdict_verify_read_result(
            outputs.data_ptr(), case["rows"], case["requests"], case["nextn"], stream,
            ctypes.cast(lvo, ctypes.c_void_p), ctypes.byref(residual_rows))
        if rc != 0:
            raise RuntimeError(self.error())
        return sum(lvo) / case["requests"], residual_rows.value


def ptr(tensor):
    return tensor.data_ptr() if tensor is not None else None


def processed_probs_eager(logits, f):
    """The processed distribution in PyTorch eager: temperature, then top-k,
    min-p and top-p masks from one ascending sort of the row (vLLM's
    fallback), then the softmax."""
    z = logits / f.temperature if f.temperature != 1.0 else logits
    if f.top_k > 0 or f.top_p < 1.0 or f.min_p > 0.0:
        z_sort, order = z.sort(dim=-1, descending=False)
        drop = torch.zeros_like(z_sort, dtype=torch.bool)
        if 0 < f.top_k < z.shape[-1]:
            drop |= z_sort < z_sort[:, z.shape[-1] - f.top_k].unsqueeze(-1)
        if f.min_p > 0.0:
            drop |= z_sort < z_sort[:, -1:] + math.log(f.min_p)
        if f.top_p < 1.0:
            p_sort = torch.softmax(z_sort.masked_fill(drop, -math.inf), dim=-1)
            drop |= p_sort.cumsum(dim=-1) <= 1.0 - f.top_p
            drop[:, -1] = False
        z = z.scatter(-1, order, z_sort.masked_fill(drop, -math.inf))
    return torch.softmax(z, dim=-1)


def processed_probs_flashinfer(sampling, logits, f):
    """The processed distribution through FlashInfer's kernels (min-p, which
    it only samples from, in PyTorch)."""
    probs = sampling.softmax(logits, temperature=f.temperature)
    if f.top_k > 0:
        probs = sampling.top_k_renorm_probs(probs, f.top_k)
    if f.min_p > 0.0:
        probs = probs.masked_fill(probs < f.min_p * probs.amax(dim=-1, keepdim=True), 0.0)
        probs = probs / probs.sum(dim=-1, keepdim=True)
    if f.top_p < 1.0:
        probs = sampling.top_p_renorm_probs(probs, f.top_p)
    return probs


def flashinfer_sample(sampling, logits, f):
    """One sample per row of logits with FlashInfer's samplers."""
    filtered = f.top_k > 0 or f.top_p < 1.0
    if f.min_p > 0.0:
        if filtered:
            return sampling.sampling_from_probs(processed_probs_flashinfer(sampling, logits, f))
        return sampling.min_p_sampling_from_probs(
            sampling.softmax(logits, temperature=f.temperature), f.min_p)
    z = logits / f.temperature if f.temperature != 1.0 else logits
    if filtered:
        top_k = f.top_k if f.top_k > 0 else logits.shape[-1]
        return sampling.top_k_top_p_sampling_from_logits(z, top_k, f.top_p)
    return sampling.sampling_from_logits(z)


def torch_eager(case, inputs, f):
    """Speculative verification in PyTorch eager, from logits (seed 000)."""
    b, n, v = case["requests"], case["n"], case["vocab"]
    q = processed_probs_eager(inputs["logits"], f).view(b, n + 1, v)
    if n == 0:
        return torch.multinomial(q[:, 0], 1), None
    p = inputs["p"].view(b, n, v)
    ids = case["draft_ids"].view(b, n, 1).long()
    q_d = q[:, :n].gather(2, ids).squeeze(2)
    p_d = p.gather(2, ids).squeeze(2)
    u = torch.rand(b, n, device=q.device)
    accept = u * p_d < q_d
    accepted = torch.cumprod(accept.int(), dim=1).sum(dim=1)  # drafts before the first reject
    final = accepted.view(b, 1, 1).expand(b, 1, v)
    q_final = q.gather(1, final).squeeze(1)
    p_final = p.gather(1, final.clamp(max=n - 1)).squeeze(1) * (accepted < n).view(b, 1)
    residual = torch.clamp(q_final - ALPHA * p_final, min=0)
    empty = residual.sum(dim=1, keepdim=True) <= 0
    residual = torch.where(empty, q_final, residual)
    token = torch.multinomial(residual, 1)
    steps = torch.arange(n, device=q.device).view(1, n)
    verified = torch.where(steps < accepted.view(b, 1), case["draft_ids"].view(b, n), -1)
    return token, verified


def make_case(vocab, requests, nextn, gen, f):
    b = max(requests, 1)
    n = 0 if requests == 0 else nextn
    rows = b * (n + 1)
    drafts = b * n
    dev = "cuda"
    case = {
        "vocab": vocab, "requests": b, "rows": rows, "drafts": drafts, "n": n, "nextn": nextn,
        "ftp": torch.arange(0, rows, n + 1, dtype=torch.int32, device=dev),
        "seqlen": torch.full((b,), n + 1, dtype=torch.int32, device=dev),
        "positions": torch.randint(0, 100000, (b,), dtype=torch.int64, device=dev, generator=gen),
        "draft_ids": torch.randint(0, vocab, (max(drafts, 1),), dtype=torch.int32, device=dev,
                                   generator=gen),
        "temperatures": torch.full((b,), f.temperature, dtype=torch.float32, device=dev),
        "top_ks": (torch.full((b,), f.top_k, dtype=torch.int32, device=dev)
                   if f.top_k > 0 else None),
        "top_ps": (torch.full((b,), f.top_p, dtype=torch.float32, device=dev)
                   if f.top_p < 1.0 else None),
        "min_ps": (torch.full((b,), f.min_p, dtype=torch.float32, device=dev)
                   if f.min_p > 0.0 else None),
        "seeds": torch.randint(0, 2**62, (b,), dtype=torch.int64, device=dev, generator=gen),
    }
    set_bytes = (rows + drafts) * vocab * 4
    copies = int(min(16, max(1, math.ceil(512e6 / set_bytes))))
    sets = []
    for _ in range(copies):
        logits = torch.randn(rows, vocab, device=dev, generator=gen) * 2.0
        s = {"logits": logits}
        if drafts:
            p = torch.rand(drafts, vocab, device=dev, generator=gen)
            s["p"] = p / p.sum(dim=1, keepdim=True)
            s["target_probs"] = processed_probs_eager(logits, f).view(b, n + 1, vocab)
            s["draft_probs"] = s["p"].view(b, n, vocab)
            s["draft_ids_2d"] = case["draft_ids"].view(b, n)
        sets.append(s)
    return case, sets


def time_us(fn, sets, launches, repeats):
    for s in sets[:3]:
        fn(s)
    torch.cuda.synchronize()
    start = torch.cuda.Event(enable_timing=True)
    stop = torch.cuda.Event(enable_timing=True)
    times = []
    k = 0
    for _ in range(repeats):
        start.record()
        for _ in range(launches):
            fn(sets[k % len(sets)])
            k += 1
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop) * 1e3 / launches)
    times.sort()
    return times[len(times) // 2]


def copy_bandwidth_gbps():
    n = 1 << 28  # 1 GiB of floats
    a = torch.ones(n, device="cuda")
    b = torch.empty_like(a)
    for _ in range(2):
        b.copy_(a)
    torch.cuda.synchronize()
    start = torch.cuda.Event(enable_timing=True)
    stop = torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(10):
        start.record()
        b.copy_(a)
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop) * 1e-3)
    times.sort()
    return 2 * 4 * n / times[len(times) // 2] / 1e9


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--capi", help="path of libverdict_verify_sample.so")
    parser.add_argument("--cpp_json", help="JSON written by verify_sampler_benchmark")
    parser.add_argument("--vocab_sizes", default="32000,151936")
    parser.add_argument("--requests", default="0,1,2,4,8,16,32,64,128,256,341")
    parser.add_argument("--nextn", type=int, default=5)
    parser.add_argument("--launches", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--top_k", type=int, default=0, help="0 = off")
    parser.add_argument("--top_p", type=float, default=1.0, help="1 = off")
    parser.add_argument("--min_p", type=float, default=0.0, help="0 = off")
    parser.add_argument("--out_md", default="verify_sample_perf.md")
    parser.add_argument("--out_json", default="verify_sample_peers.json")
    args = parser.parse_args()
    if not (args.temperature > 0.0 and args.top_k >= 0 and 0.0 < args.top_p <= 1.0
            and 0.0 <= args.min_p <= 1.0):
        parser.error("sampling: temperature > 0, top_k >= 0, top_p in (0, 1], min_p in [0, 1]")
    sampling_flags = (f"temperature {args.temperature:g}"
                      + (f", top_k {args.top_k}" if args.top_k > 0 else "")
                      + (f", top_p {args.top_p:g}" if args.top_p < 1.0 else "")
                      + (f", min_p {args.min_p:g}" if args.min_p > 0.0 else ""))

    torch.backends.cuda.matmul.allow_tf32 = False
    gen = torch.Generator(device="cuda")
    gen.manual_seed(2024)
    ours, ours_note = None, None
    if args.capi:
        try:
            ours = Ours(args.capi)
        except OSError as e:
            ours_note = f"could not load {args.capi}: {e}"
    flashinfer, fi_note = load_flashinfer()
    cpp = {}
    cpp_copy = None
    if args.cpp_json and os.path.exists(args.cpp_json):
        with open(args.cpp_json) as f:
            report = json.load(f)
        cpp_copy = report.get("copy_bandwidth_gbps")
        for r in report.get("results", []):
            cpp[(r["vocab"], r["requests"])] = r
    copy_gbps = copy_bandwidth_gbps()
    print(f"device {torch.cuda.get_device_name()}; copy bandwidth {copy_gbps:.0f} GB/s "
          f"(torch), {cpp_copy or float('nan'):.0f} GB/s (C++)", flush=True)
    if ours_note:
        print(ours_note)
    if fi_note:
        print(fi_note)

    results = []
    vocabs = [int(x) for x in args.vocab_sizes.split(",") if x]
    reqs = [int(x) for x in args.requests.split(",") if x]
    for vocab in vocabs:
        for requests in reqs:
            case, sets = make_case(vocab, requests, args.nextn, gen, args)
            row = {"vocab": vocab, "requests": requests, "rows": case["rows"]}
            if ours:
                outputs = ours.outputs(case["rows"], case["requests"], args.nextn)
                ours.run(case, sets[0], outputs)
                mean_accepted, residual_rows = ours.check(case, outputs)
                row["ours_us"] = time_us(lambda s: ours.run(case, s, outputs), sets,
                                         args.launches, args.repeats)
                ours.check(case, outputs)
                row["ours_mean_accepted"] = mean_accepted
                row["residual_rows"] = residual_rows
                row["bytes_min"] = (case["rows"] + residual_rows) * vocab * 4.0
            row["torch_us"] = time_us(lambda s: torch_eager(case, s, args), sets, args.launches,
                                      args.repeats)
            if flashinfer:
                chain = flashinfer.chain_speculative_sampling
                try:
                    if case["drafts"]:
                        row["flashinfer_probs_us"] = time_us(
                            lambda s: chain(s["draft_probs"], s["draft_ids_2d"], s["target_probs"]),
                            sets, args.launches, args.repeats)
                        row["flashinfer_logits_us"] = time_us(
                            lambda s: chain(s["draft_probs"], s["draft_ids_2d"],
                                            processed_probs_flashinfer(flashinfer, s["logits"],
                                                                       args).view(
                                                case["requests"], case["n"] + 1, vocab)),
                            sets, args.launches, args.repeats)
                    else:
                        row["flashinfer_logits_us"] = time_us(
                            lambda s: flashinfer_sample(flashinfer, s["logits"], args), sets,
                            args.launches, args.repeats)
                except Exception as e:  # pylint: disable=broad-except
                    row["flashinfer_error"] = repr(e)
                    print(f"flashinfer failed at V={vocab} R={requests}: {e!r}", flush=True)
            c = cpp.get((vocab, requests))
            if c:
                row["ours_cpp_us"] = c["us"]
                row.setdefault("bytes_min", c["bytes_min"])
            results.append(row)
            print(json.dumps(row), flush=True)
            del sets
            torch.cuda.empty_cache()

    floor_gbps = cpp_copy or copy_gbps
    lines = [
        "## Fused verify sampler (kernels/verify_sampler.cu)",
        "",
        "One step of speculative verification and sampling: R requests x (nextn + 1) rows "
        f"(nextn {args.nextn}; R = 0 is one row without drafts), float32 target logits, dense "
        f"draft distributions, {sampling_flags}, random drafts (most requests reject their first "
        "draft, whose row then also reads its p). Inputs rotate among copies so that "
        "small steps are not served from L2. Times are microseconds per step, the median of "
        "repeated batches of back-to-back calls (CUDA events); \"ours (C++, graph)\" replays "
        "the launches from a CUDA graph. Bytes (min) = every logit once plus p of each request's "
        "final row where that row rejected its draft (the only p a step needs); the floor is that over the copy bandwidth. PyTorch eager is the reference in "
        "kernels/bench/verify_sample_peers.py; FlashInfer's chain_speculative_sampling takes "
        "probabilities, so it is timed on probabilities and with the processing in front "
        "(its softmax and renormalisations); a one-row step is one FlashInfer sample from logits.",
        "",
        "```",
        "tools/device/bundle.sh .bundle //kernels/bench/...             # build machine",
        "kernels/bench/run_on_gpu.sh .bundle/bin/kernels/bench/verify_sampler_benchmark",
        "```",
        "",
        f"Device: {torch.cuda.get_device_name()}; copy bandwidth (read + write) "
        f"{floor_gbps:.0f} GB/s.",
        "",
    ]
    if fi_note:
        lines += [f"FlashInfer: {fi_note}", ""]
    for vocab in vocabs:
        lines += [
            f"### V = {vocab}",
            "",
            "| rows | requests | ours | ours (C++, graph) | bytes (min) | GB/s | % of copy "
            "| torch eager | flashinfer (probs in) | flashinfer (logits in) "
            "| best peer (logits in) / ours |",
            "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for r in [x for x in results if x["vocab"] == vocab]:
            ours_candidates = [t for t in (r.get("ours_us"), r.get("ours_cpp_us")) if t and t > 0]
            best_ours = min(ours_candidates) if ours_candidates else None
            # The peers that do the same work (logits in); FlashInfer on
            # probabilities is shown, not compared.
            peers = [t for t in (r.get("torch_us"), r.get("flashinfer_logits_us")) if t]
            gbps = r["bytes_min"] / (best_ours * 1e-6) / 1e9 if best_ours and "bytes_min" in r else None

            def fmt(x, spec=".1f"):
                return format(x, spec) if x is not None else "n/a"

            lines.append(
                f"| {r['rows']} | {r['requests']} | {fmt(r.get('ours_us'))} "
                f"| {fmt(r.get('ours_cpp_us'))} | {fmt(r.get('bytes_min'), '.3g')} "
                f"| {fmt(gbps, '.0f')} | {fmt(100 * gbps / floor_gbps if gbps else None)} "
                f"| {fmt(r.get('torch_us'))} | {fmt(r.get('flashinfer_probs_us'))} "
                f"| {fmt(r.get('flashinfer_logits_us'))} "
                f"| {fmt(min(peers) / best_ours if best_ours and peers else None, '.2f')}x |")
        lines.append("")
    with open(args.out_md, "w") as f:
        f.write("\n".join(lines))
    with open(args.out_json, "w") as f:
        json.dump({"copy_bandwidth_gbps": floor_gbps, "results": results}, f, indent=2)
    print("\n".join(lines))


if __name__ == "__main__":
    main()
