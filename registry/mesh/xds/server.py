"""The xDS control plane: Envoy's Aggregated Discovery Service over gRPC (``grpc.aio``), both variants.
Plain Python, no Django.

``StreamAggregatedResources`` is the state-of-the-world variant (SotW: every request names all the
resources the client wants of a type), ``DeltaAggregatedResources`` the incremental one (a request
names the resources to add and to drop). Both serve the four types of resources.py, for any service
name of the catalog. The rules they follow, from Envoy's "xDS REST and gRPC protocol" and gRPC's A27:

1. Versions and nonces. Every response has a nonce of its own; a resource's version is a hash of its
   bytes (the same resource always has the same version, on every stream and after a restart), and a
   SotW response's ``version_info`` a hash of the versions the client holds of that type after it.
2. ACK and NACK. A request carrying a response's nonce answers it: with ``error_detail`` it is a NACK
   (the client rejected it and keeps what it had), else an ACK. A NACK is logged with the client's
   reason (once a minute per type, with a count) and the rejected versions are remembered: they are
   not sent again; the resource is sent when it changes. A NACK never causes a response by itself, so
   a client that rejects everything, however often, costs a parse and a log count.
3. SotW subscriptions. A request whose nonce is not the latest one sent of its type is stale: its
   ACK or NACK counts, its subscription is ignored (the answer to the latest response repeats it).
   Listeners and clusters are "state of the world" types: each response lists every subscribed one,
   and one left out no longer exists; a client that names none, or ``*``, gets all of them
   (wildcard), and a change of subscription is always answered. Route configurations and assignments
   are sent only when they change, and one that does not exist is not sent (the client decides that
   it does not exist after its own timeout).
4. Delta subscriptions. Each request is applied on its own: ``resource_names_subscribe`` adds,
   ``..._unsubscribe`` drops, ``*`` is the wildcard for listeners and clusters (as is a first request
   that names none), ``initial_resource_versions`` says what a reconnecting client already has (it is
   not sent again). A subscribed name that does not exist, and one that stops existing, is listed in
   ``removed_resources``, once.
5. Changes. The catalog calls its listener on the thread that feeds it; the change is handed to the
   event loop, coalesced (``COALESCE_S``), the changed names' resources dropped from the shared cache,
   and every stream that holds or wants one of them woken: it sends what differs from what it sent.
6. Until the catalog has its first snapshot no stream is answered: an empty catalog would tell every
   client that every service was deleted.
7. Limits. Streams in all and per client address (RESOURCE_EXHAUSTED), names per request and per type
   of a stream (INVALID_ARGUMENT), the size of a request (gRPC's receive limit), a request that is not
   a discovery request (INVALID_ARGUMENT); a type URL not served is answered with nothing. Every
   refusal is logged at most once a minute per kind, with a count, and counted in ``refused``.
8. Memory. gRPC holds a response in memory until the client has taken it, and a stream writes its
   next response only then. So route configurations and assignments, and every type in delta, go
   ``MAX_RESPONSE_BYTES`` at a time, each part with its own nonce (the protocol lets these be sent a
   few at a time): the whole registry to hundreds of clients that read slowly is held a part per
   stream, not a copy per stream. Listeners and clusters are small, and a response of theirs must
   list them all.
"""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import logging
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from urllib.parse import unquote

import grpc
from envoy.service.discovery.v3 import discovery_pb2
from google.protobuf.message import DecodeError

from registry.config.services import MeshConfig
from registry.domain.refusals import RefusalLines, refusal_fields, since_last_line
from registry.mesh.catalog import Catalog
from registry.mesh.xds.resources import CLUSTER, KIND, LISTENER, TYPE_URLS, Entry, ResourceCache

log = logging.getLogger("registry.mesh.xds")

