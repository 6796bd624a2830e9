#!/usr/bin/env python3
"""verdict's metrics through a real Prometheus server.

Starts `verdict serve` at TP 2 with deploy/launch.sh (mpirun, two ranks on
this host, the CPU backend), with a cost table so that the planner's
predictions are recorded, and a Prometheus server (Debian's `prometheus`)
that scrapes rank 0's /metrics every second and evaluates
deploy/prometheus/alerts.yml. Then:
  1. clients send completion and chat requests; Prometheus's HTTP API
     returns the request, prompt-token and generated-token counts the clients
     saw;
  2. the per-rank figures of both ranks arrived (gathered to rank 0), every
     rank is up, and no plan check failed;
  3. the speculation and planner families agree with each other;
  4. `promtool check metrics` accepts a live scrape;
  5. every query of the Grafana dashboard names only metrics verdict exports
     and runs on Prometheus with a result;
  6. every alerting rule evaluates without error on the live series, and the
     availability and TP alerts stay quiet;
  7. SIGTERM to launch.sh drains both ranks (a streaming request finishes)
     and the job exits 0.

    prometheus_e2e_test.py VERDICT_BINARY LAUNCH_SH DASHBOARD_JSON ALERTS_YML
"""

import concurrent.futures
import http.client
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse

from local_mpi import local_mpi_env

TMP = os.environ.get("TEST_TMPDIR") or tempfile.mkdtemp()
OUT = os.environ.get("TEST_UNDECLARED_OUTPUTS_DIR") or TMP
# Sanitized builds run several times slower (.bazelrc sets this for them):
# the drain window stretches with them.
TIME_SCALE = int(os.environ.get("VERDICT_TEST_TIME_SCALE", "1"))

# A step costs 10 ms plus 0.4 ms per verified row (the CPU backend is in the
# same range for the bundled model): predictions exist for every step.
COST_TABLE = {
    "batch_sizes": [1, 16, 64],
    "verify_tokens": [1, 16, 128, 512],
    "seconds": [[0.0104, 0.0164, 0.0612, 0.2148],
                [0.0110, 0.0170, 0.0618, 0.2154],
                [0.0130, 0.0190, 0.0638, 0.2174]],
}

HISTOGRAM_SUFFIXES = ("_bucket", "_sum", "_count")


class Failures:
    def __init__(self):
        self.count = 0

    def check(self, condition, message):
        print(("PASS " if condition else "FAIL ") + message, flush=True)
        if not condition:
            self.count += 1


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http_get(port, path, timeout=10):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    conn.request("GET", path)
    response = conn.getresponse()
    return response.status, response.read().decode()


def post(port, path, body):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    conn.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
    response = conn.getresponse()
    return response.status, json.loads(response.read())


def wait_for(what, predicate, seconds, procs=()):
    deadline = time.time() + seconds
    while time.time() < deadline:
        for p in procs:
            if p.poll() is not None:
                raise AssertionError(f"{what}: a process exited early with {p.returncode}")
        try:
            if predicate():
                return
        except OSError:
            pass
        time.sleep(0.2)
    raise AssertionError(f"timed out after {seconds}s waiting for {what}")


def query(prom_port, expr):
    """Instant query through Prometheus's HTTP API: (status, result list)."""
    path = "/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    _, body = http_get(prom_port, path)
    answer = json.loads(body)
    return answer.get("status"), answer.get("data", {}).get("result", []), answer.get("error")


def scalar(prom_port, expr):
    status, result, error = query(prom_port, expr)
    if status != "success":
        raise AssertionError(f"query {expr!r} failed: {error}")
    if not result:
        return None
    return float(result[0]["value"][1])


def metric_families(scrape):
    """Family name -> type, from the `# TYPE` lines of an exposition."""
    families = {}
    for line in scrape.splitlines():
        m = re.match(r"^# TYPE (\S+) (\S+)$", line)
        if m:
            families[m.group(1)] = m.group(2)
    return families


def names_in(expr, families):
    """The verdict families an expression names (histogram series mapped to
    their family); unknown names come back as they are."""
    names = set()
    for name in re.findall(r"\bverdict_[a-zA-Z0-9_]+", expr):
        for suffix in HISTOGRAM_SUFFIXES:
            base = name[: -len(suffix)]
            if name.endswith(suffix) and families.get(base) == "histogram":
                name = base
                break
        names.add(name)
    return names


