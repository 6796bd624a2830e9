#!/usr/bin/env python3
"""End-to-end test of `verdict serve` on the bundled model (CPU backend).

Starts the real server, then:
  1. runs tests/openai_client_test.py (the official openai client: models,
     completions, chat, streaming, 32 concurrent clients, malformed requests);
  2. disconnects a client mid-stream and checks, through /metrics, that the
     request was cancelled and nothing is left running;
  3. checks that the request and token counters of /metrics equal what the
     clients saw;
  4. starts the same model at TP 2 under mpirun (deploy/launch.sh) and checks
     that it serves the same greedy text as TP 1;
  5. sends SIGTERM while a long request streams and checks that the server
     drains and exits 0;
and checks /tokenize and /detokenize: the ids are the `tokenizers` package's
for a model with a tokenizer.json, and for any model the prompt token counts
of completions and chat completions (chat template arguments included),
`verdict tokenize`'s ids (which equal the `tokenizers` package's on the
tokenizer.json files of runtime/text/testdata) and the text back; and that
start-up read the target's tokenizer once.

    serve_e2e_test.py VERDICT_BINARY OPENAI_CLIENT_TEST LAUNCH_SH
"""

import http.client
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

from local_mpi import local_mpi_env
from server_probe import free_port, wait_healthy

GREEDY_PROMPTS = ["It is a truth universally acknowledged", "Call me Ishmael.",
                  "In the beginning God created"]


def greedy_texts(port):
    texts = []
    for prompt in GREEDY_PROMPTS:
        status, answer = post(port, "/v1/completions", {
            "model": "verdict-default", "prompt": prompt, "max_tokens": 24,
            "temperature": 0, "ignore_eos": True})
        expect(status == 200, f"status {status}: {answer}")
        texts.append(answer["choices"][0]["text"])
    return texts


def start_tp2(binary, launch, port, log):
    """deploy/launch.sh --tp 2 with Open MPI kept on this host."""
    env = local_mpi_env("verdict_e2e_")
    proc = subprocess.Popen([launch, "--tp", "2", "--binary", binary, "--", f"--port={port}",
                             "--cpu-threads=1", "--drain-seconds=10"],
                            stdout=log, stderr=subprocess.STDOUT, env=env)
    return proc, env["TMPDIR"]


def metrics(port):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    conn.request("GET", "/metrics")
    text = conn.getresponse().read().decode()
    values = {}
    for line in text.splitlines():
        m = re.match(r'^(verdict_[a-z_]+(?:\{[^}]*\})?) ([0-9.e+-]+)$', line)
        if m:
            values[m.group(1)] = float(m.group(2))
    return values


def post(port, path, body):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    conn.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
    response = conn.getresponse()
    return response.status, json.loads(response.read())


TOKENIZE_TEXTS = GREEDY_PROMPTS + ["", "  two  spaces, tabs\t and\nnewlines",
                                   "caf\u00e9 \u65e5\u672c \U0001f6a2 \u00a0"]
# tokenizer.json files of several families (runtime/text/testdata).
HF_TESTDATA = "runtime/text/testdata"
CHATS = [
    ({"messages": [{"role": "user", "content": "Where is the ship?"}]}, {}),
    ({"messages": [{"role": "system", "content": "Be brief."},
                   {"role": "user", "content": "Where is the ship?"}]},
     {"add_generation_prompt": False}),
    ({"messages": [{"role": "user", "content": "Where is the ship?"},
                   {"role": "assistant", "content": "The ship is "}]},
     {"continue_final_message": True}),
]


