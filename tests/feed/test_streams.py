"""The stream hub (registry/feed/streams.py): coalesced wake-ups, whole and ordered streams, prompt ends.

The registry is the plain lease map; streams run in threads, as they would in a gthread worker.
"""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest

from registry.feed import streams
from registry.feed.query import FeedQuery
from registry.feed.streams import Refusal, StreamBody, StreamHub, Subscription, change_stream, resume_point
from tests.domain.test_core import SEC, T0, inst, make_registry

EVERYTHING = FeedQuery(since=None, apps=None, actions=None)


class Reader:
    """Runs one stream in a thread and keeps what it wrote."""

    def __init__(self, hub, query=EVERYTHING, keepalive_s=30.0, max_seconds=30.0):
        self.hub = hub
        self.subscription = hub.open()
        assert isinstance(self.subscription, Subscription)
        cursor, too_old_at = resume_point(hub.registry, query)
        self.chunks: list[bytes] = []
        self.body = change_stream(hub, self.subscription, query, cursor, too_old_at, keepalive_s, max_seconds)
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        for chunk in self.body:
            self.chunks.append(chunk)

    @property
    def text(self) -> str:
        return b"".join(self.chunks).decode()

    def ids(self) -> list[int]:
        return [int(line[4:]) for line in self.text.splitlines() if line.startswith("id: ")]

    def wait_for(self, predicate, timeout=5.0):
        deadline = time.monotonic() + timeout
        while not predicate(self):
            assert time.monotonic() < deadline, f"timed out; stream so far: {self.text[-500:]!r}"
            time.sleep(0.01)


def test_a_burst_of_a_thousand_changes_wakes_a_stream_a_few_times_and_it_sees_them_all_in_order():
    registry, _ = make_registry()
    hub = StreamHub(registry, max_streams=10, coalesce_ms=100)
    reader = Reader(hub)
    start = hub.wakeups
    for n in range(1_000):
        registry.register(inst(n=n), T0 + n)
    last = registry.changes.last_id
    reader.wait_for(lambda r: r.ids() and r.ids()[-1] == last)
    ids = reader.ids()
    assert ids == sorted(set(ids)) and len(ids) == 1_000
    # One fan-out starts at the first change; the rest of the burst (well under 100 ms here) at most
    # one or two more, however many changes came.
    assert hub.wakeups - start <= 3
    hub.stop()
    reader.thread.join(2)
    assert not reader.thread.is_alive() and hub.open_streams == 0


def test_filters_apply_to_streams_and_an_idle_stream_sends_keep_alive_comments():
    registry, _ = make_registry()
    hub = StreamHub(registry, max_streams=10, coalesce_ms=0)
    query = FeedQuery(since=None, apps=frozenset({"BILLING"}), actions=None)
    reader = Reader(hub, query, keepalive_s=0.05)
    registry.register(inst(app="ORDERS", n=1), T0)
    registry.register(inst(app="BILLING", n=2), T0 + SEC)
    reader.wait_for(lambda r: '"app":"BILLING"' in r.text)
    assert '"app":"ORDERS"' not in reader.text
    reader.wait_for(lambda r: r.text.count(": keep-alive\n\n") >= 2)
    hub.stop()
    reader.thread.join(2)


def test_a_waiting_stream_ends_at_once_when_the_hub_stops():
    registry, _ = make_registry()
    hub = StreamHub(registry, max_streams=10, coalesce_ms=50)
    reader = Reader(hub, keepalive_s=30)
    reader.wait_for(lambda r: r.text.startswith("retry: "))
    started = time.monotonic()
    hub.stop()
    reader.thread.join(2)
    assert not reader.thread.is_alive() and time.monotonic() - started < 1
    assert hub.open() is Refusal.FULL, "a stopping hub opens no new stream"


def test_a_stream_ends_after_its_maximum_duration():
    registry, _ = make_registry()
    hub = StreamHub(registry, max_streams=10, coalesce_ms=0)
    reader = Reader(hub, keepalive_s=30, max_seconds=0.2)
    reader.thread.join(2)
    assert not reader.thread.is_alive() and hub.open_streams == 0


