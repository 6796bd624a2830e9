#!/usr/bin/env python3
"""Charts `verdict bench` results as a PNG: decode tok/s and acceptance length
against concurrency, one line per configuration.

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
import sys


def load_series(paths):
    """[(panel title, [(name, report)])] in the order given."""
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
                panels.setdefault(title, []).append((c["mode"], report))
        else:
            name = doc.get("label") or os.path.splitext(os.path.basename(path))[0]
            panels.setdefault("", []).append((name, doc))
    return list(panels.items())


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
        for index, (name, report) in enumerate(series):
            # One colour per configuration in both panels, also where a
            # configuration (speculation off) has no acceptance length.
            style = {"marker": "o", "label": name, "color": f"C{index % 10}"}
            points = sorted(report["points"], key=lambda p: p["concurrency"])
            xs = [p["concurrency"] for p in points]
            top.plot(xs, [p["decode_tokens_per_s"] for p in points], **style)
            acceptance = [(p["concurrency"], p["acceptance_length"]) for p in points
                          if p.get("acceptance_length") is not None]
            if acceptance:
                bottom.plot(*zip(*acceptance), **style)
        top.set_title(title or "verdict bench")
        top.set_ylabel("decode tok/s")
        bottom.set_ylabel("acceptance length")
        bottom.set_xlabel("concurrency")
        for ax in (top, bottom):
            ax.set_xscale("log", base=2)
            ax.grid(True, alpha=0.3)
        top.legend()
        all_x = sorted({p["concurrency"] for _, r in series for p in r["points"]})
        bottom.set_xticks(all_x)
        bottom.set_xticklabels([str(x) for x in all_x])
    fig.tight_layout()
    fig.savefig(args.out, dpi=110)
    print(f"plot.py: wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
