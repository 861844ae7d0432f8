"""The DNS interface's handling of bytes without sockets (registry/mesh/dns.py ``DnsHandler``): hostile
and malformed input, the UDP size bound, the per-address rate limit on a fake clock, the ``allowed``
check, and each refusal counted and logged at most once a minute."""

from __future__ import annotations

import logging
import random
import struct

import dns.flags
import dns.message
import dns.opcode
import dns.rcode
import pytest

from registry.domain.refusals import RefusalLines
from registry.mesh import dns as dns_module
from registry.mesh.catalog import Catalog
from registry.mesh.dns import (
    EDNS_VERSION,
    INTERNAL_ERROR,
    MALFORMED,
    NOT_A_QUERY,
    NOT_ALLOWED,
    NOT_READY,
    OPCODE,
    QUESTION_COUNT,
    RATE_LIMITED,
    REFUSALS,
    ROTATIONS,
    TOO_LONG,
    DnsHandler,
    DnsTally,
    RateLimiter,
)
from tests.mesh.dns_fleet import catalog_of, config, endpoint, fleet, query, records

CLIENT = "192.0.2.10"


class Clock:
    def __init__(self, now: float = 1000.0):
        self.now = now

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock():
    return Clock()


def handler_for(catalog, clock, rate=0, **kwargs):
    tally = DnsTally(RefusalLines(60.0, clock))
    return DnsHandler(catalog, config(dns_rate_per_address=rate), clock=clock, tally=tally, **kwargs)


@pytest.fixture
def handler(clock):
    return handler_for(catalog_of(endpoint("ORDERS", "10.0.0.1"), *fleet("BIG", 200, first_octet=11)), clock)


def udp(handler, wire, address=CLIENT):
    return handler.handle(wire, address, tcp=False)[0]


def parsed(wire):
    return dns.message.from_wire(wire)


def counted(handler):
    return {kind: count for kind, count in handler.tally.totals.items() if count}


def test_a_query_is_answered(handler):
    answer = parsed(udp(handler, query("orders.service.eureka").to_wire()))
    assert records(answer.answer) == ["10.0.0.1"]
    assert handler.queries == {"udp": 1, "tcp": 0}
    assert counted(handler) == {}


def test_bytes_too_short_for_a_header_are_dropped(handler):
    for wire in (b"", b"\x00", b"\x12\x34\x01\x00\x00\x01\x00\x00\x00\x00\x00"):
        assert handler.handle(wire, CLIENT, tcp=False) == (None, False)
    assert counted(handler) == {MALFORMED: 3}


def test_a_message_whose_header_parses_but_not_the_rest_gets_a_bare_formerr(handler):
    good = query("orders.service.eureka", id=0x4242).to_wire()
    for wire in (good[:-3], good + b"junk", good[:12] + b"\xc0\x0c\x00\x01\x00\x01"):
        answer, was_query = handler.handle(wire, CLIENT, tcp=False)
        assert not was_query and len(answer) == 12
        header = parsed(answer)
        assert header.id == 0x4242 and header.rcode() == dns.rcode.FORMERR
        assert header.flags & dns.flags.QR and header.flags & dns.flags.RD
    assert counted(handler) == {MALFORMED: 3}


def test_a_response_sent_to_the_port_is_dropped(handler):
    response = dns.message.make_response(query("orders.service.eureka"))
    assert handler.handle(response.to_wire(), CLIENT, tcp=False) == (None, False)
    assert counted(handler) == {NOT_A_QUERY: 1}


def test_a_query_without_exactly_one_question_gets_formerr(handler):
    none = query("orders.service.eureka")
    none.question = []
    two = query("orders.service.eureka")
    two.question = two.question * 2 + [query("big.service.eureka").question[0]]
    for message in (none, two):
        answer = parsed(udp(handler, message.to_wire()))
        assert answer.rcode() == dns.rcode.FORMERR and answer.id == message.id
    assert counted(handler) == {QUESTION_COUNT: 2}


@pytest.mark.parametrize(
    "opcode", [dns.opcode.NOTIFY, dns.opcode.STATUS, dns.opcode.IQUERY, dns.opcode.UPDATE]
)
def test_another_opcode_than_query_gets_notimp(handler, opcode):
    message = query("eureka", "SOA")
    message.set_opcode(opcode)
    answer = parsed(udp(handler, message.to_wire()))
    assert answer.rcode() == dns.rcode.NOTIMP and answer.opcode() == opcode
    assert counted(handler) == {OPCODE: 1}


def test_an_edns_version_other_than_0_gets_badvers(handler):
    answer = parsed(udp(handler, query("orders.service.eureka", use_edns=1).to_wire()))
    assert answer.rcode() == dns.rcode.BADVERS and answer.edns == 0 and answer.answer == []
    assert counted(handler) == {EDNS_VERSION: 1}


def test_a_message_longer_than_a_query_is_dropped(handler):
    long = query("orders.service.eureka").to_wire() + b"\0" * 5000
    assert handler.handle(long, CLIENT, tcp=True) == (None, False)
    assert counted(handler) == {TOO_LONG: 1}


