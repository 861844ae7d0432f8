"""The DNS interface: UDP and TCP on ``EUREKA_DNS_BIND:EUREKA_DNS_PORT``, answering from the catalog
(``registry/mesh/dns_answers.py`` says which names and records). Plain Python and asyncio, no Django:
``manage.py mesh`` runs it on its event loop with ``start_dns``.

What a client can make it do is bounded, and each refusal is counted (``DnsServer.refusals``, by kind)
and logged at most once a minute per kind (``registry/domain/refusals.py``):

* a datagram that does not parse is dropped, or answered FORMERR (12 bytes) when its header does; a
  DNS response sent to the port is dropped (answering it could start a loop between two servers);
  other opcodes than QUERY get NOTIMP, a query without exactly one question FORMERR, an EDNS version
  other than 0 BADVERS, and a client ``allowed`` refuses REFUSED;
* over UDP an answer is never bigger than 512 bytes, or than the EDNS payload the query offers up to
  1232: a larger one is cut to the records that fit and flagged TC, and the client asks again over
  TCP, where it gets all of it (up to 65,535 bytes);
* over UDP each client address gets at most ``EUREKA_DNS_RATE_PER_ADDRESS`` answers a second (a
  token bucket holding one second's worth); beyond it a query is answered with TC set and no record
  (a "slip"), no larger than the question: a real client retries over TCP, which a spoofed source
  address cannot, and the owner of a spoofed address gets nothing bigger than what was sent;
* TCP connections are capped in all and per address (more are closed at once), a connection is
  closed when idle or slow to read its answers (``DnsLimits.tcp_idle_seconds``) and after
  ``tcp_queries_per_connection`` queries, and a message longer than ``query_max_bytes`` closes it.

Before the catalog's first snapshot every query is answered SERVFAIL: an NXDOMAIN then would be
cached by resolvers for names that exist.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

import dns.flags
import dns.message
import dns.opcode
import dns.rcode

from registry.config.services import MeshConfig
from registry.domain.refusals import RefusalLines, refusal_fields, since_last_line
from registry.mesh.catalog import Catalog
from registry.mesh.dns_answers import ROTATIONS, TCP_MAX, UDP_PAYLOAD_MAX, Zone, render, udp_limit

logger = logging.getLogger("registry.mesh.dns")

# Refusal kinds, each with the words of its log line. The answer logic's own kinds
# (outside_domain, any_query, zone_transfer, not_in_class) are among them.
MALFORMED = "malformed"
NOT_A_QUERY = "not_a_query"
QUESTION_COUNT = "question_count"
OPCODE = "opcode"
EDNS_VERSION = "edns_version"
NOT_ALLOWED = "not_allowed"
NOT_READY = "not_ready"
RATE_LIMITED = "rate_limited"
TOO_LONG = "too_long"
UDP_BACKLOG = "udp_backlog"
TCP_CONNECTIONS = "tcp_connections"
TCP_CONNECTIONS_PER_ADDRESS = "tcp_connections_per_address"
TCP_IDLE = "tcp_idle"
TCP_QUERY_LIMIT = "tcp_query_limit"
INTERNAL_ERROR = "internal_error"

REFUSALS = {
    MALFORMED: "DNS message that does not parse dropped (or answered FORMERR when its header does)",
    NOT_A_QUERY: "DNS response sent to the DNS port dropped",
    QUESTION_COUNT: "DNS query without exactly one question answered FORMERR",
    OPCODE: "DNS message of another opcode than QUERY answered NOTIMP",
    EDNS_VERSION: "DNS query of an EDNS version other than 0 answered BADVERS",
    NOT_ALLOWED: "DNS query from a client not allowed to read the registry refused",
    NOT_READY: "DNS query answered SERVFAIL: the registry's first snapshot has not come yet",
    RATE_LIMITED: "DNS answer over UDP cut to TC, no record: client over EUREKA_DNS_RATE_PER_ADDRESS",
    TOO_LONG: "DNS message longer than a query can be dropped",
    UDP_BACKLOG: "DNS query over UDP dropped: the answers waiting to be sent fill the send buffer",
    TCP_CONNECTIONS: "DNS TCP connection closed at once: too many open in all",
    TCP_CONNECTIONS_PER_ADDRESS: "DNS TCP connection closed at once: too many open from its address",
    TCP_IDLE: "DNS TCP connection closed: no whole query, or its answer not read, within the idle time",
    TCP_QUERY_LIMIT: "DNS TCP connection closed after its most queries",
    INTERNAL_ERROR: "DNS query failed on an unexpected error",
    "outside_domain": "DNS query for a name outside EUREKA_DNS_DOMAIN refused (this is no resolver)",
    "any_query": "DNS ANY query answered with one HINFO record (RFC 8482)",
    "zone_transfer": "DNS zone transfer (AXFR, IXFR) refused",
    "not_in_class": "DNS query of another class than IN refused",
}


@dataclass(frozen=True, slots=True)
class DnsLimits:
    """The bounds on what clients can make the server hold (the module docstring)."""

    tcp_connections_max: int = 512
    tcp_connections_per_address_max: int = 32
    tcp_idle_seconds: float = 10.0
    tcp_queries_per_connection: int = 100
    # A query is a header, one name (255 bytes at most) and an OPT record with a few options.
    query_max_bytes: int = 4096
    # Answers the kernel has not taken yet, over UDP: beyond this, queries are dropped.
    udp_backlog_max_bytes: int = 1 << 20
    # Client addresses the rate limit remembers; beyond, the one seen longest ago is forgotten (its
    # bucket is full again unless more addresses than this came within one second).
    rate_addresses_max: int = 65_536


class RateLimiter:
    """Token buckets by client address: ``rate`` a second, holding up to one second's worth."""

    def __init__(self, rate: int, clock: Callable[[], float], addresses_max: int):
        self.rate = rate
        self.clock = clock
        self.addresses_max = addresses_max
        # address -> (tokens, when last counted), least recently seen first.
        self._buckets: dict[str, tuple[float, float]] = {}

    def allow(self, address: str) -> bool:
        if self.rate <= 0:
            return True
        now = self.clock()
        tokens, last = self._buckets.pop(address, (float(self.rate), now))
        tokens = min(float(self.rate), tokens + max(now - last, 0.0) * self.rate)
        allowed = tokens >= 1.0
        if allowed:
            tokens -= 1.0
        self._buckets[address] = (tokens, now)
        if len(self._buckets) > self.addresses_max:
            del self._buckets[next(iter(self._buckets))]
        return allowed

    def __len__(self) -> int:
        return len(self._buckets)


