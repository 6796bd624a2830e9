#!/usr/bin/env python3
"""Unit tests of tools/bench/sweep.py and tools/bench/plot.py without a
server: which configurations a sweep runs, how the overlap flag is found in
`verdict --help`, the comparison table with its change against static, and
the chart; and tools/bench/step_log_summary.py on a step log.

    bench_sweep_test.py SWEEP_PY PLOT_PY VERDICT STEP_LOG_SUMMARY_PY
"""

import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import unittest

SWEEP_PY, PLOT_PY, VERDICT, STEP_LOG_SUMMARY_PY = sys.argv[1:5]
spec = importlib.util.spec_from_file_location("sweep", SWEEP_PY)
sweep = importlib.util.module_from_spec(spec)
spec.loader.exec_module(sweep)

TMP = os.environ.get("TEST_TMPDIR") or tempfile.mkdtemp()

HELP_WITHOUT = """verdict: speculative decoding serving runtime.

  Flags from runtime/cli/engine_flags.cc:
    --verify_mode (static (verify every draft), cap-accept or compact; unlike
      --disable_overlap_schedule elsewhere this has no overlap); default: "static";
"""

HELP_BOOL = HELP_WITHOUT + """    --overlap_schedule (plan step N+1 on the CPU while the GPU runs
      step N); default: true;
    --seed (seeds requests); default: 0;
"""

HELP_STRING = HELP_WITHOUT + """    --overlap (on or off); default: "on";
"""


def fake_verdict(help_text):
    """An executable that prints `help_text` for --help, as absl does (exit 1)."""
    fd, path = tempfile.mkstemp(dir=TMP, suffix=".sh")
    with os.fdopen(fd, "w") as f:
        f.write("#!/bin/sh\ncat <<'HELP'\n" + help_text + "HELP\nexit 1\n")
    os.chmod(path, 0o755)
    return path


def args(*argv):
    return sweep.build_parser().parse_args(["--verdict", "/bin/true"] + list(argv))


def report(label, rates, acceptance=None):
    """Output tok/s is a tenth below each decode rate."""
    return {"label": label, "points": [
        {"concurrency": c, "decode_tokens_per_s": r, "output_tokens_per_s": 0.9 * r,
         "completed": 4, "failed": 0,
         "acceptance_length": acceptance, "verify_tokens_per_step": 6.0 if acceptance else None,
         "ttft_p50_ms": 12.5, "itl_p50_ms": 1.25}
        for c, r in rates.items()]}


def write_sweep_folder(configs):
    """A new folder holding each configuration's report and the sweep's
    comparison.json, as sweep.py leaves them."""
    folder = tempfile.mkdtemp(dir=TMP)
    for c in configs:
        with open(os.path.join(folder, f"{c.name}.json"), "w") as f:
            json.dump(c.report, f)
    with open(os.path.join(folder, "comparison.json"), "w") as f:
        json.dump(sweep.comparison_json(configs), f)
    return folder


class OverlapFlagTest(unittest.TestCase):
    def test_no_overlap_flag(self):
        # A flag that only mentions overlap in its help text is not one.
        self.assertIsNone(sweep.find_overlap_flag(fake_verdict(HELP_WITHOUT)))

    def test_bool_flag(self):
        flag = sweep.find_overlap_flag(fake_verdict(HELP_BOOL))
        self.assertEqual(flag, ("overlap-schedule", True))
        self.assertEqual(sweep.overlap_args(flag, "on"), ["--overlap-schedule=true"])
        self.assertEqual(sweep.overlap_args(flag, "off"), ["--overlap-schedule=false"])

    def test_string_flag(self):
        flag = sweep.find_overlap_flag(fake_verdict(HELP_STRING))
        self.assertEqual(flag, ("overlap", False))
        self.assertEqual(sweep.overlap_args(flag, "off"), ["--overlap=off"])

    def test_this_trees_binary(self):
        # `verdict --help` of this tree lists `--overlap  (default: off)`.
        self.assertEqual(sweep.find_overlap_flag(VERDICT), ("overlap", False))


