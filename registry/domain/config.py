"""Eureka's own server settings as typed, frozen objects, and how any setting is declared.

The sections here are the Java server's ``eureka.server.*`` concerns: the lease map's rules
(``RegistryRules``: eviction, self-preservation, the delta, write limits), the response cache, peers
and replication, remote regions; and the two timing profiles (``PROFILES``: the fields each one
changes). Each setting has one home: a dataclass field declared with ``setting(default, "EUREKA_…",
"meaning", minimum=…)``, which names its variable, bounds and default (once), and is what
docs/configuration.md's table is generated from. The sections of the rest of the node and of the site
around it, and the parser that reads them all from the environment, are in registry/config/.

Django-free, and light to import: no HTTP or Redis client is loaded.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import MISSING, Field, dataclass, field
from typing import Any

from registry.domain import constants as c
from registry.domain.endpoints import (
    Peer,
    PeerDns,
    Whitelist,
    parse_nameserver,
    parse_peer_dns,
    parse_peer_urls,
    parse_region_urls,
    parse_whitelist,
)
from registry.domain.leases import LEASE_EXPIRY_EUREKA

TIMINGS = ("fast", "eureka")
LEASE_EXPIRY_MODES = ("exact", "eureka")
# Start-up sync retries: Eureka's numberRegistrySyncRetries, 5 in the Java server's own config (Spring
# Cloud's bean default is 0).
DEFAULT_SYNC_RETRIES = 5


class BadSetting(ValueError):
    """An environment variable whose value cannot be used; ``variable`` names it."""

    def __init__(self, variable: str, problem: str):
        super().__init__(f"{variable}: {problem}")
        self.variable = variable


@dataclass(frozen=True, slots=True)
class Variable:
    """How one environment variable fills one field (``setting`` declares it)."""

    name: str
    # One line for docs/configuration.md's table.
    doc: str
    minimum: float | None = None
    choices: tuple[str, ...] = ()
    # The field holds the value times this: variables in seconds fill fields in milliseconds.
    scale: int = 1
    # A value that is not a plain number, switch or text: ``read(raw, fields_read_so_far)`` returns the
    # field's value or raises ValueError, whose message BadSetting shows.
    read: Callable[[str, Mapping[str, Any]], Any] | None = None
    # Where a default is computed from other settings (parse_config), in words for the table.
    derived: str = ""
    # NAME_FILE names a file holding the value (Docker/systemd credentials); never shown in a repr.
    secret: bool = False


VARIABLE = "variable"


def setting(
    default: Any = MISSING,
    variable: str = "",
    doc: str = "",
    *,
    factory: Callable[[], Any] | None = None,
    **options: Any,
) -> Any:
    """A dataclass field read from ``variable``: its default (``factory`` for a mutable one; none for a
    default ``derived`` from other settings), one line of meaning, and ``Variable``'s options."""
    metadata = {VARIABLE: Variable(variable, doc, **options)}
    repr_ = not options.get("secret", False)
    if factory is not None:
        return field(default_factory=factory, metadata=metadata, repr=repr_)
    return field(default=default, metadata=metadata, repr=repr_)


def variable_of(part: Field) -> Variable | None:
    return part.metadata.get(VARIABLE)


def declared_default(part: Field) -> Any:
    if part.default is not MISSING:
        return part.default
    if part.default_factory is not MISSING:
        return part.default_factory()
    return MISSING


def comma_list(raw: str) -> list[str]:
    """A comma-separated list; blanks dropped."""
    return [item.strip() for item in raw.split(",") if item.strip()]


def _peers(raw: str, _: Mapping[str, Any]) -> tuple[Peer, ...]:
    return tuple(parse_peer_urls(comma_list(raw)))


def _peer_dns(raw: str, _: Mapping[str, Any]) -> tuple[PeerDns, ...]:
    return parse_peer_dns(comma_list(raw))


def _nameservers(raw: str, _: Mapping[str, Any]) -> tuple[str, ...]:
    """``ip``, ``ip:port`` or ``[ipv6]:port`` entries, checked and written out with their port."""
    servers = []
    for entry in comma_list(raw):
        address, port = parse_nameserver(entry)
        servers.append(f"[{address}]:{port}" if ":" in address else f"{address}:{port}")
    return tuple(servers)