def check_tokenizer_endpoints(port, binary, model_dir, log_path):
    """Returns the number of failures."""
    failures = 0
    ids = {}
    for text in TOKENIZE_TEXTS:
        status, answer = post(port, "/tokenize", {"model": "verdict-default", "prompt": text})
        expect(status == 200, f"/tokenize status {status}: {answer}")
        expect(answer["count"] == len(answer["tokens"]) and answer["max_model_len"] > 0,
               f"/tokenize answer {answer}")
        ids[text] = answer["tokens"]

    hf = os.path.join(model_dir, "tokenizer.json")
    if os.path.exists(hf):
        import tokenizers
        reference = tokenizers.Tokenizer.from_file(hf)
        wrong = [t for t in TOKENIZE_TEXTS if reference.encode(t).ids != ids[t]]
        if wrong:
            failures += 1
            print(f"FAIL /tokenize differs from the tokenizers package on {wrong!r}")
        else:
            print(f"PASS /tokenize equals the tokenizers package on {len(ids)} texts")
    else:
        # A SentencePiece model: the completions endpoint's own encoding.
        wrong = []
        for text in TOKENIZE_TEXTS[:3]:
            status, answer = post(port, "/v1/completions", {
                "prompt": text, "max_tokens": 1, "temperature": 0})
            expect(status == 200, f"status {status}: {answer}")
            if answer["usage"]["prompt_tokens"] != len(ids[text]):
                wrong.append((text, answer["usage"]["prompt_tokens"], len(ids[text])))
        if wrong:
            failures += 1
            print(f"FAIL /tokenize counts differ from completions' prompt_tokens: {wrong!r}")
        else:
            print(f"PASS /tokenize counts equal completions' prompt_tokens ({model_dir} has no "
                  f"tokenizer.json)")

    # Conversations: with special tokens, the ids chat completions generate
    # from, under each template argument.
    wrong = []
    for chat, arguments in CHATS:
        status, tokenized = post(port, "/tokenize",
                                 {**chat, **arguments, "add_special_tokens": True})
        expect(status == 200, f"/tokenize status {status}: {tokenized}")
        status, answer = post(port, "/v1/chat/completions", {
            **chat, **arguments, "max_tokens": 1, "temperature": 0})
        expect(status == 200, f"chat status {status}: {answer}")
        if answer["usage"]["prompt_tokens"] != tokenized["count"]:
            wrong.append((arguments, answer["usage"]["prompt_tokens"], tokenized["count"]))
    status, both = post(port, "/v1/chat/completions", {
        **CHATS[2][0], "continue_final_message": True, "add_generation_prompt": True})
    if wrong or status != 400 or both["error"]["param"] != "continue_final_message":
        failures += 1
        print(f"FAIL chat template arguments: {wrong!r}; both true gave {status} {both}")
    else:
        print(f"PASS /tokenize of {len(CHATS)} conversations counts what chat completions "
              "count, and continue_final_message with add_generation_prompt is a 400")

    # The CLI gives the same ids offline.
    lines = "".join(json.dumps({"text": t}) + "\n" for t in TOKENIZE_TEXTS)
    cli = subprocess.run([binary, "tokenize"], input=lines, capture_output=True, text=True,
                         timeout=120)
    cli_ids = [json.loads(line)["ids"] for line in cli.stdout.splitlines()]
    if cli.returncode != 0 or cli_ids != [ids[t] for t in TOKENIZE_TEXTS]:
        failures += 1
        print(f"FAIL verdict tokenize: exit {cli.returncode}, {cli.stderr[-300:]}")
    else:
        print(f"PASS verdict tokenize gives the ids of /tokenize on {len(cli_ids)} lines")

    # The same code path on tokenizer.json files, against the tokenizers
    # package, with and without special tokens.
    import tokenizers
    for name in sorted(os.listdir(HF_TESTDATA)):
        path = os.path.join(HF_TESTDATA, name)
        if not os.path.exists(os.path.join(path, "tokenizer.json")):
            continue
        reference = tokenizers.Tokenizer.from_file(os.path.join(path, "tokenizer.json"))
        lines = "".join(json.dumps({"text": t}) + "\n" + json.dumps(
            {"text": t, "add_special_tokens": False}) + "\n" for t in TOKENIZE_TEXTS)
        cli = subprocess.run([binary, "tokenize", f"--tokenizer={path}"], input=lines,
                             capture_output=True, text=True, timeout=120)
        expected = []
        for t in TOKENIZE_TEXTS:
            expected += [reference.encode(t).ids,
                         reference.encode(t, add_special_tokens=False).ids]
        got = [json.loads(line)["ids"] for line in cli.stdout.splitlines()]
        if cli.returncode != 0 or got != expected:
            failures += 1
            print(f"FAIL verdict tokenize --tokenizer={path} differs from the tokenizers "
                  f"package: exit {cli.returncode}, {cli.stderr[-300:]}")
        else:
            print(f"PASS verdict tokenize equals the tokenizers package on {name}/tokenizer.json "
                  f"({len(got)} lines)")

    # Back to text, and a bad id named by its index.
    back = [post(port, "/detokenize", {"tokens": ids[t]})[1]["prompt"] for t in GREEDY_PROMPTS]
    status, bad = post(port, "/detokenize", {"tokens": [1, 2, 10 ** 9]})
    if back != GREEDY_PROMPTS or status != 400 or bad["error"]["param"] != "tokens[2]":
        failures += 1
        print(f"FAIL /detokenize: {back!r}; a bad id gave {status} {bad}")
    else:
        print("PASS /detokenize returns the texts, and an id out of range is a 400 naming it")

    with open(log_path) as f:
        target_loads = [line for line in f if re.match(r"verdict: tokenizer \S*target", line)]
    if len(target_loads) != 1:
        failures += 1
        print(f"FAIL start-up read the target's tokenizer {len(target_loads)} times")
    else:
        print("PASS start-up read the target's tokenizer once")
    return failures


