#!/usr/bin/env python3
"""A stalled or dead rank ends the whole job: `verdict serve` at TP 2 under
mpirun, rank 1 stopped with SIGSTOP (--signal=STOP, the default) or killed
with SIGKILL (--signal=KILL) in the middle of a streamed completion.

Within --comm-timeout plus a few seconds: rank 0 logs that the engine
stopped (with its rank and step), the stream ends with an error event and
[DONE], /health stops answering 200, and mpirun exits non-zero with no rank
left running (the stopped one included).

    serve_stalled_rank_test.py VERDICT LAUNCH_SH [--signal=STOP|KILL]
"""

import http.client
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from local_mpi import local_mpi_env  # noqa: E402
from server_probe import free_port, health, wait_healthy  # noqa: E402

VERDICT, LAUNCH = sys.argv[1], sys.argv[2]
SIGNAL = "STOP"
for arg in sys.argv[3:]:
    if arg.startswith("--signal=") and arg[len("--signal="):] in ("STOP", "KILL"):
        SIGNAL = arg[len("--signal="):]
    else:
        sys.exit(f"usage: {sys.argv[0]} VERDICT LAUNCH_SH [--signal=STOP|KILL], not {arg}")
# What happened to rank 1, for the messages.
FAULT = {"STOP": "stalled", "KILL": "was killed"}[SIGNAL]
COMM_TIMEOUT = 3
# Detection (the timeout), the handlers' grace (2 s) and mpirun's teardown.
EXIT_WITHIN = COMM_TIMEOUT + 10


def rank_pids(root_pid):
    """{rank: pid} of the ranks among root_pid's descendants (launch.sh, then
    mpirun, then the ranks), from their environment."""
    parents = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    parents[int(entry)] = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue

    def descends(pid):
        while pid in parents and pid != root_pid:
            pid = parents[pid]
        return pid == root_pid

    ranks = {}
    for pid in parents:
        if pid == root_pid or not descends(pid):
            continue
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                env = dict(v.split(b"=", 1) for v in f.read().split(b"\0") if b"=" in v)
            if b"OMPI_COMM_WORLD_RANK" in env and b"verdict" in open(
                    f"/proc/{pid}/cmdline", "rb").read():
                ranks[int(env[b"OMPI_COMM_WORLD_RANK"])] = pid
        except (OSError, ValueError):
            continue
    return ranks


def stream_completion(port, events):
    """Reads the SSE stream of a long completion into `events`."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    body = {"prompt": "It is a truth universally acknowledged", "max_tokens": 900,
            "ignore_eos": True, "stream": True, "temperature": 0}
    conn.request("POST", "/v1/completions", json.dumps(body), {"Content-Type": "application/json"})
    response = conn.getresponse()
    events.append(("status", response.status))
    for raw in response:
        line = raw.decode().strip()
        if line.startswith("data: "):
            events.append(("data", line[len("data: "):]))


def main():
    port = free_port()
    env = local_mpi_env("verdict_stall_")
    log = tempfile.NamedTemporaryFile("w+", suffix=".log", delete=False)
    proc = subprocess.Popen([LAUNCH, "--tp", "2", "--binary", VERDICT, "--", f"--port={port}",
                             "--cpu-threads=1", f"--comm-timeout={COMM_TIMEOUT}",
                             ],
                            stdout=log, stderr=subprocess.STDOUT, env=env)
    stopped = None
    try:
        wait_healthy(port, proc)
        ranks = rank_pids(proc.pid)
        if set(ranks) != {0, 1}:
            raise AssertionError(f"expected ranks 0 and 1 under launch.sh {proc.pid}, got {ranks}")

        events = []
        reader = threading.Thread(target=stream_completion, args=(port, events), daemon=True)
        reader.start()
        while sum(1 for kind, _ in events if kind == "data") < 5:
            if not reader.is_alive():
                raise AssertionError(f"the stream ended early: {events}")
            time.sleep(0.05)

        stopped = ranks[1]
        os.kill(stopped, signal.SIGSTOP if SIGNAL == "STOP" else signal.SIGKILL)
        start = time.time()
        # The stream ends before the process does; /health must not say 200
        # from then on (503 while rank 0 winds down, or nothing at all).
        reader.join(timeout=EXIT_WITHIN)
        if reader.is_alive():
            raise AssertionError(f"the stream still runs {EXIT_WITHIN} s after rank 1 {FAULT}")
        streamed = time.time() - start
        status = health(port)
        if status == 200:
            raise AssertionError(f"/health answers 200 after rank 1 {FAULT}")
        try:
            code = proc.wait(timeout=max(start + EXIT_WITHIN - time.time(), 0))
        except subprocess.TimeoutExpired:
            raise AssertionError(f"the job still runs {EXIT_WITHIN} s after rank 1 {FAULT}")
        took = time.time() - start
        if code == 0:
            raise AssertionError(f"the job exited 0 after rank 1 {FAULT}")

        data = [payload for kind, payload in events if kind == "data"]
        if not data or data[-1] != "[DONE]":
            raise AssertionError(f"the stream did not end with [DONE]: {data[-3:]}")
        last = json.loads(data[-2])
        if "error" not in last:
            raise AssertionError(f"no error event before [DONE]: {data[-2]}")
        # mpirun resumes the stopped rank (SIGCONT, then SIGTERM and SIGKILL)
        # and may return a moment before that process is gone.
        def running(pid):
            try:
                with open(f"/proc/{pid}/stat") as f:
                    return f.read().rsplit(")", 1)[1].split()[0] != "Z"
            except OSError:
                return False
        while any(running(pid) for pid in ranks.values()) and time.time() < start + EXIT_WITHIN:
            time.sleep(0.1)
        for rank, pid in ranks.items():
            if running(pid):
                raise AssertionError(f"rank {rank} (pid {pid}) still runs {EXIT_WITHIN} s after "
                                     f"rank 1 {FAULT}")
        gone = time.time() - start
        log.seek(0)
        text = log.read()
        if not re.search(r"verdict serve \(rank 0\): the engine stopped at decode step [0-9]+", text):
            raise AssertionError(f"rank 0 did not report the dead engine:\n{text[-3000:]}")
        print(f"PASS rank 1 {FAULT} (SIG{SIGNAL}, --comm-timeout {COMM_TIMEOUT}): the stream "
              f"ended with an error and [DONE] after {streamed:.1f} s, /health then answered "
              f"{status}, the job exited {code} after {took:.1f} s and the last rank was gone "
              f"after {gone:.1f} s")
    finally:
        if stopped is not None:
            try:
                os.kill(stopped, signal.SIGKILL)
            except OSError:
                pass
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        log.seek(0)
        sys.stdout.write(log.read()[-4000:])


if __name__ == "__main__":
    main()