def _region_urls(raw: str, _: Mapping[str, Any]) -> dict[str, str]:
    return parse_region_urls(comma_list(raw))


def _whitelist(raw: str, read: Mapping[str, Any]) -> Whitelist:
    return parse_whitelist(comma_list(raw), read["urls"])


@dataclass(frozen=True)
class RegistryRules:
    """The lease map's rules (``Registry`` in core.py applies them); names follow Eureka's
    ``eureka.server.*`` keys, defaults as in Spring Cloud (``PROFILES`` changes some)."""

    enable_self_preservation: bool = setting(
        True, "EUREKA_ENABLE_SELF_PRESERVATION", "Stop evicting when fewer renewals arrive than expected."
    )
    renewal_percent_threshold: float = setting(
        0.85,
        "EUREKA_RENEWAL_PERCENT_THRESHOLD",
        "Share of the expected renewals below which self-preservation starts.",
    )
    expected_client_renewal_interval_secs: int = setting(
        30,
        "EUREKA_EXPECTED_CLIENT_RENEWAL_INTERVAL_SECONDS",
        "Renewal interval the expected-renewals arithmetic assumes for clients.",
    )
    expected_number_of_clients_sending_renews: int = setting(
        1,
        "EUREKA_EXPECTED_NUMBER_OF_CLIENTS_SENDING_RENEWS",
        "Clients expected before any registers (the threshold's starting point).",
        minimum=0,
    )
    default_open_for_traffic_count: int = setting(
        1,
        "EUREKA_DEFAULT_OPEN_FOR_TRAFFIC_COUNT",
        "Expected clients counted when the node opens for traffic with an empty registry.",
        minimum=0,
    )
    renewal_threshold_update_interval_ms: int = setting(
        900_000,
        "EUREKA_RENEWAL_THRESHOLD_UPDATE_INTERVAL_MS",
        "How often the expected clients are recounted from the registry.",
        minimum=1,
    )
    eviction_interval_ms: int = setting(
        60_000, "EUREKA_EVICTION_INTERVAL_MS", "How often expired leases are evicted.", minimum=1
    )
    delta_retention_ms: int = setting(
        180_000,
        "EUREKA_RETENTION_TIME_IN_DELTA_QUEUE_MS",
        "How long a change stays in the delta (GET apps/delta).",
        minimum=1,
    )
    delta_retention_timer_interval_ms: int = setting(
        30_000,
        "EUREKA_DELTA_RETENTION_TIMER_INTERVAL_MS",
        "How often old changes are pruned from the delta.",
        minimum=1,
    )
    disable_delta: bool = setting(
        False, "EUREKA_DISABLE_DELTA", "Answer GET apps/delta with an empty delta (clients fetch in full)."
    )
    sync_when_timestamp_differs: bool = setting(
        True,
        "EUREKA_SYNC_WHEN_TIMESTAMP_DIFFERS",
        "Answer a peer's heartbeat carrying another lastDirtyTimestamp so that it sends its copy.",
    )
    lease_expiry: str = setting(
        "exact",
        "EUREKA_LEASE_EXPIRY",
        "exact: a lease ends its duration after the last renewal; eureka: the Java server's doubled timing.",
        choices=LEASE_EXPIRY_MODES,
    )
    wait_time_in_ms_when_sync_empty: int = setting(
        0,
        "EUREKA_WAIT_TIME_IN_MS_WHEN_SYNC_EMPTY",
        "Reads are refused (403) this long after a start that synced nothing (Eureka standalone: 300000).",
        minimum=0,
    )
    override_idle_expiry_ms: int = setting(
        3_600_000,
        "EUREKA_OVERRIDE_IDLE_EXPIRY_MS",
        "A status override of an instance that is gone is forgotten after this long.",
        minimum=1,
    )
    # Eureka moves the expected-clients count only while it is > 0 (so a node that starts at 0 never
    # evicts until its 15-minute recount). False counts every registration and cancel from 0 up.
    expected_clients_move_only_above_zero: bool = setting(
        True,
        "EUREKA_EXPECTED_CLIENTS_MOVE_ONLY_ABOVE_ZERO",
        "Move the expected-clients count only while it is above 0 (Eureka's rule).",
    )
    # Limits against hostile or broken clients (the Java server has none of them).
    # A lastDirtyTimestamp decides which copy of an instance wins, so one far in the future would win
    # against every later registration of the real instance: none is kept further ahead of the
    # node's clock than this (clocks of real clients are seconds apart, not minutes).
    max_dirty_ahead_ms: int = 300_000
    # Lease durations and renewal intervals above this are lowered to it, not refused: a real
    # config (Spring's lease-expiration-duration-in-seconds) asking for more still registers, and an
    # instance that dies is not listed for days.
    max_lease_duration_secs: int = setting(
        3_600,
        "EUREKA_MAX_LEASE_DURATION_SECONDS",
        "Lease durations and renewal intervals above this are lowered to it.",
        minimum=90,
    )
    # Instances (app, id) clients may add; 0: no limit. Off by default: refusing a growing fleet's
    # new instances is an outage, memory is not, and the right number depends on the node's memory.
    # Peers' writes are never refused (see ``register``).
    max_instances: int = setting(
        0,
        "EUREKA_MAX_INSTANCES",
        "Instances clients may register (a new one past it gets 503); 0: no limit.",
        minimum=0,
    )
    # One instance's metadata (keys, and UTF-8 bytes of keys plus values); 0: no limit. Spring Cloud
    # apps send 10-20 short keys (well under 1 KiB): the defaults leave room for build info and URLs,
    # and keep metadata PUTs, whose merges only add, from growing a record (and every full fetch).
    max_metadata_keys: int = setting(
        128,
        "EUREKA_MAX_METADATA_KEYS",
        "Metadata keys one instance may hold (else 400); 0: no limit.",
        minimum=0,
    )
    max_metadata_bytes: int = setting(
        32_768,
        "EUREKA_MAX_METADATA_BYTES",
        "UTF-8 bytes of one instance's metadata keys and values (else 400); 0: no limit.",
        minimum=0,
    )
    # One whole record: UTF-8 bytes of every text it holds (``instances.record_bytes``); 0: no limit.
    # Real registrations hold 1-4 KB; the default leaves room for the metadata's 32 KiB on top, and
    # bounds what the fields metadata limits do not see (URLs, VIPs, appGroupName, the data center's
    # metadata) made 913 KB records. Peers' copies are held to it too (see ``register``).
    max_instance_bytes: int = setting(
        65_536,
        "EUREKA_MAX_INSTANCE_BYTES",
        "UTF-8 bytes of all the text of one instance record, from clients and peers (else 400); 0: no limit.",
        minimum=0,
    )
    # One instance of a peer's or a remote region's answer as it is read (registry/wire/answers.py):
    # the characters of its names and texts, one for every other value. It bounds what one record can
    # make of Python objects (a record of 60 MB of ``[]`` would be millions). Above the record limit
    # (its text plus the names and JSON around it), so that every record a node keeps is read.
    max_answer_record_bytes: int = setting(
        262_144,
        "EUREKA_MAX_ANSWER_RECORD_BYTES",
        "Characters (names, texts) of one instance in a peer's or region's answer; a larger one is skipped.",
        minimum=4_096,
    )

    @property
    def eureka_timing(self) -> bool:
        return self.lease_expiry == LEASE_EXPIRY_EUREKA

    @property
    def renewal_interval_secs(self) -> int:
        value = self.expected_client_renewal_interval_secs
        return value if value > 0 else c.DEFAULT_RENEWAL_INTERVAL_SECS


