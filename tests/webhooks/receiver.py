"""A real webhook receiver for tests: an ``http.server`` on a free loopback port, in a thread.

It records every request (headers, raw body, time) and answers from a script: a list of status codes
used up one per request (then 200), or ``hang`` seconds of silence before answering.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import orjson


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: bytes
    at: float

    def json(self) -> dict:
        return orjson.loads(self.body)


class Receiver:
    def __init__(self):
        self.requests: list[Received] = []
        self.answers: list[int] = []  # used up one per request; then 200
        self.hang_s = 0.0
        self._lock = threading.Lock()
        self._released = threading.Event()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                with receiver._lock:
                    receiver.requests.append(
                        Received(
                            self.path, {k.lower(): v for k, v in self.headers.items()}, body, time.time()
                        )
                    )
                    status = receiver.answers.pop(0) if receiver.answers else 200
                    hang = receiver.hang_s
                if hang:
                    receiver._released.wait(hang)
                try:
                    self.send_response(status)
                    self.send_header("Content-Length", "2")
                    self.end_headers()
                    self.wfile.write(b"ok")
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the sender gave up waiting (a hang): expected, not worth a traceback

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        self._thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.1})

    def __enter__(self) -> Receiver:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._released.set()
        self.server.shutdown()
        self.server.server_close()
        self._thread.join(5)

    def hang(self, seconds: float) -> None:
        with self._lock:
            self.hang_s = seconds
            self._released.clear()

    def release(self) -> None:
        with self._lock:
            self.hang_s = 0.0
        self._released.set()

    def answer(self, *codes: int) -> None:
        with self._lock:
            self.answers.extend(codes)

    def received(self) -> list[Received]:
        with self._lock:
            return list(self.requests)
