"""The DNS interface on a real loopback port (registry/mesh/dns.py), asked by dnspython's
``dns.query`` and by ``dig`` (Debian's bind9-dnsutils: ``make test`` installs it as root): answers over
UDP and TCP, a large answer cut over UDP and whole over TCP, a catalog change seen by the next query,
and the server's bounds against floods, garbage and too many connections."""

from __future__ import annotations

import contextlib
import random
import re
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass, field

import dns.flags
import dns.message
import dns.query
import dns.rcode
import pytest

from registry.mesh.dns import (
    MALFORMED,
    RATE_LIMITED,
    TCP_CONNECTIONS,
    TCP_CONNECTIONS_PER_ADDRESS,
    TCP_IDLE,
    TCP_QUERY_LIMIT,
    TOO_LONG,
    DnsLimits,
)
from tests.interop.conftest import require_toolchain
from tests.mesh.dns_fleet import catalog_of, config, dns_server, endpoint, fleet, query, records
from tests.ports import free_port

pytestmark = pytest.mark.live

HOST = "127.0.0.1"
TIMEOUT_S = 5.0


@pytest.fixture(scope="module")
def catalog():
    return catalog_of(
        endpoint("ORDERS", "10.0.0.1"),
        endpoint("ORDERS", "10.0.0.2", weight=5),
        endpoint("ORDERS", "10.0.0.3", status="DOWN"),
        endpoint("ORDERS", "fd00::1", port=9090),
        endpoint("PAYMENTS", "10.0.1.1", vip="payments.v2", secure_port=8443),
        *fleet("BIG", 200, first_octet=11),
    )


@pytest.fixture(scope="module")
def server(catalog):
    with dns_server(catalog, config(dns_port=free_port(HOST), dns_rate_per_address=0)) as running:
        yield running


def udp(server, name, rdtype="A", **kwargs):
    return dns.query.udp(query(name, rdtype, **kwargs), HOST, port=server.port, timeout=TIMEOUT_S)


def tcp(server, name, rdtype="A", **kwargs):
    return dns.query.tcp(query(name, rdtype, **kwargs), HOST, port=server.port, timeout=TIMEOUT_S)


# ---------------------------------------------------------------------- dig


@dataclass
class Dig:
    status: str
    flags: set[str]
    answer: list[list[str]] = field(default_factory=list)  # [name, ttl, class, type, data...]
    additional: list[list[str]] = field(default_factory=list)
    size: int = 0
    retried_over_tcp: bool = False
    output: str = ""

    def data(self, rdtype: str) -> list[str]:
        return [" ".join(record[4:]) for record in self.answer if record[3] == rdtype]


def dig(port: int, *args: str) -> Dig:
    require_toolchain(
        "dig", shutil.which("dig") is not None, "apt-get install bind9-dnsutils (make system-deps)"
    )
    command = ["dig", f"@{HOST}", "-p", str(port), "+tries=1", "+time=5", *args]
    output = subprocess.run(command, capture_output=True, text=True, timeout=30, check=False).stdout
    header = re.search(r"status: (\w+)", output)
    flags = re.search(r";; flags: ([a-z ]*);", output)
    size = re.search(r"MSG SIZE\s+rcvd: (\d+)", output)
    assert header and flags and size, output
    sections: dict[str, list[list[str]]] = {"ANSWER": [], "ADDITIONAL": []}
    current = None
    for line in output.splitlines():
        heading = re.match(r";; (\w+) SECTION:", line)
        if heading:
            current = heading.group(1)
        elif not line.strip():
            current = None
        elif current in sections and not line.startswith(";"):
            sections[current].append(line.split())
    return Dig(
        status=header.group(1),
        flags=set(flags.group(1).split()),
        answer=sections["ANSWER"],
        additional=sections["ADDITIONAL"],
        size=int(size.group(1)),
        retried_over_tcp="Truncated, retrying in TCP mode" in output,
        output=output,
    )


# ---------------------------------------------------------------------- answers