@dataclass(frozen=True, slots=True)
class ResponseCacheConfig:
    """The response cache (registry/cache/): how often the read-only tier is refreshed and rebuilt."""

    # The fast profile's 500 ms: with replication's own delay, a peer serves a change within a second;
    # builds are paced and from pieces, so refreshing this often is cheap.
    update_interval_ms: int = setting(
        30_000,
        "EUREKA_RESPONSE_CACHE_UPDATE_INTERVAL_MS",
        "How often the read-only response cache is refreshed from the registry.",
        minimum=1,
    )
    auto_expiration_ms: int = setting(
        180_000,
        "EUREKA_RESPONSE_CACHE_AUTO_EXPIRATION_SECONDS",
        "A cached payload nothing asked for is dropped after this many seconds.",
        minimum=1,
        scale=1000,
    )
    use_read_only: bool = setting(
        True, "EUREKA_USE_READ_ONLY_RESPONSE_CACHE", "Serve reads from the read-only tier of the cache."
    )


@dataclass(frozen=True, slots=True)
class ClusterConfig:
    """Peers and replication (docs "Clusters"). ``peers`` are parsed once, credentials kept."""

    peers: tuple[Peer, ...] = setting(
        (),
        "EUREKA_PEER_URLS",
        "The other nodes' service URLs, comma-separated (credentials: Basic auth); empty: standalone.",
        read=_peers,
    )
    # Names whose DNS records list peers (registry/cluster/discovery.py), looked up at start and every
    # peer_dns_interval_ms; ``dns_nameservers`` ("ip" or "ip:port") instead of the system's resolver.
    peer_dns: tuple[PeerDns, ...] = setting(
        (),
        "EUREKA_PEER_DNS",
        "Names whose DNS records list peers: name:port (A/AAAA), `_service._proto.name` (SRV), or a URL.",
        read=_peer_dns,
    )
    peer_dns_interval_ms: int = setting(
        30_000,
        "EUREKA_PEER_DNS_INTERVAL_SECONDS",
        "How often EUREKA_PEER_DNS is looked up again.",
        minimum=1,
        scale=1000,
    )
    dns_nameservers: tuple[str, ...] = setting(
        (),
        "EUREKA_DNS_NAMESERVERS",
        "Nameservers for EUREKA_PEER_DNS (ip, ip:port, [ipv6]:port); empty: the system's.",
        read=_nameservers,
    )
    self_url: str = setting(
        "", "EUREKA_SELF_URL", "This node's service URL as peers know it (when host and port cannot tell)."
    )
    self_app_name: str = setting(
        "",
        "EUREKA_SELF_APP_NAME",
        "Register this node with each peer under this app name (e.g. EUREKA-SERVER).",
    )
    # Start-up sync (Eureka's syncUp): tries after the first, while no peer had any instance.
    sync_retries: int = setting(
        DEFAULT_SYNC_RETRIES,
        "EUREKA_REGISTRY_SYNC_RETRIES",
        "Start-up sync: tries after the first while no peer had any instance.",
        minimum=0,
    )
    sync_retry_wait_ms: int = setting(
        5_000, "EUREKA_REGISTRY_SYNC_RETRY_WAIT_MS", "Start-up sync: the wait between tries.", minimum=0
    )
    replication_flush_ms: int = setting(
        100,
        "EUREKA_REPLICATION_FLUSH_MS",
        "Writes are coalesced this long before going to the peers' queues.",
        minimum=10,
    )
    replication_queue_size: int = setting(
        10_000,
        "EUREKA_REPLICATION_QUEUE_SIZE",
        "Items queued per peer at most (past it the oldest are dropped and counted).",
        minimum=250,
    )
    peer_timeout_ms: int = setting(
        5_000, "EUREKA_PEER_TIMEOUT_MS", "How long one read from a peer may take.", minimum=100
    )
    # A peer's whole answer (cluster/transport.py read_answer): bytes once inflated, and time from the
    # request to its last byte (peer_timeout_ms bounds each read only). 64 MiB: a registry's JSON is
    # about a kilobyte an instance, so tens of thousands of instances fit; a bomb costs 64 MiB at most.
    peer_max_answer_bytes: int = setting(
        64 * 1024 * 1024,
        "EUREKA_PEER_MAX_ANSWER_BYTES",
        "Bytes of a peer's whole answer once inflated (64 MiB, ~60,000 instances).",
        minimum=65_536,
    )
    peer_total_timeout_ms: int = setting(
        30_000,
        "EUREKA_PEER_TOTAL_TIMEOUT_MS",
        "Time from a request to a peer to the last byte of its answer.",
        minimum=100,
    )
    # Instances a peer's registry answer (GET apps, its delta) may hold, and applications too: one more
    # and nothing of it is applied. The byte cap alone does not bound them (an empty instance is three
    # bytes, and gzip shrinks such repetition a thousandfold); the default is above the number of real
    # instances the byte cap lets through.
    peer_max_answer_instances: int = setting(
        100_000,
        "EUREKA_PEER_MAX_ANSWER_INSTANCES",
        "Instances (and applications) one registry answer of a peer may hold; one more and none is applied.",
        minimum=1_000,
    )
    # Items a peer's batch may hold (registry/cluster/incoming.py); a larger one is refused whole (413).
    # Peers send at most 250: four times that is headroom, not a load the node is sized for. At least
    # 250: the Java server's batches and ours hold up to 250 items.
    replication_batch_max_items: int = setting(
        1_000,
        "EUREKA_REPLICATION_BATCH_MAX_ITEMS",
        "Items one replication batch from a peer may hold (a larger one is refused with 413).",
        minimum=250,
    )

    @property
    def peer_urls(self) -> tuple[str, ...]:
        return tuple(peer.url for peer in self.peers)

    @property
    def clustered(self) -> bool:
        """Peers are configured: static ones, or names whose DNS records list them."""
        return bool(self.peers or self.peer_dns)


