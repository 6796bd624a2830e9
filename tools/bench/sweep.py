#!/usr/bin/env python3
"""Runs `verdict bench` against `verdict serve` in several configurations and
writes one comparison table.

For each configuration (a server flag set x TP degree x overlap setting) it
starts `verdict serve` (directly for TP 1, under mpirun for TP > 1, with the
mpirun settings of tests/mpirun_test.sh), waits until the server is ready,
runs the concurrency sweep of `verdict bench`, stops the server with SIGTERM
and keeps its log. Then it merges the bench reports into comparison.md (decode
tok/s by concurrency per configuration, with the change against static, as
seed 002's tables show it), comparison.json, and a chart (plot.py, when
matplotlib is installed).

The server flag sets: one per --modes entry (`--verify-mode=MODE`), plus
`--speculation=off` as the baseline (--no-baseline drops it), or the
--config NAME=FLAGS sets given instead. --overlap is passed to the server
only when `verdict --help` lists an overlap flag; otherwise it is reported
and ignored.

Example (GPU machine, 2 GPUs):
    tools/bench/sweep.py --verdict bazel-bin/runtime/cli/verdict --tp 1,2 \\
        --concurrency 1,4,8,16,32,64,128,512 --max-tokens 1024 --out /tmp/sweep

Exit status: 0 when every configuration ran and every request completed,
1 otherwise (the tables are still written), 2 for bad options.
"""

import argparse
import http.client
import json
import os
import re
import shlex
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

BASELINE = "spec-off"
BASELINE_FLAGS = ["--speculation=off"]


def log(message):
    print(f"sweep: {time.strftime('%H:%M:%S')} {message}", file=sys.stderr, flush=True)


def comma_list(text):
    return [item.strip() for item in text.split(",") if item.strip()]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http_status(port, path):
    try:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
        conn.request("GET", path)
        status = conn.getresponse().status
        conn.close()
        return status
    except OSError:
        return None


def find_overlap_flag(verdict):
    """The server's overlap flag, as (name, is_bool), or None without one."""
    result = subprocess.run([verdict, "--help"], capture_output=True, text=True, timeout=60)
    text = result.stdout + result.stderr
    # Each flag starts a line: `--name  (default: v)` with its help below (this
    # tree's `verdict --help`), or `--name (help); default: v;` (absl's, which
    # older binaries print); a flag named in another flag's help text does not
    # count.
    match = re.search(r"^\s*--([A-Za-z0-9_-]*overlap[A-Za-z0-9_-]*) {1,2}\((.*?)(?=^\s*--|\Z)",
                      text, re.M | re.S)
    if not match:
        return None
    is_bool = re.search(r"default: (true|false)[;)]", match.group(2)) is not None
    return match.group(1).replace("_", "-"), is_bool


def overlap_args(flag, setting):
    name, is_bool = flag
    if is_bool:
        value = {"on": "true", "off": "false"}.get(setting, setting)
    else:
        value = setting
    return [f"--{name}={value}"]


