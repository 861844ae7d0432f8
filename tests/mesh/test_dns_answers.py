"""The DNS interface's answers without sockets (registry/mesh/dns_answers.py): which names hold which
records, negative answers, refusals, rotation, and answers cut to a size."""

from __future__ import annotations

import dns.edns
import dns.flags
import dns.message
import dns.name
import dns.rcode
import dns.rdataclass
import dns.rdatatype
import pytest

from registry.mesh.dns_answers import (
    ANY_QUERY,
    FOUND_CACHE_MAX,
    NOT_IN_CLASS,
    OUTSIDE_DOMAIN,
    ZONE_TRANSFER,
    Zone,
    answer,
    render,
    udp_limit,
)
from tests.mesh.dns_fleet import catalog_of, config, endpoint, fleet, query, records

CONFIG = config(dns_ttl_seconds=7)


@pytest.fixture
def catalog():
    return catalog_of(
        endpoint("ORDERS", "10.0.0.1"),
        endpoint("ORDERS", "10.0.0.2", port=8081, weight=5),
        endpoint("ORDERS", "10.0.0.3", status="DOWN"),
        endpoint("ORDERS", "10.0.0.4", status="OUT_OF_SERVICE"),
        endpoint("ORDERS", "10.0.0.5", status="STARTING"),
        endpoint("ORDERS", "fd00::1", port=9090),
        endpoint("PAYMENTS", "10.0.1.1", vip="payments.v2", secure_port=8443, weight=1_000_000),
        endpoint("BILLING", "10.0.2.1", status="DOWN"),
        endpoint("LEDGER", "2001:db8::7"),
    )


def ask(catalog, name, rdtype="A", turn=0, mesh_config=CONFIG, **kwargs):
    return answer(query(name, rdtype, **kwargs), catalog, mesh_config, turn).message


def negative(message, rcode):
    """A negative answer: the rcode, no record, the zone's SOA in authority with the TTL as both its
    TTL and its minimum (how long resolvers keep the negative answer)."""
    assert message.rcode() == rcode
    assert message.answer == []
    (soa,) = message.authority
    assert soa.rdtype == dns.rdatatype.SOA and soa.name == dns.name.from_text("eureka")
    assert soa.ttl == 7 and soa[0].minimum == 7
    assert message.flags & dns.flags.AA
    return True


def test_a_service_name_answers_the_ipv4_addresses_of_its_up_instances_only(catalog):
    message = ask(catalog, "orders.service.eureka")
    assert message.rcode() == dns.rcode.NOERROR
    assert message.flags & dns.flags.AA and message.flags & dns.flags.QR
    assert sorted(records(message.answer)) == ["10.0.0.1", "10.0.0.2"]
    assert message.answer[0].ttl == 7
    assert message.answer[0].name == dns.name.from_text("orders.service.eureka")


def test_aaaa_answers_the_ipv6_addresses_and_a_the_ipv4_ones(catalog):
    assert records(ask(catalog, "orders.service.eureka", "AAAA").answer, "AAAA") == ["fd00::1"]
    assert records(ask(catalog, "ledger.service.eureka", "AAAA").answer, "AAAA") == ["2001:db8::7"]
    assert negative(ask(catalog, "ledger.service.eureka", "A"), dns.rcode.NOERROR)


def test_a_name_whose_instances_are_none_up_is_nodata_not_nxdomain(catalog):
    assert negative(ask(catalog, "billing.service.eureka"), dns.rcode.NOERROR)
    assert negative(ask(catalog, "billing.service.eureka", "SRV"), dns.rcode.NOERROR)


def test_an_unknown_name_is_nxdomain_with_the_soa(catalog):
    assert negative(ask(catalog, "shipping.service.eureka"), dns.rcode.NXDOMAIN)
    assert negative(ask(catalog, "orders.eureka"), dns.rcode.NXDOMAIN)
    assert negative(ask(catalog, "a.b.orders.service.eureka"), dns.rcode.NXDOMAIN)
    assert negative(ask(catalog, "_orders._udp.service.eureka", "SRV"), dns.rcode.NXDOMAIN)


def test_a_type_the_name_has_no_record_of_is_nodata(catalog):
    assert negative(ask(catalog, "orders.service.eureka", "TXT"), dns.rcode.NOERROR)
    assert negative(ask(catalog, "orders.service.eureka", "MX"), dns.rcode.NOERROR)
    assert negative(ask(catalog, "_orders._tcp.service.eureka", "A"), dns.rcode.NOERROR)


