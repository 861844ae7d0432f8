"""Eureka's self-preservation arithmetic: how many clients a node expects, the renewals per minute
they owe it, and whether leases may expire. Plain Python, no Django; time is passed in (ms).

Not thread-safe: the registry calls it under its own lock, from the writes that move the numbers
(a new instance, a cancel, a renewal) and the jobs that recount them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from .leases import MeasuredRate

MINUTE_MS = 60_000


class PreservationSettings(Protocol):
    """The server knobs the arithmetic reads (``RegistryRules`` has them, with Eureka's names)."""

    enable_self_preservation: bool
    renewal_percent_threshold: float
    expected_number_of_clients_sending_renews: int
    default_open_for_traffic_count: int
    wait_time_in_ms_when_sync_empty: int
    expected_clients_move_only_above_zero: bool

    @property
    def renewal_interval_secs(self) -> int: ...


@dataclass(frozen=True, slots=True)
class SelfPreservation:
    """The numbers behind the self-preservation banner and "Lease expiration enabled" (reference A4)."""

    enabled: bool
    renews_last_minute: int
    renews_threshold: int
    expected_clients: int
    renewal_interval_secs: int
    renewal_percent_threshold: float
    # R <= T once the start-up wait is over: what the banners key on.
    below_threshold: bool
    lease_expiration_enabled: bool
    # Still inside wait_time_in_ms_when_sync_empty after start: Eureka shows no banner yet.
    in_startup_wait: bool
    start_ts: int
    startup_wait_ms: int


class Preservation:
    """Expected clients, the renewal threshold they give, the renewals of the last full minute, and
    when the node opened for traffic (the read gate after an empty start-up sync).

    The threshold is ``int(expected × renewals a client owes a minute × percent)``; leases expire
    only while the last minute's renewals are strictly above it (or self-preservation is off).
    """

    def __init__(self, config: PreservationSettings, now: int):
        self.config = config
        self.expected_clients = config.expected_number_of_clients_sending_renews
        self.renews_threshold = 0
        # Renewals per full minute (``renews.increment`` at every renewal: the hot path).
        self.renews = MeasuredRate(MINUTE_MS, now)
        self.start_ts = now
        self.peer_transfer_empty = True

    def open_for_traffic(self, synced_count: int, now: int, restored: bool = False) -> None:
        """Start serving after the startup sync copied ``synced_count`` instances from peers."""
        if restored:
            # A warm restart opened the node already, with its own count and renew measurement: the
            # peers' instances only add to it (their new ones were counted as registered).
            self.expected_clients = max(synced_count, self.expected_clients)
            self.update_threshold()
            return
        self.expected_clients = synced_count or self.config.default_open_for_traffic_count
        self.peer_transfer_empty = self.expected_clients == 0
        self.start_ts = now
        self.renews.reset(now)
        self.update_threshold()

    def restore(self, expected_clients: int, renews_last_minute: int, now: int) -> None:
        """Open at once with a warm restart's numbers, carrying the last minute's renews over, so that
        self-preservation neither fires nor waits on the restart."""
        self.expected_clients = expected_clients
        self.update_threshold()
        self.peer_transfer_empty = self.expected_clients == 0
        self.start_ts = now
        self.renews.reset(now, last=renews_last_minute)

    def update_threshold(self) -> None:
        cfg = self.config
        self.renews_threshold = int(
            self.expected_clients * (60.0 / cfg.renewal_interval_secs) * cfg.renewal_percent_threshold
        )

    def client_added(self) -> None:
        """A new instance registered. Eureka moves the count only while it is above 0 (see
        ``expected_clients_move_only_above_zero``)."""
        if self.expected_clients > 0 or not self.config.expected_clients_move_only_above_zero:
            self.expected_clients += 1
            self.update_threshold()

    def client_removed(self) -> None:
        """An instance cancelled or evicted."""
        if self.expected_clients > 0:
            self.expected_clients -= 1
            self.update_threshold()

    def recount(self, size: int) -> None:
        """The 15-minute recount: adopt the registry's size unless it fell below the threshold share
        of the expected clients (then the missing ones may only be cut off, not gone)."""
        cfg = self.config
        if size > cfg.renewal_percent_threshold * self.expected_clients or not cfg.enable_self_preservation:
            self.expected_clients = size
            self.update_threshold()

    def renews_last_minute(self, now: int) -> int:
        return self.renews.count(now)

    def lease_expiration_enabled(self, now: int) -> bool:
        """False while the node is in self-preservation (it then evicts nothing); a threshold of 0
        (no clients expected) never lets leases expire."""
        if not self.config.enable_self_preservation:
            return True
        return self.renews_threshold > 0 and self.renews.count(now) > self.renews_threshold

    def allows_reads(self, now: int) -> bool:
        """Eureka's read gate: closed for a while after a startup sync that found no instances."""
        wait = self.config.wait_time_in_ms_when_sync_empty
        return wait <= 0 or not self.peer_transfer_empty or now > self.start_ts + wait

    def report(self, now: int) -> SelfPreservation:
        cfg = self.config
        renews = self.renews.count(now)
        wait = cfg.wait_time_in_ms_when_sync_empty
        in_wait = wait > 0 and now <= self.start_ts + wait
        return SelfPreservation(
            enabled=cfg.enable_self_preservation,
            renews_last_minute=renews,
            renews_threshold=self.renews_threshold,
            expected_clients=self.expected_clients,
            renewal_interval_secs=cfg.renewal_interval_secs,
            renewal_percent_threshold=cfg.renewal_percent_threshold,
            below_threshold=renews <= self.renews_threshold and not in_wait,
            lease_expiration_enabled=self.lease_expiration_enabled(now),
            in_startup_wait=in_wait,
            start_ts=self.start_ts,
            startup_wait_ms=wait,
        )