def children(pid):
    """The pids of a process's children (from /proc)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                # The command name, in parentheses, may hold spaces.
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            found.append(int(entry))
    return found


class Configuration:
    def __init__(self, name, mode, tp, overlap, flags, repeat=None):
        self.name = name          # file names and table rows
        self.mode = mode          # the column of the comparison table
        self.tp = tp
        self.overlap = overlap    # "on", "off" or None
        self.flags = flags        # verdict serve flags of this configuration
        self.repeat = repeat      # 1, 2, ... under --repeats, else None
        self.ok = False
        self.status = "not run"
        self.server_exit = None
        self.report = None        # the bench JSON, once read
        self.counters = {}        # SERVER_COUNTERS at the end of the run


def configurations(args, overlap_flag):
    flag_sets = []
    if args.config:
        for entry in args.config:
            name, _, flags = entry.partition("=")
            flag_sets.append((name.strip(), shlex.split(flags)))
    else:
        for mode in comma_list(args.modes):
            flag_sets.append((mode, [f"--verify-mode={mode}"]))
    if args.baseline:
        flag_sets.append((BASELINE, list(BASELINE_FLAGS)))
    overlaps = comma_list(args.overlap) if (args.overlap and overlap_flag) else [None]
    out = []
    for tp in [int(t) for t in comma_list(args.tp)]:
        for overlap in overlaps:
            for mode, flags in flag_sets:
                name = f"{mode}-tp{tp}" + (f"-overlap-{overlap}" if overlap else "")
                extra = overlap_args(overlap_flag, overlap) if overlap else []
                out.append(Configuration(name, mode, tp, overlap, flags + extra))
    return out


def interleaved_runs(configs, repeats):
    """The runs of `repeats` rounds, each round every configuration once,
    odd rounds in the order given and even rounds reversed, so that a drift
    of the machine over the sweep (clocks, heat, a neighbour) falls on every
    configuration alike instead of on the last ones. Each run is named
    NAME-rK; with one round the configurations run as given."""
    if repeats <= 1:
        return list(configs)
    runs = []
    for r in range(1, repeats + 1):
        for c in (configs if r % 2 else reversed(configs)):
            runs.append(Configuration(f"{c.name}-r{r}", c.mode, c.tp, c.overlap, c.flags, r))
    return runs


class Server:
    """verdict serve, directly or under mpirun, in its own process group."""

    def __init__(self, args, config, log_path):
        self.port = free_port()
        self.metrics_port = free_port()
        serve = [args.verdict, "serve", f"--port={self.port}",
                 f"--metrics-port={self.metrics_port}", f"--tp={config.tp}"]
        # The load generator is one client address with up to the sweep's
        # largest concurrency open at once (a probe on top), so the server's
        # per-address cap must not turn its load into 429s.
        clients = max(int(c) for c in comma_list(args.concurrency))
        serve += [f"--max-connections-per-client={clients + 8}",
                  f"--max-connections={max(1024, clients + 8)}"]
        serve += config.flags + shlex.split(args.server_args)
        env = dict(os.environ)
        self.session_dir = None
        if config.tp > 1:
            # As tests/mpirun_test.sh: a short private TMPDIR for Open MPI's
            # session directory and sockets, shared memory only, backing
            # files in the private directory, ranks not pinned.
            self.session_dir = tempfile.mkdtemp(prefix="verdict_sweep.", dir="/tmp")
            env.update(TMPDIR=self.session_dir, OMPI_ALLOW_RUN_AS_ROOT="1",
                       OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
            for var in ("XML_OUTPUT_FILE", "TEST_PREMATURE_EXIT_FILE", "TEST_SHARD_STATUS_FILE",
                        "TEST_TOTAL_SHARDS", "TEST_SHARD_INDEX"):
                env.pop(var, None)
            serve = [args.mpirun, "-np", str(config.tp), "--oversubscribe", "--bind-to", "none",
                     "--mca", "pml", "ob1", "--mca", "btl", "self,vader",
                     "--mca", "btl_vader_single_copy_mechanism", "none",
                     "--mca", "btl_vader_backing_directory", self.session_dir,
                     "--mca", "osc_sm_backing_directory", self.session_dir] + serve
        env.setdefault("NCCL_NVLS_ENABLE", "0")
        self.command = serve
        self.log = open(log_path, "w")
        self.log.write("$ " + shlex.join(serve) + "\n")
        self.log.flush()
        self.proc = subprocess.Popen(serve, stdout=self.log, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, env=env, start_new_session=True)

    def wait_ready(self, seconds):
        deadline = time.time() + seconds
        while time.time() < deadline:
            if self.proc.poll() is not None:
                return f"the server exited with {self.proc.returncode} while starting"
            if http_status(self.port, "/health") == 200 and http_status(self.port, "/ready") == 200:
                return None
            time.sleep(0.2)
        return f"the server was not ready after {seconds:.0f} s"

    def stop(self, seconds):
        """SIGTERM to the server, then SIGKILL to its process group.

        Under mpirun the signal goes to the first rank, not to mpirun: a
        rank's SIGTERM drains the whole job (runtime/cli/serve_command.cc),
        while mpirun ends a job it was signalled to stop with status 1 even
        after a clean drain, which would hide a real failure.
        """
        if self.proc.poll() is None:
            ranks = children(self.proc.pid) if self.session_dir else []
            try:
                os.kill(min(ranks) if ranks else self.proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                self.proc.wait(timeout=seconds)
            except subprocess.TimeoutExpired:
                log(f"the server did not stop within {seconds:.0f} s; killing it")
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self.log.close()
        if self.session_dir:
            shutil.rmtree(self.session_dir, ignore_errors=True)
        return self.proc.returncode


def run_configuration(args, config):
    log_path = os.path.join(args.out, f"{config.name}.serve.log")
    log(f"{config.name}: starting the server ({shlex.join(config.flags) or 'defaults'}, "
        f"tp {config.tp})")
    server = Server(args, config, log_path)
    try:
        problem = server.wait_ready(args.startup_timeout)
        if problem:
            config.status = f"{problem} (see {log_path})"
            return
        bench = [args.verdict, "bench", f"--bench-url=http://127.0.0.1:{server.port}",
                 f"--bench-metrics-url=http://127.0.0.1:{server.metrics_port}/metrics",
                 f"--bench-out={os.path.join(args.out, config.name)}",
                 f"--bench-label={config.name}",
                 f"--bench-concurrency={args.concurrency}",
                 f"--bench-num-requests={args.num_requests}",
                 f"--bench-max-tokens={args.max_tokens}",
                 f"--bench-temperature={args.temperature}",
                 f"--bench-prompts={args.prompts}"] + shlex.split(args.bench_args)
        with open(os.path.join(args.out, f"{config.name}.bench.log"), "w") as out:
            code = subprocess.run(bench, stdout=out, stdin=subprocess.DEVNULL).returncode
        report_path = os.path.join(args.out, f"{config.name}.json")
        if os.path.exists(report_path):
            with open(report_path) as f:
                config.report = json.load(f)
        config.counters = scrape_counters(
            server.metrics_port, os.path.join(args.out, f"{config.name}.metrics.txt"))
        if config.counters.get("verdict_plan_mismatches_total", 0) > 0:
            code = code or 1
            config.status = "the ranks' plans disagreed"
        if code == 0:
            config.ok, config.status = True, "ok"
        elif config.status == "not run":
            config.status = f"verdict bench exited with {code}"
    finally:
        config.server_exit = server.stop(args.stop_timeout)
        log(f"{config.name}: {config.status}; the server exited with {config.server_exit}")
        if config.ok and config.server_exit != 0:
            config.status = f"ok, but the server exited with {config.server_exit}"


# Counters of the server's own report that the runs table shows: how many
# decode steps ran, how often the ranks compared plans and disagreed, where
# a step's time went (draft passes, verify) and how many of its passes
# replayed CUDA graphs; and the steps by plan reason (PLAN_REASON_PREFIX,
# one counter per reason), which shows whether cap-accept and compact
# planned at all or fell back to verifying everything.
SERVER_COUNTERS = ("verdict_decode_steps_total", "verdict_plan_checks_total",
                   "verdict_plan_mismatches_total",
                   "verdict_step_draft_seconds_sum", "verdict_step_draft_seconds_count",
                   "verdict_step_verify_seconds_sum", "verdict_step_verify_seconds_count",
                   'verdict_graph_replays_total{model="target"}',
                   'verdict_graph_replays_total{model="draft"}')
PLAN_REASON_PREFIX = 'verdict_plan_steps_total{reason="'


def scrape_counters(port, path):
    """Saves the server's /metrics page to `path`; returns SERVER_COUNTERS."""
    try:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        conn.request("GET", "/metrics")
        text = conn.getresponse().read().decode()
        conn.close()
    except OSError as e:
        log(f"could not read the server's metrics: {e}")
        return {}
    with open(path, "w") as f:
        f.write(text)
    counters = {}
    for line in text.splitlines():
        name, _, value = line.partition(" ")
        if name in SERVER_COUNTERS or name.startswith(PLAN_REASON_PREFIX):
            counters[name] = float(value)
    return counters