def test_dnspython_gets_a_aaaa_and_srv_over_udp_and_tcp(server):
    for ask in (udp, tcp):
        answer = ask(server, "orders.service.eureka")
        assert answer.flags & dns.flags.AA and sorted(records(answer.answer)) == ["10.0.0.1", "10.0.0.2"]
        assert records(ask(server, "ORDERS.service.EUREKA", "AAAA").answer, "AAAA") == ["fd00::1"]
        srv = ask(server, "_orders._tcp.service.eureka", "SRV")
        assert sorted(records(srv.answer, "SRV")) == [
            "1 100 8080 0a000001.addr.eureka.",
            "1 100 9090 fd000000000000000000000000000001.addr.eureka.",
            "1 5 8080 0a000002.addr.eureka.",
        ]
        assert sorted(records(srv.additional)) == ["10.0.0.1", "10.0.0.2"]
        assert records(ask(server, "payments.v2.service.eureka").answer) == ["10.0.1.1"]
        missing = ask(server, "shipping.service.eureka")
        assert missing.rcode() == dns.rcode.NXDOMAIN and missing.authority[0].rdtype == dns.rdatatype.SOA
        assert ask(server, "example.com").rcode() == dns.rcode.REFUSED


def test_dig_gets_a_aaaa_srv_and_nxdomain(server):
    answer = dig(server.port, "orders.service.eureka", "A")
    assert answer.status == "NOERROR" and "aa" in answer.flags
    assert sorted(answer.data("A")) == ["10.0.0.1", "10.0.0.2"]
    assert all(record[1] == "5" for record in answer.answer)
    assert dig(server.port, "orders.service.eureka", "AAAA", "+tcp").data("AAAA") == ["fd00::1"]
    for extra in ((), ("+tcp",)):
        srv = dig(server.port, "_payments.v2._tcp.service.eureka", "SRV", *extra)
        assert srv.data("SRV") == ["1 100 8443 0a000101.addr.eureka."]
        assert [record[4] for record in srv.additional if record[3] == "A"] == ["10.0.1.1"]
    # dig follows the SRV target by itself when asked for it.
    assert dig(server.port, "0a000101.addr.eureka", "A").data("A") == ["10.0.1.1"]
    missing = dig(server.port, "shipping.service.eureka", "A")
    assert missing.status == "NXDOMAIN" and missing.answer == []
    assert dig(server.port, "orders.service.eureka", "TXT").status == "NOERROR"
    assert dig(server.port, "www.example.com", "A").status == "REFUSED"


def test_a_large_answer_is_cut_over_udp_and_whole_over_tcp(server):
    before = server.truncated
    for options, bound in [
        ({}, 512),
        ({"use_edns": 0, "payload": 4096}, 1232),
        ({"use_edns": 0, "payload": 800}, 800),
    ]:
        wire = query("big.service.eureka", **options).to_wire()
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            sock.settimeout(TIMEOUT_S)
            sock.sendto(wire, (HOST, server.port))
            raw, _ = sock.recvfrom(65535)
        cut = dns.message.from_wire(raw)
        assert len(raw) <= bound and cut.flags & dns.flags.TC
        assert 0 < len(records(cut.answer)) < 200
    assert len(records(tcp(server, "big.service.eureka").answer)) == 200
    srv = tcp(server, "big.service.eureka", "SRV")
    assert len(records(srv.answer, "SRV")) == 200 and len(records(srv.additional)) == 200
    assert server.truncated >= before + 3
    # dig sees TC, asks again over TCP by itself, and gets every record.
    retried = dig(server.port, "big.service.eureka", "A")
    assert retried.retried_over_tcp and len(retried.data("A")) == 200
    retried = dig(server.port, "_big._tcp.service.eureka", "SRV", "+bufsize=4096")
    assert retried.retried_over_tcp and len(retried.data("SRV")) == 200
    # Kept to the truncated UDP answer: TC, within what dig offered.
    cut = dig(server.port, "big.service.eureka", "A", "+ignore", "+bufsize=512")
    assert "tc" in cut.flags and cut.size <= 512 and 0 < len(cut.data("A")) < 200
    cut = dig(server.port, "big.service.eureka", "A", "+ignore", "+bufsize=65000")
    assert "tc" in cut.flags and cut.size <= 1232


