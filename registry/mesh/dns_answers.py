"""The DNS interface's answers: from a query (a parsed ``dns.message.Message``) and the catalog to the
answer message, and the answer to bytes within a size. Plain Python, no Django, no sockets: the
server (``registry/mesh/dns.py``) reads and sends, this module decides.

The zone, under ``EUREKA_DNS_DOMAIN`` (``eureka`` below; names are matched without regard to case):

* ``<name>.service.eureka`` — A (IPv4) and AAAA (IPv6) records of the UP instances of the service
  ``<name>`` (an app name in lower case, or a VIP address, which may hold dots:
  ``orders.v2.service.eureka``), and SRV records of the same instances;
* ``_<name>._tcp.service.eureka`` — the same SRV records (RFC 2782's form);
* ``<hex>.addr.eureka`` — the target of every SRV record: the instance's address in hexadecimal
  (8 digits for IPv4, 32 for IPv6), answering its A or AAAA record, so that a client following the
  SRV record resolves its target here (the records are in the additional section already);
* ``eureka`` itself answers its SOA and NS records; ``ns.eureka`` the address the server is bound to
  (when it is bound to one), ``service.eureka`` and ``addr.eureka`` exist without records.

A service whose instances are none UP, or a name asked for a type it has no record of, is answered
NOERROR with no record (NODATA); a name the zone does not hold is NXDOMAIN; both carry the zone's
SOA in the authority section, so resolvers cache the negative answer for the TTL. A name under a
service's name (``v2.service.eureka`` while ``orders.v2`` is a service) exists without records, as
RFC 8020 requires of a resolver that walks names label by label. Names outside the zone are REFUSED:
the server is no resolver. An ANY query is answered with one synthesized HINFO record, as RFC 8482
allows: the answer to ANY would be every record of the name at once, the classic amplification
query, and no client needs it.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

import dns.exception
import dns.flags
import dns.message
import dns.name
import dns.opcode
import dns.rcode
import dns.rdataclass
import dns.rdatatype
import dns.rdtypes.ANY.HINFO
import dns.rdtypes.ANY.NS
import dns.rdtypes.ANY.SOA
import dns.rdtypes.IN.A
import dns.rdtypes.IN.AAAA
import dns.rdtypes.IN.SRV
import dns.rrset

from registry.config.services import MeshConfig
from registry.mesh.catalog import Catalog, Endpoint

# How many orders of its records a name is answered in, in turn (``_rotated``).
ROTATIONS = 16

IN = dns.rdataclass.IN
A = dns.rdatatype.A
AAAA = dns.rdatatype.AAAA
SRV = dns.rdatatype.SRV
SOA = dns.rdatatype.SOA
NS = dns.rdatatype.NS
ANY = dns.rdatatype.ANY
HINFO = dns.rdatatype.HINFO
ZONE_TRANSFERS = frozenset({dns.rdatatype.AXFR, dns.rdatatype.IXFR})

# The EDNS payload the server offers and the most it sends over UDP whatever the query offers: the
# DNS flag day 2020's size, below the Internet's common MTU, so an answer is never fragmented.
UDP_PAYLOAD_MAX = 1232
# Over UDP without EDNS (RFC 1035).
UDP_PLAIN_MAX = 512
# Over TCP: the two-byte length prefix's bound.
TCP_MAX = 65535
# An SRV record's weight is 16 bits; an endpoint's is up to catalog.MAX_WEIGHT.
SRV_WEIGHT_MAX = 65535
SRV_PRIORITY = 1
# The SOA's timers: only secondaries read them, and this zone has none; its minimum is the TTL.
SOA_REFRESH, SOA_RETRY, SOA_EXPIRE = 3600, 600, 86400

# Refusal kinds this module decides (``Reply.refusal``); the server counts and logs them.
OUTSIDE_DOMAIN = "outside_domain"
ANY_QUERY = "any_query"
ZONE_TRANSFER = "zone_transfer"
NOT_IN_CLASS = "not_in_class"


@dataclass(frozen=True, slots=True)
class Reply:
    """An answer message, and the refusal kind it stands for (None for an ordinary answer)."""

    message: dns.message.Message
    refusal: str | None = None


@dataclass(frozen=True, slots=True)
class _Found:
    """What a name holds of one type: its records (one RRset each), and the additional section's."""

    records: tuple[dns.rrset.RRset, ...] = ()
    additional: tuple[dns.rrset.RRset, ...] = ()