def plan_reasons(counters):
    """The steps by plan reason, most first, e.g. "planned 43, confidence-prior 44"."""
    steps = [(value, name[len(PLAN_REASON_PREFIX):].rstrip('"}'))
             for name, value in counters.items()
             if name.startswith(PLAN_REASON_PREFIX) and value > 0]
    steps.sort(key=lambda s: (-s[0], s[1]))
    return ", ".join(f"{reason} {value:.0f}" for value, reason in steps) or "-"


def step_split(counters):
    """Mean draft and verify milliseconds per decode step, from the histograms."""
    means = []
    for phase in ("draft", "verify"):
        total = counters.get(f"verdict_step_{phase}_seconds_sum")
        count = counters.get(f"verdict_step_{phase}_seconds_count")
        means.append(None if not count else 1e3 * total / count)
    return " / ".join(fmt(m, 2) for m in means)


def graph_replays(counters):
    """Target / draft passes replayed from CUDA graphs per decode step."""
    steps = counters.get("verdict_decode_steps_total")
    if not steps:
        return "-"
    per_step = [counters.get(f'verdict_graph_replays_total{{model="{m}"}}')
                for m in ("target", "draft")]
    return " / ".join(fmt(None if r is None else r / steps, 2) for r in per_step)


def fmt(value, decimals):
    return "-" if value is None else f"{value:.{decimals}f}"


