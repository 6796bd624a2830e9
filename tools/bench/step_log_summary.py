#!/usr/bin/env python3
"""Summarises `verdict serve --step-log` files: per (batch size range, draft
passes), how many steps ran, their measured draft and verify time, the
prefills admitted before them, the wall time from the previous step's commit
to theirs (what lies between steps too), the scheduling thread's planning
and its wait for the device (a wait near 0: the CPU set the pace), and the
cost table's price of them, so a mispriced kind of step stands out.

    python3 tools/bench/step_log_summary.py steps.jsonl [more.jsonl ...]
"""
import argparse
import collections
import json
import statistics
import sys


def batch_range(b):
    """Power-of-two ranges: 1, 2-3, 4-7, ..., so a sweep's points stay apart."""
    lo = 1
    while lo * 2 <= b:
        lo *= 2
    return lo, lo * 2 - 1


def summarise(path, out):
    groups = collections.defaultdict(list)
    reasons = collections.Counter()
    previous = None
    with open(path) as f:
        for line in f:
            if not line.endswith("\n"):
                break  # a step a running server is still writing
            s = json.loads(line)
            # The wall time since the previous step's commit, where the two
            # steps ran back to back (a pause of a second or more is the
            # load generator between points, not a step).
            s["interval"] = None
            if previous is not None and "committed_at" in s and "committed_at" in previous:
                gap = s["committed_at"] - previous["committed_at"]
                if s["step"] == previous["step"] + 1 and 0 <= gap < 1.0:
                    s["interval"] = gap
            previous = s
            reasons[s["draft_reason"]] += 1
            groups[(batch_range(s["batch"]), s["draft_passes"])].append(s)
    out.write(f"# {path}: {sum(reasons.values())} steps; draft plans: "
              + ", ".join(f"{k} {v}" for k, v in sorted(reasons.items())) + "\n")
    out.write("| batch | passes | steps | drafting | catch-up | verify rows | draft ms | verify ms "
              "| measured ms | prefill tokens | prefill ms (target / draft) | interval ms "
              "| plan ms | await ms | predicted ms | predicted / measured |\n")
    out.write("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
    for ((lo, hi), passes), steps in sorted(groups.items()):
        def mean(key):
            return statistics.fmean(s[key] for s in steps)
        measured = mean("draft_seconds") + mean("verify_seconds")
        # null without a cost table (the server writes NaN as null)
        intervals = [s["interval"] for s in steps if s["interval"] is not None]
        priced = [s["predicted_seconds"] for s in steps if s["predicted_seconds"] is not None]
        predicted = statistics.fmean(priced) if priced else 0.0
        ratio = f"{predicted / measured:.2f}" if predicted > 0 and measured > 0 else "-"
        out.write(f"| {lo}-{hi} | {passes} | {len(steps)} | {mean('drafting_requests'):.1f} "
                  f"| {statistics.fmean(s.get('catch_up_tokens', 0) for s in steps):.1f} "
                  f"| {mean('verify_tokens'):.1f} | {mean('draft_seconds') * 1e3:.2f} "
                  f"| {mean('verify_seconds') * 1e3:.2f} | {measured * 1e3:.2f} "
                  f"| {statistics.fmean(s.get('prefill_tokens', 0) for s in steps):.1f} "
                  f"| {statistics.fmean(s.get('target_prefill_seconds', 0) for s in steps) * 1e3:.2f}"
                  f" / {statistics.fmean(s.get('draft_prefill_seconds', 0) for s in steps) * 1e3:.2f} "
                  f"| {f'{statistics.fmean(intervals) * 1e3:.2f}' if intervals else '-'} "
                  f"| {statistics.fmean(s.get('plan_seconds', 0) for s in steps) * 1e3:.3f} "
                  f"| {statistics.fmean(s.get('await_seconds', 0) for s in steps) * 1e3:.3f} "
                  f"| {f'{predicted * 1e3:.2f}' if priced else '-'} | {ratio} |\n")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("logs", nargs="+")
    for path in parser.parse_args().logs:
        summarise(path, sys.stdout)


if __name__ == "__main__":
    main()