class DnsTally:
    """Refusals by kind since start (``totals``, for /metrics), each kind logged at most once an
    interval with the count since its last line."""

    def __init__(self, lines: RefusalLines | None = None, log: logging.Logger = logger):
        self.lines = lines or RefusalLines()
        self.log = log
        self.totals: dict[str, int] = dict.fromkeys(REFUSALS, 0)

    def note(self, kind: str, address: str, exc_info: bool = False) -> None:
        self.totals[kind] = self.totals.get(kind, 0) + 1
        count = self.lines.note(kind)
        if count:
            self.log.warning(
                "%s (latest from %s)%s",
                REFUSALS.get(kind, kind),
                address or "-",
                since_last_line(count),
                extra=refusal_fields(kind, count),
                exc_info=exc_info,
            )


def _header_reply(wire: bytes, rcode: int) -> bytes:
    """A 12-byte answer to a message whose header is all that is known of it: its id, opcode and RD
    bit, the rcode, no section."""
    flags = int.from_bytes(wire[2:4], "big")
    answer_flags = 0x8000 | (flags & 0x7800) | (flags & 0x0100) | (rcode & 0xF)
    return wire[:2] + answer_flags.to_bytes(2, "big") + bytes(8)


# Rendering an answer is most of a query's cost (dnspython builds the message record by record). An
# answer depends only on the query's bytes after its id (flags, question as spelt, EDNS), the size it
# must fit, the rotation and the catalog: so answers are kept per catalog version and a repeated query
# gets the same bytes behind its own id. A name is answered in ROTATIONS orders in turn
# (registry/mesh/dns_answers.py), so a popular name costs at most that many renderings a change.
ANSWERS_KEPT = 4_096