SERVICE = "envoy.service.discovery.v3.AggregatedDiscoveryService"
# Types whose every response lists all the subscribed resources, and that have a wildcard.
FULL_STATE = frozenset({LISTENER, CLUSTER})
WILDCARD = "*"
# Resource names in one request, and subscribed per type on one stream; more refuses the stream.
MAX_NAMES = 10_000
MAX_REQUEST_BYTES = 4 * 1024 * 1024
# A burst of catalog changes becomes one push per this interval, at most; a lone change goes at once.
COALESCE_S = 0.02
# How often a stream started before the catalog's first snapshot checks for it.
READY_POLL_S = 0.05
# Responses of one delta stream not yet answered by the client that are remembered (for its ACK/NACK).
MAX_IN_FLIGHT = 64
# A response as a stream keeps it until its turn to be written: the header's bytes, and the pieces of
# its resources (shared with every other stream, in the resource cache).
Response = tuple[bytes, list[bytes]]
# Resources of one response, about, in bytes; more go in the next responses (rule 8).
MAX_RESPONSE_BYTES = 1 << 20
# A client's NACK reason in our log, at most.
REASON_MAX_CHARS = 500

GRPC_OPTIONS = (
    ("grpc.max_receive_message_length", MAX_REQUEST_BYTES),
    # Streams live for hours: the server pings a quiet connection to find a client gone without a word.
    ("grpc.keepalive_time_ms", 60_000),
    ("grpc.keepalive_timeout_ms", 20_000),
    # Clients may ping every 10 s, even without a stream; more often is answered with GOAWAY.
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.http2.min_ping_interval_without_data_ms", 10_000),
    ("grpc.http2.max_ping_strikes", 2),
    # A connection that has held no stream for 5 minutes is closed.
    ("grpc.max_connection_idle_ms", 300_000),
    # gRPC sets SO_REUSEPORT by default: a second mesh process started on the same port would share it
    # without an error, and clients would reach one or the other at random. Taken is taken.
    ("grpc.so_reuseport", 0),
)

# (the ``authorization`` metadata value, the client certificate as DER, the client's address: what
# failed sign-ins are counted by) → None, or a refusal reason.
Authorize = Callable[[str | None, bytes | None, str], Awaitable[str | None]]


class Forbidden(str):
    """A refusal reason of ``authorize`` for a caller its credentials name who may not read the
    registry: the stream ends PERMISSION_DENIED (the node's 403). Any other reason (no credentials,
    wrong ones) ends it UNAUTHENTICATED (the node's 401)."""


# (certificate chain PEM, private key PEM, client CA PEM or None, client certificate required).
TlsFiles = tuple[bytes, bytes, bytes | None, bool]


class Refused(Exception):
    """A stream ends with this gRPC status and message (sent back: never a secret)."""

    def __init__(self, code: grpc.StatusCode, kind: str, message: str):
        super().__init__(message)
        self.code = code
        self.kind = kind
        self.message = message


def _hash(items: Iterable[tuple[str, str | None]]) -> str:
    digest = hashlib.blake2b(digest_size=8)
    for name, version in items:
        digest.update(f"{name}\0{version}\0".encode())
    return digest.hexdigest()


def peer_address(peer: str) -> str:
    """The client's address from gRPC's peer string (``ipv4:10.0.0.1:5000``, ``ipv6:[::1]:5000``, its
    brackets sometimes percent-encoded)."""
    kind, _, rest = unquote(peer).partition(":")
    if kind == "ipv6":
        return rest.rpartition("]")[0].lstrip("[")
    if kind == "ipv4":
        return rest.rpartition(":")[0]
    return peer


@dataclass(slots=True)
class TypeState:
    """What one stream knows of one type: the client's subscription, and what it holds."""

    subscribed: set[str] = field(default_factory=set)
    wildcard: bool = False
    # SotW: the client has named resources (an empty list is then no longer the wildcard).
    named: bool = False
    requested: bool = False
    responded: bool = False
    # The version the client holds of each resource, as far as the server knows (None: told, in
    # delta, that it does not exist).
    sent: dict[str, str | None] = field(default_factory=dict)
    # The resources the client accepted last (what it keeps when it rejects a response).
    acked: dict[str, Entry] = field(default_factory=dict)
    # Versions the client rejected: not sent again.
    rejected: dict[str, str] = field(default_factory=dict)
    # Responses not yet answered: nonce → the resources each changed (None: removed).
    in_flight: dict[str, dict[str, Entry | None]] = field(default_factory=dict)
    last_nonce: str = ""
    # Names to look at on the next push, or all of them.
    dirty: set[str] = field(default_factory=set)
    dirty_all: bool = True

    def forget(self, name: str) -> None:
        self.sent.pop(name, None)
        self.acked.pop(name, None)
        self.rejected.pop(name, None)

    def accept(self, changes: dict[str, Entry | None]) -> None:
        for name, entry in changes.items():
            if entry is None:
                self.acked.pop(name, None)
            else:
                self.acked[name] = entry
            self.rejected.pop(name, None)

    def reject(self, changes: dict[str, Entry | None]) -> None:
        """The client kept what it had before this response: ``sent`` goes back to that, and the
        versions it rejected are remembered."""
        for name, entry in changes.items():
            if entry is not None:
                self.rejected[name] = entry.version
            if self.sent.get(name, "") != (entry.version if entry else None):
                continue  # sent again since: a later answer will say how it went
            if name in self.acked:
                self.sent[name] = self.acked[name].version
            else:
                self.sent.pop(name, None)

    def mark(self, names: frozenset[str]) -> bool:
        """Note changed service names this stream holds or wants; True when there were some."""
        if self.wildcard:
            relevant = names
        else:
            relevant = {name for name in names if name in self.subscribed or name in self.sent}
        self.dirty |= relevant
        return bool(relevant)


