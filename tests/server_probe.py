"""Small helpers the end-to-end tests share: a free port, and /health."""

import http.client
import socket


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