def dashboard_queries(dashboard):
    """(where, expr) for every panel target and templating query."""
    queries = []

    def walk(panels):
        for p in panels:
            for t in p.get("targets", []):
                queries.append((f"panel {p.get('title')!r} {t.get('refId')}", t.get("expr", "")))
            walk(p.get("panels", []))

    walk(dashboard.get("panels", []))
    for v in dashboard.get("templating", {}).get("list", []):
        if v.get("type") == "query":
            q = v.get("query")
            q = q.get("query", "") if isinstance(q, dict) else q
            queries.append((f"variable ${v.get('name')}", q))
    return queries


def runnable(expr):
    """A dashboard expression with Grafana's variables bound for this test."""
    return expr.replace("$__rate_interval", "1m").replace("$instance", ".*")


def send_requests(port):
    """12 requests from 4 concurrent clients; returns what the clients saw."""
    bodies = []
    prompts = ["It is a truth universally acknowledged", "Call me Ishmael.", "The whale",
               "In the beginning", "Mr. Darcy was", "Upon my word,"]
    for i in range(12):
        if i % 3 == 2:
            bodies.append(("/v1/chat/completions", {
                "model": "verdict-default", "max_tokens": 10 + i, "temperature": 0.8, "seed": i,
                "messages": [{"role": "user", "content": prompts[i % len(prompts)]}]}))
        else:
            bodies.append(("/v1/completions", {
                "model": "verdict-default", "prompt": prompts[i % len(prompts)],
                "max_tokens": 8 + i, "temperature": 0 if i % 2 else 0.8, "seed": i}))
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        answers = list(pool.map(lambda pb: post(port, *pb), bodies))
    seen = {"requests": 0, "prompt_tokens": 0, "completion_tokens": 0}
    for status, answer in answers:
        if status != 200:
            raise AssertionError(f"request failed with {status}: {answer}")
        seen["requests"] += 1
        seen["prompt_tokens"] += answer["usage"]["prompt_tokens"]
        seen["completion_tokens"] += answer["usage"]["completion_tokens"]
    return seen