@dataclass(frozen=True, slots=True)
class RemoteRegionsConfig:
    """Other deployments whose registries are fetched and merged (docs "Remote regions")."""

    urls: Mapping[str, str] = setting(
        variable="EUREKA_REMOTE_REGION_URLS",
        doc="Other regions' registries to fetch and merge: region=serviceUrl, comma-separated.",
        factory=dict,
        read=_region_urls,
    )
    fetch_interval_ms: int = setting(
        30_000,
        "EUREKA_REMOTE_REGION_FETCH_INTERVAL_SECONDS",
        "How often each region is fetched.",
        minimum=1,
        scale=1000,
    )
    connect_timeout_ms: int = setting(
        1_000, "EUREKA_REMOTE_REGION_CONNECT_TIMEOUT_MS", "How long a fetch may take to connect.", minimum=100
    )
    read_timeout_ms: int = setting(
        1_000, "EUREKA_REMOTE_REGION_READ_TIMEOUT_MS", "How long one read of a fetch may take.", minimum=100
    )
    # A region's whole answer, as a peer's above (a region's registry is as large as a peer's).
    max_answer_bytes: int = setting(
        64 * 1024 * 1024,
        "EUREKA_REMOTE_REGION_MAX_ANSWER_BYTES",
        "Bytes of a region's whole answer once inflated.",
        minimum=65_536,
    )
    total_timeout_ms: int = setting(
        10_000,
        "EUREKA_REMOTE_REGION_TOTAL_TIMEOUT_MS",
        "Time from a fetch's request to the last byte of its answer.",
        minimum=100,
    )
    # As a peer's above.
    max_answer_instances: int = setting(
        100_000,
        "EUREKA_REMOTE_REGION_MAX_ANSWER_INSTANCES",
        "Instances (and applications) one answer of a region may hold; one more and none is applied.",
        minimum=1_000,
    )
    # APP (from every region) or region:APP (from that region); a region with entries of its own
    # uses those, the others the plain entries; none at all: every app.
    whitelist: Whitelist = setting(
        variable="EUREKA_REMOTE_REGION_APP_WHITELIST",
        doc="Apps merged from the regions: APP or region:APP, comma-separated; empty: every app.",
        factory=Whitelist,
        read=_whitelist,
    )
    # Eureka's transparent fallback: requests without regions= get every region too.
    transparent_fallback: bool = setting(
        True,
        "EUREKA_REMOTE_REGION_TRANSPARENT_FALLBACK",
        "Requests without regions= get every region's instances too.",
    )


# The two timing profiles, as the fields each one changes from the dataclasses' defaults: "fast" (the
# default: exact 90 s leases, eviction every 2 s and cache sync every 500 ms, expected clients counted
# exactly) and "eureka" (the Java server's timings and arithmetic). A variable set wins over both.
PROFILES: dict[str, dict[str, dict[str, object]]] = {
    "fast": {
        "registry": {
            "expected_number_of_clients_sending_renews": 0,
            "default_open_for_traffic_count": 0,
            "eviction_interval_ms": 2_000,
            "expected_clients_move_only_above_zero": False,
        },
        "response_cache": {"update_interval_ms": 500},
    },
    "eureka": {
        "registry": {"lease_expiry": "eureka"},
        "cluster": {"sync_retry_wait_ms": 30_000},
    },
}