class Stream:
    """One ADS stream: requests read by one task, responses written by the stream's own loop, which
    wakes on a request or a catalog change. Subclasses say how a request changes the subscription
    (``take``) and what a push sends (``responses``)."""

    def __init__(self, server: XdsServer, address: str):
        self.server = server
        self.address = address
        self.node = ""
        self.types: dict[str, TypeState] = {}
        self.wake = asyncio.Event()
        self.refusal: Refused | None = None

    async def run(self, requests: AsyncIterator[bytes], context: grpc.aio.ServicerContext) -> None:
        reader = asyncio.create_task(self._read(requests))
        try:
            while True:
                await self.wake.wait()
                self.wake.clear()
                if self.refusal is not None:
                    raise self.refusal
                if self.server.catalog.ready.is_set():
                    for header, pieces in self.responses():
                        # Joined only now: a stream holds one response's bytes at a time (rule 8).
                        await context.write(header + b"".join(pieces))
                        self.server.pushes += 1
                if reader.done():
                    if self.refusal is not None:
                        raise self.refusal
                    # The client closed its side, or the connection is gone.
                    if not reader.cancelled():
                        reader.exception()
                    return
        finally:
            reader.cancel()

    async def _read(self, requests: AsyncIterator[bytes]) -> None:
        try:
            async for raw in requests:
                try:
                    self.take(raw)
                except Refused as refused:
                    self.refusal = refused
                    return
                self.wake.set()
        finally:
            self.wake.set()

    def changed(self, names: frozenset[str]) -> None:
        if any([state.mark(names) for state in self.types.values()]):
            self.wake.set()

    def _state(self, type_url: str) -> TypeState | None:
        if type_url not in TYPE_URLS:
            self.server.unknown_types += 1
            self.server.note("xds_unknown_type", f"type URL {type_url[:200]!r} is not served (no answer)")
            return None
        return self.types.setdefault(type_url, TypeState())

    def _answered(self, state: TypeState, type_url: str, nonce: str, error: str | None) -> None:
        """ACK or NACK of the response ``nonce`` (rule 2)."""
        changes = state.in_flight.pop(nonce, None)
        if error is not None:
            self.server.nacks += 1
            self.server.note(
                f"xds_nack_{KIND[type_url]}",
                f"{KIND[type_url]} response {nonce} rejected by {self.node[:200]!r} at {self.address}: "
                f"{error[:REASON_MAX_CHARS]!r}",
            )
            if changes is not None:
                state.reject(changes)
        elif changes is not None:
            state.accept(changes)

    def _nonce(self, state: TypeState, changes: dict[str, Entry | None]) -> str:
        nonce = str(next(self.server.nonces))
        state.in_flight[nonce] = changes
        while len(state.in_flight) > MAX_IN_FLIGHT:
            del state.in_flight[next(iter(state.in_flight))]
        state.last_nonce = nonce
        state.responded = True
        return nonce

    def take(self, raw: bytes) -> None:
        raise NotImplementedError

    def responses(self) -> list[Response]:
        """What a push sends: each response's header and its resources' cached pieces, in order."""
        raise NotImplementedError