def change(value, base):
    if value is None or not base:
        return "-"
    return f"{(value / base - 1) * 100:+.1f}%"


def column_name(config):
    return "speculation off" if config.mode == BASELINE else config.mode


def groups_of(configs):
    """(tp, overlap) -> [configurations in run order]."""
    groups = {}
    for c in configs:
        groups.setdefault((c.tp, c.overlap), []).append(c)
    return groups


def points_by_concurrency(config):
    if not config.report:
        return {}
    return {p["concurrency"]: p for p in config.report["points"]}


def columns_of(members):
    """mode -> [its runs], in the order the modes first ran (one run a mode
    without --repeats)."""
    columns = {}
    for c in members:
        columns.setdefault(c.mode, []).append(c)
    return columns


def median(values):
    return statistics.median(values) if values else None


def values_at(runs, conc, key):
    """The runs' values of `key` at concurrency `conc`, where they have one."""
    values = []
    for run in runs:
        value = points_by_concurrency(run).get(conc, {}).get(key)
        if value is not None:
            values.append(value)
    return values


def with_spread(values, decimals):
    """The median, and after it the lowest and highest where runs repeat:
    "5948 (5878-6016)"."""
    if len(values) <= 1:
        return fmt(values[0] if values else None, decimals)
    return (f"{fmt(median(values), decimals)} "
            f"({fmt(min(values), decimals)}-{fmt(max(values), decimals)})")


def rate_table(members, base_mode, concurrencies, key):
    """One row a concurrency, one column a configuration (the median of its
    repeats with their range), each beside its change against static at the
    same TP."""
    columns = columns_of(members)
    header = ["concurrency"]
    for mode, runs in columns.items():
        header.append(column_name(runs[0]))
        if base_mode is not None and mode != base_mode:
            header.append("change")
    lines = ["| " + " | ".join(header) + " |", "|" + "---:|" * len(header)]
    for conc in concurrencies:
        row = [str(conc)]
        base_value = (median(values_at(columns[base_mode], conc, key))
                      if base_mode is not None else None)
        for mode, runs in columns.items():
            values = values_at(runs, conc, key)
            row.append(with_spread(values, 0))
            if base_mode is not None and mode != base_mode:
                row.append(change(median(values), base_value))
        lines.append("| " + " | ".join(row) + " |")
    return lines


def reference_table(columns, reference, concurrencies):
    """The reference configuration's median against the best median of the
    others at each concurrency, decode and output tok/s, naming the best."""
    lines = ["| concurrency | decode tok/s | best other | output tok/s | best other |",
             "|---:|---:|---|---:|---|"]
    for conc in concurrencies:
        row = [str(conc)]
        for key in ("decode_tokens_per_s", "output_tokens_per_s"):
            mine = median(values_at(columns[reference], conc, key))
            others = [(median(values_at(runs, conc, key)), mode)
                      for mode, runs in columns.items() if mode != reference]
            others = [(value, mode) for value, mode in others if value is not None]
            if mine is None or not others:
                row += ["-", "-"]
                continue
            best, best_mode = max(others)
            row += [f"{100 * mine / best:.1f}%", column_name(columns[best_mode][0])]
        lines.append("| " + " | ".join(row) + " |")
    return lines