class DnsHandler:
    """Bytes of a query in, bytes of the answer out (or none), for either transport: every rule of
    the module docstring but the sockets' own. Never raises."""

    def __init__(
        self,
        catalog: Catalog,
        config: MeshConfig,
        *,
        allowed: Callable[[str], bool] | None = None,
        limits: DnsLimits | None = None,
        clock: Callable[[], float] = time.monotonic,
        tally: DnsTally | None = None,
    ):
        self.catalog = catalog
        self.zone = Zone(config)
        self.allowed = allowed
        self.limits = limits or DnsLimits()
        self.rate = RateLimiter(config.dns_rate_per_address, clock, self.limits.rate_addresses_max)
        self.tally = tally or DnsTally()
        self.queries = {"udp": 0, "tcp": 0}
        self.truncated = 0
        self._turn = 0
        self._answers: dict[tuple[bytes, int, int], tuple[bytes, str | None, bool]] = {}
        self._answers_version = -1

    def handle(self, wire: bytes, address: str, tcp: bool) -> tuple[bytes | None, bool]:
        """(the answer or None, whether the message was a query at all: a TCP connection that sent
        something else is closed)."""
        try:
            return self._handle(wire, address, tcp)
        except Exception:
            self.tally.note(INTERNAL_ERROR, address, exc_info=True)
            if len(wire) >= 12 and not wire[2] & 0x80:
                return _header_reply(wire, dns.rcode.SERVFAIL), True
            return None, False

    def _handle(self, wire: bytes, address: str, tcp: bool) -> tuple[bytes | None, bool]:
        self.queries["tcp" if tcp else "udp"] += 1
        if len(wire) > self.limits.query_max_bytes:
            self.tally.note(TOO_LONG, address)
            return None, False
        if len(wire) < 12:
            self.tally.note(MALFORMED, address)
            return None, False
        if wire[2] & 0x80:
            self.tally.note(NOT_A_QUERY, address)
            return None, False
        # Every UDP answer counts against the address's rate, the short refusals too.
        within_rate = tcp or self.rate.allow(address)
        try:
            query = dns.message.from_wire(wire)
        except Exception:
            # dnspython's errors for what it cannot parse are many (FormError, ShortHeader,
            # TrailingJunk, BadLabelType, NameTooLong, UnknownTSIGKey...): all mean the same here.
            self.tally.note(MALFORMED, address)
            return (_header_reply(wire, dns.rcode.FORMERR) if within_rate else None), False
        if query.opcode() != dns.opcode.QUERY:
            self.tally.note(OPCODE, address)
            return (_header_reply(wire, dns.rcode.NOTIMP) if within_rate else None), True
        if len(query.question) != 1:
            self.tally.note(QUESTION_COUNT, address)
            return (_header_reply(wire, dns.rcode.FORMERR) if within_rate else None), True
        limit = TCP_MAX if tcp else udp_limit(query)
        refusal = self._refusal(query, address, within_rate)
        if refusal is not None:
            kind, rcode = refusal
            self.tally.note(kind, address)
            response = dns.message.make_response(query, our_payload=UDP_PAYLOAD_MAX, pad=0)
            response.set_rcode(rcode)
            if kind == RATE_LIMITED:
                response.flags |= dns.flags.TC
            return render(response, limit)[0], True
        self._turn += 1
        turn = self._turn % ROTATIONS
        version = self.catalog.version
        if version != self._answers_version:
            self._answers.clear()
            self._answers_version = version
        key = (wire[2:], limit, turn)
        kept = self._answers.get(key)
        if kept is None:
            reply = self.zone.answer(query, self.catalog, turn)
            answer, truncated = render(reply.message, limit)
            kept = (answer[2:], reply.refusal, truncated)
            if len(self._answers) >= ANSWERS_KEPT:
                self._answers.clear()
            self._answers[key] = kept
        body, refusal, truncated = kept
        if refusal is not None:
            self.tally.note(refusal, address)
        if truncated:
            self.truncated += 1
        return wire[:2] + body, True

    def _refusal(self, query: dns.message.Message, address: str, within_rate: bool) -> tuple[str, int] | None:
        """(kind, rcode) of a query answered without records, in the order the checks are made."""
        if not within_rate:
            return RATE_LIMITED, dns.rcode.NOERROR
        if query.edns > 0:
            return EDNS_VERSION, dns.rcode.BADVERS
        if self.allowed is not None and not self._allows(address):
            return NOT_ALLOWED, dns.rcode.REFUSED
        if not self.catalog.ready.is_set():
            return NOT_READY, dns.rcode.SERVFAIL
        return None

    def _allows(self, address: str) -> bool:
        try:
            return bool(self.allowed(address))  # type: ignore[misc]
        except Exception:
            self.tally.note(INTERNAL_ERROR, address, exc_info=True)
            return False