def test_names_are_matched_without_regard_to_case_and_echoed_as_asked(catalog):
    message = ask(catalog, "OrDeRs.SeRvIcE.EuReKa")
    assert sorted(records(message.answer)) == ["10.0.0.1", "10.0.0.2"]
    # Resolvers that mix the case of their questions (DNS 0x20) check the spelling they get back.
    received = dns.message.from_wire(render(message, 512)[0])
    assert received.question[0].name.to_text() == "OrDeRs.SeRvIcE.EuReKa."
    assert {rrset.name.to_text() for rrset in received.answer} == {"OrDeRs.SeRvIcE.EuReKa."}
    assert records(ask(catalog, "_ORDERS._TCP.service.eureka", "SRV").answer, "SRV")


def test_the_domain_comes_from_the_settings_whatever_its_case():
    catalog = catalog_of(endpoint("ORDERS", "10.0.0.1"))
    mesh = config(dns_domain="Mesh.Example")
    assert records(ask(catalog, "orders.service.mesh.example", mesh_config=mesh).answer) == ["10.0.0.1"]
    refused = ask(catalog, "orders.service.eureka", mesh_config=mesh)
    assert refused.rcode() == dns.rcode.REFUSED


def test_a_vip_address_with_dots_is_a_name_and_the_names_above_it_exist_without_records(catalog):
    assert records(ask(catalog, "payments.v2.service.eureka").answer) == ["10.0.1.1"]
    assert records(ask(catalog, "payments.service.eureka").answer) == ["10.0.1.1"]
    srv = ask(catalog, "_payments.v2._tcp.service.eureka", "SRV")
    assert records(srv.answer, "SRV") == ["1 65535 8443 0a000101.addr.eureka."]
    # A resolver walking the name label by label (QNAME minimisation) must not be told NXDOMAIN on
    # the way, or it concludes (RFC 8020) that nothing lies below.
    assert negative(ask(catalog, "v2.service.eureka"), dns.rcode.NOERROR)
    assert negative(ask(catalog, "v2._tcp.service.eureka", "SRV"), dns.rcode.NOERROR)
    assert negative(ask(catalog, "_tcp.service.eureka", "SRV"), dns.rcode.NOERROR)
    assert negative(ask(catalog, "v3.service.eureka"), dns.rcode.NXDOMAIN)


def test_srv_records_carry_port_weight_and_a_target_that_resolves(catalog):
    for name in ("_orders._tcp.service.eureka", "orders.service.eureka"):
        message = ask(catalog, name, "SRV")
        assert message.rcode() == dns.rcode.NOERROR and message.flags & dns.flags.AA
        assert sorted(records(message.answer, "SRV")) == [
            "1 100 8080 0a000001.addr.eureka.",
            "1 100 9090 fd000000000000000000000000000001.addr.eureka.",
            "1 5 8081 0a000002.addr.eureka.",
        ]
        assert sorted(records(message.additional, "A")) == ["10.0.0.1", "10.0.0.2"]
        assert records(message.additional, "AAAA") == ["fd00::1"]
    # The targets answer on their own, for a client that asks for them.
    assert records(ask(catalog, "0a000002.addr.eureka").answer) == ["10.0.0.2"]
    target = "fd000000000000000000000000000001.addr.eureka"
    assert records(ask(catalog, target, "AAAA").answer, "AAAA") == ["fd00::1"]
    assert negative(ask(catalog, target, "A"), dns.rcode.NOERROR)
    assert negative(ask(catalog, "0a00000.addr.eureka"), dns.rcode.NXDOMAIN)
    assert negative(ask(catalog, "zz000002.addr.eureka"), dns.rcode.NXDOMAIN)


def test_the_srv_weight_is_the_endpoints_weight_within_sixteen_bits():
    catalog = catalog_of(
        endpoint("ORDERS", "10.0.0.1", weight=1), endpoint("ORDERS", "10.0.0.2", weight=70_000)
    )
    weights = sorted(
        rdata.weight for rrset in ask(catalog, "orders.service.eureka", "SRV").answer for rdata in rrset
    )
    assert weights == [1, 65535]


def test_the_apex_answers_soa_and_ns_and_the_service_folder_exists(catalog):
    soa = ask(catalog, "eureka", "SOA")
    assert soa.answer[0][0].serial == catalog.version
    assert soa.answer[0][0].mname == dns.name.from_text("ns.eureka")
    assert records(ask(catalog, "EUREKA", "NS").answer, "NS") == ["ns.eureka."]
    assert records(ask(catalog, "ns.eureka").answer) == ["127.0.0.1"]
    assert negative(
        ask(catalog, "ns.eureka", mesh_config=config(dns_bind="0.0.0.0", dns_ttl_seconds=7)),
        dns.rcode.NOERROR,
    )
    for name in ("eureka", "service.eureka", "addr.eureka"):
        assert negative(ask(catalog, name, "A"), dns.rcode.NOERROR)


