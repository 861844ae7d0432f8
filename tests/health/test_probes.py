"""The probes (registry/health/probes.py) against real servers on loopback, and the bounded pool."""

from __future__ import annotations

import ipaddress
import json
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from registry.domain.endpoints import parse_networks
from registry.health.addresses import CLOUD_METADATA, AddressPolicy, interface_addresses
from registry.health.checker import BadResult, ProbeResult, ProbeTarget
from registry.health.probes import ProbePool, Refused, probe, probe_http, probe_tcp, run_round
from registry.runtime.composition import build_node
from tests.health.targets import ERROR, SLOW, HttpTarget, TcpTarget
from tests.ports import free_port

ROOT = Path(__file__).resolve().parents[2]

# The servers of these tests listen on loopback, which probes reach only when the operator allows it.
LOOPBACK = AddressPolicy(parse_networks("127.0.0.0/8"))


@pytest.fixture
def target():
    server = HttpTarget(slow_seconds=1.0)
    yield server
    server.close()


def raw_server(answer: bytes) -> int:
    """A TCP server that answers every connection with ``answer`` and closes it."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    listener.settimeout(5)

    def serve():
        try:
            connection, _ = listener.accept()
        except OSError:
            return
        with connection:
            connection.recv(4096)
            connection.sendall(answer)
        listener.close()

    threading.Thread(target=serve, daemon=True).start()
    return listener.getsockname()[1]


def test_a_2xx_answer_is_healthy_and_the_path_and_query_are_sent(target):
    url = f"http://127.0.0.1:{target.port}/actuator/health?deep=1"
    assert probe_http(url, 1.0, LOOPBACK) == (True, "HTTP 200")
    assert target.answers[-1][1] == "/actuator/health?deep=1"


def test_a_500_answer_is_a_failure(target):
    target.mode = ERROR
    assert probe_http(target.url, 1.0, LOOPBACK) == (False, "HTTP 500")


def test_a_redirect_is_healthy_and_not_followed():
    port = raw_server(
        b"HTTP/1.1 302 Found\r\nLocation: http://127.0.0.1:1/elsewhere\r\nContent-Length: 0\r\n\r\n"
    )
    assert probe_http(f"http://127.0.0.1:{port}/health", 1.0, LOOPBACK) == (True, "HTTP 302")


def test_an_answer_that_is_not_http_is_a_failure():
    port = raw_server(b"SSH-2.0-OpenSSH_9.6\r\n")
    assert probe_http(f"http://127.0.0.1:{port}/", 1.0, LOOPBACK) == (False, "bad HTTP answer")


def test_a_slow_answer_fails_at_the_timeout_not_later(target):
    target.mode = SLOW
    started = time.monotonic()
    assert probe_http(target.url, 0.2, LOOPBACK) == (False, "timed out after 0.2s")
    assert time.monotonic() - started < 0.6


def test_a_closed_port_is_refused():
    port = free_port()
    assert probe_http(f"http://127.0.0.1:{port}/", 1.0, LOOPBACK) == (False, "connection refused")
    assert probe_tcp("127.0.0.1", port, 1.0, LOOPBACK) == (False, "connection refused")


def test_tcp_connects_to_a_listening_port():
    server = TcpTarget()
    try:
        assert probe_tcp("127.0.0.1", server.port, 1.0, LOOPBACK) == (True, "connected")
    finally:
        server.close()


def test_a_probe_never_raises_and_measures_its_latency(target):
    target.mode = SLOW
    broken = ProbeTarget("A", "i-1", 7, "http", "http://127.0.0.1:notaport/", "127.0.0.1", 0, 500)
    result = probe(broken, LOOPBACK)
    assert result.ok is False and result.claim == 7 and result.reason
    slow = ProbeTarget("A", "i-2", 8, "http", target.url, "127.0.0.1", target.port, 150)
    result = probe(slow, LOOPBACK)
    assert result.ok is False and 140 <= result.latency_ms < 600


def test_the_pool_never_runs_more_probes_at_once_than_its_bound(target):
    target.mode = SLOW
    target.slow_seconds = 0.2
    pool = ProbePool(4, LOOPBACK)
    targets = [
        ProbeTarget("A", f"i-{n}", n + 1, "http", target.url, "127.0.0.1", target.port, 1000)
        for n in range(12)
    ]
    started = time.monotonic()
    results = run_round(targets, pool, 5.0)
    took = time.monotonic() - started
    pool.shutdown()
    assert len(results) == 12 and all(result.ok for result in results)
    assert pool.max_active == 4
    assert took >= 0.55, "12 probes of 0.2 s, 4 at a time, take three rounds"


# --- Where probes may go (registry/health/addresses.py) ---------------------------------------------

SECURE = AddressPolicy()  # the default: EUREKA_HEALTH_CHECK_ALLOWED_NETWORKS empty
LOOPBACK_REASON = (
    "127.0.0.1 is a loopback address: not probed unless EUREKA_HEALTH_CHECK_ALLOWED_NETWORKS allows it"
)


def http_target(url: str, timeout_ms: int = 1000) -> ProbeTarget:
    return ProbeTarget("A", "i-1", 1, "http", url, "", 0, timeout_ms)


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost", "0.0.0.0", "[::ffff:127.0.0.1]", "127.1.2.3"])
def test_loopback_is_refused_and_nothing_is_sent_unless_an_allowed_network_holds_it(target, host):
    port = target.port
    if host == "127.1.2.3":
        target.close()  # a loopback address other than the server's: the answer would be "refused"
        port = free_port()
    result = probe(http_target(f"http://{host}:{port}/health"), SECURE)
    assert result.refused and not result.ok
    assert "not probed unless EUREKA_HEALTH_CHECK_ALLOWED_NETWORKS allows it" in result.reason
    assert ("loopback" in result.reason) or ("unspecified" in result.reason)
    assert target.count() == 0, "the probe reached the server on loopback"
    if host not in ("127.1.2.3", "0.0.0.0"):  # 0.0.0.0 is not in 127.0.0.0/8: refused still
        allowed = probe(http_target(f"http://{host}:{port}/health"), LOOPBACK)
        assert (allowed.ok, allowed.refused, allowed.reason) == (True, False, "HTTP 200")
        assert target.count(200) == 1


def test_a_tcp_probe_to_loopback_is_refused_before_any_connection():
    server = TcpTarget()
    try:
        result = probe(ProbeTarget("A", "i-1", 1, "tcp", None, "127.0.0.1", server.port, 500), SECURE)
        assert result.refused and result.reason == LOOPBACK_REASON
        time.sleep(0.1)  # the listener's accept loop polls every 50 ms
        assert server.accepted == 0
        assert probe_tcp("127.0.0.1", server.port, 1.0, LOOPBACK) == (True, "connected")
    finally:
        server.close()


@pytest.mark.parametrize(
    ("address", "problem"),
    [
        ("169.254.10.1", "a link-local address"),
        ("[fe80::1]", "a link-local address"),
        ("[64:ff9b::7f00:1]", "a loopback address"),  # 127.0.0.1 through a NAT64 gateway
        ("[::1]", "a loopback address"),
        ("[::]", "an unspecified address"),
        ("224.0.0.1", "a multicast or broadcast address"),
        ("255.255.255.255", "a multicast or broadcast address"),
    ],
)
def test_link_local_and_other_non_instance_addresses_are_refused_without_a_connection(address, problem):
    started = time.monotonic()
    with pytest.raises(Refused, match=problem):
        probe_http(f"http://{address}/latest/meta-data/", 5.0, SECURE)
    # Refused before connecting: no wait for a connection that could never be answered.
    assert time.monotonic() - started < 0.5


# Cloud metadata services, several outside 169.254.0.0/16 (registry/health/addresses.py, CLOUD_METADATA).
METADATA_HOSTS = [
    "169.254.169.254",
    "[fd00:ec2::254]",  # AWS IMDS over IPv6
    "[fd20:ce::254]",  # GCP over IPv6
    "100.100.100.200",  # Alibaba Cloud
    "168.63.129.16",  # Azure WireServer
    "192.0.0.192",  # Oracle Cloud Classic
    "[::ffff:100.100.100.200]",
    "[64:ff9b::a9fe:a9fe]",  # 169.254.169.254 through a NAT64 gateway
]


@pytest.mark.parametrize("host", METADATA_HOSTS)
def test_cloud_metadata_addresses_are_refused_by_default_without_a_connection(host):
    started = time.monotonic()
    for check in (
        lambda: probe_http(f"http://{host}/latest/meta-data/iam/security-credentials/", 5.0, SECURE),
        lambda: probe_tcp(host, 80, 5.0, SECURE),
    ):
        with pytest.raises(Refused, match="is a cloud metadata address: not probed unless "):
            check()
    assert time.monotonic() - started < 0.5


@pytest.mark.parametrize("answer", ["fd00:ec2::254", "100.100.100.200", "168.63.129.16"])
def test_a_name_that_resolves_to_a_cloud_metadata_address_is_refused(monkeypatch, answer):
    family = socket.AF_INET6 if ":" in answer else socket.AF_INET

    def resolve(host, port, *args, **kwargs):
        return [(family, socket.SOCK_STREAM, 6, "", (answer, port))]

    monkeypatch.setattr(socket, "getaddrinfo", resolve)
    result = probe(http_target("http://metadata.example/computeMetadata/v1/", timeout_ms=5000), SECURE)
    assert result.refused and not result.ok
    assert result.reason.startswith(f"{answer} is a cloud metadata address")


def test_only_an_allowed_network_of_the_one_address_opens_a_cloud_metadata_address():
    wide = AddressPolicy(
        parse_networks("0.0.0.0/0,::/0,169.254.0.0/16,100.64.0.0/10,fd00::/8"), interfaces=None
    )
    for address in CLOUD_METADATA:
        assert wide.refusal(address) == (
            f"{address} is a cloud metadata address: not probed unless "
            f"EUREKA_HEALTH_CHECK_ALLOWED_NETWORKS lists {address}/{address.max_prefixlen} itself"
        )
    assert wide.refusal(ipaddress.ip_address("169.254.10.1")) is None  # the wide network still counts
    named = AddressPolicy(parse_networks("168.63.129.16,fd00:ec2::254/128"), interfaces=None)
    assert named.refusal(ipaddress.ip_address("168.63.129.16")) is None
    assert named.refusal(ipaddress.ip_address("fd00:ec2::254")) is None
    assert named.refusal(ipaddress.ip_address("100.100.100.200")) is not None


def test_the_nodes_own_addresses_are_refused_unless_allowed():
    own = AddressPolicy(own=["198.51.100.7"], interfaces=None)
    reason = own.refusal(ipaddress.ip_address("198.51.100.7"))
    assert reason == (
        "198.51.100.7 is one of the node's own addresses: not probed unless "
        "EUREKA_HEALTH_CHECK_ALLOWED_NETWORKS allows it"
    )
    assert own.refusal(ipaddress.ip_address("198.51.100.8")) is None
    with pytest.raises(Refused, match="node's own"):
        probe_tcp("198.51.100.7", 8761, 5.0, own)
    allowed = AddressPolicy(parse_networks("198.51.100.0/24"), own=["198.51.100.7"], interfaces=None)
    assert allowed.refusal(ipaddress.ip_address("198.51.100.7")) is None


def test_every_address_of_the_hosts_interfaces_is_the_nodes_own():
    found = interface_addresses()
    assert ipaddress.ip_address("127.0.0.1") in found
    for address in found:
        assert SECURE.refusal(address) is not None, address


def test_the_nodes_policy_takes_its_ip_setting_and_where_it_listens(eureka_options, clock):
    eureka_options = eureka_options.with_changes(
        health_checks__enabled=True, identity__instance_ip_address="198.51.100.7"
    )
    node = build_node(eureka_options, clock=clock)
    try:
        assert "node's own" in node.health_policy.refusal(ipaddress.ip_address("198.51.100.7"))
        assert node.health_policy.refusal(ipaddress.ip_address("198.51.100.9")) is None
        node.start_cluster([("198.51.100.9", 8761)])  # gunicorn's post_worker_init: its listen sockets
        assert "node's own" in node.health_policy.refusal(ipaddress.ip_address("198.51.100.9"))
    finally:
        node.stop()


def test_a_name_is_resolved_once_and_the_probe_connects_to_the_address_judged(target, monkeypatch):
    """DNS rebinding: the name first resolves to an allowed address, then to loopback. The probe must
    not look it up again to connect (the server on loopback would then be reached)."""
    lookups = []

    def rebinding_getaddrinfo(host, port, *args, **kwargs):
        lookups.append(host)
        answer = "198.51.100.1" if len(lookups) == 1 else "127.0.0.1"  # 198.51.100.0/24: TEST-NET-2
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (answer, port))]

    monkeypatch.setattr(socket, "getaddrinfo", rebinding_getaddrinfo)
    result = probe(http_target(f"http://rebind.example:{target.port}/health", timeout_ms=300), SECURE)
    assert lookups == ["rebind.example"]
    assert not result.ok and not result.refused  # 198.51.100.1 was probed: it did not answer
    assert target.count() == 0


def test_a_name_with_an_allowed_and_a_refused_address_is_probed_at_the_allowed_one_only(monkeypatch):
    server = TcpTarget()
    try:
        monkeypatch.setattr(
            socket,
            "getaddrinfo",
            lambda host, port, *a, **k: [
                (socket.AF_INET, socket.SOCK_STREAM, 6, "", ("169.254.169.254", port)),
                (socket.AF_INET, socket.SOCK_STREAM, 6, "", ("127.0.0.1", port)),
            ],
        )
        assert probe_tcp("svc.example", server.port, 1.0, LOOPBACK) == (True, "connected")
        with pytest.raises(Refused, match="169.254.169.254 is a cloud metadata address"):
            probe_tcp("svc.example", server.port, 1.0, SECURE)
    finally:
        server.close()


def test_under_gevent_a_name_is_resolved_off_the_event_loop_and_checked():
    """The node's process: sockets patched by gevent. The lookup runs in the probes' own native
    threads (not on the event loop, not in the hub's pool) and its answer is judged like any other."""
    script = """
from gevent import monkey; monkey.patch_all()
import json
from registry.health.addresses import AddressPolicy
from registry.domain.endpoints import parse_networks
from registry.health import probes
from tests.health.targets import HttpTarget
server = HttpTarget()
url = f"http://localhost:{server.port}/health"
allowed = probes.probe_http(url, 2.0, AddressPolicy(parse_networks("127.0.0.0/8,::1/128")))
try:
    probes.probe_http(url, 2.0, AddressPolicy())
    refused = None
except probes.Refused as exc:
    refused = str(exc)
pool = probes._lookup_slots is not None and probes._lookup_slots.busy == 0
print(json.dumps({"allowed": allowed, "refused": refused, "pool": pool, "requests": server.count()}))
"""
    result = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr[-2000:]
    found = json.loads(result.stdout.strip().splitlines()[-1])
    assert found["allowed"] == [True, "HTTP 200"] and found["pool"] is True
    assert "loopback" in found["refused"] and found["requests"] == 1


def test_a_refused_result_travels_to_the_node_and_back():
    result = probe(http_target("http://169.254.169.254/"), SECURE)
    assert ProbeResult.from_dict(result.as_dict()) == result and result.refused
    with pytest.raises(BadResult):
        ProbeResult.from_dict({**result.as_dict(), "refused": "yes"})
    # A worker of the release before this one sends no "refused": a plain result.
    legacy = {key: value for key, value in result.as_dict().items() if key != "refused"}
    assert ProbeResult.from_dict(legacy).refused is False


def test_a_celery_workers_probes_keep_the_same_rules(settings, monkeypatch):
    """Production mode: the worker's pool judges addresses by the same settings, refuses the node's
    address as it reaches it (EUREKA_CONTROL_URL) and, each round, what the node reports as its own."""
    from registry.runtime import tasks

    settings.EUREKA = settings.EUREKA.with_changes(
        identity__instance_ip_address="198.51.100.7",
        health_checks__allowed_networks=(),
        control_url="http://198.51.100.8:8761",
        redis__url="redis://127.0.0.1:9/3",  # never connected to here
    )
    tasks._health_context.cache_clear()
    try:
        _, _, pool = tasks._health_context()
        for own in ("198.51.100.7", "198.51.100.8"):
            assert "node's own" in pool.policy.refusal(ipaddress.ip_address(own))
        assert "loopback" in pool.policy.refusal(ipaddress.ip_address("127.0.0.1"))
        assert pool.policy.refusal(ipaddress.ip_address("198.51.100.9")) is None

        class Answer:
            def raise_for_status(self):
                pass

            def json(self):
                return {"targets": [], "node_addresses": ["198.51.100.9"]}

        class Control:
            def post(self, path, **kwargs):
                return Answer()

        class Lock:
            def acquire(self, blocking):
                return True

            def release(self):
                pass

        class Redis:
            def lock(self, *args, **kwargs):
                return Lock()

        tasks._health_context.cache_clear()
        monkeypatch.setattr(tasks, "_health_context", lambda: (Redis(), Control(), pool))
        assert tasks.run_health_checks() == 0
        assert "node's own" in pool.policy.refusal(ipaddress.ip_address("198.51.100.9"))
    finally:
        pool.shutdown()


def test_under_gevent_slow_lookups_keep_to_the_deadline_and_leave_the_loop_free():
    """A name whose DNS server takes 0.5 s (ten probes at once, 0.2 s each): every probe fails at its
    deadline with the reason, the event loop keeps turning meanwhile, at most the lookup threads' number
    of lookups run at once, and their threads come back when the lookups end."""
    script = """
from gevent import monkey; monkey.patch_all()
import json, time
import gevent
from registry.health import probes
from registry.health.addresses import AddressPolicy
real_sleep = monkey.get_original("time", "sleep")
probes._resolve("localhost", 80, time.monotonic() + 5, 5)  # makes the lookup threads
slots = probes._lookup_slots
def slow_getaddrinfo(host, port, **kwargs):
    real_sleep(0.5)  # blocks a native thread, as a resolver waiting for DNS does
    return [(2, 1, 6, "", ("198.51.100.1", port))]
slots._getaddrinfo = slow_getaddrinfo
ticks = []
ticker = gevent.spawn(lambda: [ticks.append(gevent.sleep(0.01)) for _ in range(1000)])
started = time.monotonic()
probing = [gevent.spawn(probes.probe_tcp, "slow.example", 80, 0.2, AddressPolicy()) for _ in range(10)]
gevent.joinall(probing)
elapsed = time.monotonic() - started
in_flight = slots.busy
gevent.sleep(0.6)
ticker.kill()
print(json.dumps({"results": [g.value for g in probing], "elapsed": elapsed, "ticks": len(ticks),
                  "in_flight": in_flight, "after": slots.busy}))
"""
    result = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr[-2000:]
    found = json.loads(result.stdout.strip().splitlines()[-1])
    reasons = sorted(reason for ok, reason in found["results"] if not ok)
    assert len(reasons) == 10
    assert reasons.count("host name lookup took over 0.2s") == 8
    assert reasons.count("host name lookup: all 8 lookup threads busy for 0.2s") == 2
    assert found["elapsed"] < 0.45, "a probe outlived its deadline"
    assert found["ticks"] >= 0.5 * found["elapsed"] / 0.01, "the event loop stalled during the lookups"
    assert found["in_flight"] == 8 and found["after"] == 0