class _UdpProtocol(asyncio.DatagramProtocol):
    def __init__(self, handler: DnsHandler):
        self.handler = handler
        self.transport: asyncio.DatagramTransport | None = None

    def connection_made(self, transport) -> None:
        self.transport = transport

    def datagram_received(self, data: bytes, addr) -> None:
        address = str(addr[0]) if addr else ""
        try:
            transport = self.transport
            if transport is None or transport.is_closing():
                return
            if transport.get_write_buffer_size() > self.handler.limits.udp_backlog_max_bytes:
                self.handler.tally.note(UDP_BACKLOG, address)
                return
            answer, _ = self.handler.handle(data, address, tcp=False)
            if answer is not None:
                transport.sendto(answer, addr)
        except Exception:
            self.handler.tally.note(INTERNAL_ERROR, address, exc_info=True)

    def error_received(self, exc: Exception) -> None:
        # ICMP errors for answers sent to addresses that do not listen (spoofed ones among them):
        # nothing to do, and one a datagram.
        pass


class DnsServer:
    """The DNS interface's sockets (``start_dns``). ``port`` is the one bound; ``refusals``,
    ``queries``, ``truncated`` and ``tcp_connections`` count what happened (for /metrics)."""

    def __init__(self, handler: DnsHandler, bind: str):
        self.handler = handler
        self.bind = bind
        self.port = 0
        self._udp: asyncio.DatagramTransport | None = None
        self._tcp: asyncio.Server | None = None
        self._by_address: dict[str, int] = {}
        self._open = 0
        self._tasks: set[asyncio.Task] = set()
        self._writers: set[asyncio.StreamWriter] = set()

    @property
    def refusals(self) -> dict[str, int]:
        return self.handler.tally.totals

    @property
    def queries(self) -> dict[str, int]:
        return self.handler.queries

    @property
    def truncated(self) -> int:
        return self.handler.truncated

    @property
    def tcp_connections(self) -> int:
        return self._open

    async def _listen(self, port: int) -> None:
        loop = asyncio.get_running_loop()
        transport, _ = await loop.create_datagram_endpoint(
            lambda: _UdpProtocol(self.handler), local_addr=(self.bind, port)
        )
        bound = transport.get_extra_info("sockname")[1]
        try:
            self._tcp = await asyncio.start_server(self._connection, self.bind, bound)
        except OSError:
            transport.close()
            raise
        self._udp = transport  # type: ignore[assignment]
        self.port = bound

    async def start(self, port: int) -> None:
        if port:
            await self._listen(port)
            return
        # Port 0: the UDP port the kernel picks, and TCP on the same; that one may be taken for TCP.
        for attempt in range(20):
            try:
                await self._listen(0)
                return
            except OSError:
                if attempt == 19:
                    raise

    def close(self) -> None:
        """Stop listening and close every open connection (``wait_closed`` waits for them)."""
        if self._udp is not None:
            self._udp.close()
        if self._tcp is not None:
            self._tcp.close()
        for writer in list(self._writers):
            writer.close()
        for task in list(self._tasks):
            task.cancel()

    async def wait_closed(self) -> None:
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._tcp is not None:
            await self._tcp.wait_closed()

    # ------------------------------------------------------------------ TCP

    def _admit(self, address: str) -> str | None:
        limits = self.handler.limits
        if self._open >= limits.tcp_connections_max:
            return TCP_CONNECTIONS
        if self._by_address.get(address, 0) >= limits.tcp_connections_per_address_max:
            return TCP_CONNECTIONS_PER_ADDRESS
        self._open += 1
        self._by_address[address] = self._by_address.get(address, 0) + 1
        return None

    def _release(self, address: str) -> None:
        self._open -= 1
        left = self._by_address.get(address, 1) - 1
        if left > 0:
            self._by_address[address] = left
        else:
            self._by_address.pop(address, None)

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = writer.get_extra_info("peername")
        address = str(peer[0]) if peer else ""
        refusal = self._admit(address)
        if refusal is not None:
            self.handler.tally.note(refusal, address)
            writer.transport.abort()
            return
        task = asyncio.current_task()
        if task is not None:
            self._tasks.add(task)
        self._writers.add(writer)
        try:
            await self._serve(reader, writer, address)
        except asyncio.CancelledError:
            pass
        except Exception:
            self.handler.tally.note(INTERNAL_ERROR, address, exc_info=True)
        finally:
            self._release(address)
            self._writers.discard(writer)
            if task is not None:
                self._tasks.discard(task)
            with contextlib.suppress(Exception):
                writer.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, address: str) -> None:
        limits = self.handler.limits
        idle = limits.tcp_idle_seconds
        for served in range(limits.tcp_queries_per_connection):
            within_query = False
            try:
                head = await asyncio.wait_for(reader.readexactly(2), idle)
                within_query = True
                length = int.from_bytes(head, "big")
                if length > limits.query_max_bytes:
                    self.handler.tally.note(TOO_LONG, address)
                    return
                wire = await asyncio.wait_for(reader.readexactly(length), idle)
            except asyncio.IncompleteReadError as error:
                # The client closed: at a query's edge, the normal end of a connection.
                if error.partial:
                    self.handler.tally.note(MALFORMED, address)
                return
            except TimeoutError:
                # A client that asked and went quiet is closed silently (it may have meant to ask
                # more); one that never asked, or stopped within a query, is a refusal.
                if served == 0 or within_query:
                    self.handler.tally.note(TCP_IDLE, address)
                return
            except ConnectionError:
                return
            answer, was_query = self.handler.handle(wire, address, tcp=True)
            if answer is not None:
                writer.write(len(answer).to_bytes(2, "big") + answer)
                try:
                    await asyncio.wait_for(writer.drain(), idle)
                except TimeoutError:
                    # Not read: dropped with what it holds, not kept until it would be.
                    self.handler.tally.note(TCP_IDLE, address)
                    writer.transport.abort()
                    return
                except ConnectionError:
                    return
            if not was_query:
                return
        self.handler.tally.note(TCP_QUERY_LIMIT, address)


async def start_dns(
    catalog: Catalog,
    config: MeshConfig,
    *,
    allowed: Callable[[str], bool] | None = None,
    limits: DnsLimits | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> DnsServer:
    """The DNS interface on ``config.dns_bind:config.dns_port`` (UDP and TCP; port 0: one the kernel
    picks, read it from ``DnsServer.port``), serving ``catalog`` on the running event loop.
    ``allowed(client_address)`` False: that client's queries are REFUSED. ``limits`` and ``clock``
    (the rate limit's) are for tests."""
    handler = DnsHandler(catalog, config, allowed=allowed, limits=limits, clock=clock)
    server = DnsServer(handler, config.dns_bind)
    await server.start(config.dns_port)
    logger.info(
        "DNS interface on %s port %d (UDP and TCP), names under %s",
        config.dns_bind,
        server.port,
        config.dns_domain,
    )
    return server