def test_a_change_in_the_catalog_is_in_the_next_answer(server, catalog):
    added = endpoint("ORDERS", "10.0.0.9")
    catalog.apply(puts=[added])
    try:
        assert "10.0.0.9" in records(udp(server, "orders.service.eureka").answer)
        assert "10.0.0.9" in dig(server.port, "orders.service.eureka", "A").data("A")
        catalog.apply(puts=[endpoint("ORDERS", "10.0.0.9", status="OUT_OF_SERVICE")])
        assert "10.0.0.9" not in records(udp(server, "orders.service.eureka").answer)
    finally:
        catalog.apply(removes=[(added.app, added.instance_id)])
    catalog.apply(puts=[endpoint("SHIPPING", "10.0.4.1")])
    try:
        assert records(tcp(server, "shipping.service.eureka").answer) == ["10.0.4.1"]
    finally:
        catalog.apply(removes=[("SHIPPING", endpoint("SHIPPING", "10.0.4.1").instance_id)])
    assert udp(server, "shipping.service.eureka").rcode() == dns.rcode.NXDOMAIN


def test_garbage_is_ignored_and_the_server_answers_after_it(server):
    before = server.refusals[MALFORMED]
    chance = random.Random(5)
    asked = query("orders.service.eureka").to_wire()
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.settimeout(TIMEOUT_S)
        for _ in range(6):
            for _ in range(50):
                sock.sendto(chance.randbytes(chance.randrange(1, 11)), (HOST, server.port))
            # The next answer is the query's: nothing of the garbage was answered. (Batches of 50: all
            # of them fit the socket's buffer, so the kernel drops none and the count below is exact.)
            sock.sendto(asked, (HOST, server.port))
            assert records(dns.message.from_wire(sock.recvfrom(65535)[0]).answer)
    # Over TCP, a message that is no query closes the connection.
    with socket.create_connection((HOST, server.port), timeout=TIMEOUT_S) as sock:
        sock.sendall(b"\x00\x05hello")
        assert _closed(sock)
    assert records(udp(server, "orders.service.eureka").answer)
    assert records(tcp(server, "orders.service.eureka").answer)
    assert server.refusals[MALFORMED] >= before + 301


# ---------------------------------------------------------------------- bounds


def test_over_the_rate_udp_answers_slip_and_dig_gets_its_answer_over_tcp(catalog):
    with dns_server(catalog, config(dns_port=free_port(HOST), dns_rate_per_address=5)) as server:
        wire = query("big.service.eureka", "SRV", use_edns=0, payload=1232).to_wire()
        started = time.monotonic()
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            sock.settimeout(TIMEOUT_S)
            for _ in range(40):
                sock.sendto(wire, (HOST, server.port))
            answers = [sock.recvfrom(65535)[0] for _ in range(40)]
        elapsed = time.monotonic() - started
        slips = [raw for raw in answers if not dns.message.from_wire(raw).answer]
        for raw in slips:
            assert dns.message.from_wire(raw).flags & dns.flags.TC and len(raw) <= len(wire)
        # 5 at once, then 5 a second while they came.
        assert len(slips) >= 40 - 5 - int(5 * elapsed) - 1
        assert server.refusals[RATE_LIMITED] == len(slips)
        retried = dig(server.port, "big.service.eureka", "SRV")
        assert retried.retried_over_tcp and len(retried.data("SRV")) == 200


def _connect(port: int, source: str) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.settimeout(TIMEOUT_S)
    sock.bind((source, 0))
    sock.connect((HOST, port))
    return sock


def _exchange(sock: socket.socket, message: dns.message.Message) -> dns.message.Message | None:
    """One query over an open TCP connection; None when the server closed it instead of answering."""
    wire = message.to_wire()
    try:
        sock.sendall(len(wire).to_bytes(2, "big") + wire)
        head = sock.recv(2, socket.MSG_WAITALL)
        if len(head) < 2:
            return None
        return dns.message.from_wire(sock.recv(int.from_bytes(head, "big"), socket.MSG_WAITALL))
    except ConnectionError:
        return None


def _closed(sock: socket.socket) -> bool:
    try:
        return sock.recv(1) == b""
    except ConnectionError:
        return True