def test_names_over_dnspythons_bounds_are_formerr_not_an_exception(handler):
    header = struct.pack("!HHHHHH", 7, 0x0100, 1, 0, 0, 0)
    long_label = header + b"\x40" + b"a" * 64 + b"\x00\x00\x01\x00\x01"
    long_name = header + (b"\x3f" + b"a" * 63) * 4 + b"\x00\x00\x01\x00\x01"
    pointer_loop = header + b"\xc0\x0c\x00\x01\x00\x01"
    bad_label_type = header + b"\x80abc\x00\x00\x01\x00\x01"
    for wire in (long_label, long_name, pointer_loop, bad_label_type):
        answer = parsed(udp(handler, wire))
        assert answer.rcode() == dns.rcode.FORMERR and answer.id == 7
    assert counted(handler) == {MALFORMED: 4}


def test_random_and_mangled_bytes_never_raise_and_never_answer_bigger_than_allowed(handler):
    """Garbage, and real queries with bytes changed: every answer within the UDP bound (512 bytes, as
    none of these offers more), none an exception (an error would be counted as internal_error)."""
    chance = random.Random(47)
    base = [
        query(name, rdtype).to_wire()
        for name, rdtype in [
            ("big.service.eureka", "A"),
            ("_big._tcp.service.eureka", "SRV"),
            ("eureka", "SOA"),
        ]
    ]
    for round_ in range(3000):
        if round_ % 3 == 0:
            wire = chance.randbytes(chance.randrange(0, 600))
        else:
            wire = bytearray(chance.choice(base))
            for _ in range(chance.randrange(1, 6)):
                wire[chance.randrange(len(wire))] = chance.randrange(256)
            wire = bytes(wire)
        answer = udp(handler, wire)
        if answer is not None:
            offered = 512
            try:
                asked = dns.message.from_wire(wire)
                offered = max(512, min(asked.payload, 1232)) if asked.edns >= 0 else 512
            except Exception:
                pass
            assert len(answer) <= offered
    assert handler.tally.totals[INTERNAL_ERROR] == 0
    assert sum(handler.tally.totals.values()) > 0


def test_over_udp_an_answer_is_never_bigger_than_the_size_offered(handler):
    for payload in (None, 512, 800, 1232, 4096, 65535):
        options = {} if payload is None else {"use_edns": 0, "payload": payload}
        for name, rdtype in [("big.service.eureka", "A"), ("big.service.eureka", "SRV")]:
            answer, _ = handler.handle(query(name, rdtype, **options).to_wire(), CLIENT, tcp=False)
            assert len(answer) <= min(max(payload or 512, 512), 1232)
            assert parsed(answer).flags & dns.flags.TC
    whole, _ = handler.handle(query("big.service.eureka", "SRV").to_wire(), CLIENT, tcp=True)
    assert len(records(parsed(whole).answer, "SRV")) == 200 and len(records(parsed(whole).additional)) == 200
    assert handler.truncated == 12


def test_over_the_rate_a_udp_client_gets_tc_and_no_record_until_its_bucket_fills(clock):
    handler = handler_for(catalog_of(*fleet("BIG", 200)), clock, rate=3)
    asked = query("big.service.eureka", "SRV", use_edns=0, payload=1232).to_wire()
    full = [udp(handler, asked) for _ in range(3)]
    assert all(len(records(parsed(answer).answer, "SRV")) > 0 for answer in full)
    slips = [udp(handler, asked) for _ in range(5)]
    for slip in slips:
        cut = parsed(slip)
        assert cut.flags & dns.flags.TC and cut.answer == cut.additional == []
        # No amplification: the slip is the question sent back with a header, no larger.
        assert len(slip) <= len(asked)
    assert handler.tally.totals[RATE_LIMITED] == 5
    # Another address has its own bucket; TCP is not rate-limited (a spoofed address cannot use it).
    assert records(parsed(udp(handler, asked, "192.0.2.11")).answer, "SRV")
    assert records(parsed(handler.handle(asked, CLIENT, tcp=True)[0]).answer, "SRV")
    clock.now += 1 / 3
    assert records(parsed(udp(handler, asked)).answer, "SRV")
    assert parsed(udp(handler, asked)).flags & dns.flags.TC
    clock.now += 10
    assert all(records(parsed(udp(handler, asked)).answer, "SRV") for _ in range(3))


def test_over_the_rate_what_is_not_a_good_query_is_dropped(clock):
    handler = handler_for(catalog_of(endpoint()), clock, rate=1)
    assert udp(handler, b"\x00\x01\x00\x00" + b"\x00" * 8 + b"\x07") is not None
    assert udp(handler, b"\x00\x01\x00\x00" + b"\x00" * 8 + b"\x07") is None
    notify = query("eureka", "SOA")
    notify.set_opcode(dns.opcode.NOTIFY)
    assert udp(handler, notify.to_wire()) is None


def test_a_rate_of_zero_means_no_limit(clock):
    handler = handler_for(catalog_of(endpoint()), clock, rate=0)
    asked = query("orders.service.eureka").to_wire()
    assert all(records(parsed(udp(handler, asked)).answer) for _ in range(1000))
    assert len(handler.rate) == 0