class SotwStream(Stream):
    """``StreamAggregatedResources`` (rules 1-3)."""

    def take(self, raw: bytes) -> None:
        try:
            request = discovery_pb2.DiscoveryRequest.FromString(raw)
        except DecodeError as error:
            raise Refused(
                grpc.StatusCode.INVALID_ARGUMENT, "xds_malformed", f"not a DiscoveryRequest: {error}"
            ) from None
        if request.HasField("node") and not self.node:
            self.node = request.node.id
        if len(request.resource_names) > MAX_NAMES:
            raise Refused(
                grpc.StatusCode.INVALID_ARGUMENT,
                "xds_too_many_names",
                f"{len(request.resource_names)} resource names in one request (at most {MAX_NAMES})",
            )
        state = self._state(request.type_url)
        if state is None:
            return
        # A nonce before any response of this type on this stream is one of a former stream: none.
        nonce = request.response_nonce if state.last_nonce else ""
        if nonce:
            # Every response is answered, a stale one too: its ACK or NACK counts.
            error = request.error_detail.message if request.HasField("error_detail") else None
            self._answered(state, request.type_url, nonce, error)
            if nonce != state.last_nonce:
                return  # stale: the answer to the latest response will say the subscription again
        names = set(request.resource_names)
        wildcard = False
        if request.type_url in FULL_STATE:
            wildcard = WILDCARD in names or (not names and not state.named)
            state.named = state.named or bool(names - {WILDCARD})
        names.discard(WILDCARD)
        if state.requested and names == state.subscribed and wildcard == state.wildcard:
            return
        if request.type_url in FULL_STATE:
            # A new subscription is answered even when what exists of it is what the client has:
            # the client learns from the answer which of the names it added do not exist.
            state.responded = False
        else:
            for name in state.subscribed - names:
                state.forget(name)
        state.subscribed = names
        state.wildcard = wildcard
        state.requested = True
        state.dirty_all = True

    def responses(self) -> list[Response]:
        out = []
        for type_url, state in self.types.items():
            if not state.requested or not (state.dirty_all or state.dirty):
                continue
            if type_url in FULL_STATE:
                changes = self._full_state(type_url, state)
            else:
                changes = self._changed_only(type_url, state)
            state.dirty, state.dirty_all = set(), False
            if changes is None:
                continue
            version = _hash(sorted(state.sent.items()))
            # Listeners and clusters list every resource in each response: one response. Routes and
            # assignments may come a few at a time (rule 8).
            parts = [changes] if type_url in FULL_STATE else _parts(changes, "sotw_piece")
            for part in parts:
                pieces = [entry.sotw_piece for entry in part.values() if entry is not None]
                header = discovery_pb2.DiscoveryResponse(
                    version_info=version, type_url=type_url, nonce=self._nonce(state, part)
                )
                out.append((header.SerializeToString(), pieces))
        return out

    def _full_state(self, type_url: str, state: TypeState) -> dict[str, Entry | None] | None:
        """Every subscribed resource that exists (a rejected version replaced by the one the client
        accepted before, if any), or None when that is what the client holds already."""
        cache = self.server.cache
        names = set(cache.names()) | state.subscribed if state.wildcard else state.subscribed
        entries: dict[str, Entry] = {}
        for name in sorted(names):
            entry = cache.get(type_url, name)
            if entry is not None and state.rejected.get(name) == entry.version:
                entry = state.acked.get(name)
            if entry is not None:
                entries[name] = entry
        holds = {name: entry.version for name, entry in entries.items()}
        if state.responded and holds == state.sent:
            return None
        changes: dict[str, Entry | None] = {name: None for name in state.sent}
        changes.update(entries)
        state.sent = dict(holds)
        return changes

    def _changed_only(self, type_url: str, state: TypeState) -> dict[str, Entry | None] | None:
        """The subscribed resources whose version the client does not hold (rule 3)."""
        names = state.subscribed if state.dirty_all else state.dirty & state.subscribed
        changes: dict[str, Entry | None] = {}
        for name in sorted(names):
            entry = self.server.cache.get(type_url, name)
            if entry is None:
                state.forget(name)  # so that it is sent again if it comes back
            elif entry.version not in (state.rejected.get(name), state.sent.get(name)):
                changes[name] = entry
                state.sent[name] = entry.version
        return changes or None


