"""What this node knows about its replicas (DS Replicas on the console). Plain Python, no Django.

Health comes from real replication results, never from Eureka's hostname heuristic: a peer is
available when its latest replication attempt succeeded, recently. The replication worker reports
each attempt here (``record_success`` / ``record_failure`` / ``set_queued``); until peers are
configured the node is standalone and the set is empty. A peer's first result, and each change
between success and failure after it, is logged once (unavailable with the error, available again):
not every failed retry.
"""

from __future__ import annotations

import ipaddress
import logging
import socket
import threading
from dataclasses import dataclass, replace

from registry.domain.endpoints import Peer, peer_hostname
from registry.domain.redact import scrub_credentials, scrub_text

# A peer with no successful replication for this long is unavailable even without a recorded error:
# heartbeats replicate continuously (every instance renews every 30 s), so silence means trouble.
AVAILABILITY_WINDOW_MS = 90_000

logger = logging.getLogger(__name__)


def _addresses_of(host: str) -> set[str]:
    try:
        return {info[4][0] for info in socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)}
    except OSError:
        return set()


def _interface_addresses() -> set[str]:
    """Every address of this host's network interfaces (a pod's own IP among them)."""
    import psutil

    try:
        return {
            entry.address.split("%")[0]
            for entries in psutil.net_if_addrs().values()
            for entry in entries
            if entry.family in (socket.AF_INET, socket.AF_INET6)
        }
    except OSError:
        return set()


def _is_local_address(address: str) -> bool:
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return False
    if ip.is_loopback:
        return True
    return address in _interface_addresses() or address in _addresses_of(socket.gethostname())


def is_own_url(peer: Peer, self_url: str | None, listening: list[tuple[str, int]]) -> bool:
    """This node's own URL: ``self_url``, or the same host **and** port as an address it listens on
    (the Java server compares the host alone, so two nodes on one host would ignore each other)."""
    if self_url and scrub_credentials(self_url.rstrip("/")) == peer.display_url.rstrip("/"):
        return True
    host, port = peer.address
    peer_addresses = _addresses_of(host)
    for bound_host, bound_port in listening:
        if bound_port != port:
            continue
        if bound_host in ("0.0.0.0", "::", ""):
            if any(_is_local_address(address) for address in peer_addresses):
                return True
        elif bound_host in peer_addresses:
            return True
    return False


@dataclass(frozen=True)
class PeerState:
    """One replica as the console shows it. ``url`` is already free of credentials."""

    url: str
    last_success: int | None = None
    last_failure: int | None = None
    last_error: str | None = None
    queued_events: int = 0
    # How long the oldest queued event has waited (0 when nothing waits).
    lag_ms: int = 0
    failures: int = 0
    # The latest attempt failed (timestamps alone cannot order a success and a failure in one ms).
    failing: bool = False

    @property
    def hostname(self) -> str:
        return peer_hostname(self.url)

    def available(self, now: int) -> bool:
        if self.last_success is None or self.failing:
            return False
        return now - self.last_success <= AVAILABILITY_WINDOW_MS

    def unavailable_reason(self, now: int) -> str | None:
        if self.available(now):
            return None
        if self.failing:
            return f"last replication failed: {self.last_error or 'unknown error'}"
        if self.last_success is None:
            return "no successful replication yet"
        return f"no successful replication for more than {AVAILABILITY_WINDOW_MS // 1000} s"


class PeerSet:
    """The node's replicas, keyed by scrubbed service URL; updates are atomic under one lock."""

    def __init__(self, urls: list[str] | tuple[str, ...] = ()):
        self._lock = threading.Lock()
        self._peers: dict[str, PeerState] = {}
        # What the log last said of each peer (True: available), so that each change is logged once.
        self._announced: dict[str, bool] = {}
        for url in urls:
            clean = scrub_credentials(url)
            self._peers.setdefault(clean, PeerState(clean))

    def states(self) -> list[PeerState]:
        with self._lock:
            return list(self._peers.values())

    def state(self, url: str) -> PeerState | None:
        with self._lock:
            return self._peers.get(scrub_credentials(url))

    def _update(self, url: str, **changes) -> None:
        clean = scrub_credentials(url)
        with self._lock:
            current = self._peers.get(clean)
            if current is not None:
                self._peers[clean] = replace(current, **changes)

    def record_success(self, url: str, now: int) -> None:
        clean = scrub_credentials(url)
        with self._lock:
            current = self._peers.get(clean)
            if current is None:
                return
            self._peers[clean] = replace(current, last_success=now, failing=False)
            was = self._announced.get(clean)
            self._announced[clean] = True
        if was is False:
            logger.warning("peer %s available again", clean, extra={"event": "peer_available", "peer": clean})
        elif was is None:
            logger.info("peer %s available", clean, extra={"event": "peer_available", "peer": clean})

    def record_failure(self, url: str, now: int, error: str) -> None:
        clean = scrub_credentials(url)
        error = scrub_text(error)
        with self._lock:
            current = self._peers.get(clean)
            if current is None:
                return
            self._peers[clean] = replace(
                current, last_failure=now, last_error=error, failures=current.failures + 1, failing=True
            )
            was = self._announced.get(clean)
            self._announced[clean] = False
        if was is not False:
            logger.warning(
                "peer %s unavailable: %s",
                clean,
                error,
                extra={"event": "peer_unavailable", "peer": clean, "error": error},
            )

    def set_queued(self, url: str, queued: int, lag_ms: int = 0) -> None:
        self._update(url, queued_events=queued, lag_ms=lag_ms if queued else 0)

    def add(self, url: str) -> None:
        clean = scrub_credentials(url)
        with self._lock:
            self._peers.setdefault(clean, PeerState(clean))

    def remove(self, url: str) -> None:
        with self._lock:
            self._peers.pop(scrub_credentials(url), None)
            self._announced.pop(scrub_credentials(url), None)