class ConfigurationsTest(unittest.TestCase):
    def test_default_modes_and_baseline(self):
        configs = sweep.configurations(args("--tp", "1,2"), None)
        self.assertEqual([c.name for c in configs], [
            "static-tp1", "cap-accept-tp1", "compact-tp1", "spec-off-tp1",
            "static-tp2", "cap-accept-tp2", "compact-tp2", "spec-off-tp2"])
        self.assertEqual(configs[1].flags, ["--verify-mode=cap-accept"])
        self.assertEqual(configs[3].flags, ["--speculation=off"])
        self.assertEqual(configs[4].tp, 2)

    def test_overlap_only_with_a_server_flag(self):
        ignored = sweep.configurations(args("--modes", "static", "--overlap", "on,off"), None)
        self.assertEqual([c.name for c in ignored], ["static-tp1", "spec-off-tp1"])
        both = sweep.configurations(args("--modes", "static", "--no-baseline",
                                         "--overlap", "on,off"), ("overlap-schedule", True))
        self.assertEqual([c.name for c in both],
                         ["static-tp1-overlap-on", "static-tp1-overlap-off"])
        self.assertEqual(both[1].flags, ["--verify-mode=static", "--overlap-schedule=false"])

    def test_custom_flag_sets(self):
        configs = sweep.configurations(
            args("--config", "static=--verify-mode=static",
                 "--config", "gamma3=--verify-mode=static --num-draft-tokens=3", "--no-baseline"),
            None)
        self.assertEqual([c.name for c in configs], ["static-tp1", "gamma3-tp1"])
        self.assertEqual(configs[1].flags, ["--verify-mode=static", "--num-draft-tokens=3"])


class ComparisonTest(unittest.TestCase):
    def configs(self):
        configs = sweep.configurations(args("--modes", "static,compact"), None)
        configs[0].report = report("static-tp1", {1: 330, 4: 1233, 128: 8141}, 3.5)
        configs[1].report = report("compact-tp1", {1: 329, 4: 1146, 128: 9622}, 3.4)
        configs[2].report = report("spec-off-tp1", {1: 120, 4: 480})
        for c in configs:
            c.ok, c.status, c.server_exit = True, "ok", 0
        configs[1].counters = {"verdict_decode_steps_total": 811.0,
                               "verdict_plan_checks_total": 13.0,
                               "verdict_plan_mismatches_total": 0.0,
                               "verdict_step_draft_seconds_sum": 4.866,
                               "verdict_step_draft_seconds_count": 811.0,
                               "verdict_step_verify_seconds_sum": 4.055,
                               "verdict_step_verify_seconds_count": 811.0,
                               'verdict_graph_replays_total{model="target"}': 770.0,
                               'verdict_graph_replays_total{model="draft"}': 3244.0,
                               'verdict_plan_steps_total{reason="planned"}': 790.0,
                               'verdict_plan_steps_total{reason="confidence-prior"}': 21.0,
                               'verdict_plan_steps_total{reason="small-batch"}': 0.0}
        return configs

    def test_decode_table_with_change_against_static(self):
        text = sweep.comparison_markdown(args("--modes", "static,compact"), self.configs())
        self.assertIn("| concurrency | static | compact | change | speculation off | change |",
                      text)
        self.assertIn("| 1 | 330 | 329 | -0.3% | 120 | -63.6% |", text)
        self.assertIn("| 4 | 1233 | 1146 | -7.1% | 480 | -61.1% |", text)
        self.assertIn("| 128 | 8141 | 9622 | +18.2% | - | - |", text)
        # Output tok/s in a table of its own, after the decode rates.
        output = text[text.index("Output tok/s"):]
        self.assertLess(text.index("Decode tok/s:"), text.index("Output tok/s"))
        self.assertIn("| 1 | 297 | 296 | -0.3% | 108 | -63.6% |", output)
        self.assertIn("| 128 | 7327 | 8660 | +18.2% | - | - |", output)
        self.assertIn("| 1 | 3.50 / 6.00, 12.5 / 1.25 | 3.40 / 6.00, 12.5 / 1.25 | "
                      "- / -, 12.5 / 1.25 |", text)
        # The server's own counters: decode steps, plan checks (mismatches),
        # the steps by plan reason (the ones that happened, most first), the
        # mean draft and verify time of a step and its passes replayed from
        # CUDA graphs.
        self.assertIn("| compact-tp1 | `--verify-mode=compact` | 12 | 811 | 13 (0) | "
                      "planned 790, confidence-prior 21 | 6.00 / 5.00 | 0.95 / 4.00 | ok |", text)
        self.assertIn("| static-tp1 | `--verify-mode=static` | 12 | - | - | - | - / - | - | ok |",
                      text)

    def test_failed_runs_are_listed(self):
        configs = self.configs()
        configs[1].report, configs[1].ok = None, False
        configs[1].status = "the server exited with 1 while starting"
        text = sweep.comparison_markdown(args(), configs)
        self.assertIn("| 1 | 330 | - | - | 120 | -63.6% |", text)
        self.assertIn("| compact-tp1 | `--verify-mode=compact` | 0 | 811 | 13 (0) | "
                      "planned 790, confidence-prior 21 | 6.00 / 5.00 | 0.95 / 4.00 | "
                      "the server exited with 1 while starting |", text)
        doc = sweep.comparison_json(configs)
        self.assertEqual([c["report"] for c in doc["configurations"]],
                         ["static-tp1.json", None, "spec-off-tp1.json"])

    def test_chart(self):
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            self.skipTest("matplotlib is not installed")
        folder = write_sweep_folder(self.configs())
        chart = os.path.join(folder, "chart.png")
        subprocess.run([sys.executable, PLOT_PY, "--out", chart,
                        os.path.join(folder, "comparison.json")], check=True)
        with open(chart, "rb") as f:
            self.assertEqual(f.read(8), b"\x89PNG\r\n\x1a\n")
        # Bench reports given directly work as well.
        subprocess.run([sys.executable, PLOT_PY, "--out", chart,
                        os.path.join(folder, "static-tp1.json")], check=True)


