"""Keeps the mesh process's ``Catalog`` in step with its node, over the node's own HTTP API.

1. ``GET /api/v1/registry``: every instance as the node's map holds it now, and ``lastId``, the newest
   change before that read (registry/feed/query.py ``registry_page``). The catalog is replaced whole.
2. ``GET /api/v1/changes/stream?since=lastId&instances=true``: every change after it, each carrying the
   instance's record as the map holds it when the node reads the change (or null once it left). What
   one network read brings is applied as one catalog step, so a burst of changes wakes the xDS streams
   a few times, not once per change.
3. A stream that ends (the node's ``EUREKA_CHANGE_STREAM_MAX_SECONDS``, a restart of the node, a
   network cut) is reopened from the last id seen; a ``too-old`` event (this process fell behind the
   node's retention window, or the node restarted and numbers its changes anew) starts again at 1.

The node wakes its streams within ``EUREKA_CHANGE_STREAM_COALESCE_MS`` of a change, so a change reaches
the catalog within that and one round trip. While the node cannot be reached, the catalog keeps what
it had (clients keep routing to the last known instances, as Eureka clients keep their last fetch) and
the failure is logged once per outage. Plain Python: httpx, no Django.
"""

from __future__ import annotations

import logging
import socket
import threading
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import orjson

from registry.mesh.catalog import Catalog, Endpoint, endpoint_from_instance

logger = logging.getLogger("registry.mesh")

REGISTRY_PATH = "/api/v1/registry"
STREAM_PATH = "/api/v1/changes/stream"
# Waits between attempts while the node cannot be reached: doubling from the first to the last.
FIRST_RETRY_S = 0.5
LAST_RETRY_S = 5.0


class Followed:
    """Where the follower stands, for logs, /metrics and the readiness of the mesh process."""

    def __init__(self) -> None:
        self.connected = False
        self.last_id: int | None = None
        self.snapshots = 0
        self.changes = 0
        self.failures = 0
        self.last_error = ""


def _events(chunks: Iterator[bytes]) -> Iterator[list[tuple[str, bytes]]]:
    """Server-Sent Events from the byte chunks of a stream: one list of (event, data) per network read
    that completed at least one event (comments and ``retry:`` lines are skipped)."""
    buffer = b""
    for chunk in chunks:
        buffer += chunk
        if b"\n\n" not in buffer:
            continue
        complete, _, buffer = buffer.rpartition(b"\n\n")
        batch: list[tuple[str, bytes]] = []
        for block in complete.split(b"\n\n"):
            event, data = "message", b""
            for line in block.split(b"\n"):
                if line.startswith(b"event: "):
                    event = line[7:].decode("ascii", "replace")
                elif line.startswith(b"data: "):
                    data = line[6:]
            if data:
                batch.append((event, data))
        if batch:
            yield batch


class TooOld(Exception):
    """The node can no longer follow on from our last id: start again from its registry."""


