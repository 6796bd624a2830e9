#!/usr/bin/env python3
"""Summarises the verify kernel's phase timing.

A build with the phase timing on (kernels/verify_sampler.cu,
VERDICT_VERIFY_PHASE_TRACE) prints one `verify_phase` line per row and CTA
(the first and the last CTA of each row's cluster) at the end of every
launch: each phase boundary's nanoseconds since the row's start, -1 where
the row did not pass it. This script reads those lines (the benchmark's
output) and prints, for each row and CTA over the launches, the median time
at which each phase ended and the median time the phase took (from the
previous boundary the row passed), in microseconds. Launches in which a row
took a different path (say, the residual in some launches and not in
others, as a request's rejected row moves between rows with the inputs) are
summarised apart, path by path, each with its share of the launches.

On the GPU machine, from a bundle built with
`VERDICT_BUNDLE_BAZEL_ARGS=--config=verify_phase_trace tools/device/bundle.sh DIR
//kernels/bench:verify_sampler_benchmark`:

    verify_sampler_benchmark --vocab_sizes=151936 --requests=1 --launches=2 \\
        --repeats=3 --top_p=0.9 > trace.txt
    python3 kernels/bench/verify_phase_trace.py trace.txt [--json out.json]

The times include the phase marks' own cost (a timer read and a shared
store by one thread), and the benchmark's warm-up launches count as
launches too.
"""
import argparse
import collections
import json
import re
import statistics
import sys

PHASES = [
    "streamed", "merged", "mass", "top_k_bucket", "top_k_listed", "top_k_selected",
    "top_k_mass", "top_p_level1", "top_p_level2", "top_p_listed", "top_p_selected",
    "filtered", "decided", "residual_summed", "residual_raced", "drawn", "end",
]
LINE = re.compile(r"verify_phase row (\d+) rank (\d+) (.*)")


def parse(lines):
    """{(row, rank): [{phase: ns}, ...]} over the launches, in file order."""
    runs = collections.defaultdict(list)
    for line in lines:
        m = LINE.search(line)
        if not m:
            continue
        fields = m.group(3).split()
        if len(fields) != 2 * len(PHASES) or fields[0::2] != PHASES:
            raise ValueError(f"malformed verify_phase line: {line.strip()}")
        times = dict(zip(PHASES, (int(v) for v in fields[1::2])))
        runs[(int(m.group(1)), int(m.group(2)))].append(times)
    return runs


def summarise(runs):
    """Per (row, rank, path), path being the phases a launch passed: the
    median end time of each phase and the median duration since the previous
    phase passed, in us, over the launches that took that path."""
    out = {}
    for (row, rank), launches in sorted(runs.items()):
        by_path = collections.defaultdict(list)
        for t in launches:
            by_path[tuple(p for p in PHASES if t[p] >= 0)].append(t)
        # The most common path first, then by the phases' order.
        for path, group in sorted(by_path.items(),
                                  key=lambda kv: (-len(kv[1]), [PHASES.index(p) for p in kv[0]])):
            phases = []
            for i, phase in enumerate(path):
                ends = [t[phase] / 1000 for t in group]
                took = [(t[phase] - (t[path[i - 1]] if i > 0 else 0)) / 1000 for t in group]
                phases.append({"phase": phase, "end_us": statistics.median(ends),
                               "took_us": statistics.median(took)})
            out[(row, rank, path)] = {"launches": len(group), "of": len(launches),
                                      "phases": phases}
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("trace", help="the benchmark's output ('-' for standard input)")
    parser.add_argument("--json", help="also write the summary here")
    args = parser.parse_args()
    text = sys.stdin if args.trace == "-" else open(args.trace)
    summary = summarise(parse(text))
    if not summary:
        sys.exit("verify_phase_trace: no verify_phase lines (was the kernel built with "
                 "--config=verify_phase_trace?)")
    for (row, rank, _), s in summary.items():
        print(f"row {row} rank {rank} ({s['launches']} of {s['of']} launches): " + ", ".join(
            f"{p['phase']} {p['took_us']:.1f} (at {p['end_us']:.1f})" for p in s["phases"]))
    if args.json:
        with open(args.json, "w") as f:
            json.dump([{"row": row, "rank": rank, **s} for (row, rank, _), s in summary.items()],
                      f, indent=1)


if __name__ == "__main__":
    main()
