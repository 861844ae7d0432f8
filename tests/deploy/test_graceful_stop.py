"""A node stops promptly on SIGTERM even while clients keep idle connections open.

Java clients keep their connection to the registry open between heartbeats. gunicorn's gevent worker
waits for every open connection up to ``graceful_timeout`` (20 s in deploy/gunicorn.conf.py) before
it stops; the node's worker (registry/serving/gunicorn_worker.py) closes connections that are only
waiting for their next request, and still answers a request whose head it has received.
"""

from __future__ import annotations

import json
import signal
import socket
import threading
import time

import pytest

from tests.factories import instance_body
from tests.interop.conftest import running_server

pytestmark = pytest.mark.live

GRACEFUL_TIMEOUT_S = 20  # deploy/gunicorn.conf.py


def read_answer(sock: socket.socket) -> bytes:
    """One whole answer (head and Content-Length body): nothing of it is left for the next read."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            return data
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    while len(body) < length:
        chunk = sock.recv(65536)
        assert chunk, "closed inside an answer's body"
        body += chunk
    return head


def request(sock: socket.socket, path: str) -> bytes:
    sock.sendall(f"GET {path} HTTP/1.1\r\nHost: node\r\nAccept: application/json\r\n\r\n".encode())
    return read_answer(sock)


def closed_by_node(sock: socket.socket) -> bool:
    """Reads what is left of the last answer; True at EOF or reset within 5 s."""
    sock.settimeout(5)
    try:
        while sock.recv(65536):
            pass
    except ConnectionResetError:
        pass
    except TimeoutError:
        return False
    finally:
        sock.close()
    return True


def test_sigterm_closes_idle_kept_alive_connections_and_the_node_stops_in_seconds(tmp_path):
    with running_server(tmp_path) as server:
        idle = [socket.create_connection(("127.0.0.1", server.port), timeout=30) for _ in range(3)]
        for sock in idle:
            assert request(sock, "/eureka/apps").startswith(b"HTTP/1.1 200")
        started = time.monotonic()
        server.process.send_signal(signal.SIGTERM)
        server.process.wait(timeout=GRACEFUL_TIMEOUT_S + 10)
        took = time.monotonic() - started
        assert all(closed_by_node(sock) for sock in idle), "every idle connection was closed by the node"
        assert took < GRACEFUL_TIMEOUT_S / 2, f"the stop waited {took:.1f} s for idle connections"


def test_a_request_in_progress_when_the_stop_begins_is_still_answered(tmp_path):
    with running_server(tmp_path) as server:
        sock = socket.create_connection(("127.0.0.1", server.port), timeout=30)
        assert request(sock, "/eureka/apps").startswith(b"HTTP/1.1 200")
        # A registration's head is in when the stop begins; its body follows.
        body = json.dumps(instance_body(app="ORDERS", host="10.0.0.9")).encode()
        sock.sendall(
            b"POST /eureka/apps/ORDERS HTTP/1.1\r\nHost: node\r\nContent-Type: application/json\r\n"
            + f"Content-Length: {len(body)}\r\n\r\n".encode()
        )
        answered: list[bytes] = []

        def finish() -> None:
            time.sleep(0.5)
            sock.sendall(body)
            answered.append(read_answer(sock))

        sender = threading.Thread(target=finish)
        sender.start()
        time.sleep(0.1)
        server.process.send_signal(signal.SIGTERM)
        sender.join(15)
        server.process.wait(timeout=GRACEFUL_TIMEOUT_S + 10)
        sock.close()
        assert answered and answered[0].startswith(b"HTTP/1.1 204"), answered