class DeltaStream(Stream):
    """``DeltaAggregatedResources`` (rules 1, 2 and 4)."""

    def take(self, raw: bytes) -> None:
        try:
            request = discovery_pb2.DeltaDiscoveryRequest.FromString(raw)
        except DecodeError as error:
            raise Refused(
                grpc.StatusCode.INVALID_ARGUMENT, "xds_malformed", f"not a DeltaDiscoveryRequest: {error}"
            ) from None
        if request.HasField("node") and not self.node:
            self.node = request.node.id
        count = (
            len(request.resource_names_subscribe)
            + len(request.resource_names_unsubscribe)
            + len(request.initial_resource_versions)
        )
        if count > MAX_NAMES:
            raise Refused(
                grpc.StatusCode.INVALID_ARGUMENT,
                "xds_too_many_names",
                f"{count} resource names in one request (at most {MAX_NAMES})",
            )
        state = self._state(request.type_url)
        if state is None:
            return
        if request.response_nonce:
            error = request.error_detail.message if request.HasField("error_detail") else None
            self._answered(state, request.type_url, request.response_nonce, error)
        full_state = request.type_url in FULL_STATE
        if not state.requested:
            state.requested = True
            state.dirty_all = True
            state.wildcard = full_state and not request.resource_names_subscribe
            for name, version in request.initial_resource_versions.items():
                state.sent[name] = version
        for name in request.resource_names_subscribe:
            if name == WILDCARD and full_state:
                state.wildcard = True
                state.dirty_all = True
            else:
                # A name subscribed again is sent again: the client may have lost it.
                if name in state.subscribed:
                    state.sent.pop(name, None)
                state.subscribed.add(name)
                state.dirty.add(name)
        for name in request.resource_names_unsubscribe:
            if name == WILDCARD and full_state:
                state.wildcard = False
                state.dirty_all = True
            else:
                state.subscribed.discard(name)
                state.dirty.discard(name)
                if not state.wildcard:
                    state.forget(name)
        if len(state.subscribed) > MAX_NAMES:
            kind = KIND[request.type_url]
            raise Refused(
                grpc.StatusCode.INVALID_ARGUMENT,
                "xds_too_many_names",
                f"{len(state.subscribed)} {kind} resources subscribed on one stream (at most {MAX_NAMES})",
            )

    def responses(self) -> list[Response]:
        out = []
        cache = self.server.cache
        for type_url, state in self.types.items():
            if not state.requested or not (state.dirty_all or state.dirty):
                continue
            every = cache.name_set() if state.wildcard else frozenset()
            names = state.subscribed | set(state.sent) | every if state.dirty_all else state.dirty
            state.dirty, state.dirty_all = set(), False
            changes: dict[str, Entry | None] = {}
            removed: list[str] = []
            for name in sorted(names):
                wanted = name in state.subscribed or (state.wildcard and name in every)
                entry = cache.get(type_url, name) if wanted else None
                if entry is not None:
                    if entry.version not in (state.rejected.get(name), state.sent.get(name)):
                        changes[name] = entry
                        state.sent[name] = entry.version
                elif name in state.subscribed:
                    if name not in state.sent or state.sent[name] is not None:
                        removed.append(name)
                        changes[name] = None
                        state.sent[name] = None
                elif state.sent.get(name) is not None:
                    removed.append(name)
                    changes[name] = None
                    state.forget(name)
            if not changes:
                continue
            for index, part in enumerate(_parts(changes, "delta_piece")):
                pieces = [entry.delta_piece for entry in part.values() if entry is not None]
                header = discovery_pb2.DeltaDiscoveryResponse(
                    system_version_info=str(self.server.catalog.version),
                    type_url=type_url,
                    nonce=self._nonce(state, part),
                    removed_resources=removed if index == 0 else (),
                )
                out.append((header.SerializeToString(), pieces))
        return out


def _parts(changes: dict[str, Entry | None], piece: str) -> list[dict[str, Entry | None]]:
    """``changes`` cut into parts of about MAX_RESPONSE_BYTES of resources, in order (rule 8)."""
    parts: list[dict[str, Entry | None]] = [{}]
    size = 0
    for name, entry in changes.items():
        length = len(getattr(entry, piece)) if entry is not None else 0
        if size and size + length > MAX_RESPONSE_BYTES:
            parts.append({})
            size = 0
        parts[-1][name] = entry
        size += length
    return parts