def comparison_markdown(args, configs):
    lines = ["# verdict sweep", ""]
    lines.append(
        f"{args.max_tokens} output tokens per request (ignore_eos), temperature "
        f"{args.temperature}, prompts {args.prompts}, {args.num_requests or 'four per client'} "
        f"requests per point. Decode tok/s = per-request decode rate (output tokens after the "
        f"first chunk / time after the first chunk), times concurrency; c1 is the single-request "
        f"decode rate. A configuration whose requests get their first token sooner and end at "
        f"the same time reads lower by it; output tok/s (all output tokens over the point's "
        f"wall time) does not. Change is against static at the same TP.")
    if args.server_args:
        lines.append(f"Server flags of every run: `{args.server_args}`.")
    spread_note = ""
    if args.repeats > 1:
        spread_note = f", the median of {args.repeats} repeats (lowest-highest)"
        lines.append(f"Each configuration ran {args.repeats} times in interleaved rounds (odd "
                     f"rounds in the order of the runs table, even rounds reversed).")
    lines.append("")
    for (tp, overlap), members in groups_of(configs).items():
        title = f"## TP{tp}" + (f", overlap {overlap}" if overlap else "")
        columns = columns_of(members)
        base_mode = "static" if "static" in columns else None
        concurrencies = sorted({k for c in members for k in points_by_concurrency(c)})
        lines += [title, "", "Decode tok/s" + spread_note + ":", ""]
        lines += rate_table(members, base_mode, concurrencies, "decode_tokens_per_s")
        lines += ["", "Output tok/s (the point's output tokens over its wall time)" +
                  spread_note + ":", ""]
        lines += rate_table(members, base_mode, concurrencies, "output_tokens_per_s")
        if args.reference in columns:
            lines += ["", f"{args.reference} against the best of the others (medians):", ""]
            lines += reference_table(columns, args.reference, concurrencies)
        lines += ["", "Acceptance length / verify tokens per request and step, "
                  "TTFT p50 / ITL p50 (ms)" + (", medians of the repeats" if spread_note else "")
                  + ":", ""]
        header = ["concurrency"] + [column_name(runs[0]) for runs in columns.values()]
        lines.append("| " + " | ".join(header) + " |")
        lines.append("|" + "---:|" * len(header))
        for conc in concurrencies:
            row = [str(conc)]
            for runs in columns.values():
                if not any(conc in points_by_concurrency(r) for r in runs):
                    row.append("-")
                    continue
                at = {key: median(values_at(runs, conc, key)) for key in
                      ("acceptance_length", "verify_tokens_per_step", "ttft_p50_ms", "itl_p50_ms")}
                row.append(f"{fmt(at['acceptance_length'], 2)} / "
                           f"{fmt(at['verify_tokens_per_step'], 2)}, "
                           f"{fmt(at['ttft_p50_ms'], 1)} / {fmt(at['itl_p50_ms'], 2)}")
            lines.append("| " + " | ".join(row) + " |")
        lines.append("")
    lines += ["## Runs", "",
              "| configuration | server flags | requests | decode steps | plan checks "
              "(mismatches) | steps by plan reason | draft / verify ms per step | "
              "graph replays per step (target / draft) | status |",
              "|---|---|---:|---:|---:|---|---:|---:|---|"]
    for c in configs:
        completed = failed = 0
        for p in (c.report or {}).get("points", []):
            completed += p["completed"]
            failed += p["failed"]
        requests = f"{completed}" + (f" ({failed} failed)" if failed else "")
        steps = c.counters.get("verdict_decode_steps_total")
        checks = c.counters.get("verdict_plan_checks_total")
        mismatches = c.counters.get("verdict_plan_mismatches_total")
        plan = "-" if checks is None else f"{checks:.0f} ({mismatches or 0:.0f})"
        lines.append(f"| {c.name} | `{shlex.join(c.flags)}` | {requests} | "
                     f"{fmt(steps, 0)} | {plan} | {plan_reasons(c.counters)} | "
                     f"{step_split(c.counters)} | {graph_replays(c.counters)} | "
                     f"{c.status} |")
    return "\n".join(lines) + "\n"


