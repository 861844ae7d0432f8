"""Instance servers for the live tests and the bench: an HTTP server that can be told to answer 200,
answer 500, hang past the probe's timeout, or stop listening (connections refused) and come back;
and a bare TCP listener that can go away and come back. Each runs in threads of the test process."""

from __future__ import annotations

import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from tests.ports import free_port

OK, ERROR, SLOW = "ok", "error", "slow"


class _Handler(BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802 (http.server's name)
        target: HttpTarget = self.server.target  # type: ignore[attr-defined]
        mode = target.mode
        if mode == SLOW:
            time.sleep(target.slow_seconds)
        code = 500 if mode == ERROR else 200
        target.record(self.path, code)
        body = b'{"status":"UP"}' if code == 200 else b'{"status":"DOWN"}'
        try:
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        except OSError:
            pass  # the prober gave up first (slow mode)

    def log_message(self, format, *args):  # noqa: A002 (http.server's signature)
        pass


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 256


class HttpTarget:
    """``mode`` is read per request; ``answers`` lists (time, path, code) of every answer given."""

    def __init__(self, slow_seconds: float = 2.0, port: int | None = None):
        self.port = port or free_port()
        self.mode = OK
        self.slow_seconds = slow_seconds
        self.answers: list[tuple[float, str, int]] = []
        self._lock = threading.Lock()
        self._server: _Server | None = None
        self.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/health"

    def record(self, path: str, code: int) -> None:
        with self._lock:
            self.answers.append((time.monotonic(), path, code))

    def count(self, code: int | None = None, since: float = 0.0) -> int:
        with self._lock:
            return sum(1 for at, _, got in self.answers if at >= since and (code is None or got == code))

    def start(self) -> None:
        """Listen (again, on the same port)."""
        if self._server is None:
            self._server = _Server(("127.0.0.1", self.port), _Handler)
            self._server.target = self  # type: ignore[attr-defined]
            threading.Thread(
                target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
            ).start()

    def close(self) -> None:
        """Stop listening: connections are refused until ``start``."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None


class TcpTarget:
    """Accepts connections and closes them at once; ``close`` stops listening, ``start`` listens again."""

    def __init__(self, port: int | None = None):
        self.port = port or free_port()
        self.accepted = 0
        self._sock: socket.socket | None = None
        self._stop = threading.Event()
        self.start()

    def start(self) -> None:
        if self._sock is not None:
            return
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", self.port))
        sock.listen(64)
        sock.settimeout(0.05)
        self._sock = sock
        self._stop = threading.Event()
        threading.Thread(target=self._accept, args=(sock, self._stop), daemon=True).start()

    def _accept(self, sock: socket.socket, stop: threading.Event) -> None:
        while not stop.is_set():
            try:
                connection, _ = sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            self.accepted += 1
            connection.close()

    def close(self) -> None:
        if self._sock is not None:
            self._stop.set()
            self._sock.close()
            self._sock = None
