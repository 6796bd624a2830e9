#!/usr/bin/env python3
"""Soak of `verdict serve`: twice the sustained concurrency, for minutes.

    /opt/verdict/python/bin/python3 tools/soak/soak.py [--duration 600] [--out DIR]
        [--verdict bazel-bin/runtime/cli/verdict] [--server-arg=--cpu-threads=2 ...]
    /opt/verdict/python/bin/python3 tools/soak/soak.py --url http://127.0.0.1:8000 \
        [--metrics-url http://127.0.0.1:9400/metrics] [--pid PID]

Without --url it starts `verdict serve` on the bundled model with
--max-running-requests 16 --max-waiting-requests 16 (--running and
--waiting change them; --server-arg passes any other flag) and a metrics
port, and stops it with SIGTERM at the end (it must exit 0).

The concurrency the server sustains, C, is the largest number of requests it
holds at once without refusing one: the engine admits
--max-running-requests + --max-waiting-requests requests and answers 429 to
the next. The script measures it rather than trusting the flags: it opens
long streaming requests one at a time and keeps them open until one is
answered 429 (with Retry-After); C is the number admitted before it. When
/metrics is available, C must equal verdict_max_running_requests +
verdict_max_waiting_requests. It then confirms that C closed-loop clients
run for --confirm-seconds without a single 429 (the server sustains C), and
soaks with N = 2C client threads for --duration seconds. On the 2-core CPU
backend the defaults (16 + 16) keep every admitted request well inside the
deadline; the server's own defaults (64 + 1024) mean N = 2176 threads.

Clients: two thirds are ordinary, one third (every third client) always
leaves early. Requests mix /v1/completions and /v1/chat/completions,
streaming and not, max_tokens from 1 to 160, greedy and seeded sampling with
temperature, top_p, top_k and min_p, stop strings, ignore_eos, and logprobs.
Ordinary clients draw from a fixed set of cases whose answers the script
measured alone on the idle server before the soak (outputs at temperature 0
or with a seed do not depend on the batch), so every completed answer is
checked against its reference text, token count and finish reason. Leaving
clients hang up at a random moment: with half the body sent, after the whole
request before any answer, after the response headers, mid-stream after k
events, or mid-stream with a reset (SO_LINGER 0).

Every request's outcome is one of:
  complete      200 and the answer in full: non-streaming, the JSON answer;
                streaming, chunks then a finish_reason, the usage chunk and
                `data: [DONE]`; the text, the token count (logprobs tokens
                when asked, usage.completion_tokens always) and the finish
                reason equal the reference (length means completion_tokens ==
                max_tokens);
  busy_429 / unavailable_503   with a Retry-After header; the client then
                waits that many seconds before its next request;
  disconnect_*  an intentional early hang-up.
Anything else is a failure: another status, 429/503 without Retry-After, a
body that does not parse, a stream that ends without [DONE] or an error
event, text or counts that differ from the reference, a connection refused
or reset, or no answer by --request-deadline seconds.

Every --sample-seconds it records the server's RSS (VmRSS of
/proc/PID/status; with --url only when --pid is given) and the running and
waiting gauges of /metrics. Afterwards it checks that the gauges return to 0
(no request leaked by the hang-ups), that verdict_requests_total{outcome=
"error"} did not grow, that /health answers 200 and that a fresh request
gets its reference answer.

It writes soak.json (everything) and soak.md (a summary: counts by outcome,
latency percentiles, RSS first/min/max/last and the least-squares slope in
MiB per minute over the second half of the run) to --out, and exits 1 on any
failure or when the slope is above --max-rss-slope (MiB/min).
"""

import argparse
import http.client
import json
import os
import random
import re
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
import urllib.parse

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

