"""Answers from peers and remote regions are read within limits (registry/cluster/transport.py
``read_answer``; issue 34, item 3): a cap on the body once inflated, reached without inflating past
it, and a deadline for the whole answer on top of the per-read timeout. What they hold is bounded too
(registry/wire/answers.py; issue 44, item 1): an answer under the byte cap that expands into 22
million instances is refused at the instance cap. What a peer or region over the limits leaves
behind: the region keeps its last registry and is shown failing, the peer is unreachable (the
start-up sync registers nothing of it and reports it once).

``read_answer`` is driven through httpx's mock transport; the transports through a local HTTP server
(tests/cluster/hostile_remote.py) that answers with a 400 MiB gzip bomb or a byte at a time.
"""

from __future__ import annotations

import gzip
import time
import tracemalloc
import zlib
from collections.abc import Iterator

import httpx
import pytest

from registry.cache.pacing import PACER
from registry.cluster import transport as transport_module
from registry.cluster.region_transport import RegionHttpTransport
from registry.cluster.regions import FetchFailed, RemoteRegions
from registry.cluster.startup import sync_from_peers
from registry.cluster.transport import (
    AnswerLimits,
    AnswerOverLimit,
    PeerTransport,
    PeerUnreachable,
    read_answer,
)
from registry.config.eureka import parse_config
from registry.domain.core import Registry, RegistryRules
from registry.domain.endpoints import Peer, Whitelist
from tests.cluster.hostile_remote import HostileRemote, expanding_answer, gzip_bomb, registry_document
from tests.cluster.test_remote_regions import LIMITS as REGION_LIMITS
from tests.cluster.test_remote_regions import FakeRemote, remote_instance
from tests.cluster.test_replication import FetchingTransport, apps_document
from tests.factories import instance_body

MIB = 1024 * 1024
LIMITS = AnswerLimits(MIB, 5.0, "EUREKA_TEST_MAX_BYTES", "EUREKA_TEST_TOTAL_MS")


def answered(body: bytes, encoding: str | None = "gzip") -> httpx.Client:
    """A client whose every request is answered 200 with ``body`` (sent as it is: already encoded)."""
    headers = {"Content-Type": "application/json"}
    if encoding:
        headers["Content-Encoding"] = encoding

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, headers=headers, stream=httpx.ByteStream(body))

    return httpx.Client(transport=httpx.MockTransport(handler))


def read(client: httpx.Client, limits: AnswerLimits = LIMITS, **kwargs) -> tuple[int, bytearray]:
    return read_answer(client, "GET", "http://remote/eureka/apps/", limits, **kwargs)


@pytest.fixture
def remote() -> Iterator[HostileRemote]:
    server = HostileRemote()
    yield server
    server.close()


# ------------------------------------------------------------------------------ read_answer


def test_a_gzip_bomb_is_refused_at_the_cap_without_inflating_the_rest():
    bomb = gzip_bomb()
    tracemalloc.start()
    try:
        with pytest.raises(AnswerOverLimit) as refused:
            read(answered(bomb))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert str(refused.value) == (
        "answer larger than 1,048,576 bytes once inflated, not read further "
        "(the limit is EUREKA_TEST_MAX_BYTES)"
    )
    # The cap and one inflating step, not the 400 MiB (nor one read's 64 MB) it inflates to.
    assert peak < 4 * MIB, f"{peak / MIB:.1f} MiB traced"


@pytest.mark.parametrize("encoding", ["gzip", "deflate", None])
def test_an_answer_within_the_cap_is_read_whole_in_any_encoding_asked_for(encoding):
    document = registry_document() * 2000  # ~2 MB: more than one inflating step
    encoded = {"gzip": gzip.compress, "deflate": zlib.compress, None: bytes}[encoding](document)
    status, body = read(answered(encoded, encoding), AnswerLimits(4 * MIB, 5.0, "S", "T"))
    assert status == 200 and body == document


def test_an_answer_of_exactly_the_cap_is_read_and_one_byte_more_is_not():
    limits = AnswerLimits(1000, 5.0, "EUREKA_TEST_MAX_BYTES", "T")
    assert read(answered(gzip.compress(b" " * 1000)), limits)[1] == b" " * 1000
    with pytest.raises(AnswerOverLimit, match="larger than 1,000 bytes once inflated"):
        read(answered(gzip.compress(b" " * 1001)), limits)
    with pytest.raises(AnswerOverLimit, match=r"larger than 1,000 bytes, not read further"):
        read(answered(b" " * 1001, None), limits)