def test_names_outside_the_domain_are_refused_without_authority(catalog):
    for name in ("example.com", "eureka.com", "noteureka", "orders.service.eureka.example"):
        reply = answer(query(name), catalog, CONFIG)
        assert reply.message.rcode() == dns.rcode.REFUSED, name
        assert not reply.message.flags & dns.flags.AA
        assert reply.message.answer == reply.message.authority == []
        assert reply.refusal == OUTSIDE_DOMAIN


def test_any_is_answered_with_one_hinfo_record(catalog):
    reply = answer(query("orders.service.eureka", "ANY"), catalog, CONFIG)
    assert [rrset.rdtype for rrset in reply.message.answer] == [dns.rdatatype.HINFO]
    assert reply.message.answer[0][0].cpu == b"RFC8482"
    assert reply.refusal == ANY_QUERY
    assert negative(ask(catalog, "nothing.service.eureka", "ANY"), dns.rcode.NXDOMAIN)


def test_zone_transfers_and_other_classes_are_refused(catalog):
    for rdtype in ("AXFR", "IXFR"):
        reply = answer(query("eureka", rdtype), catalog, CONFIG)
        assert (reply.message.rcode(), reply.refusal) == (dns.rcode.REFUSED, ZONE_TRANSFER)
    chaos = query("orders.service.eureka", "TXT", rdclass=dns.rdataclass.CH)
    reply = answer(chaos, catalog, CONFIG)
    assert (reply.message.rcode(), reply.refusal) == (dns.rcode.REFUSED, NOT_IN_CLASS)


def test_labels_that_spell_no_service_name_are_nxdomain(catalog):
    # One label holding a dot is not the two labels of the VIP address.
    escaped = dns.name.Name((b"payments.v2", b"service", b"eureka", b""))
    assert negative(answer(query(escaped), catalog, CONFIG).message, dns.rcode.NXDOMAIN)
    odd = dns.name.Name((b"\xff\xfe", b"service", b"eureka", b""))
    assert negative(answer(query(odd), catalog, CONFIG).message, dns.rcode.NXDOMAIN)
    longest = dns.name.Name((b"a" * 63,) * 3 + (b"b" * 46, b"service", b"eureka", b""))
    assert len(longest.to_wire()) == 255
    assert negative(answer(query(longest), catalog, CONFIG).message, dns.rcode.NXDOMAIN)


def test_the_order_of_the_records_turns_with_each_query():
    catalog = catalog_of(*fleet("ORDERS", 4))
    firsts = [records(ask(catalog, "orders.service.eureka", turn=turn).answer)[0] for turn in range(8)]
    assert sorted(set(firsts)) == ["10.0.0.1", "10.0.0.2", "10.0.0.3", "10.0.0.4"]
    assert firsts[:4] == firsts[4:]
    every = {tuple(sorted(records(ask(catalog, "orders.service.eureka", turn=t).answer))) for t in range(4)}
    assert every == {("10.0.0.1", "10.0.0.2", "10.0.0.3", "10.0.0.4")}
    srv_firsts = {ask(catalog, "orders.service.eureka", "SRV", turn=t).answer[0][0].target for t in range(4)}
    assert len(srv_firsts) == 4


def test_a_change_in_the_catalog_is_in_the_next_answer():
    first, second = endpoint("ORDERS", "10.0.0.1"), endpoint("ORDERS", "10.0.0.2")
    catalog = catalog_of(first)
    zone = Zone(CONFIG)
    assert records(zone.answer(query("orders.service.eureka"), catalog).message.answer) == ["10.0.0.1"]
    catalog.apply(puts=[second])
    assert sorted(records(zone.answer(query("orders.service.eureka"), catalog).message.answer)) == [
        "10.0.0.1",
        "10.0.0.2",
    ]
    catalog.apply(
        puts=[endpoint("ORDERS", "10.0.0.1", status="DOWN")], removes=[("ORDERS", second.instance_id)]
    )
    assert negative(zone.answer(query("orders.service.eureka"), catalog).message, dns.rcode.NOERROR)
    # The names above a VIP address follow the catalog too (the zone keeps them per catalog version).
    assert negative(zone.answer(query("v9.service.eureka"), catalog).message, dns.rcode.NXDOMAIN)
    catalog.apply(puts=[endpoint("SHIPPING", "10.0.3.1", vip="shipping.v9")])
    assert negative(zone.answer(query("v9.service.eureka"), catalog).message, dns.rcode.NOERROR)
    soa = zone.answer(query("eureka", "SOA"), catalog).message
    assert soa.answer[0][0].serial == catalog.version