def test_the_rate_limiter_forgets_the_address_seen_longest_ago_beyond_its_size(clock):
    limiter = RateLimiter(2, clock, addresses_max=4)
    for n in range(10):
        assert limiter.allow(f"192.0.2.{n}")
    assert len(limiter) == 4
    assert limiter.allow("192.0.2.9") and not limiter.allow("192.0.2.9")


def test_a_client_allowed_refuses_gets_refused(clock):
    catalog = catalog_of(endpoint())
    handler = handler_for(catalog, clock, allowed=lambda address: address == "127.0.0.1")
    asked = query("orders.service.eureka").to_wire()
    assert records(parsed(udp(handler, asked, "127.0.0.1")).answer) == ["10.0.0.1"]
    refused = parsed(udp(handler, asked, "192.0.2.99"))
    assert refused.rcode() == dns.rcode.REFUSED and refused.answer == []
    assert counted(handler) == {NOT_ALLOWED: 1}


def test_an_allowed_check_that_fails_refuses(clock):
    def broken(address):
        raise RuntimeError("no accounts")

    handler = handler_for(catalog_of(endpoint()), clock, allowed=broken)
    assert parsed(udp(handler, query("orders.service.eureka").to_wire())).rcode() == dns.rcode.REFUSED
    assert counted(handler) == {INTERNAL_ERROR: 1, NOT_ALLOWED: 1}


def test_before_the_first_snapshot_every_query_gets_servfail(clock):
    handler = handler_for(Catalog(), clock)
    assert parsed(udp(handler, query("orders.service.eureka").to_wire())).rcode() == dns.rcode.SERVFAIL
    assert counted(handler) == {NOT_READY: 1}


def test_an_error_in_the_answer_is_servfail_and_counted(handler, monkeypatch):
    def broken(*args):
        raise ValueError("a bug")

    monkeypatch.setattr(handler.zone, "answer", broken)
    answer, was_query = handler.handle(query("orders.service.eureka", id=9).to_wire(), CLIENT, tcp=False)
    assert was_query and parsed(answer).rcode() == dns.rcode.SERVFAIL and parsed(answer).id == 9
    assert counted(handler) == {INTERNAL_ERROR: 1}


def test_each_refusal_kind_is_logged_at_most_once_a_minute_with_its_count(handler, clock, caplog):
    caplog.set_level(logging.WARNING, logger="registry.mesh.dns")
    for _ in range(100):
        udp(handler, b"\x01")
        udp(handler, query("example.com").to_wire())
    lines = [record for record in caplog.records if record.name == "registry.mesh.dns"]
    assert [(line.kind, line.refusals) for line in lines] == [(MALFORMED, 1), ("outside_domain", 1)]
    assert "192.0.2.10" in lines[0].getMessage()
    clock.now += 61
    udp(handler, b"\x01")
    last = caplog.records[-1]
    assert (last.kind, last.refusals) == (MALFORMED, 100)
    assert "99 more since the last such line" in last.getMessage()
    assert handler.tally.totals[MALFORMED] == 101 and handler.tally.totals["outside_domain"] == 100


def test_every_refusal_kind_has_a_line_and_starts_at_zero():
    tally = DnsTally()
    assert set(tally.totals) == set(REFUSALS) and not any(tally.totals.values())
    assert all(len(words.split()) >= 5 for words in REFUSALS.values())


# ------------------------------------------------------------------ answers kept per catalog version


def test_a_repeated_query_gets_the_kept_answer_behind_its_own_id(handler, monkeypatch):
    rendered = []
    real_render = dns_module.render
    monkeypatch.setattr(dns_module, "render", lambda *a: rendered.append(1) or real_render(*a))
    answers = []
    for _ in range(3 * ROTATIONS):
        ask = query("orders.service.eureka")
        answers.append(parsed(udp(handler, ask.to_wire())))
        assert answers[-1].id == ask.id
    # One rendering per rotation, then the same bytes again.
    assert len(rendered) == ROTATIONS
    assert records(answers[0].answer) == records(answers[ROTATIONS].answer) == ["10.0.0.1"]


def test_a_catalog_change_is_in_the_next_answer_though_answers_are_kept():
    catalog = catalog_of(endpoint("ORDERS", "10.0.0.1"))
    handler = handler_for(catalog, Clock())
    for _ in range(ROTATIONS + 1):
        assert records(parsed(udp(handler, query("orders.service.eureka").to_wire())).answer) == ["10.0.0.1"]
    catalog.apply(puts=[endpoint("ORDERS", "10.0.0.2")])
    assert sorted(records(parsed(udp(handler, query("orders.service.eureka").to_wire())).answer)) == [
        "10.0.0.1",
        "10.0.0.2",
    ]


def test_the_rotations_between_them_serve_every_instance_over_udp(handler):
    """200 instances: each UDP answer holds a few dozen; the rotations start spread over the list."""
    served = set()
    for _ in range(ROTATIONS):
        answer = parsed(udp(handler, query("big.service.eureka").to_wire()))
        assert answer.flags & dns.flags.TC
        served |= set(records(answer.answer))
    assert len(served) == 200
