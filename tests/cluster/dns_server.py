"""A DNS server on loopback for the tests, whose answers a test changes while it runs (dnslib).

``DnsServer.set(name, "A", ["127.0.0.2", ...])`` replaces a name's records of one type; SRV records
are ``(priority, weight, port, target)``. A name with no records of the type asked answers NOERROR
with no records (NXDOMAIN when it has none at all). ``fail(name)`` makes the name answer SERVFAIL
until ``set`` is called for it again. UDP and TCP on one port; every question is counted.
"""

from __future__ import annotations

import threading
from collections import Counter

from dnslib import AAAA, QTYPE, RCODE, RR, SRV, TXT, A, DNSRecord
from dnslib.server import BaseResolver, DNSServer

from tests.ports import free_port

TTL = 1


class _Answers(BaseResolver):
    def __init__(self):
        self.lock = threading.Lock()
        self.records: dict[str, dict[str, list]] = {}
        self.failing: set[str] = set()
        self.questions: Counter[tuple[str, str]] = Counter()

    def resolve(self, request: DNSRecord, handler):
        reply = request.reply()
        name = str(request.q.qname).rstrip(".").lower()
        qtype = QTYPE[request.q.qtype]
        with self.lock:
            self.questions[(name, qtype)] += 1
            if name in self.failing:
                reply.header.rcode = RCODE.SERVFAIL
                return reply
            by_type = self.records.get(name)
            if not by_type:
                reply.header.rcode = RCODE.NXDOMAIN
                return reply
            for value in by_type.get(qtype, []):
                reply.add_answer(RR(request.q.qname, request.q.qtype, rdata=_rdata(qtype, value), ttl=TTL))
        return reply


def _rdata(qtype: str, value):
    if qtype == "A":
        return A(value)
    if qtype == "AAAA":
        return AAAA(value)
    if qtype == "TXT":
        return TXT(value)
    if qtype == "SRV":
        priority, weight, port, target = value
        return SRV(priority, weight, port, target)
    raise ValueError(qtype)


class DnsServer:
    def __init__(self, host: str = "127.0.0.1"):
        self.host = host
        self.port = free_port()
        self.answers = _Answers()
        self._servers = [
            DNSServer(self.answers, address=host, port=self.port, tcp=tcp, logger=_Quiet())
            for tcp in (False, True)
        ]

    @property
    def nameserver(self) -> str:
        """The value of EUREKA_DNS_NAMESERVERS that points at this server."""
        return f"{self.host}:{self.port}"

    def start(self) -> DnsServer:
        for server in self._servers:
            server.start_thread()
        return self

    def stop(self) -> None:
        for server in self._servers:
            server.stop()
            server.server.server_close()

    def set(self, name: str, qtype: str, values: list) -> None:
        with self.answers.lock:
            self.answers.failing.discard(_key(name))
            self.answers.records.setdefault(_key(name), {})[qtype] = list(values)

    def fail(self, name: str) -> None:
        with self.answers.lock:
            self.answers.failing.add(_key(name))

    def asked(self, name: str, qtype: str) -> int:
        with self.answers.lock:
            return self.answers.questions[(_key(name), qtype)]

    def __enter__(self) -> DnsServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def _key(name: str) -> str:
    return name.rstrip(".").lower()


class _Quiet:
    """dnslib's logger interface, saying nothing (its default prints every query)."""

    def __getattr__(self, name):
        return lambda *args, **kwargs: None