def test_tcp_connections_over_the_caps_are_closed_at_once(catalog):
    limits = DnsLimits(tcp_connections_max=5, tcp_connections_per_address_max=3)
    with dns_server(catalog, config(dns_port=free_port(HOST)), limits=limits) as server:
        held = [_connect(server.port, "127.0.0.1") for _ in range(3)]
        for sock in held:
            assert _exchange(sock, query("orders.service.eureka")) is not None
        over = _connect(server.port, "127.0.0.1")
        assert _closed(over)
        assert server.refusals[TCP_CONNECTIONS_PER_ADDRESS] == 1
        held += [_connect(server.port, source) for source in ("127.0.0.2", "127.0.0.3")]
        assert all(_exchange(sock, query("orders.service.eureka")) is not None for sock in held[3:])
        assert _closed(_connect(server.port, "127.0.0.4"))
        assert server.refusals[TCP_CONNECTIONS] == 1
        # Those held still answer; one closed makes room.
        assert records(_exchange(held[0], query("orders.service.eureka")).answer)
        held.pop().close()
        deadline = time.monotonic() + TIMEOUT_S
        while server.tcp_connections >= 5 and time.monotonic() < deadline:
            time.sleep(0.01)
        late = _connect(server.port, "127.0.0.4")
        assert records(_exchange(late, query("orders.service.eureka")).answer)
        for sock in [*held, over, late]:
            sock.close()


def test_tcp_connections_are_closed_when_idle_after_their_queries_or_on_a_long_message(catalog):
    limits = DnsLimits(tcp_idle_seconds=0.5, tcp_queries_per_connection=3)
    with dns_server(catalog, config(dns_port=free_port(HOST)), limits=limits) as server:
        silent = _connect(server.port, HOST)
        started = time.monotonic()
        assert _closed(silent)
        assert 0.4 < time.monotonic() - started < 3
        assert server.refusals[TCP_IDLE] == 1
        # A query begun and never finished is closed the same way.
        stalled = _connect(server.port, HOST)
        stalled.sendall(b"\x00\x30\x12\x34")
        assert _closed(stalled)
        assert server.refusals[TCP_IDLE] == 2
        busy = _connect(server.port, HOST)
        assert all(_exchange(busy, query("orders.service.eureka")) is not None for _ in range(3))
        assert _exchange(busy, query("orders.service.eureka")) is None
        assert server.refusals[TCP_QUERY_LIMIT] == 1
        long = _connect(server.port, HOST)
        long.sendall(b"\xff\xff" + b"\0" * 100)
        assert _closed(long)
        assert server.refusals[TOO_LONG] == 1
        for sock in (silent, stalled, busy, long):
            sock.close()
        assert records(tcp(server, "orders.service.eureka").answer)


def test_bound_to_ipv6_loopback_it_answers_over_ipv6(catalog):
    with dns_server(
        catalog, config(dns_port=free_port("::1"), dns_bind="::1", dns_rate_per_address=2)
    ) as server:
        asked = query("orders.service.eureka", "AAAA")
        for ask in (dns.query.udp, dns.query.tcp):
            answer = ask(asked, "::1", port=server.port, timeout=TIMEOUT_S)
            assert records(answer.answer, "AAAA") == ["fd00::1"]
        ns = dns.query.udp(query("ns.eureka", "AAAA"), "::1", port=server.port, timeout=TIMEOUT_S)
        assert records(ns.answer, "AAAA") == ["::1"]
        # The rate is counted per IPv6 address too (2 a second here).
        answers = [dns.query.udp(asked, "::1", port=server.port, timeout=TIMEOUT_S) for _ in range(10)]
        slips = [answer for answer in answers if answer.flags & dns.flags.TC and not answer.answer]
        assert slips and server.refusals[RATE_LIMITED] == len(slips)


def test_a_tcp_client_that_does_not_read_its_answers_is_dropped(catalog):
    limits = DnsLimits(tcp_idle_seconds=0.5, tcp_queries_per_connection=2000)
    with dns_server(catalog, config(dns_port=free_port(HOST)), limits=limits) as server:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.settimeout(TIMEOUT_S)
        sock.connect((HOST, server.port))
        wire = query("big.service.eureka", "SRV").to_wire()
        # 2,000 answers of 13 KB each: far more than the socket buffers between the two hold.
        with contextlib.suppress(OSError):  # the server may drop it before it has sent them all
            sock.sendall((len(wire).to_bytes(2, "big") + wire) * 2000)
        deadline = time.monotonic() + 20
        while server.refusals[TCP_IDLE] == 0 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert server.refusals[TCP_IDLE] == 1
        assert server.tcp_connections == 0
        sock.close()
        assert records(tcp(server, "orders.service.eureka").answer)
