#!/usr/bin/env python3
"""A step that runs past --step-timeout ends the server instead of hanging it.

A timeout that is not a number of seconds is refused at start. Then starts
`verdict serve` on the bundled model with a step timeout of 100 ms: a step
that reads a prompt of about 750 tokens on one CPU thread takes over a
second, while an idle loop's iterations (admission and an empty step, the
wait for work not counted) take microseconds, so neither a missed stall nor
a false one hangs on the machine's speed. Checks that the idle server stays
healthy; then that a streamed completion with that prompt ends with an
error event naming the timeout and [DONE], that the server logs the stall,
that /health stops answering 200, and that the process exits non-zero
within seconds.

    serve_step_timeout_test.py VERDICT
"""

import http.client
import json
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from server_probe import free_port, health, wait_healthy  # noqa: E402

VERDICT = os.path.abspath(sys.argv[1])
EXIT_WITHIN = 15  # seconds: detection (100 ms polls), the handlers' grace (2 s), the exit


def check_bad_values(failures):
    """A timeout that is not a number of seconds stops serve before it starts."""
    for value in ("-1", "nan"):
        bad = subprocess.run([VERDICT, "serve", f"--step-timeout={value}"],
                             capture_output=True, text=True, timeout=60)
        if bad.returncode != 2 or "--step-timeout takes seconds" not in bad.stderr:
            failures.append(f"--step-timeout={value}: exit {bad.returncode}, {bad.stderr!r:.300}")


def main():
    failures = []
    check_bad_values(failures)
    port = free_port()
    log = tempfile.NamedTemporaryFile("w+", suffix=".log", delete=False)
    proc = subprocess.Popen([VERDICT, "serve", f"--port={port}", "--cpu-threads=1",
                             "--step-timeout=0.1"],
                            stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_healthy(port, proc)
        # Idle, the loop waits between iterations: nothing to time out.
        for _ in range(10):
            time.sleep(0.1)
            if health(port) != 200 or proc.poll() is not None:
                failures.append("the idle server stopped being healthy")
                break

        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        body = {"prompt": "It was the best of times, it was the worst of times, " * 50,
                "max_tokens": 100, "stream": True, "ignore_eos": True}
        sent = time.time()
        conn.request("POST", "/v1/completions", json.dumps(body),
                     {"Content-Type": "application/json"})
        response = conn.getresponse()
        stream = response.read().decode("utf-8", "replace")
        events = [line[len("data: "):] for line in stream.splitlines()
                  if line.startswith("data: ")]
        errors = [json.loads(e)["error"]["message"] for e in events
                  if e != "[DONE]" and "error" in json.loads(e)]
        if response.status != 200:
            failures.append(f"the stream's status {response.status}")
        if not errors or "--step-timeout" not in errors[-1]:
            failures.append(f"no error event naming --step-timeout: {stream[-500:]!r}")
        if not events or events[-1] != "[DONE]":
            failures.append(f"the stream did not end with [DONE]: {stream[-200:]!r}")

        try:
            proc.wait(timeout=EXIT_WITHIN - (time.time() - sent))
        except subprocess.TimeoutExpired:
            failures.append(f"the server still runs {EXIT_WITHIN} s after the request")
        if proc.returncode is not None and proc.returncode == 0:
            failures.append("the server exited with 0 after a stalled step")
        if health(port) == 200:
            failures.append("/health still answers 200")
        log.seek(0)
        text = log.read()
        if "cannot serve" not in text or "longer than --step-timeout" not in text:
            failures.append(f"the server did not log the stall: {text[-1500:]}")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    if failures:
        for f in failures:
            print(f"FAIL {f}")
        sys.exit(1)
    print(f"PASS: the stalled step ended the stream with its error and the server "
          f"(exit {proc.returncode}); the idle server stayed healthy")


if __name__ == "__main__":
    main()