class RepeatsTest(unittest.TestCase):
    def test_rounds_alternate_their_order(self):
        base = sweep.configurations(args("--modes", "static,compact"), None)
        runs = sweep.interleaved_runs(base, 3)
        self.assertEqual([r.name for r in runs], [
            "static-tp1-r1", "compact-tp1-r1", "spec-off-tp1-r1",
            "spec-off-tp1-r2", "compact-tp1-r2", "static-tp1-r2",
            "static-tp1-r3", "compact-tp1-r3", "spec-off-tp1-r3"])
        self.assertEqual([r.repeat for r in runs[:4]], [1, 1, 1, 2])
        self.assertEqual(runs[4].flags, ["--verify-mode=compact"])
        self.assertEqual(runs[4].mode, "compact")
        # One round runs the configurations themselves, names unchanged.
        self.assertEqual([r.name for r in sweep.interleaved_runs(base, 1)],
                         ["static-tp1", "compact-tp1", "spec-off-tp1"])

    def runs(self):
        runs = sweep.interleaved_runs(
            sweep.configurations(args("--modes", "static,compact"), None), 3)
        rates = {  # the runs in run order: static, compact, off; off, compact, static; ...
            "static-tp1-r1": {1: 300, 64: 9000}, "compact-tp1-r1": {1: 310, 64: 9900},
            "spec-off-tp1-r1": {1: 160, 64: 8800}, "spec-off-tp1-r2": {1: 170, 64: 8600},
            "compact-tp1-r2": {1: 305, 64: 9800}, "static-tp1-r2": {1: 290, 64: 9100},
            "static-tp1-r3": {1: 320, 64: 8900}, "compact-tp1-r3": {1: 290},
            "spec-off-tp1-r3": {1: 165, 64: 8700}}
        for r in runs:
            accept = None if r.mode == sweep.BASELINE else 3.0 + r.repeat / 10
            r.report = report(r.name, rates[r.name], accept)
            r.ok, r.status, r.server_exit = True, "ok", 0
        return runs

    def test_table_gives_the_median_and_the_range(self):
        text = sweep.comparison_markdown(args("--modes", "static,compact", "--repeats", "3"),
                                         self.runs())
        self.assertIn("ran 3 times in interleaved rounds", text)
        self.assertIn("Decode tok/s, the median of 3 repeats (lowest-highest):", text)
        self.assertIn("| concurrency | static | compact | change | speculation off | change |",
                      text)
        # Medians 300 / 305 / 165; the change is median against median.
        self.assertIn("| 1 | 300 (290-320) | 305 (290-310) | +1.7% | 165 (160-170) | -45.0% |",
                      text)
        # A point one repeat lacks: the median of the two that have it.
        self.assertIn("| 64 | 9000 (8900-9100) | 9850 (9800-9900) | +9.4% | "
                      "8700 (8600-8800) | -3.3% |", text)
        self.assertIn("| 1 | 270 (261-288) | 274 (261-279) | +1.7% |", text)
        self.assertIn("| 1 | 3.20 / 6.00, 12.5 / 1.25 | 3.20 / 6.00, 12.5 / 1.25 | "
                      "- / -, 12.5 / 1.25 |", text)
        # No reference asked for, no such table.
        self.assertNotIn("against the best of the others", text)
        # Every run keeps its own row.
        self.assertIn("| compact-tp1-r2 | `--verify-mode=compact` | 8 |", text)
        doc = sweep.comparison_json(self.runs())
        self.assertEqual([c["repeat"] for c in doc["configurations"]],
                         [1, 1, 1, 2, 2, 2, 3, 3, 3])

    def test_reference_against_the_best_of_the_others(self):
        text = sweep.comparison_markdown(
            args("--modes", "static,compact", "--repeats", "3", "--reference", "compact"),
            self.runs())
        table = text[text.index("compact against the best of the others (medians):"):]
        # c1: compact 305 against static's 300; c64: 9850 against 9000.
        self.assertIn("| 1 | 101.7% | static | 101.7% | static |", table)
        self.assertIn("| 64 | 109.4% | static | 109.4% | static |", table)
        text = sweep.comparison_markdown(
            args("--modes", "static,compact", "--repeats", "3", "--reference", "static"),
            self.runs())
        table = text[text.index("static against the best of the others (medians):"):]
        self.assertIn("| 1 | 98.4% | compact |", table)

    def test_chart_of_repeats(self):
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            self.skipTest("matplotlib is not installed")
        folder = write_sweep_folder(self.runs())
        spec = importlib.util.spec_from_file_location("plot", PLOT_PY)
        plot = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(plot)
        (title, series), = plot.load_series([os.path.join(folder, "comparison.json")])
        self.assertEqual(title, "TP1")
        self.assertEqual([(name, len(reports)) for name, reports in series],
                         [("static", 3), ("compact", 3), ("spec-off", 3)])
        xs, mids, (below, above) = plot.line_of(series[1][1], "decode_tokens_per_s")
        self.assertEqual((xs, mids, below, above), ([1, 64], [305, 9850], [15, 50], [5, 50]))
        chart = os.path.join(folder, "chart.png")
        subprocess.run([sys.executable, PLOT_PY, "--out", chart,
                        os.path.join(folder, "comparison.json")], check=True)
        with open(chart, "rb") as f:
            self.assertEqual(f.read(8), b"\x89PNG\r\n\x1a\n")


