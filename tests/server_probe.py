"""Small helpers the end-to-end tests share: a free port, /health, and the
wait for a server to start."""

import http.client
import socket
import time


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def health(port):
    """The status of GET /health, or None when nothing answers."""
    try:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
        conn.request("GET", "/health")
        return conn.getresponse().status
    except OSError:
        return None


def wait_healthy(port, proc, seconds=90):
    """Waits until /health answers 200; raises AssertionError when the
    server process `proc` exits first or `seconds` pass."""
    deadline = time.time() + seconds
    while health(port) != 200:
        if proc.poll() is not None or time.time() > deadline:
            raise AssertionError(f"server did not start (exit {proc.poll()})")
        time.sleep(0.2)