def main():
    binary, launch, dashboard_path, alerts_path = (os.path.abspath(a) for a in sys.argv[1:5])
    failures = Failures()
    port, metrics_port, prom_port = free_port(), free_port(), free_port()

    cost_table = os.path.join(TMP, "cost_table.json")
    with open(cost_table, "w") as f:
        json.dump(COST_TABLE, f)

    env = local_mpi_env("verdict_prom_")
    serve_log = open(os.path.join(OUT, "serve.log"), "w")
    server = subprocess.Popen(
        [launch, "--tp", "2", "--binary", binary, "--",
         f"--port={port}", f"--metrics-port={metrics_port}", "--cpu-threads=1",
         f"--cost-table={cost_table}", "--verify-mode=compact", "--plan-check-interval=4",
         f"--drain-seconds={10 * TIME_SCALE}"],
        stdout=serve_log, stderr=subprocess.STDOUT, env=env)

    prom_config = os.path.join(TMP, "prometheus.yml")
    with open(prom_config, "w") as f:
        f.write(f"""global:
  scrape_interval: 1s
  evaluation_interval: 1s
rule_files:
  - {alerts_path}
scrape_configs:
  - job_name: verdict
    static_configs:
      - targets: ["127.0.0.1:{metrics_port}"]
""")
    prom_log = open(os.path.join(OUT, "prometheus.log"), "w")
    prometheus = subprocess.Popen(
        ["prometheus", f"--config.file={prom_config}",
         f"--storage.tsdb.path={os.path.join(TMP, 'prometheus-data')}",
         f"--web.listen-address=127.0.0.1:{prom_port}"],
        stdout=prom_log, stderr=subprocess.STDOUT)

    try:
        wait_for("verdict /health", lambda: http_get(port, "/health", 2)[0] == 200, 90,
                 [server])
        wait_for("prometheus /-/ready", lambda: http_get(prom_port, "/-/ready", 2)[0] == 200,
                 60, [prometheus])
        wait_for("a first scrape", lambda: scalar(prom_port, 'up{job="verdict"}') == 1, 30,
                 [prometheus])

        # 1. Prometheus counts what the clients saw.
        seen = send_requests(port)
        expected = {
            "sum(verdict_requests_total)": seen["requests"],
            "sum(verdict_prompt_tokens_total)": seen["prompt_tokens"],
            "sum(verdict_generated_tokens_total)": seen["completion_tokens"],
        }
        got = {}

        def counts_arrived():
            got.update({e: scalar(prom_port, e) for e in expected})
            return all(got[e] == v for e, v in expected.items())

        try:
            wait_for("the counters in Prometheus", counts_arrived, 30, [prometheus])
        except AssertionError:
            pass
        for expr, value in expected.items():
            failures.check(got.get(expr) == value,
                           f"Prometheus: {expr} = {got.get(expr)}, clients saw {value}")
        failures.check(
            scalar(prom_port, 'sum(verdict_requests_total{outcome=~"error|rejected"})') == 0,
            "Prometheus: no request ended in error or was rejected")

        # Later queries compare families with each other: wait until a scrape
        # has caught the engine idle, so that every family is of one moment.
        wait_for("an idle scrape", lambda: scalar(
            prom_port, "verdict_running_requests + verdict_waiting_requests") == 0, 10)
        time.sleep(1.5)

        # 2. Per-rank figures of both ranks, gathered to rank 0.
        failures.check(scalar(prom_port, "verdict_tp_world_size") == 2, "TP degree is 2")
        failures.check(scalar(prom_port, "verdict_tp_ranks_up") == 2, "both ranks are up")
        _, ranks, _ = query(prom_port, "verdict_rank_decode_steps_total > 0")
        failures.check(sorted(r["metric"].get("rank") for r in ranks) == ["0", "1"],
                       f"decode steps reported by ranks {[r['metric'].get('rank') for r in ranks]}")
        _, collective, _ = query(prom_port, "verdict_rank_collective_seconds_total > 0")
        failures.check(len(collective) == 2, "collective seconds reported by both ranks")
        failures.check(scalar(prom_port, "verdict_plan_checks_total") > 0, "plans were checked")
        failures.check(scalar(prom_port, "verdict_plan_mismatches_total") == 0,
                       "no plan check found a divergence")

        # 3. The speculation and planner families agree.
        steps = scalar(prom_port, "verdict_decode_steps_total")
        failures.check(steps is not None and steps > 0, f"{steps} decode steps")
        # This table has no draft split, so it cannot price a step that runs
        # no draft pass (the plan reason "no-drafts"): such steps have no
        # prediction (scheduler/verify_planner.cc).
        unpriced = scalar(prom_port, 'sum(verdict_plan_steps_total{reason="no-drafts"})') or 0
        for family in ("verdict_step_verify_seconds", "verdict_step_predicted_seconds",
                       "verdict_step_collective_seconds", "verdict_step_verify_tokens"):
            count = scalar(prom_port, f"{family}_count")
            expected = steps - unpriced if family == "verdict_step_predicted_seconds" else steps
            failures.check(count == expected, f"{family}_count {count} = decode steps {steps}"
                           f"{f' less {unpriced} unpriced' if expected != steps else ''}")
        reasons = scalar(prom_port, "sum(verdict_plan_steps_total)")
        failures.check(reasons == steps, f"plan reasons {reasons} = decode steps {steps}")
        for kind in ("verified", "accepted"):
            total = scalar(prom_port, f"verdict_draft_tokens_{kind}_total")
            by_position = scalar(prom_port, f"sum(verdict_draft_position_{kind}_total)")
            failures.check(total is not None and total > 0 and by_position == total,
                           f"drafts {kind}: {by_position} by position = {total} in total")
        committed = scalar(prom_port, "verdict_step_acceptance_length_sum")
        plain = scalar(prom_port, "verdict_plain_decode_rows_total")
        failures.check(committed is not None and plain is not None and
                       committed + plain >= seen["completion_tokens"],
                       f"tokens committed by verifies ({committed}) and plain decode rows "
                       f"({plain}) cover the {seen['completion_tokens']} generated")
        requests_measured = scalar(prom_port, "verdict_request_acceptance_length_count")
        failures.check(requests_measured == seen["requests"],
                       f"acceptance length of {requests_measured} requests")

        # 4. promtool accepts what verdict serves.
        status, scrape = http_get(metrics_port, "/metrics")
        promtool = subprocess.run(["promtool", "check", "metrics"], input=scrape,
                                  capture_output=True, text=True)
        failures.check(status == 200 and promtool.returncode == 0,
                       "promtool check metrics on a live scrape"
                       + (f": {promtool.stdout}{promtool.stderr}" if promtool.returncode else ""))

        # 5. The dashboard queries what verdict exports.
        families = metric_families(scrape)
        with open(dashboard_path) as f:
            dashboard = json.load(f)
        queries = dashboard_queries(dashboard)
        failures.check(len(queries) >= 30, f"the dashboard has {len(queries)} queries")
        unknown, empty, broken = [], [], []
        for where, expr in queries:
            names = names_in(expr, families)
            if not names or any(n not in families for n in names):
                unknown.append(f"{where}: {sorted(n for n in names if n not in families)}")
            if where.startswith("variable"):
                continue  # Grafana's label_values() is not PromQL
            status, result, error = query(prom_port, runnable(expr))
            if status != "success":
                broken.append(f"{where}: {error}")
            elif not result:
                empty.append(where)
        failures.check(not unknown, "every dashboard query names metrics verdict exports"
                       + (f"; not exported: {unknown}" if unknown else ""))
        failures.check(not broken, "every dashboard query runs on Prometheus"
                       + (f"; errors: {broken}" if broken else ""))
        failures.check(not empty, "every dashboard query returns series"
                       + (f"; empty: {empty}" if empty else ""))

        # 6. The alerting rules evaluate on live series.
        _, body = http_get(prom_port, "/api/v1/rules")
        rules = [r for g in json.loads(body)["data"]["groups"] for r in g["rules"]]
        unhealthy = [f"{r['name']}: {r.get('lastError')}" for r in rules
                     if r.get("health") != "ok"]
        failures.check(len(rules) >= 9 and not unhealthy,
                       f"{len(rules)} alerting rules evaluate"
                       + (f"; unhealthy: {unhealthy}" if unhealthy else ""))
        _, body = http_get(prom_port, "/api/v1/alerts")
        active = {a["labels"]["alertname"] for a in json.loads(body)["data"]["alerts"]}
        quiet = {"VerdictDown", "VerdictRanksDown", "VerdictPlanMismatch",
                 "VerdictRequestsRejected", "VerdictQueueSaturation"}
        failures.check(not (active & quiet),
                       f"a healthy server raises none of {sorted(quiet)} (active: {sorted(active)})")

        # 7. SIGTERM to launch.sh drains both ranks: a request streaming at
        #    the time finishes, then the job exits 0.
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        conn.request("POST", "/v1/completions", json.dumps({
            "model": "verdict-default", "prompt": "The whale", "max_tokens": 96,
            "stream": True, "ignore_eos": True}), {"Content-Type": "application/json"})
        response = conn.getresponse()
        first = response.readline()
        server.send_signal(signal.SIGTERM)
        rest = response.read().decode()
        failures.check(first.startswith(b"data:") and '"finish_reason":"length"' in rest
                       and "[DONE]" in rest, "the in-flight stream finishes during the drain")
        code = server.wait(timeout=60)
        failures.check(code == 0, f"launch.sh (mpirun) exits {code} after SIGTERM")
    except Exception as e:  # report, then fail
        failures.count += 1
        print(f"FAIL {type(e).__name__}: {e}", flush=True)
    finally:
        for p in (server, prometheus):
            if p.poll() is None:
                p.terminate()
                try:
                    p.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
        serve_log.close()
        prom_log.close()
        subprocess.run(["rm", "-rf", env["TMPDIR"]])
    if failures.count:
        with open(os.path.join(OUT, "serve.log")) as f:
            print("--- serve.log (tail)\n" + "".join(f.readlines()[-30:]))
    print("prometheus e2e:", "FAILED" if failures.count else "PASSED")
    return 1 if failures.count else 0


if __name__ == "__main__":
    sys.exit(main())