class NodeFollower:
    """Follows one node into one catalog, on its own thread (``start``) until ``stop``."""

    def __init__(
        self,
        catalog: Catalog,
        node_url: str,
        *,
        auth: tuple[str, str] | None = None,
        weight_key: str = "weight",
        transport: httpx.BaseTransport | None = None,
        read_timeout_s: float = 60.0,
        sleep: Callable[[float], None] | None = None,
    ):
        self.catalog = catalog
        self.node_url = node_url.rstrip("/")
        self.weight_key = weight_key
        self.state = Followed()
        self._stopping = threading.Event()
        self._sleep = sleep or self._stopping.wait
        # The stream's idle reads are bounded by the node's keep-alive comments (15 s by default).
        timeout = httpx.Timeout(10.0, read=read_timeout_s)
        self._client = httpx.Client(auth=auth, transport=transport, timeout=timeout)
        self._thread: threading.Thread | None = None
        self._response: httpx.Response | None = None

    # ------------------------------------------------------------------ running

    def start(self) -> None:
        self._thread = threading.Thread(target=self.run, name="mesh-follower", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stopping.set()
        response = self._response
        if response is not None:
            # Unblocks the stream's read at once instead of at the next keep-alive comment. Closing a
            # socket does not wake a read blocked on it in another thread (over TLS it waits for
            # data); shutting it down does, and the reader sees the end of the stream.
            stream = response.extensions.get("network_stream")
            sock = stream.get_extra_info("socket") if stream is not None else None
            if sock is not None:
                try:
                    # The plain socket's shutdown: an SSLSocket's own would drop its TLS state under
                    # the reader.
                    socket.socket.shutdown(sock, socket.SHUT_RDWR)
                except OSError:
                    pass
            try:
                response.close()
            except Exception:  # noqa: BLE001 - closing from another thread may race the reader
                pass
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._client.close()

    def run(self) -> None:
        retry = FIRST_RETRY_S
        since: int | None = None
        while not self._stopping.is_set():
            try:
                if since is None:
                    since = self.load_registry()
                since = self.follow(since)
                retry = FIRST_RETRY_S
            except TooOld:
                since = None
                logger.warning(
                    "mesh: the node cannot follow on from change %s: reading its registry again",
                    self.state.last_id,
                )
            except (httpx.HTTPError, ValueError) as exc:
                if self._stopping.is_set():
                    return
                self._failed(exc)
                self._sleep(retry)
                retry = min(retry * 2, LAST_RETRY_S)

    def _failed(self, exc: BaseException) -> None:
        self.state.failures += 1
        text = f"{type(exc).__name__}: {exc}"[:300]
        if self.state.connected or not self.state.last_error:
            logger.warning(
                "mesh: lost the node at %s (%s); serving the last registry read", self.node_url, text
            )
        self.state.connected = False
        self.state.last_error = text

    def _connected(self) -> None:
        if not self.state.connected and self.state.last_error:
            logger.warning("mesh: following the node at %s again", self.node_url)
        self.state.connected = True
        self.state.last_error = ""

    # ------------------------------------------------------------------ steps

    def load_registry(self) -> int:
        """Replace the catalog with the node's registry; returns the change id to follow on from."""
        answer = self._client.get(f"{self.node_url}{REGISTRY_PATH}")
        _raise_for(answer)
        page = orjson.loads(answer.content)
        endpoints = []
        for app in page["applications"].get("application", []):
            for raw in app.get("instance", []):
                endpoint = endpoint_from_instance(raw, self.weight_key)
                if endpoint is not None:
                    endpoints.append(endpoint)
        self.catalog.replace_all(endpoints)
        self.state.snapshots += 1
        self.state.last_id = int(page["lastId"])
        self._connected()
        return self.state.last_id

    def follow(self, since: int) -> int:
        """Apply the node's changes after ``since`` until the stream ends; returns the last id seen.
        Raises TooOld when the node cannot go on from ``since``."""
        params = {"since": str(since), "instances": "true"}
        with self._client.stream("GET", f"{self.node_url}{STREAM_PATH}", params=params) as response:
            _raise_for(response)
            self._response = response
            try:
                self._connected()
                for batch in _events(response.iter_raw()):
                    since = self._apply(batch, since)
                    if self._stopping.is_set():
                        break
            finally:
                self._response = None
        return since

    def _apply(self, batch: list[tuple[str, bytes]], since: int) -> int:
        puts: dict[tuple[str, str], Endpoint] = {}
        removes: dict[tuple[str, str], None] = {}
        for event, data in batch:
            if event == "too-old":
                self._apply_step(puts, removes)
                raise TooOld
            if event != "change":
                continue
            change: dict[str, Any] = orjson.loads(data)
            key = (str(change["app"]).upper(), str(change["instanceId"]))
            instance = change.get("instance")
            endpoint = endpoint_from_instance(instance, self.weight_key) if instance else None
            # An instance the mesh cannot serve (no usable address or port) is as good as gone.
            if endpoint is None:
                puts.pop(key, None)
                removes[key] = None
            else:
                removes.pop(key, None)
                puts[key] = endpoint
            since = max(since, int(change["id"]))
            self.state.changes += 1
        self._apply_step(puts, removes)
        self.state.last_id = since
        return since

    def _apply_step(self, puts: dict, removes: dict) -> None:
        if puts or removes:
            self.catalog.apply(puts=list(puts.values()), removes=list(removes))


def _raise_for(answer: httpx.Response) -> None:
    if answer.status_code in (404, 410):
        # 410: a too-old id; 404: the node has its change feed off (EUREKA_CHANGE_FEED=false).
        if answer.status_code == 410:
            raise TooOld
        raise ValueError(
            f"{answer.request.url.path} answered 404: the node's change feed is off (EUREKA_CHANGE_FEED)"
        )
    if answer.status_code in (401, 403):
        raise ValueError(
            f"{answer.request.url.path} answered {answer.status_code}: set EUREKA_MESH_NODE_USER and "
            "EUREKA_MESH_NODE_PASSWORD to an account with the reader role"
        )
    answer.raise_for_status()