def test_the_hub_refuses_streams_beyond_its_maximum_and_counts_them():
    registry, _ = make_registry()
    hub = StreamHub(registry, max_streams=2, coalesce_ms=0)
    first, second = hub.open(), hub.open()
    assert isinstance(first, Subscription) and isinstance(second, Subscription)
    assert hub.open() is Refusal.FULL and hub.refused == 1
    hub.release(first)
    assert isinstance(hub.open(), Subscription)


def test_one_address_holds_at_most_its_share_of_streams_and_others_still_get_theirs():
    registry, _ = make_registry()
    hub = StreamHub(registry, max_streams=10, coalesce_ms=0, max_per_address=3)
    held = [hub.open("203.0.113.9") for _ in range(3)]
    assert all(isinstance(subscription, Subscription) for subscription in held)

    assert hub.open("203.0.113.9") is Refusal.ADDRESS_FULL
    assert (hub.refused_per_address, hub.refused) == (1, 0)
    assert isinstance(hub.open("198.51.100.7"), Subscription)
    assert (hub.streams_from("203.0.113.9"), hub.open_streams) == (3, 4)

    # A slot freed (twice, as a stream's generator and its body both do) is one slot back.
    hub.release(held[0])
    hub.release(held[0])
    assert hub.streams_from("203.0.113.9") == 2
    assert isinstance(hub.open("203.0.113.9"), Subscription)
    for subscription in held[1:]:
        hub.release(subscription)
    assert hub.streams_from("203.0.113.9") == 1


def test_a_per_address_cap_of_zero_lets_one_address_take_every_stream():
    registry, _ = make_registry()
    hub = StreamHub(registry, max_streams=5, coalesce_ms=0, max_per_address=0)
    assert all(isinstance(hub.open("203.0.113.9"), Subscription) for _ in range(5))
    assert hub.open("203.0.113.9") is Refusal.FULL


def test_a_body_closed_before_it_was_read_frees_its_slot():
    registry, _ = make_registry()
    hub = StreamHub(registry, max_streams=1, coalesce_ms=0)
    subscription = hub.open()
    body = change_stream(hub, subscription, EVERYTHING, registry.changes.last_id, None, 30, 30)
    StreamBody(body, lambda: hub.release(subscription)).close()
    assert hub.open_streams == 0


def test_a_resume_point_past_retention_starts_with_one_too_old_event_carrying_the_newest_id():
    registry, _ = make_registry()
    registry.register(inst(n=1), T0)
    old = registry.changes.last_id - 1
    registry.prune(T0 + registry.config.delta_retention_ms + 1)
    registry.register(inst(n=2), T0 + registry.config.delta_retention_ms + 2)
    hub = StreamHub(registry, max_streams=1, coalesce_ms=0)
    reader = Reader(hub, FeedQuery(since=old, apps=None, actions=None))
    newest = registry.changes.last_id
    reader.wait_for(lambda r: "event: too-old" in r.text)
    assert f"id: {newest}\nevent: too-old\ndata: " in reader.text
    registry.register(inst(n=3), T0 + registry.config.delta_retention_ms + 3)
    reader.wait_for(lambda r: r.ids()[-1] == registry.changes.last_id)
    assert reader.ids() == [newest, registry.changes.last_id]
    hub.stop()
    reader.thread.join(2)


@pytest.mark.skipif(os.name != "posix", reason="SIGTERM")
def test_sigterm_ends_the_streams_after_calling_the_workers_own_handler(monkeypatch):
    called = []
    original = signal.signal(signal.SIGTERM, lambda signum, frame: called.append(signum))
    monkeypatch.setattr(streams, "_hooked", False)
    try:
        registry, _ = make_registry()
        hub = StreamHub(registry, max_streams=10, coalesce_ms=0)
        reader = Reader(hub)
        reader.wait_for(lambda r: r.text.startswith("retry: "))
        os.kill(os.getpid(), signal.SIGTERM)
        reader.thread.join(3)
        assert called == [signal.SIGTERM], "the worker's handler still runs"
        assert not reader.thread.is_alive() and hub.stopping
    finally:
        signal.signal(signal.SIGTERM, original)