PROMPTS = [
    "It is a truth universally acknowledged",
    "Call me Ishmael.",
    "In the beginning God created",
    "The whale",
    "It was a dark and stormy night",
    "Chapter 1. The house stood",
    "And the LORD said unto Moses,",
    "She opened the letter and read",
]
CHAT_MESSAGES = [
    [{"role": "user", "content": "Where is the ship?"}],
    [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Tell me a story."}],
    [{"role": "user", "content": "What did the king say?"},
     {"role": "assistant", "content": "He said"}, {"role": "user", "content": "Go on."}],
]
MAX_TOKENS = [1, 2, 7, 16, 33, 64, 100, 160]
SAMPLING = [
    {"temperature": 0},
    {"temperature": 0.8, "seed": 7},
    {"temperature": 1.0, "top_p": 0.9, "seed": 11},
    {"temperature": 0.7, "top_k": 20, "seed": 3},
    {"temperature": 0.9, "min_p": 0.05, "seed": 5},
    {"temperature": 0, "stop": [".", "\n"]},
]


# --- HTTP on raw sockets (to see every header and to hang up at will) -------

class Answer:
    def __init__(self):
        self.status = None
        self.headers = {}
        self.body = b""
        self.events = []        # SSE data payloads (strings), in order
        self.complete = False   # the body or the chunked stream ended cleanly


class Deadline(Exception):
    pass


class Connection:
    """One HTTP/1.1 connection; reading raises Deadline past `deadline`."""

    def __init__(self, host, port, deadline):
        self.deadline = deadline
        self.sock = socket.create_connection((host, port), timeout=max(0.1, deadline - time.time()))
        self.buf = b""
        self.host = host

    def _recv(self):
        left = self.deadline - time.time()
        if left <= 0:
            raise Deadline()
        self.sock.settimeout(left)
        try:
            data = self.sock.recv(65536)
        except socket.timeout:
            raise Deadline()
        return data

    def send_request(self, path, body, keep_alive, cut_body=False):
        payload = json.dumps(body).encode()
        connection = "" if keep_alive else "Connection: close\r\n"
        head = (f"POST {path} HTTP/1.1\r\nHost: {self.host}\r\n"
                f"Content-Type: application/json\r\nContent-Length: {len(payload)}\r\n"
                f"{connection}\r\n").encode()
        if cut_body:
            self.sock.sendall(head + payload[:len(payload) // 2])
        else:
            self.sock.sendall(head + payload)

    def get(self, path):
        self.sock.sendall(f"GET {path} HTTP/1.1\r\nHost: {self.host}\r\nConnection: close\r\n\r\n"
                          .encode())

    def _line(self):
        while b"\r\n" not in self.buf:
            data = self._recv()
            if not data:
                raise ConnectionError("the server closed the connection mid-line")
            self.buf += data
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def _exactly(self, n):
        while len(self.buf) < n:
            data = self._recv()
            if not data:
                raise ConnectionError(f"the server closed the connection {n - len(self.buf)} "
                                      "bytes short")
            self.buf += data
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def read_head(self, answer):
        line = self._line().decode("latin-1")
        m = re.match(r"HTTP/1\.[01] (\d{3})", line)
        if not m:
            raise ConnectionError(f"bad status line {line!r}")
        answer.status = int(m.group(1))
        while True:
            line = self._line().decode("latin-1")
            if not line:
                break
            name, _, value = line.partition(":")
            answer.headers[name.strip().lower()] = value.strip()

    def chunks(self):
        """Yields the chunks of a chunked body; the last one is b""."""
        while True:
            size_line = self._line().split(b";")[0].strip()
            size = int(size_line, 16)
            data = self._exactly(size)
            self._exactly(2)
            yield data
            if size == 0:
                return

    def read_body(self, answer):
        if answer.headers.get("transfer-encoding", "").lower() == "chunked":
            answer.body = b"".join(self.chunks())
        elif "content-length" in answer.headers:
            answer.body = self._exactly(int(answer.headers["content-length"]))
        else:
            while True:
                data = self._recv()
                if not data:
                    break
                self.buf += data
            answer.body, self.buf = self.buf, b""
        answer.complete = True

    def close(self, reset=False):
        try:
            if reset:
                self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self.sock.close()
        except OSError:
            pass


def sse_events(conn, answer, stop_after=None):
    """Reads a chunked event stream into answer.events; returns False when the
    caller's stop_after events were read before the end."""
    pending = b""
    for chunk in conn.chunks():
        if chunk == b"":
            answer.complete = True
            return True
        pending += chunk
        while b"\n\n" in pending:
            block, pending = pending.split(b"\n\n", 1)
            for line in block.decode().split("\n"):
                if line.startswith("data: "):
                    answer.events.append(line[len("data: "):])
            if stop_after is not None and len(answer.events) >= stop_after:
                return False
    return True


# --- the cases and their references ------------------------------------------

def make_case(rng, model):
    chat = rng.random() < 0.5
    sampling = dict(rng.choice(SAMPLING))
    body = {"model": model, "max_tokens": rng.choice(MAX_TOKENS), **sampling}
    if rng.random() < 0.5:
        body["ignore_eos"] = True
    if chat:
        body["messages"] = rng.choice(CHAT_MESSAGES)
        if rng.random() < 0.5:
            body["logprobs"] = True
    else:
        body["prompt"] = rng.choice(PROMPTS)
        if rng.random() < 0.5:
            body["logprobs"] = 1
    return {"path": "/v1/chat/completions" if chat else "/v1/completions", "body": body}


def parse_full(case, body_bytes):
    """(text, completion_tokens, finish_reason, logprob token count or None)."""
    answer = json.loads(body_bytes)
    choice = answer["choices"][0]
    chat = case["path"].endswith("chat/completions")
    text = choice["message"]["content"] if chat else choice["text"]
    tokens = None
    if choice.get("logprobs"):
        tokens = len(choice["logprobs"]["content"] if chat else choice["logprobs"]["tokens"])
    return text, answer["usage"]["completion_tokens"], choice["finish_reason"], tokens


def parse_stream(case, events):
    """The same from a stream's events; raises ValueError on a malformed stream."""
    chat = case["path"].endswith("chat/completions")
    if not events or events[-1] != "[DONE]":
        raise ValueError(f"the stream did not end with [DONE] (last event {events[-1:]!r})")
    text, tokens, finish, usage = [], 0, None, None
    saw_logprobs = False
    for raw in events[:-1]:
        event = json.loads(raw)
        if "error" in event:
            raise ValueError(f"error event {raw[:300]}")
        if event.get("usage"):
            usage = event["usage"]
        for choice in event.get("choices", []):
            if finish is not None:
                raise ValueError("a chunk after the finish_reason")
            if chat:
                text.append(choice["delta"].get("content") or "")
            else:
                text.append(choice["text"])
            if choice.get("logprobs"):
                saw_logprobs = True
                tokens += len(choice["logprobs"]["content"] if chat
                              else choice["logprobs"]["tokens"])
            if choice.get("finish_reason"):
                finish = choice["finish_reason"]
    if finish is None:
        raise ValueError("no finish_reason in the stream")
    if usage is None:
        raise ValueError("no usage chunk although include_usage was asked")
    return "".join(text), usage["completion_tokens"], finish, tokens if saw_logprobs else None


def check_against(case, got, reference):
    """None when `got` matches; else what differs."""
    text, n, finish, logprob_tokens = got
    max_tokens = case["body"]["max_tokens"]
    if finish not in ("length", "stop"):
        return f"finish_reason {finish!r}"
    if finish == "length" and n != max_tokens:
        return f"finish_reason length with {n} of max_tokens {max_tokens} tokens"
    if n > max_tokens:
        return f"{n} tokens above max_tokens {max_tokens}"
    if logprob_tokens is not None and logprob_tokens != n:
        return f"{logprob_tokens} logprob tokens but usage.completion_tokens {n}"
    if reference is not None:
        ref_text, ref_n, ref_finish, _ = reference
        if (text, n, finish) != (ref_text, ref_n, ref_finish):
            return (f"differs from the reference: {n} tokens {finish} {text[:80]!r} vs "
                    f"{ref_n} tokens {ref_finish} {ref_text[:80]!r}")
    return None


# --- one request, ordinary or leaving early -----------------------------------

def run_request(host, port, case, stream, deadline_s, leave=None, rng=None, keep=None):
    """Returns (outcome, detail, latency_s, conn_to_keep_or_None).

    outcome: complete, busy_429, unavailable_503, disconnect_<mode>, or
    failure_<kind>. `keep` is a reusable keep-alive Connection or None.
    """
    body = dict(case["body"])
    if stream:
        body["stream"] = True
        body["stream_options"] = {"include_usage": True}
    start = time.time()
    deadline = start + deadline_s
    reused = keep is not None
    conn = keep
    answer = Answer()
    try:
        if conn is None:
            conn = Connection(host, port, deadline)
        conn.deadline = deadline
        keep_alive = leave is None and rng is not None and rng.random() < 0.5
        try:
            conn.send_request(case["path"], body, keep_alive, cut_body=(leave == "before_body"))
        except OSError:
            if not reused:
                raise
            # The server closed an idle keep-alive connection: a fresh one.
            conn.close()
            conn = Connection(host, port, deadline)
            conn.send_request(case["path"], body, keep_alive)
        if leave == "before_body":
            time.sleep(rng.uniform(0, 0.2))
            conn.close()
            return "disconnect_before_body", None, time.time() - start, None
        if leave == "after_request":
            time.sleep(rng.uniform(0, 0.5))
            conn.close(reset=rng.random() < 0.5)
            return "disconnect_after_request", None, time.time() - start, None
        conn.read_head(answer)
        status = answer.status
        if status in (429, 503):
            conn.read_body(answer)
            conn.close()
            retry = answer.headers.get("retry-after")
            if retry is None or not retry.isdigit():
                return (f"failure_{status}_without_retry_after",
                        f"Retry-After {retry!r}: {answer.body[:200]!r}", time.time() - start, None)
            return ("busy_429" if status == 429 else "unavailable_503"), int(retry), \
                time.time() - start, None
        if status != 200:
            conn.read_body(answer)
            conn.close()
            return f"failure_status_{status}", answer.body[:300].decode("latin-1"), \
                time.time() - start, None
        if leave == "after_headers":
            conn.close()
            return "disconnect_after_headers", None, time.time() - start, None
        if stream:
            stop_after = None
            if leave in ("mid_stream", "mid_stream_reset"):
                stop_after = rng.randint(1, 6)
            ended = sse_events(conn, answer, stop_after)
            if not ended:
                conn.close(reset=(leave == "mid_stream_reset"))
                return f"disconnect_{leave}", None, time.time() - start, None
            got = parse_stream(case, answer.events)
        else:
            conn.read_body(answer)
            got = parse_full(case, answer.body)
        latency = time.time() - start
        closing = answer.headers.get("connection", "").lower() == "close"
        if keep_alive and not closing:
            keep_conn = conn
        else:
            conn.close()
            keep_conn = None
        return "complete", got, latency, keep_conn
    except Deadline:
        if conn is not None:
            conn.close()
        return "failure_deadline", f"no full answer within {deadline_s} s (status {answer.status}, " \
            f"{len(answer.events)} events)", time.time() - start, None
    except ConnectionRefusedError as e:
        return "failure_refused", str(e), time.time() - start, None
    except (OSError, ConnectionError) as e:
        if conn is not None:
            conn.close()
        return "failure_connection", f"{type(e).__name__}: {e} (status {answer.status}, " \
            f"{len(answer.events)} events, reused {reused})", time.time() - start, None
    except (ValueError, KeyError, IndexError, TypeError) as e:
        if conn is not None:
            conn.close()
        return "failure_malformed", f"{type(e).__name__}: {e}", time.time() - start, None


# --- server, metrics, RSS -----------------------------------------------------

def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http_get(host, port, path, timeout=10):
    conn = http.client.HTTPConnection(host, port, timeout=timeout)
    try:
        conn.request("GET", path)
        r = conn.getresponse()
        return r.status, r.read().decode("utf-8", "replace")
    finally:
        conn.close()


def metrics(metrics_url):
    if metrics_url is None:
        return None
    u = urllib.parse.urlparse(metrics_url)
    try:
        status, text = http_get(u.hostname, u.port, u.path or "/metrics")
    except OSError:
        return None
    if status != 200:
        return None
    values = {}
    for line in text.splitlines():
        m = re.match(r'^(verdict_[a-z_]+(?:\{[^}]*\})?) ([0-9.e+-]+|NaN|[+-]Inf)$', line)
        if m:
            values[m.group(1)] = float(m.group(2))
    return values


def rss_mib(pid):
    if pid is None:
        return None
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024.0
    except OSError:
        return None
    return None


def slope_mib_per_min(samples):
    """Least-squares slope of (t seconds, MiB) pairs, in MiB per minute."""
    if len(samples) < 3:
        return None
    n = len(samples)
    mt = sum(t for t, _ in samples) / n
    mr = sum(r for _, r in samples) / n
    var = sum((t - mt) ** 2 for t, _ in samples)
    if var == 0:
        return None
    return 60.0 * sum((t - mt) * (r - mr) for t, r in samples) / var


def percentile(values, p):
    if not values:
        return None
    s = sorted(values)
    k = min(len(s) - 1, max(0, int(round(p / 100.0 * (len(s) - 1)))))
    return s[k]


def wait_healthy(host, port, proc, seconds=120):
    end = time.time() + seconds
    while time.time() < end:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"the server exited early with {proc.returncode}")
        try:
            if http_get(host, port, "/health", timeout=2)[0] == 200:
                return
        except OSError:
            pass
        time.sleep(0.2)
    raise RuntimeError("the server did not become healthy")


def gauges(m):
    if m is None:
        return None, None
    return m.get("verdict_running_requests"), m.get("verdict_waiting_requests")


def wait_idle(metrics_url, seconds):
    """Seconds until running and waiting are both 0 (in three reads over a
    second: the gauges are set after each engine iteration, so one read can
    be stale), or None."""
    start = time.time()
    zeros = 0
    while time.time() - start < seconds:
        running, waiting = gauges(metrics(metrics_url))
        zeros = zeros + 1 if running == 0 and waiting == 0 else 0
        if zeros == 3:
            return time.time() - start
        time.sleep(0.5)
    return None


# --- the phases ----------------------------------------------------------------

def measure_capacity(host, port, model, limit, deadline_s, metrics_url=None):
    """Opens long streams one at a time until one gets 429; returns
    (admitted, streams, retry_after_of_the_429 or None, detail). `admitted`
    is running + waiting in the server's gauges right after the 429, with
    the streams still held, or `streams` without metrics: on a fast backend
    some of the first streams end while the probe is still opening the
    rest, so `streams`, the streams it opened, can exceed what the server
    holds at once."""
    held = []
    occupied = None
    body = {"model": model, "prompt": "It was a dark", "max_tokens": 900, "ignore_eos": True,
            "temperature": 0, "stream": True}
    result = (len(held), None, f"no 429 up to {limit} requests")
    try:
        for _ in range(limit):
            conn = Connection(host, port, time.time() + deadline_s)
            conn.send_request("/v1/completions", body, keep_alive=True)
            answer = Answer()
            conn.read_head(answer)
            if answer.status == 200:
                held.append(conn)
                continue
            conn.read_body(answer)
            conn.close()
            retry = answer.headers.get("retry-after")
            result = (len(held), retry,
                      f"request {len(held) + 1} got {answer.status} {answer.body[:120]!r}")
            if answer.status != 429:
                raise RuntimeError(f"capacity probe: {result[2]}")
            occupied = occupancy(metrics_url)
            break
    finally:
        for conn in held:
            conn.close()
    streams, retry, detail = result
    return (occupied if occupied is not None else streams), streams, retry, detail


def occupancy(metrics_url):
    """The most of running + waiting over three reads of the gauges half a
    second apart (each is set after an engine iteration, so one read can
    lag, as in wait_idle), or None."""
    best = None
    for _ in range(3):
        running, waiting = gauges(metrics(metrics_url))
        if running is not None and waiting is not None:
            best = max(best or 0, int(running + waiting))
        time.sleep(0.5)
    return best


class Recorder:
    def __init__(self):
        self.lock = threading.Lock()
        self.counts = {}
        self.failures = []
        self.latency = {"complete": [], "busy_429": []}
        self.tokens = 0
        self.by_kind = {}

    def add(self, outcome, detail, latency, kind, case):
        with self.lock:
            self.counts[outcome] = self.counts.get(outcome, 0) + 1
            self.by_kind.setdefault(kind, {})
            self.by_kind[kind][outcome] = self.by_kind[kind].get(outcome, 0) + 1
            if outcome in self.latency:
                self.latency[outcome].append(latency)
            if outcome.startswith("failure"):
                if len(self.failures) < 200:
                    self.failures.append({"t": time.time(), "outcome": outcome, "detail": detail,
                                          "kind": kind, "case": case})


def client_loop(index, host, port, cases, references, args, stop, recorder, phase_leaving):
    rng = random.Random(args.seed * 1000 + index)
    leaving = phase_leaving and index % 3 == 2
    keep = None
    while not stop.is_set():
        ci = rng.randrange(len(cases))
        case = cases[ci]
        stream = rng.random() < 0.5
        leave = None
        if leaving:
            leave = rng.choice(["before_body", "after_request", "after_headers", "mid_stream",
                                "mid_stream_reset"])
            if leave in ("after_headers", "mid_stream", "mid_stream_reset"):
                stream = True
            elif leave == "after_request":
                stream = False
        kind = f"{'leaving' if leaving else 'ordinary'}/{'stream' if stream else 'body'}"
        outcome, detail, latency, keep = run_request(host, port, case, stream,
                                                     args.request_deadline, leave, rng, keep)
        if outcome == "complete":
            problem = check_against(case, detail, references[ci])
            if problem:
                outcome, detail = "failure_wrong_answer", problem
            else:
                with recorder.lock:
                    recorder.tokens += detail[1]
                detail = None
        recorder.add(outcome, detail, latency, kind, ci if outcome.startswith("failure") else None)
        if outcome in ("busy_429", "unavailable_503"):
            stop.wait(detail)  # honour Retry-After
    if keep is not None:
        keep.close()


def run_clients(n, seconds, host, port, cases, references, args, leaving, sampler=None):
    stop = threading.Event()
    recorder = Recorder()
    threads = [threading.Thread(target=client_loop, daemon=True,
                                args=(i, host, port, cases, references, args, stop, recorder,
                                      leaving)) for i in range(n)]
    start = time.time()
    for t in threads:
        t.start()
    while time.time() - start < seconds:
        time.sleep(max(0.0, min(1.0, seconds - (time.time() - start))))
        if sampler is not None:
            sampler()
    stop.set()
    # Each client ends after its current request, which has its deadline.
    hung = []
    for i, t in enumerate(threads):
        t.join(args.request_deadline + 10)
        if t.is_alive():
            hung.append(i)
    return recorder, time.time() - start, hung


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--verdict", default=os.path.join(ROOT, "bazel-bin/runtime/cli/verdict"))
    p.add_argument("--url", help="attach to this server instead of starting one")
    p.add_argument("--metrics-url", help="with --url: its /metrics")
    p.add_argument("--pid", type=int, help="with --url: the server's pid, for RSS")
    p.add_argument("--model", default="verdict-default")
    p.add_argument("--running", type=int, default=16, help="--max-running-requests of the server")
    p.add_argument("--waiting", type=int, default=16, help="--max-waiting-requests of the server")
    p.add_argument("--server-arg", action="append", default=[],
                   help="another flag for verdict serve (repeatable)")
    p.add_argument("--duration", type=float, default=600)
    p.add_argument("--confirm-seconds", type=float, default=20)
    p.add_argument("--probe-limit", type=int, default=4096)
    p.add_argument("--concurrency", type=int, help="skip the probe: the sustained concurrency")
    p.add_argument("--request-deadline", type=float, default=120)
    p.add_argument("--sample-seconds", type=float, default=10)
    p.add_argument("--max-rss-slope", type=float, default=1.0,
                   help="MiB per minute over the second half above which the run fails")
    p.add_argument("--cases", type=int, default=64)
    p.add_argument("--seed", type=int, default=20261202)
    p.add_argument("--out", default="soak-out")
    args = p.parse_args()
    os.makedirs(args.out, exist_ok=True)

    proc, log = None, None
    pid = args.pid
    if args.url:
        u = urllib.parse.urlparse(args.url)
        host, port = u.hostname, u.port or 80
        metrics_url = args.metrics_url
    else:
        host, port, mport = "127.0.0.1", free_port(), free_port()
        metrics_url = f"http://127.0.0.1:{mport}/metrics"
        command = [args.verdict, "serve", f"--port={port}", f"--metrics-port={mport}",
                   f"--max-running-requests={args.running}",
                   f"--max-waiting-requests={args.waiting}"]
        # Every client of the soak comes from 127.0.0.1, and it runs twice
        # the engine's capacity: the connection gate's caps (per address,
        # and in all) go above that, so that the engine's own limits are
        # what the probe finds, unless --server-arg sets them.
        given = " ".join(args.server_arg)
        if "--max-connections-per-client" not in given:
            command.append("--max-connections-per-client=0")
        if "--max-connections=" not in given:
            command.append(f"--max-connections={2 * (args.running + args.waiting) + 64}")
        command += args.server_arg
        log = open(os.path.join(args.out, "server.log"), "w")
        proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT)
        pid = proc.pid
    report = {"config": {k: v for k, v in vars(args).items()}, "failures": [], "checks": {}}
    if proc is not None:
        report["config"]["server_command"] = command
    failed = []
    try:
        wait_healthy(host, port, proc)
        m0 = metrics(metrics_url)
        print(f"soak: server on {host}:{port} (pid {pid}), RSS {rss_mib(pid)} MiB", flush=True)

        # References, measured one at a time on the idle server.
        rng = random.Random(args.seed)
        cases = [make_case(rng, args.model) for _ in range(args.cases)]
        references = []
        for case in cases:
            outcome, got, _, _ = run_request(host, port, case, False, args.request_deadline)
            if outcome != "complete":
                raise RuntimeError(f"reference for {case}: {outcome} {got}")
            problem = check_against(case, got, None)
            if problem:
                raise RuntimeError(f"reference for {case}: {problem}")
            references.append(got)
        print(f"soak: {len(cases)} reference answers", flush=True)

        # The sustained concurrency.
        probe = {}
        if args.concurrency:
            capacity = args.concurrency
            probe["given"] = capacity
        else:
            admitted, streams, retry, detail = measure_capacity(
                host, port, args.model, args.probe_limit, args.request_deadline, metrics_url)
            probe.update(admitted=admitted, streams_admitted=streams, retry_after=retry,
                         detail=detail)
            capacity = admitted
            if retry is None:
                failed.append(f"capacity probe: {detail} (no Retry-After)")
            if m0 is not None:
                configured = int(m0.get("verdict_max_running_requests", -1) +
                                 m0.get("verdict_max_waiting_requests", -1))
                probe["configured"] = configured
                if configured != admitted:
                    failed.append(f"capacity probe: the server held {admitted} requests when it "
                                  f"refused one, the flags say {configured}")
            time.sleep(1)
            idle = wait_idle(metrics_url, 30) if metrics_url else (time.sleep(5) or 5)
            probe["idle_after_probe_s"] = idle
            if idle is None:
                failed.append("running/waiting did not return to 0 after the probe's hang-ups")
        print(f"soak: sustained concurrency {capacity} ({probe})", flush=True)
        if capacity < 1:
            raise RuntimeError("the server admitted no request")

        # Confirm: C ordinary clients, no 429.
        confirm, confirm_s, hung = run_clients(capacity, args.confirm_seconds, host, port, cases,
                                               references, args, leaving=False)
        probe["confirm"] = {"clients": capacity, "seconds": round(confirm_s, 1),
                            "counts": confirm.counts, "failures": confirm.failures[:20],
                            "hung_clients": hung}
        if any(k != "complete" for k in confirm.counts) or hung:
            failed.append(f"at the sustained concurrency {capacity}: {confirm.counts}, "
                          f"hung {hung}")
        print(f"soak: confirmed {capacity} clients for {confirm_s:.0f} s: {confirm.counts}",
              flush=True)
        report["probe"] = probe
        wait_idle(metrics_url, 30)

        # The soak.
        n = 2 * capacity
        samples = []
        t0 = time.time()
        next_sample = [t0]

        def sampler():
            now = time.time()
            if now < next_sample[0]:
                return
            next_sample[0] += args.sample_seconds
            m = metrics(metrics_url)
            running, waiting = gauges(m)
            samples.append({"t": round(now - t0, 1), "rss_mib": rss_mib(pid), "running": running,
                            "waiting": waiting})
            if proc is not None and proc.poll() is not None:
                failed.append(f"the server exited with {proc.returncode} during the soak")

        m_before = metrics(metrics_url)
        print(f"soak: {n} clients ({n // 3} leaving early) for {args.duration:.0f} s", flush=True)
        rec, soak_s, hung = run_clients(n, args.duration, host, port, cases, references, args,
                                        leaving=True, sampler=sampler)
        sampler()
        if hung:
            failed.append(f"clients {hung} still had a request {args.request_deadline + 10} s "
                          "after the end")
        fail_count = sum(v for k, v in rec.counts.items() if k.startswith("failure"))
        if fail_count:
            failed.append(f"{fail_count} requests failed: "
                          f"{ {k: v for k, v in rec.counts.items() if k.startswith('failure')} }")

        # After: no leaked requests, healthy, a fresh request answers in full.
        checks = {}
        checks["idle_after_s"] = wait_idle(metrics_url, 60) if metrics_url else None
        if metrics_url and checks["idle_after_s"] is None:
            failed.append(f"running/waiting did not return to 0: {gauges(metrics(metrics_url))}")
        m_after = metrics(metrics_url)
        if m_before is not None and m_after is not None:
            delta = {k: m_after.get(k, 0) - m_before.get(k, 0) for k in m_after
                     if k.startswith("verdict_requests_total")}
            checks["server_requests_delta"] = delta
            if delta.get('verdict_requests_total{outcome="error"}', 0):
                failed.append(f"the server counted errors: {delta}")
            seen_429 = rec.counts.get("busy_429", 0)
            rejected = delta.get('verdict_requests_total{outcome="rejected"}', 0)
            if rejected < seen_429:
                failed.append(f"clients saw {seen_429} 429s, the server counted {rejected}")
            ended = sum(v for k, v in delta.items() if 'outcome="rejected"' not in k)
            checks["server_finished_vs_client_complete"] = [ended, rec.counts.get("complete", 0)]
            if ended < rec.counts.get("complete", 0):
                failed.append(f"the server finished {ended} requests, clients completed "
                              f"{rec.counts.get('complete', 0)}")
            checks["server_generated_tokens"] = (m_after.get("verdict_generated_tokens_total", 0) -
                                                 m_before.get("verdict_generated_tokens_total", 0))
        # Every slot is free again: a leaked request would hold one
        # without showing in the gauges.
        admitted, _, _, detail = measure_capacity(
            host, port, args.model, args.probe_limit, args.request_deadline, metrics_url)
        checks["capacity_after"] = admitted
        if admitted != probe.get("admitted", admitted):
            failed.append(f"after the soak the server admits {admitted} requests, not "
                          f"{capacity} ({detail})")
        time.sleep(1)
        if metrics_url and wait_idle(metrics_url, 30) is None:
            failed.append("running/waiting did not return to 0 after the second probe")
        try:
            checks["health"] = http_get(host, port, "/health")[0]
        except OSError as e:
            checks["health"] = str(e)
        if checks["health"] != 200:
            failed.append(f"/health after the soak: {checks['health']}")
        fresh = []
        for ci in range(min(4, len(cases))):
            for stream in (False, True):
                outcome, got, _, _ = run_request(host, port, cases[ci], stream,
                                                 args.request_deadline)
                problem = (check_against(cases[ci], got, references[ci])
                           if outcome == "complete" else f"{outcome} {got}")
                fresh.append(problem)
        checks["fresh_requests"] = {"sent": len(fresh), "wrong": [f for f in fresh if f]}
        if any(fresh):
            failed.append(f"fresh requests after the soak: {[f for f in fresh if f]}")

        # RSS.
        rss = [(s["t"], s["rss_mib"]) for s in samples if s["rss_mib"] is not None]
        rss_summary = None
        if rss:
            half = [(t, r) for t, r in rss if t >= soak_s / 2]
            values = [r for _, r in rss]
            rss_summary = {"first": values[0], "min": min(values), "max": max(values),
                           "last": values[-1], "samples": len(values),
                           "slope_second_half_mib_per_min": slope_mib_per_min(half),
                           "slope_whole_mib_per_min": slope_mib_per_min(rss)}
            s2 = rss_summary["slope_second_half_mib_per_min"]
            if s2 is not None and s2 > args.max_rss_slope:
                failed.append(f"RSS grows {s2:.2f} MiB/min over the second half (threshold "
                              f"{args.max_rss_slope})")
        lat = rec.latency["complete"]
        report.update({
            "clients": n, "leaving_clients": n // 3, "seconds": round(soak_s, 1),
            "counts": dict(sorted(rec.counts.items())), "by_kind": rec.by_kind,
            "requests": sum(rec.counts.values()), "completion_tokens": rec.tokens,
            "latency_complete_s": {"p50": percentile(lat, 50), "p90": percentile(lat, 90),
                                   "p99": percentile(lat, 99), "max": max(lat) if lat else None},
            "rss_mib": rss_summary, "samples": samples, "checks": checks,
            "request_failures": rec.failures})
    except Exception as e:  # report, then fail
        failed.append(f"{type(e).__name__}: {e}")
    finally:
        if proc is not None:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    code = proc.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    code = proc.wait()
                    failed.append("the server did not exit within 60 s of SIGTERM")
            else:
                code = proc.returncode
            report["checks"]["server_exit"] = code
            if code != 0:
                failed.append(f"the server exited {code} after SIGTERM")
            log.close()
    report["failures"] = failed
    report["passed"] = not failed
    with open(os.path.join(args.out, "soak.json"), "w") as f:
        json.dump(report, f, indent=1)
    summary = markdown(report)
    with open(os.path.join(args.out, "soak.md"), "w") as f:
        f.write(summary)
    print(summary)
    return 0 if not failed else 1


def markdown(r):
    def f(x, digits=2):
        return "-" if x is None else f"{x:.{digits}f}"
    lines = ["# Soak", ""]
    probe = r.get("probe", {})
    if probe:
        lines.append(f"- sustained concurrency {probe.get('admitted', probe.get('given'))} "
                     f"(flags: {probe.get('configured', '-')}); confirmed with "
                     f"{probe.get('confirm', {}).get('clients')} clients for "
                     f"{probe.get('confirm', {}).get('seconds')} s: "
                     f"{probe.get('confirm', {}).get('counts')}")
    if "counts" in r:
        lat = r["latency_complete_s"]
        lines += [f"- {r['clients']} clients ({r['leaving_clients']} leaving early) for "
                  f"{r['seconds']} s: {r['requests']} requests, {r['completion_tokens']} "
                  "completion tokens checked", "",
                  "| outcome | requests |", "|---|---:|"]
        lines += [f"| {k} | {v} |" for k, v in r["counts"].items()]
        lines += ["", f"- latency of complete requests: p50 {f(lat['p50'])} s, p90 "
                      f"{f(lat['p90'])} s, p99 {f(lat['p99'])} s, max {f(lat['max'])} s"]
    rss = r.get("rss_mib")
    if rss:
        lines.append(f"- RSS MiB: first {f(rss['first'], 1)}, min {f(rss['min'], 1)}, max "
                     f"{f(rss['max'], 1)}, last {f(rss['last'], 1)} ({rss['samples']} samples); "
                     f"slope over the second half {f(rss['slope_second_half_mib_per_min'], 3)} "
                     f"MiB/min (whole run {f(rss['slope_whole_mib_per_min'], 3)})")
    c = r.get("checks", {})
    if c:
        lines.append(f"- after: running/waiting 0 after {f(c.get('idle_after_s'), 1)} s, "
                     f"{c.get('capacity_after')} requests admitted again, /health "
                     f"{c.get('health')}, fresh requests {c.get('fresh_requests')}, server exit "
                     f"{c.get('server_exit')}")
        if "server_requests_delta" in c:
            lines.append(f"- server counters: {c['server_requests_delta']}")
    lines += ["", "PASSED" if r["passed"] else "FAILED: " + "; ".join(r["failures"]), ""]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
