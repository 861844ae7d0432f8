"""A remote region or peer that turns hostile on cue, for the tests of answer limits (issue 34, item
3; issue 44, item 1): an ``http.server`` on 127.0.0.1 in a thread that first answers as a small
Eureka server would, then answers every request with a gzip bomb (407 KB that inflate to 400 MiB of
JSON whitespace), with an answer under the size cap that expands into millions of instances (64 KB of
gzip, 66 MB of valid JSON: one app holding 22 million empty ``{}`` instances, or a batch answer of 22
million ``{}``), or trickles its answer a byte at a time.

The bomb and the expanding answers are compressed in 1 MiB slices when a remote turns to them and kept
for the session, so the tests never hold their inflated forms themselves.
"""

from __future__ import annotations

import contextlib
import functools
import gzip
import json
import threading
import time
import zlib
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from tests.factories import instance_body

BOMB_INFLATED_BYTES = 400 * 1024 * 1024
SLICE = 1024 * 1024
# The instance the remote holds while it behaves.
REMOTE_INSTANCE_ID = "10.2.0.1:payments:8080"


@functools.cache
def gzip_bomb() -> bytes:
    """JSON whitespace, ``BOMB_INFLATED_BYTES`` of it once inflated, as one gzip member."""
    compressor = zlib.compressobj(6, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    blank = b" " * SLICE
    parts = [compressor.compress(blank) for _ in range(BOMB_INFLATED_BYTES // SLICE)]
    parts.append(compressor.flush())
    return b"".join(parts)


# The expanding answer's empty instances (or batch answers): 66 MB of JSON, under the 64 MiB cap.
EXPANDING_RECORDS = 22_000_000


@functools.cache
def expanding_answer(batch: bool = False) -> bytes:
    """Valid JSON, one gzip member of about 64 KB: ``GET apps`` with one app of ``EXPANDING_RECORDS``
    empty instances, or (``batch``) a batch answer of as many empty items."""
    if batch:
        head, tail = b'{"responseList":[', b"{}]}"
    else:
        head = (
            b'{"applications":{"versions__delta":"1","apps__hashcode":"UP_1_",'
            b'"application":[{"name":"EXPANDING","instance":['
        )
        tail = b"{}]}]}}"
    compressor = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    per_slice = SLICE // 3
    slices, rest = divmod(EXPANDING_RECORDS - 1, per_slice)
    parts = [compressor.compress(head)]
    parts.extend(compressor.compress(b"{}," * per_slice) for _ in range(slices))
    parts.append(compressor.compress(b"{}," * rest + tail))
    parts.append(compressor.flush())
    return b"".join(parts)


def registry_document(delta: bool = False, empty: bool = False) -> bytes:
    """The remote's registry (one UP instance unless ``empty``), or its delta (nothing changed)."""
    instance = instance_body(app="PAYMENTS", host="10.2.0.1")["instance"]
    instance["actionType"] = "ADDED"
    apps = [] if delta or empty else [{"name": "PAYMENTS", "instance": [instance]}]
    hashcode = "" if empty else "UP_1_"
    document = {"applications": {"versions__delta": "1", "apps__hashcode": hashcode, "application": apps}}
    return json.dumps(document).encode()


@functools.cache
def large_registry(instances: int) -> bytes:
    """A real registry of ``instances`` (100 apps, a few metadata keys each), as a Eureka server
    serves it, gzipped: what the node must read in full while heartbeats keep their turn."""
    apps: dict[str, list[dict]] = {}
    for n in range(instances):
        app = f"APP-{n % 100:03d}"
        host = f"10.3.{n // 256 % 256}.{n % 256}"
        body = instance_body(app=app, host=host, metadata={"zone": f"z{n % 3}", "version": f"1.{n % 4}"})
        apps.setdefault(app, []).append({**body["instance"], "actionType": "ADDED"})
    document = {
        "applications": {
            "versions__delta": "1",
            "apps__hashcode": f"UP_{instances}_",
            "application": [{"name": app, "instance": held} for app, held in apps.items()],
        }
    }
    return gzip.compress(json.dumps(document).encode())


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address) -> None:
        pass  # a node hanging up in the middle of a bomb is what the tests expect of it


class HostileRemote:
    """``mode``: "fine" (a small Eureka server), "bomb" (every answer is ``gzip_bomb()``), "expanding"
    (every answer is ``expanding_answer()``, a batch's ``expanding_answer(batch=True)``) or "trickle"
    (a valid registry, one byte every ``trickle_s``); ``empty``: the remote holds no instance;
    ``large``: in "fine" mode the remote holds ``large_registry(large)`` and its delta never adds up
    (so a region is fetched in full every time).
    ``answered`` counts the answers by mode, ``requests`` lists them: (mode, "METHOD path")."""

    def __init__(
        self, mode: str = "fine", trickle_s: float = 0.2, empty: bool = False, large: int = 0
    ) -> None:
        self.large = large
        if large:
            large_registry(large)
        self.mode = mode
        self.empty = empty
        self.trickle_s = trickle_s
        self.answered: Counter[str] = Counter()
        self.requests: list[tuple[str, str]] = []
        remote = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _answer(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                sent = self.rfile.read(length) if length else b""
                mode = remote.mode
                remote.requests.append((mode, f"{self.command} {self.path}"))
                remote.answered[mode] += 1
                if mode == "bomb":
                    self._send(gzip_bomb(), {"Content-Encoding": "gzip"})
                elif mode == "expanding":
                    batch = "peerreplication/batch" in self.path
                    self._send(expanding_answer(batch), {"Content-Encoding": "gzip"})
                elif mode == "trickle":
                    self._trickle(registry_document(empty=remote.empty))
                elif remote.large and self.command == "GET" and "apps" in self.path:
                    delta = self.path.rstrip("/").endswith("apps/delta")
                    if delta:  # a hashcode that never adds up: the next fetch is a full one
                        self._send(b'{"applications":{"apps__hashcode":"DOWN_1_","application":[]}}')
                    else:
                        self._send(large_registry(remote.large), {"Content-Encoding": "gzip"})
                else:
                    self._send(self._fine(sent))

            def _fine(self, sent: bytes) -> bytes:
                if "peerreplication/batch" in self.path:
                    items = json.loads(sent or b"{}").get("replicationList", [])
                    return json.dumps({"responseList": [{"statusCode": 200} for _ in items]}).encode()
                if self.command == "GET" and self.path.rstrip("/").endswith("apps/delta"):
                    return registry_document(delta=True, empty=remote.empty)
                if self.command == "GET" and self.path.rstrip("/").endswith("apps"):
                    return registry_document(empty=remote.empty)
                return b""

            def _send(self, body: bytes, headers: dict[str, str] | None = None) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                for name, value in (headers or {}).items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(body)

            def _trickle(self, body: bytes) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.flush()
                with contextlib.suppress(OSError):  # the client gave up
                    for byte in body:
                        time.sleep(remote.trickle_s)
                        self.wfile.write(bytes([byte]))
                        self.wfile.flush()

            do_GET = do_POST = do_PUT = do_DELETE = _answer

            def log_message(self, *args) -> None:
                pass

        self.server = _Server(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/eureka/"
        threading.Thread(target=self.server.serve_forever, name="hostile-remote", daemon=True).start()

    @property
    def mode(self) -> str:
        return self._mode

    @mode.setter
    def mode(self, mode: str) -> None:
        # Each answer is built before the remote answers with it, not while a client waits: building
        # one takes seconds of CPU, which on a busy machine would run into the client's read timeout.
        if mode == "bomb":
            gzip_bomb()
        elif mode == "expanding":
            expanding_answer()
            expanding_answer(batch=True)
        self._mode = mode

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