def test_a_body_that_does_not_inflate_or_an_unknown_encoding_is_an_http_error():
    with pytest.raises(httpx.DecodingError, match="does not inflate"):
        read(answered(b"not gzip at all", "gzip"))
    with pytest.raises(httpx.DecodingError, match="unsupported Content-Encoding 'br'"):
        read(answered(b"{}", "br"))


def test_the_deadline_covers_the_whole_answer_checked_between_steps():
    ticks = iter(range(100))  # each look at the clock is a second later
    limits = AnswerLimits(MIB, 2.0, "S", "EUREKA_TEST_TOTAL_MS")
    two_steps = gzip.compress(b" " * (transport_module.INFLATE_STEP + 1))
    with pytest.raises(AnswerOverLimit) as refused:
        read(answered(two_steps), limits, clock=lambda: float(next(ticks)))
    assert str(refused.value) == (
        "answer not complete within 2 s, not read further (the limit is EUREKA_TEST_TOTAL_MS)"
    )
    ticks = iter(range(100))
    assert len(read(answered(gzip.compress(b" ")), limits, clock=lambda: float(next(ticks)))[1]) == 1


def test_large_answers_are_read_one_at_a_time():
    """Past LARGE_ANSWER_BYTES an answer waits for its turn: two at once hold one cap of memory."""
    small = gzip.compress(registry_document())
    large = gzip.compress(b" " * (2 * MIB))
    limits = AnswerLimits(4 * MIB, 0.3, "S", "EUREKA_TEST_TOTAL_MS")
    with transport_module._large_answer_turn:  # another large answer being read
        assert read(answered(small), limits)[1] == registry_document()
        started = time.monotonic()
        with pytest.raises(AnswerOverLimit, match="waiting for another large answer.*EUREKA_TEST_TOTAL_MS"):
            read(answered(large), limits)
        assert 0.25 < time.monotonic() - started < 2
    assert len(read(answered(large), limits)[1]) == 2 * MIB


# ------------------------------------------------------------------------- the transports


def region_transport(**limits) -> RegionHttpTransport:
    return RegionHttpTransport(1.0, 2.0, **{"max_answer_bytes": MIB, "total_timeout_s": 5.0, **limits})


def peer_transport(**limits) -> PeerTransport:
    defaults = {
        "max_answer_bytes": MIB,
        "total_timeout_s": 5.0,
        "max_answer_instances": 100_000,
        "max_record_bytes": 262_144,
    }
    return PeerTransport(2.0, **{**defaults, **limits})


def test_a_region_answering_a_gzip_bomb_fails_the_fetch_naming_the_setting(remote):
    transport = region_transport()
    assert b"PAYMENTS" in transport.fetch(Peer(remote.url), delta=False)
    remote.mode = "bomb"
    for delta in (False, True):
        with pytest.raises(FetchFailed) as failed:
            transport.fetch(Peer(remote.url), delta=delta)
        assert failed.value.over_limit
        assert "answer larger than 1,048,576 bytes once inflated" in str(failed.value)
        assert "EUREKA_REMOTE_REGION_MAX_ANSWER_BYTES" in str(failed.value)


def test_a_region_trickling_its_answer_fails_at_the_deadline_not_the_read_timeout(remote):
    remote.mode = "trickle"
    remote.trickle_s = 0.1
    transport = region_transport(total_timeout_s=0.5)
    started = time.monotonic()
    with pytest.raises(FetchFailed) as failed:
        transport.fetch(Peer(remote.url), delta=False)
    # Each byte came within the read timeout (2 s); the whole answer would take a minute.
    assert time.monotonic() - started < 1.5
    assert failed.value.over_limit
    assert str(failed.value) == (
        "GET apps: answer not complete within 0.5 s, not read further "
        "(the limit is EUREKA_REMOTE_REGION_TOTAL_TIMEOUT_MS)"
    )


def test_a_peer_answering_gzip_bombs_is_unreachable_for_every_request(remote):
    transport = peer_transport()
    peer = Peer(remote.url)
    assert transport.post_batch(peer, []) == []
    remote.mode = "bomb"
    requests = {
        "POST peerreplication/batch/": lambda: transport.post_batch(peer, []),
        "GET apps/": lambda: transport.fetch_apps(peer),
        "PUT apps/ORDERS/i-1": lambda: transport.heartbeat(peer, "ORDERS", "i-1"),
    }
    for what, send in requests.items():
        with pytest.raises(PeerUnreachable) as failed:
            send()
        assert failed.value.over_limit and failed.value.congested
        assert str(failed.value) == (
            f"{what}: answer larger than 1,048,576 bytes once inflated, not read further "
            "(the limit is EUREKA_PEER_MAX_ANSWER_BYTES)"
        )


