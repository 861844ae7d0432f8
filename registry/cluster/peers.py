"""What this node knows about its replicas (DS Replicas on the console). Plain Python, no Django.

Health comes from real replication results, never from Eureka's hostname heuristic: a peer is
available when its latest replication attempt succeeded, recently. The replication worker reports
each attempt here (``record_success`` / ``record_failure`` / ``set_queued``); until peers are
configured the node is standalone and the set is empty.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, replace
from urllib.parse import urlsplit, urlunsplit

# A peer with no successful replication for this long is unavailable even without a recorded error:
# heartbeats replicate continuously (every instance renews every 30 s), so silence means trouble.
AVAILABILITY_WINDOW_MS = 90_000


def scrub_credentials(url: str) -> str:
    """``http://user:pass@host:8761/eureka/`` → ``http://host:8761/eureka/`` (never show secrets)."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return url
    if "@" not in parts.netloc:
        return url
    host = parts.netloc.rsplit("@", 1)[1]
    return urlunsplit((parts.scheme, host, parts.path, parts.query, parts.fragment))


def peer_hostname(url: str) -> str:
    try:
        return urlsplit(url).hostname or url
    except ValueError:
        return url


@dataclass(frozen=True)
class PeerState:
    """One replica as the console shows it. ``url`` is already free of credentials."""

    url: str
    last_success: int | None = None
    last_failure: int | None = None
    last_error: str | None = None
    queued_events: int = 0
    failures: int = 0

    @property
    def hostname(self) -> str:
        return peer_hostname(self.url)

    def available(self, now: int) -> bool:
        if self.last_success is None:
            return False
        if self.last_failure is not None and self.last_failure > self.last_success:
            return False
        return now - self.last_success <= AVAILABILITY_WINDOW_MS

    def unavailable_reason(self, now: int) -> str | None:
        if self.available(now):
            return None
        if self.last_failure is not None and (
            self.last_success is None or self.last_failure > self.last_success
        ):
            return f"last replication failed: {self.last_error or 'unknown error'}"
        if self.last_success is None:
            return "no successful replication yet"
        return f"no successful replication for more than {AVAILABILITY_WINDOW_MS // 1000} s"


class PeerSet:
    """The node's replicas, keyed by scrubbed service URL; updates are atomic under one lock."""

    def __init__(self, urls: list[str] | tuple[str, ...] = ()):
        self._lock = threading.Lock()
        self._peers: dict[str, PeerState] = {}
        for url in urls:
            clean = scrub_credentials(url)
            self._peers.setdefault(clean, PeerState(clean))

    def states(self) -> list[PeerState]:
        with self._lock:
            return list(self._peers.values())

    def _update(self, url: str, **changes) -> None:
        clean = scrub_credentials(url)
        with self._lock:
            current = self._peers.get(clean)
            if current is not None:
                self._peers[clean] = replace(current, **changes)

    def record_success(self, url: str, now: int) -> None:
        self._update(url, last_success=now)

    def record_failure(self, url: str, now: int, error: str) -> None:
        clean = scrub_credentials(url)
        with self._lock:
            current = self._peers.get(clean)
            if current is not None:
                self._peers[clean] = replace(
                    current, last_failure=now, last_error=error, failures=current.failures + 1
                )

    def set_queued(self, url: str, queued: int) -> None:
        self._update(url, queued_events=queued)