def comparison_json(configs):
    return {
        "version": 1,
        "configurations": [{
            "name": c.name, "mode": c.mode, "tp": c.tp, "overlap": c.overlap,
            "repeat": c.repeat, "flags": c.flags, "ok": c.ok, "status": c.status, "server_exit": c.server_exit,
            "report": f"{c.name}.json" if c.report else None, "server_counters": c.counters,
        } for c in configs],
    }


def write_comparison(args, configs, md_path):
    with open(md_path, "w") as f:
        f.write(comparison_markdown(args, configs))
    with open(os.path.join(args.out, "comparison.json"), "w") as f:
        json.dump(comparison_json(configs), f, indent=1)


def build_parser():
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--verdict", default="bazel-bin/runtime/cli/verdict",
                        help="the verdict binary")
    parser.add_argument("--mpirun", default="mpirun", help="mpirun for TP > 1")
    parser.add_argument("--out", default="bench-sweep", help="output folder")
    parser.add_argument("--tp", default="1", help="TP degrees, comma-separated")
    parser.add_argument("--modes", default="static,cap-accept,compact",
                        help="verify modes, one server flag set each")
    parser.add_argument("--no-baseline", dest="baseline", action="store_false",
                        help="leave out the --speculation=off baseline")
    parser.add_argument("--config", action="append", metavar="NAME=FLAGS",
                        help="a server flag set to compare (repeatable; replaces --modes)")
    parser.add_argument("--overlap", default="",
                        help="overlap settings to compare (on,off), used only if the server "
                             "has an overlap flag")
    parser.add_argument("--server-args", default="", help="flags for every verdict serve")
    parser.add_argument("--concurrency", default="1,4,8,16,32,64,128,512")
    parser.add_argument("--repeats", type=int, default=1,
                        help="run every configuration this many times, in interleaved "
                             "rounds; the tables give the median and the range")
    parser.add_argument("--reference", default="",
                        help="a configuration (mode or --config name) to set against the best "
                             "of the others at each concurrency")
    parser.add_argument("--num-requests", type=int, default=0,
                        help="requests per point (0: verdict bench's default)")
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--prompts", default="builtin", help="builtin or a JSONL file")
    parser.add_argument("--bench-args", default="", help="more flags for verdict bench")
    parser.add_argument("--startup-timeout", type=float, default=600)
    parser.add_argument("--stop-timeout", type=float, default=60)
    parser.add_argument("--no-plot", dest="plot", action="store_false")
    return parser


def main(argv=None):
    parser = build_parser()
    args = parser.parse_args(argv)
    if not os.access(args.verdict, os.X_OK):
        parser.error(f"not an executable: {args.verdict}")
    if any(int(t) > 1 for t in comma_list(args.tp)) and shutil.which(args.mpirun) is None:
        parser.error(f"{args.mpirun} not found; TP > 1 runs under mpirun")
    if args.config and any("=" not in c for c in args.config):
        parser.error("--config takes NAME=FLAGS")
    if args.repeats < 1:
        parser.error("--repeats takes a count of at least 1")
    os.makedirs(args.out, exist_ok=True)

    overlap_flag = None
    if args.overlap:
        overlap_flag = find_overlap_flag(args.verdict)
        if overlap_flag is None:
            log("verdict serve has no overlap flag (`verdict --help` lists none); "
                "--overlap is ignored")
    configs = interleaved_runs(configurations(args, overlap_flag), args.repeats)
    log(f"{len(configs)} runs: {', '.join(c.name for c in configs)}")
    md_path = os.path.join(args.out, "comparison.md")
    for config in configs:
        run_configuration(args, config)
        # After every run, so that a sweep stopped part way (a time limit,
        # a lost machine) keeps the tables of the runs it finished.
        write_comparison(args, configs, md_path)
    if args.plot and any(c.report for c in configs):
        plot = os.path.join(os.path.dirname(os.path.abspath(__file__)), "plot.py")
        subprocess.run([sys.executable, plot, "--out",
                        os.path.join(args.out, "decode_tokens_per_s.png"),
                        os.path.join(args.out, "comparison.json")])
    sys.stdout.write(open(md_path).read())
    log(f"wrote {md_path}")
    return 0 if all(c.ok and c.server_exit == 0 for c in configs) else 1


if __name__ == "__main__":
    sys.exit(main())