class XdsServer:
    """The running control plane: its gRPC server, the shared resource cache, the open streams, and
    counters for metrics (plain attributes)."""

    def __init__(
        self,
        catalog: Catalog,
        config: MeshConfig,
        authorize: Authorize | None,
        notes: RefusalLines | None = None,
    ):
        self.catalog = catalog
        self.config = config
        self.authorize = authorize
        self.notes = notes or RefusalLines()
        self.cache = ResourceCache(catalog, config.xds_metadata_max_bytes, self.notes)
        self.nonces = itertools.count(1)
        self.port = 0
        self.streams: set[Stream] = set()
        self.by_address: dict[str, int] = {}
        # Counters: open streams, refusals by kind, responses sent, NACKs received, requests of a type
        # not served, catalog changes pushed.
        self.streams_open = 0
        self.refused: dict[str, int] = {}
        self.pushes = 0
        self.nacks = 0
        self.unknown_types = 0
        self.changes = 0
        self._grpc: grpc.aio.Server | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._pending: set[str] = set()
        self._flush: asyncio.TimerHandle | None = None
        self._last_flush = 0.0
        self._unsubscribe: Callable[[], None] | None = None
        self._ready_task: asyncio.Task | None = None

    # ------------------------------------------------------------------ refusals and logs

    def note(self, kind: str, message: str) -> None:
        """Log a refusal (or a NACK, or a type not served) at most once a minute per kind."""
        count = self.notes.note(kind)
        if count:
            log.warning("xDS: %s%s", message, since_last_line(count), extra=refusal_fields(kind, count))

    # ------------------------------------------------------------------ catalog changes

    def _on_catalog_change(self, names: frozenset[str]) -> None:
        """The catalog's listener, on the feeding thread: hand the names to the event loop."""
        loop = self._loop
        if loop is None or loop.is_closed():
            return
        try:
            loop.call_soon_threadsafe(self._changed, names)
        except RuntimeError:
            pass  # the loop closed meanwhile: the server is stopping

    def _changed(self, names: frozenset[str]) -> None:
        self._pending |= names
        if self._flush is None:
            assert self._loop is not None
            delay = max(0.0, self._last_flush + COALESCE_S - self._loop.time())
            self._flush = self._loop.call_later(delay, self._push)

    def _push(self) -> None:
        assert self._loop is not None
        self._flush = None
        self._last_flush = self._loop.time()
        names = frozenset(self._pending)
        self._pending = set()
        self.changes += 1
        self.cache.invalidate(names)
        for stream in self.streams:
            stream.changed(names)

    async def _wait_ready(self) -> None:
        while not self.catalog.ready.is_set():
            await asyncio.sleep(READY_POLL_S)
        for stream in self.streams:
            stream.wake.set()

    # ------------------------------------------------------------------ streams

    def _admit(self, address: str) -> None:
        if self.streams_open >= self.config.xds_streams_max:
            raise Refused(
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                "xds_streams_max",
                f"{self.streams_open} xDS streams open, the most this server takes (EUREKA_XDS_STREAMS_MAX)",
            )
        per_address = self.config.xds_streams_per_address_max
        if per_address and self.by_address.get(address, 0) >= per_address:
            raise Refused(
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                "xds_streams_per_address",
                f"{per_address} xDS streams open from {address}, the most one address may open "
                "(EUREKA_XDS_STREAMS_PER_ADDRESS_MAX)",
            )

    async def _check_access(self, context: grpc.aio.ServicerContext, address: str) -> None:
        if self.authorize is None:
            return
        authorization = None
        for key, value in context.invocation_metadata() or ():
            if key == "authorization":
                authorization = value if isinstance(value, str) else value.decode("latin-1")
        certificate = client_certificate(context)
        try:
            reason = await self.authorize(authorization, certificate, address)
        except Exception:
            log.exception("xDS: the access check of a stream from %s failed", address)
            raise Refused(
                grpc.StatusCode.UNAVAILABLE, "xds_access_check_failed", "the access check failed; try again"
            ) from None
        if reason is None:
            return
        if isinstance(reason, Forbidden):
            raise Refused(grpc.StatusCode.PERMISSION_DENIED, "xds_permission_denied", str(reason))
        raise Refused(grpc.StatusCode.UNAUTHENTICATED, "xds_unauthenticated", reason)

    async def _serve(
        self, kind: type[Stream], requests: AsyncIterator[bytes], context: grpc.aio.ServicerContext
    ) -> None:
        address = peer_address(context.peer())
        stream: Stream | None = None
        try:
            self._admit(address)
            self.streams_open += 1
            self.by_address[address] = self.by_address.get(address, 0) + 1
            try:
                await self._check_access(context, address)
                stream = kind(self, address)
                self.streams.add(stream)
                await stream.run(requests, context)
            finally:
                self.streams_open -= 1
                self.by_address[address] -= 1
                if not self.by_address[address]:
                    del self.by_address[address]
                if stream is not None:
                    self.streams.discard(stream)
        except Refused as refused:
            self.refused[refused.kind] = self.refused.get(refused.kind, 0) + 1
            self.note(refused.kind, f"stream from {address} refused: {refused.message}")
            await context.abort(refused.code, refused.message)

    async def _sotw(self, requests: AsyncIterator[bytes], context: grpc.aio.ServicerContext) -> None:
        await self._serve(SotwStream, requests, context)

    async def _delta(self, requests: AsyncIterator[bytes], context: grpc.aio.ServicerContext) -> None:
        await self._serve(DeltaStream, requests, context)

    # ------------------------------------------------------------------ start and stop

    async def start(self, tls: TlsFiles | None) -> None:
        self._loop = asyncio.get_running_loop()
        # Requests are parsed by the streams (a malformed one is refused with a message of ours) and
        # responses are written already serialized (resources.Entry): no (de)serializer here.
        handler = grpc.method_handlers_generic_handler(
            SERVICE,
            {
                "StreamAggregatedResources": grpc.stream_stream_rpc_method_handler(self._sotw),
                "DeltaAggregatedResources": grpc.stream_stream_rpc_method_handler(self._delta),
            },
        )
        server = grpc.aio.server(options=GRPC_OPTIONS)
        server.add_generic_rpc_handlers((handler,))
        bind = self.config.xds_bind
        address = f"[{bind}]:{self.config.xds_port}" if ":" in bind else f"{bind}:{self.config.xds_port}"
        if tls is None:
            self.port = server.add_insecure_port(address)
        else:
            self.port = server.add_secure_port(address, server_credentials(tls))
        self._grpc = server
        self._unsubscribe = self.catalog.subscribe(self._on_catalog_change)
        self._ready_task = asyncio.create_task(self._wait_ready())
        await server.start()

    async def stop(self, grace_seconds: float | None = None) -> None:
        if self._unsubscribe is not None:
            self._unsubscribe()
        if self._ready_task is not None:
            self._ready_task.cancel()
        if self._flush is not None:
            self._flush.cancel()
        if self._grpc is not None:
            await self._grpc.stop(grace_seconds)