class ChildrenTest(unittest.TestCase):
    def test_finds_a_child(self):
        child = subprocess.Popen(["sleep", "5"])
        try:
            self.assertIn(child.pid, sweep.children(os.getpid()))
        finally:
            child.kill()
            child.wait()


class StepLogSummaryTest(unittest.TestCase):
    def test_a_step_still_being_written_is_left_out(self):
        step = {"step": 1, "batch": 4, "verify_tokens": 4, "draft_reason": "planned",
                "draft_passes": 0, "drafting_requests": 0, "draft_seconds": 0.0,
                "verify_seconds": 0.002, "predicted_seconds": 0.0021, "committed_at": 100.0}
        path = os.path.join(TMP, "steps.jsonl")
        with open(path, "w") as f:
            f.write(json.dumps(step) + "\n")
            f.write(json.dumps(dict(step, step=2, committed_at=100.003)) + "\n")
            f.write('{"step": 3, "batch": 4, "verify_tok')  # the server's next write
        result = subprocess.run([sys.executable, STEP_LOG_SUMMARY_PY, path],
                                capture_output=True, text=True, check=True)
        self.assertIn("2 steps; draft plans: planned 2", result.stdout)
        # batch 4-7, no passes, 2 steps; the interval between them 3 ms
        self.assertRegex(result.stdout, r"\| 4-7 \| 0 \| 2 \|")
        self.assertIn("| 3.00 |", result.stdout)


if __name__ == "__main__":
    unittest.main(argv=[sys.argv[0]])