def listening_sockets(pid):
    """{(address, port)} of the TCP sockets `pid` listens on (IPv4 and IPv6)."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[len("socket:["):-1])
    found = set()
    for table, width in (("tcp", 8), ("tcp6", 32)):
        with open(f"/proc/net/{table}") as f:
            next(f)
            for line in f:
                fields = line.split()
                local, state, inode = fields[1], fields[3], fields[9]
                if state != "0A" or inode not in inodes:  # 0A: LISTEN
                    continue
                address_hex, port_hex = local.split(":")
                raw = bytes.fromhex(address_hex)
                if width == 8:
                    address = socket.inet_ntop(socket.AF_INET, raw[::-1])
                else:
                    words = b"".join(raw[i:i + 4][::-1] for i in range(0, 16, 4))
                    address = socket.inet_ntop(socket.AF_INET6, words)
                found.add((address, int(port_hex, 16)))
    return found


def expect(condition, message):
    if not condition:
        raise AssertionError(message)


def main():
    binary, client_test, launch = (os.path.abspath(a) for a in sys.argv[1:4])
    port, metrics_port = free_port(), free_port()
    log_path = os.path.join(os.environ.get("TEST_UNDECLARED_OUTPUTS_DIR", "/tmp"), "serve.log")
    log = open(log_path, "w")
    proc = subprocess.Popen(
        [binary, "serve", f"--port={port}", f"--metrics-port={metrics_port}",
         "--drain-seconds=20", "--cpu-threads=2", "--max-running-requests=64"],
        stdout=log, stderr=subprocess.STDOUT)
    failures = 0
    try:
        wait_healthy(port, proc, seconds=60)
        before = metrics(metrics_port)

        # 0. A single-process server listens on its HTTP and metrics ports
        # alone, both on 127.0.0.1 (no MPI sockets on other interfaces).
        listening = listening_sockets(proc.pid)
        if listening != {("127.0.0.1", port), ("127.0.0.1", metrics_port)}:
            failures += 1
            print(f"FAIL the server listens on {sorted(listening)}, expected the HTTP port "
                  f"{port} and the metrics port {metrics_port} on 127.0.0.1 only")
        else:
            print(f"PASS the server listens on 127.0.0.1:{port} and :{metrics_port} only")

        # 0b. The bundled models are found from any working directory, and a
        # binary far from them says to pass --model.
        found = subprocess.run([binary, "generate", "--prompt=It was", "--max-tokens=2"],
                               cwd="/", capture_output=True, text=True, timeout=120)
        if found.returncode != 0:
            failures += 1
            print(f"FAIL verdict generate started in / did not find the bundled models: "
                  f"{found.stderr[-500:]}")
        with tempfile.TemporaryDirectory() as lone:
            copy = os.path.join(lone, "verdict")
            shutil.copy(binary, copy)
            lost = subprocess.run([copy, "generate", "--prompt=It was", "--max-tokens=2"],
                                  cwd=lone, capture_output=True, text=True, timeout=120)
            if lost.returncode == 0 or "--model" not in lost.stderr:
                failures += 1
                print(f"FAIL a binary without the bundled models: exit {lost.returncode}, "
                      f"{lost.stderr[-500:]}")
            else:
                print("PASS the bundled models are found from /, and their absence names --model")

        # 0b'. Server flags out of range end the server with a message that
        # names them, before it listens.
        for flag in ("--max-body-bytes=0", "--max-body-bytes=-1", "--header-timeout=0"):
            refused = subprocess.run([binary, "serve", flag, f"--port={free_port()}",
                                      f"--metrics-port={free_port()}"],
                                     capture_output=True, text=True, timeout=120)
            name = flag.split("=")[0]
            last_line = (refused.stderr.splitlines() or [""])[-1]
            if refused.returncode != 1 or name not in last_line:
                failures += 1
                print(f"FAIL verdict serve {flag}: exit {refused.returncode}, "
                      f"{refused.stderr[-300:]}")
            else:
                print(f"PASS verdict serve {flag} is refused, naming {name}")

        # 0c. The tokenizer's endpoints and the CLI, on the bundled target.
        failures += check_tokenizer_endpoints(port, binary, "models/target", log_path)

        # 1. The official client.
        result = subprocess.run(
            [sys.executable, client_test, f"--base-url=http://127.0.0.1:{port}/v1",
             "--clients=32", "--max-tokens=12"], capture_output=True, text=True, timeout=600)
        print(result.stdout, end="")
        print(result.stderr, end="", file=sys.stderr)
        if result.returncode != 0:
            failures += 1
            print("FAIL openai client test")

        # 2. A client that hangs up mid-stream cancels its request.
        cancelled_before = metrics(metrics_port).get(
            'verdict_requests_total{outcome="cancelled"}', 0)
        sock = socket.create_connection(("127.0.0.1", port))
        body = json.dumps({"model": "verdict-default", "prompt": "It was a dark",
                           "max_tokens": 900, "stream": True, "ignore_eos": True})
        sock.sendall((f"POST /v1/completions HTTP/1.1\r\nHost: x\r\n"
                      f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
                      f"{body}").encode())
        received = b""
        while received.count(b"data:") < 3:
            received += sock.recv(4096)
        sock.close()
        deadline = time.time() + 30
        while time.time() < deadline:
            m = metrics(metrics_port)
            if (m.get('verdict_requests_total{outcome="cancelled"}', 0) == cancelled_before + 1
                    and m.get("verdict_running_requests", 1) == 0):
                break
            time.sleep(0.2)
        if m.get('verdict_requests_total{outcome="cancelled"}', 0) == cancelled_before + 1 \
                and m.get("verdict_running_requests", 1) == 0:
            print("PASS disconnect mid-stream cancels the request and frees it")
        else:
            failures += 1
            cancelled = m.get('verdict_requests_total{outcome="cancelled"}')
            print("FAIL disconnect mid-stream did not cancel the request: "
                  f"cancelled {cancelled}, running {m.get('verdict_running_requests')}")

        # 3. The server's counters agree with what clients saw.
        seen_requests, seen_tokens = 0, 0
        for i in range(5):
            status, answer = post(port, "/v1/completions", {
                "model": "verdict-default", "prompt": f"Chapter {i}", "max_tokens": 7 + i,
                "temperature": 0})
            expect(status == 200, f"status {status}")
            seen_requests += 1
            seen_tokens += answer["usage"]["completion_tokens"]
        m0 = m
        m1 = metrics(metrics_port)
        finished = lambda mm: sum(v for k, v in mm.items() if k.startswith("verdict_requests_total"))
        if finished(m1) - finished(m0) != seen_requests or \
                m1["verdict_generated_tokens_total"] - m0["verdict_generated_tokens_total"] != seen_tokens:
            failures += 1
            print(f"FAIL metrics disagree with clients: {finished(m1) - finished(m0)} requests, "
                  f"{m1['verdict_generated_tokens_total'] - m0['verdict_generated_tokens_total']} "
                  f"tokens; clients saw {seen_requests} and {seen_tokens}")
        else:
            print(f"PASS metrics count {seen_requests} requests and {seen_tokens} tokens")

        # 4. TP 2 under mpirun serves the same greedy text as TP 1.
        tp1 = greedy_texts(port)
        tp2_port = free_port()
        tp2_log = open(os.path.join(os.environ.get("TEST_UNDECLARED_OUTPUTS_DIR", "/tmp"),
                                    "serve_tp2.log"), "w")
        tp2, tp2_mpi_dir = start_tp2(binary, launch, tp2_port, tp2_log)
        try:
            wait_healthy(tp2_port, tp2, seconds=120)
            tp2_texts = greedy_texts(tp2_port)
            if tp2_texts == tp1:
                print(f"PASS TP 2 under mpirun serves the TP 1 greedy text ({len(tp1)} prompts)")
            else:
                failures += 1
                print(f"FAIL TP 2 text differs: {tp2_texts!r} vs TP 1 {tp1!r}")
            tp2.send_signal(signal.SIGTERM)
            code = tp2.wait(timeout=60)
            expect(code == 0, f"launch.sh --tp 2 exits {code} after SIGTERM")
            print("PASS TP 2 job drains on SIGTERM and exits 0")
        finally:
            if tp2.poll() is None:
                tp2.kill()
                tp2.wait()
            tp2_log.close()
            shutil.rmtree(tp2_mpi_dir, ignore_errors=True)

        # 5. SIGTERM drains: a streaming request finishes, then exit 0.
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        conn.request("POST", "/v1/completions", json.dumps({
            "model": "verdict-default", "prompt": "The whale", "max_tokens": 64,
            "stream": True, "ignore_eos": True}), {"Content-Type": "application/json"})
        response = conn.getresponse()
        first = response.readline()
        proc.send_signal(signal.SIGTERM)
        rest = response.read().decode()
        expect(first.startswith(b"data:"), f"unexpected first line {first!r}")
        expect('"finish_reason":"length"' in rest and "[DONE]" in rest,
               "the in-flight stream did not finish during the drain")
        code = proc.wait(timeout=60)
        expect(code == 0, f"exit code {code} after SIGTERM")
        print("PASS SIGTERM drains the in-flight request and exits 0")
    except Exception as e:  # report, then fail
        failures += 1
        print(f"FAIL {type(e).__name__}: {e}")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        log.close()
    print("e2e:", "FAILED" if failures else "PASSED")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