def test_a_peer_trickling_its_registry_fails_at_the_deadline(remote):
    remote.mode = "trickle"
    remote.trickle_s = 0.1
    started = time.monotonic()
    with pytest.raises(PeerUnreachable, match="within 0.5 s.*EUREKA_PEER_TOTAL_TIMEOUT_MS") as failed:
        peer_transport(total_timeout_s=0.5).fetch_apps(Peer(remote.url))
    assert time.monotonic() - started < 1.5
    assert failed.value.over_limit


# ------------------------------------------------------------- what an answer over the limits leaves


class DeltaOverLimit:
    """A region whose full registry is fine and whose delta is over the limits."""

    def __init__(self, remote: FakeRemote):
        self.remote = remote
        self.asked: list[str] = []

    def fetch(self, peer: Peer, delta: bool) -> bytes:
        self.asked.append("delta" if delta else "full")
        if delta:
            raise FetchFailed("GET apps/delta: answer larger than ...", over_limit=True)
        return self.remote.serve(delta=False)


def test_a_region_over_the_limits_keeps_its_last_registry_and_is_not_fetched_whole_instead(clock):
    west = FakeRemote()
    west.add(remote_instance("PAYMENTS", "10.2.0.1"))
    transport = DeltaOverLimit(west)
    regions = RemoteRegions(
        {"us-west": "http://w1:8761/eureka/"}, Whitelist(), transport, clock, limits=REGION_LIMITS
    )
    regions.fetch("us-west")
    regions.fetch("us-west")
    # A full fetch would be larger still: the failing delta ends the fetch.
    assert transport.asked == ["full", "delta"]
    health = regions.health()[0]
    assert health.ready and health.failures == 1
    assert health.last_error == "GET apps/delta: answer larger than ..."
    held = [view.instance.instance_id for _, views in regions.applications(["us-west"]) for view in views]
    assert held == ["10.2.0.1:payments:8080"]


def test_the_start_up_sync_registers_nothing_of_a_peer_over_the_limits_and_reports_it(clock):
    registry = Registry(RegistryRules(), clock())
    over, down = Peer("http://node-b:8761/eureka/"), Peer("http://node-c:8761/eureka/")
    transport = FetchingTransport(
        {
            over.display_url: [PeerUnreachable("GET apps/: answer larger than ...", over_limit=True)],
            down.display_url: [PeerUnreachable("ConnectError: refused")],
        }
    )
    reported: list[tuple[str, str]] = []
    count = sync_from_peers(
        registry,
        [over, down],
        transport,
        clock,
        retries=0,
        wait_ms=0,
        on_failure=lambda peer, error: reported.append((peer.display_url, error)),
    )
    assert count == 0 and registry.reads.size() == 0
    # A peer not up yet is the replication probes' to report.
    assert reported == [(over.display_url, "start-up sync: GET apps/: answer larger than ...")]


def test_the_limits_are_settings():
    config = parse_config(
        {
            "EUREKA_PEER_MAX_ANSWER_BYTES": "1048576",
            "EUREKA_PEER_TOTAL_TIMEOUT_MS": "2000",
            "EUREKA_REMOTE_REGION_MAX_ANSWER_BYTES": "2097152",
            "EUREKA_REMOTE_REGION_TOTAL_TIMEOUT_MS": "3000",
        }
    )
    assert (config.cluster.peer_max_answer_bytes, config.cluster.peer_total_timeout_ms) == (MIB, 2000)
    regions = config.remote_regions
    assert (regions.max_answer_bytes, regions.total_timeout_ms) == (2 * MIB, 3000)
    defaults = parse_config({})
    assert defaults.cluster.peer_max_answer_bytes == defaults.remote_regions.max_answer_bytes == 64 * MIB


# ------------------------------------------------ answers that expand into millions of instances


@pytest.fixture(scope="module")
def _expanding_made_once():
    expanding_answer(), expanding_answer(batch=True)