def test_edns_is_echoed_when_the_query_had_it(catalog):
    with_edns = ask(catalog, "orders.service.eureka", use_edns=0, payload=4096)
    assert with_edns.edns == 0 and with_edns.payload == 1232
    assert ask(catalog, "orders.service.eureka").edns == -1


# ---------------------------------------------------------------------- sizes


def test_the_udp_size_is_512_or_the_edns_size_at_most_1232():
    assert udp_limit(query("a.eureka")) == 512
    assert udp_limit(query("a.eureka", use_edns=0, payload=100)) == 512
    assert udp_limit(query("a.eureka", use_edns=0, payload=900)) == 900
    assert udp_limit(query("a.eureka", use_edns=0, payload=65535)) == 1232


@pytest.mark.parametrize("limit", [512, 700, 1232])
def test_a_large_answer_is_cut_to_whole_records_and_flagged_tc(limit):
    catalog = catalog_of(*fleet("BIG", 200))
    message = ask(catalog, "big.service.eureka", use_edns=0, payload=limit)
    wire, truncated = render(message, udp_limit(query("x", use_edns=0, payload=limit)))
    assert truncated and len(wire) <= limit
    cut = dns.message.from_wire(wire)
    assert cut.flags & dns.flags.TC and cut.edns == 0
    kept = records(cut.answer)
    # As many as fit: one more would not (16 bytes a record, the owner name compressed).
    assert 0 < len(kept) < 200 and len(wire) + 16 > limit
    assert set(kept) <= set(records(message.answer))
    whole, truncated = render(message, 65535)
    assert not truncated and len(records(dns.message.from_wire(whole).answer)) == 200


def test_a_large_srv_answer_loses_its_additional_records_first():
    catalog = catalog_of(*fleet("BIG", 20))
    message = ask(catalog, "big.service.eureka", "SRV", use_edns=0, payload=1232)
    full, _ = render(message, 65535)
    assert len(full) > 1232
    wire, truncated = render(message, 1232)
    cut = dns.message.from_wire(wire)
    assert len(records(cut.answer, "SRV")) == 20 and len(records(cut.additional)) < 20
    # Additional records left out do not set TC (RFC 2181 9): the answer itself is whole.
    assert not truncated and not cut.flags & dns.flags.TC


def test_a_small_answer_is_sent_whole(catalog):
    message = ask(catalog, "orders.service.eureka")
    wire, truncated = render(message, 512)
    assert not truncated and records(dns.message.from_wire(wire).answer) == records(message.answer)


def test_a_padded_query_gets_no_padding_over_plain_dns(catalog):
    padded = query("orders.service.eureka", use_edns=0, options=[dns.edns.GenericOption(12, b"\0" * 8)])
    message = answer(padded, catalog, CONFIG).message
    assert len(render(message, 512)[0]) < 200


def test_instances_sharing_an_address_make_one_address_record_and_one_srv_record_a_port():
    catalog = catalog_of(
        endpoint("ORDERS", "10.0.0.1", port=8080),
        endpoint("ORDERS", "10.0.0.1", port=8081),
        endpoint("ORDERS", "10.0.0.1", port=8081, instance_id="second-id"),
    )
    assert records(ask(catalog, "orders.service.eureka").answer) == ["10.0.0.1"]
    srv = ask(catalog, "orders.service.eureka", "SRV")
    assert sorted(records(srv.answer, "SRV")) == [
        "1 100 8080 0a000001.addr.eureka.",
        "1 100 8081 0a000001.addr.eureka.",
    ]
    assert records(srv.additional) == ["10.0.0.1"]


def test_a_flood_of_made_up_names_keeps_the_zones_memory_bounded():
    catalog = catalog_of(endpoint("ORDERS", "10.0.0.1"))
    zone = Zone(CONFIG)
    for n in range(FOUND_CACHE_MAX * 2 + 10):
        zone.answer(query(f"x{n}.service.eureka"), catalog)
    assert len(zone._found) <= FOUND_CACHE_MAX
    assert records(zone.answer(query("orders.service.eureka"), catalog).message.answer) == ["10.0.0.1"]
