#!/usr/bin/env python3
"""Charts `verdict bench` results as a PNG: decode tok/s and acceptance length
against concurrency, one line per configuration (the median of a sweep's
repeats, with bars to the lowest and highest).

    plot.py --out chart.png comparison.json          # a sweep.py folder
    plot.py --out chart.png static.json compact.json # bench reports

With a sweep's comparison.json there is one column of panels per TP degree
(and overlap setting); bench reports given directly share one column. Needs
matplotlib (tools/setup.sh installs it into /opt/verdict/python); without it
the script says so and exits 0, so a sweep still finishes its tables.
"""

import argparse
import json
import os
import statistics
import sys


def load_series(paths):
    """[(panel title, [(name, [reports])])] in the order given; the reports
    of one name are a sweep's repeats of one configuration."""
    panels = {}
    for path in paths:
        with open(path) as f:
            doc = json.load(f)
        if "configurations" in doc:  # sweep.py's comparison.json
            folder = os.path.dirname(os.path.abspath(path))
            for c in doc["configurations"]:
                if not c.get("report"):
                    continue
                with open(os.path.join(folder, c["report"])) as f:
                    report = json.load(f)
                title = f"TP{c['tp']}" + (f", overlap {c['overlap']}" if c.get("overlap") else "")
                panels.setdefault(title, {}).setdefault(c["mode"], []).append(report)
        else:
            name = doc.get("label") or os.path.splitext(os.path.basename(path))[0]
            panels.setdefault("", {}).setdefault(name, []).append(doc)
    return [(title, list(series.items())) for title, series in panels.items()]


def line_of(reports, key):
    """(concurrencies, medians, [below, above]) of `key` over the reports:
    the median at each concurrency and how far the lowest and highest
    repeat lie from it (zero without repeats)."""
    by_concurrency = {}
    for report in reports:
        for p in report["points"]:
            if p.get(key) is not None:
                by_concurrency.setdefault(p["concurrency"], []).append(p[key])
    xs = sorted(by_concurrency)
    mids = [statistics.median(by_concurrency[x]) for x in xs]
    below = [m - min(by_concurrency[x]) for x, m in zip(xs, mids)]
    above = [max(by_concurrency[x]) - m for x, m in zip(xs, mids)]
    return xs, mids, [below, above]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True, help="the PNG to write")
    parser.add_argument("inputs", nargs="+", help="comparison.json or bench JSON reports")
    args = parser.parse_args(argv)
    try:
        import matplotlib
        matplotlib.use("Agg")  # no display on servers and CI
        import matplotlib.pyplot as plt
    except ImportError:
        print("plot.py: matplotlib is not installed (tools/setup.sh installs it); "
              "no chart written", file=sys.stderr)
        return 0

    panels = load_series(args.inputs)
    if not panels:
        print("plot.py: no results to plot", file=sys.stderr)
        return 1
    fig, axes = plt.subplots(2, len(panels), figsize=(5.5 * len(panels), 7), squeeze=False,
                             sharex="col")
    for column, (title, series) in enumerate(panels):
        top, bottom = axes[0][column], axes[1][column]
        for index, (name, reports) in enumerate(series):
            # One colour per configuration in both panels, also where a
            # configuration (speculation off) has no acceptance length; the
            # median of its repeats, with bars to the lowest and highest.
            style = {"marker": "o", "label": name, "color": f"C{index % 10}", "capsize": 3}
            for ax, key in ((top, "decode_tokens_per_s"), (bottom, "acceptance_length")):
                xs, mids, spread = line_of(reports, key)
                if xs:
                    ax.errorbar(xs, mids, yerr=spread, **style)
        top.set_title(title or "verdict bench")
        top.set_ylabel("decode tok/s")
        bottom.set_ylabel("acceptance length")
        bottom.set_xlabel("concurrency")
        for ax in (top, bottom):
            ax.set_xscale("log", base=2)
            ax.grid(True, alpha=0.3)
        top.legend()
        all_x = sorted({p["concurrency"] for _, reports in series for r in reports
                        for p in r["points"]})
        bottom.set_xticks(all_x)
        bottom.set_xticklabels([str(x) for x in all_x])
    fig.tight_layout()
    fig.savefig(args.out, dpi=110)
    print(f"plot.py: wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