def test_a_region_answering_millions_of_instances_keeps_its_registry_and_names_the_setting(
    remote, clock, caplog, _expanding_made_once
):
    transport = region_transport(max_answer_bytes=64 * MIB)
    regions = RemoteRegions({"us-west": remote.url}, Whitelist(), transport, clock, limits=REGION_LIMITS)
    regions.fetch("us-west")
    remote.mode = "expanding"
    for _ in range(3):
        regions.fetch("us-west")
    health = regions.health()[0]
    assert health.ready and health.failures == 3 and health.instances == 1
    assert health.last_error == (
        "GET apps/delta: answer holds more than 100,000 instances, not read further "
        "(the limit is EUREKA_REMOTE_REGION_MAX_ANSWER_INSTANCES)"
    )
    held = [view.instance.instance_id for _, views in regions.applications(["us-west"]) for view in views]
    assert held == ["10.2.0.1:payments:8080"]
    # Three failing fetches, one line: the error is logged when it changes.
    assert caplog.text.count("holds more than 100,000 instances") == 1


def test_a_peer_answering_millions_of_instances_is_unreachable_for_every_request(
    remote, _expanding_made_once
):
    transport = peer_transport(max_answer_bytes=64 * MIB)
    peer = Peer(remote.url)
    remote.mode = "expanding"
    with pytest.raises(PeerUnreachable) as failed:
        list(transport.fetch_apps(peer))
    assert failed.value.over_limit and failed.value.congested
    assert str(failed.value) == (
        "GET apps/: answer holds more than 100,000 instances, not read further "
        "(the limit is EUREKA_PEER_MAX_ANSWER_INSTANCES)"
    )
    with pytest.raises(PeerUnreachable, match="^GET apps/delta: answer holds more than 100,000") as failed:
        list(transport.fetch_delta(peer))
    assert failed.value.over_limit
    with pytest.raises(PeerUnreachable) as failed:
        transport.post_batch(peer, [{"action": "Heartbeat"}] * 3)
    assert failed.value.over_limit
    assert str(failed.value) == (
        "POST peerreplication/batch/: answer holds more than 3 items, not read further "
        "(the limit is the 3 items sent)"
    )


def test_the_start_up_sync_registers_nothing_of_an_expanding_peer_and_says_so_once(
    remote, clock, caplog, _expanding_made_once
):
    registry = Registry(RegistryRules(), clock())
    peer = Peer(remote.url)
    remote.mode = "expanding"
    reported: list[str] = []
    count = sync_from_peers(
        registry,
        [peer],
        peer_transport(max_answer_bytes=64 * MIB),
        clock,
        retries=2,
        wait_ms=0,
        on_failure=lambda _, error: reported.append(error),
    )
    assert count == 0 and registry.reads.size() == 0
    assert remote.answered["expanding"] == 3 and len(reported) == 3
    assert reported[0] == (
        "start-up sync: GET apps/: answer holds more than 100,000 instances, not read further "
        "(the limit is EUREKA_PEER_MAX_ANSWER_INSTANCES)"
    )
    warnings = [record for record in caplog.records if record.levelname == "WARNING"]
    assert len(warnings) == 1, [record.getMessage() for record in warnings]
    assert (
        warnings[0].getMessage()
        == f"start-up sync: {peer.display_url}: {reported[0][len('start-up sync: ') :]}"
    )


def test_instances_a_peer_sent_that_cannot_be_read_are_logged_in_one_line(clock, caplog):
    registry = Registry(RegistryRules(), clock())
    peer = Peer("http://node-b:8761/eureka/")
    good = instance_body()["instance"]
    document = {"applications": {"application": [{"name": "ORDERS", "instance": [{}] * 5_000 + [good]}]}}
    transport = FetchingTransport({peer.display_url: [document]})
    assert sync_from_peers(registry, [peer], transport, clock, retries=0, wait_ms=0) == 1
    warnings = [record.getMessage() for record in caplog.records if record.levelname == "WARNING"]
    assert warnings == [
        f"start-up sync: from {peer.display_url}: skipped 5,000 not valid registrations "
        "(the first: Missing instanceId)"
    ]


def test_the_start_up_sync_gives_the_loop_a_turn_as_it_reads_and_registers(clock, monkeypatch):
    ticks = []
    monkeypatch.setattr(PACER, "tick", lambda: ticks.append(1))
    registry = Registry(RegistryRules(), clock())
    peer = Peer("http://node-b:8761/eureka/")
    bodies = [instance_body(host=f"10.0.{n // 256}.{n % 256}") for n in range(1_000)]
    transport = FetchingTransport({peer.display_url: [apps_document(*bodies)]})
    assert sync_from_peers(registry, [peer], transport, clock, retries=0, wait_ms=0) == 1_000
    # Once per instance read, once per instance registered, and every few hundred events parsed.
    assert len(ticks) > 2_000