def client_certificate(context: grpc.aio.ServicerContext) -> bytes | None:
    """The TLS client's certificate as DER, or None (no TLS, or no certificate)."""
    pems = (context.auth_context() or {}).get("x509_pem_cert") or []
    if not pems:
        return None
    return ssl.PEM_cert_to_DER_cert(pems[0].decode("ascii"))


def server_credentials(tls: TlsFiles) -> grpc.ServerCredentials:
    chain, key, client_ca, require_client_cert = tls
    if require_client_cert and not client_ca:
        raise ValueError("a client certificate is required but no client CA is given")
    return grpc.ssl_server_credentials(
        [(key, chain)], root_certificates=client_ca, require_client_auth=require_client_cert
    )


async def start_xds(
    catalog: Catalog,
    config: MeshConfig,
    *,
    authorize: Authorize | None = None,
    tls: TlsFiles | None = None,
) -> XdsServer:
    """The control plane on ``config.xds_bind:config.xds_port`` (port 0: one the system picks, in
    ``XdsServer.port``), serving ``catalog``; ``authorize`` is awaited once per stream; ``tls`` makes it
    gRPC over TLS. ``await server.stop(grace_seconds)`` ends it."""
    server = XdsServer(catalog, config, authorize)
    await server.start(tls)
    return server