NODATA = _Found()
# (name, type) pairs a Zone remembers the records of, per catalog version: a flood of made-up names
# empties it, no more.
FOUND_CACHE_MAX = 4096


class Zone:
    """The names under the domain, and the answers to queries for them (the module docstring)."""

    def __init__(self, config: MeshConfig):
        self.origin = dns.name.from_text(config.dns_domain.strip().strip(".").lower() or ".")
        self.ttl = config.dns_ttl_seconds
        self.service = dns.name.Name((b"service", *self.origin.labels))
        self.addr = dns.name.Name((b"addr", *self.origin.labels))
        self.ns = dns.name.Name((b"ns", *self.origin.labels))
        bind = ipaddress.ip_address(config.dns_bind)
        # ns.<domain> answers the bound address, unless the server listens on every address.
        self.ns_address = None if bind.is_unspecified else bind
        # Names that exist without records of their own because a service's name lies below them
        # (RFC 8020), computed from the catalog's names when first needed, per catalog version.
        self._parents: tuple[int, frozenset[tuple[bytes, ...]]] = (-1, frozenset())
        # What each (name, type) asked holds, for the catalog's version: building records costs more
        # than answering from them (dnspython hashes a record by rendering it).
        self._found: dict[tuple[tuple[bytes, ...], int], _Found | None] = {}
        self._found_version = -1
        self._soa: tuple[int, dns.rrset.RRset | None] = (-1, None)

    # ------------------------------------------------------------------ records

    def soa(self, catalog: Catalog) -> dns.rrset.RRset:
        version = catalog.version
        if self._soa[0] == version and self._soa[1] is not None:
            return self._soa[1]
        rdata = dns.rdtypes.ANY.SOA.SOA(
            IN,
            SOA,
            self.ns,
            dns.name.Name((b"hostmaster", *self.origin.labels)),
            version & 0xFFFFFFFF,
            SOA_REFRESH,
            SOA_RETRY,
            SOA_EXPIRE,
            self.ttl,
        )
        soa = dns.rrset.from_rdata_list(self.origin, self.ttl, [rdata])
        self._soa = (version, soa)
        return soa

    def address_name(self, address: str) -> dns.name.Name:
        """The SRV target naming an address: ``<hex>.addr.<domain>``."""
        return dns.name.Name((ipaddress.ip_address(address).packed.hex().encode(), *self.addr.labels))

    @staticmethod
    def address_rdata(address: str) -> dns.rdtypes.IN.A.A | dns.rdtypes.IN.AAAA.AAAA:
        if ":" in address:
            return dns.rdtypes.IN.AAAA.AAAA(IN, AAAA, address)
        return dns.rdtypes.IN.A.A(IN, A, address)

    def _each(self, owner: dns.name.Name, rdatas) -> tuple[dns.rrset.RRset, ...]:
        """One RRset per record: an answer's records are rotated, and cut to what fits, record by
        record (``render``); the client merges them into one RRset again."""
        return tuple(dns.rrset.from_rdata_list(owner, self.ttl, [rdata]) for rdata in rdatas)

    # ------------------------------------------------------------------ answers

    def answer(self, query: dns.message.Message, catalog: Catalog, turn: int = 0) -> Reply:
        """The answer to a query of one question (the server checked its opcode and question count).
        ``turn`` rotates the records' order: the server passes a count of the queries it answered, so
        that clients that take the first address spread over the instances."""
        response = dns.message.make_response(query, our_payload=UDP_PAYLOAD_MAX, pad=0)
        question = query.question[0]
        qname, qtype = question.name, question.rdtype
        if question.rdclass != IN:
            response.set_rcode(dns.rcode.REFUSED)
            return Reply(response, NOT_IN_CLASS)
        if not qname.is_subdomain(self.origin):
            response.set_rcode(dns.rcode.REFUSED)
            return Reply(response, OUTSIDE_DOMAIN)
        response.flags |= dns.flags.AA
        if qtype in ZONE_TRANSFERS:
            response.flags &= ~dns.flags.AA
            response.set_rcode(dns.rcode.REFUSED)
            return Reply(response, ZONE_TRANSFER)
        labels = tuple(label.lower() for label in qname.relativize(self.origin).labels)
        found = self._lookup(labels, qtype, catalog)
        if found is None:
            response.set_rcode(dns.rcode.NXDOMAIN)
            response.authority.append(self.soa(catalog))
            return Reply(response)
        if qtype == ANY:
            # RFC 8482: one small record instead of all of them (the module docstring).
            hinfo = dns.rdtypes.ANY.HINFO.HINFO(IN, HINFO, b"RFC8482", b"")
            response.answer.append(dns.rrset.from_rdata_list(qname, self.ttl, [hinfo]))
            return Reply(response, ANY_QUERY)
        if not found.records:
            response.authority.append(self.soa(catalog))
        else:
            # The owner names are in lower case; on the wire they point at the question, so the
            # client reads its own spelling back (resolvers that mix case, DNS 0x20, check it).
            response.answer = _rotated(list(found.records), turn)
            response.additional = list(found.additional)
        return Reply(response)

    def _lookup(self, labels: tuple[bytes, ...], qtype: int, catalog: Catalog) -> _Found | None:
        version = catalog.version
        if version != self._found_version or len(self._found) >= FOUND_CACHE_MAX:
            self._found = {}
            self._found_version = version
        key = (labels, qtype)
        if key in self._found:
            return self._found[key]
        found = self._records(labels, qtype, catalog)
        self._found[key] = found
        return found

    def _records(self, labels: tuple[bytes, ...], qtype: int, catalog: Catalog) -> _Found | None:
        """What a name holds of a type (no record: NODATA); None for a name the zone does not hold."""
        owner = dns.name.Name((*labels, *self.origin.labels))
        if not labels:
            if qtype == SOA:
                return _Found(self._each(owner, [self.soa(catalog)[0]]))
            if qtype == NS:
                return _Found(self._each(owner, [dns.rdtypes.ANY.NS.NS(IN, NS, self.ns)]))
            return NODATA
        if labels == (b"ns",):
            if self.ns_address is not None and qtype == (AAAA if self.ns_address.version == 6 else A):
                return _Found(self._each(owner, [self.address_rdata(str(self.ns_address))]))
            return NODATA
        if labels in ((b"service",), (b"addr",)):
            return NODATA
        if len(labels) == 2 and labels[1] == b"addr":
            address = _decode_address(labels[0])
            if address is None:
                return None
            if qtype == (AAAA if address.version == 6 else A):
                return _Found(self._each(owner, [self.address_rdata(str(address))]))
            return NODATA
        if labels[-1] != b"service":
            return None
        srv_form = len(labels) >= 3 and labels[-2] == b"_tcp" and labels[0].startswith(b"_")
        name = _service_name(labels[:-2] if srv_form else labels[:-1], strip_underscore=srv_form)
        endpoints = catalog.endpoints(name) if name else ()
        if not endpoints:
            return NODATA if labels in self._parent_names(catalog) else None
        up = [endpoint for endpoint in endpoints if endpoint.up]
        if qtype == SRV:
            return self._srv(owner, up)
        if not srv_form and qtype in (A, AAAA):
            # Instances sharing an address (on other ports) make one record.
            addresses = dict.fromkeys(e.address for e in up if e.ipv6 == (qtype == AAAA))
            return _Found(self._each(owner, [self.address_rdata(address) for address in addresses]))
        return NODATA

    def _srv(self, owner: dns.name.Name, up: list[Endpoint]) -> _Found:
        targets = {address: self.address_name(address) for address in dict.fromkeys(e.address for e in up)}
        rdatas = {
            (endpoint.address, endpoint.port, weight): dns.rdtypes.IN.SRV.SRV(
                IN, SRV, SRV_PRIORITY, weight, endpoint.port, targets[endpoint.address]
            )
            for endpoint in up
            for weight in [min(max(endpoint.weight, 0), SRV_WEIGHT_MAX)]
        }
        additional = tuple(
            dns.rrset.from_rdata_list(target, self.ttl, [self.address_rdata(address)])
            for address, target in targets.items()
        )
        return _Found(self._each(owner, rdatas.values()), additional)

    def _parent_names(self, catalog: Catalog) -> frozenset[tuple[bytes, ...]]:
        """Every name (relative to the domain, lower case) lying above a service's names."""
        version = catalog.version
        if self._parents[0] == version:
            return self._parents[1]
        parents: set[tuple[bytes, ...]] = set()
        for name in catalog.names():
            try:
                parts = tuple(part.encode("ascii") for part in name.split("."))
            except UnicodeEncodeError:
                continue
            for owner in (parts + (b"service",), (b"_" + parts[0], *parts[1:], b"_tcp", b"service")):
                parents.update(owner[start:] for start in range(1, len(owner)))
        self._parents = (version, frozenset(parents))
        return self._parents[1]


def _service_name(labels: tuple[bytes, ...], strip_underscore: bool) -> str | None:
    """The service name the labels spell (``orders``, ``orders.v2``), or None when they spell none: a
    label holding a dot (``orders\\.v2`` is not ``orders.v2``) or a byte outside ASCII."""
    if not labels or any(b"." in label for label in labels):
        return None
    if strip_underscore:
        labels = (labels[0][1:], *labels[1:])
    try:
        return ".".join(label.decode("ascii") for label in labels)
    except UnicodeDecodeError:
        return None


def _decode_address(label: bytes) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    if len(label) not in (8, 32):
        return None
    try:
        return ipaddress.ip_address(bytes.fromhex(label.decode("ascii")))
    except ValueError:
        return None


def _rotated(items: list, turn: int) -> list:
    """The records starting at the turn's place: one turn after another for up to ROTATIONS records;
    for more, ROTATIONS starting places spread evenly over them, so the answers the server keeps per
    rotation (registry/mesh/dns.py) stay few, and the UDP answers of the ROTATIONS turns, each cut to
    what fits, between them hold every record of a few hundred."""
    if not items:
        return items
    few = len(items) <= ROTATIONS
    start = turn % len(items) if few else (turn % ROTATIONS) * len(items) // ROTATIONS
    return items[start:] + items[:start]


def answer(query: dns.message.Message, catalog: Catalog, config: MeshConfig, turn: int = 0) -> Reply:
    """``Zone(config).answer(query, catalog, turn)`` (the server keeps one Zone)."""
    return Zone(config).answer(query, catalog, turn)


def udp_limit(query: dns.message.Message) -> int:
    """The largest UDP answer to this query: 512 bytes, or the EDNS payload it offers up to 1232."""
    if query.edns < 0:
        return UDP_PLAIN_MAX
    return min(max(query.payload, UDP_PLAIN_MAX), UDP_PAYLOAD_MAX)


def render(message: dns.message.Message, limit: int) -> tuple[bytes, bool]:
    """The message in wire form in at most ``limit`` bytes, and whether it was truncated (TC): an
    answer that does not fit keeps as many whole records as fit (its RRsets hold one record each),
    the additional section first to go (without TC: RFC 2181 9), then answer records from the end
    (with TC, so the client asks over TCP)."""
    wire = message.to_wire(max_size=limit, prefer_truncation=True)
    return wire, bool(int.from_bytes(wire[2:4], "big") & dns.flags.TC)
