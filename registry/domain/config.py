"""The registry's settings as typed, frozen objects, parsed once from the environment.

``parse_config(os.environ)`` (called by eureka_site/settings.py, which derives the Django settings it
needs from the result) returns an ``EurekaConfig``; everything in registry/ and dashboard/ reads its
attributes, never the environment. Each setting has one home: a dataclass field declared with
``setting(default, "EUREKA_…", "meaning", minimum=…)``, which names its variable, bounds and default
(once), and is what docs/configuration.md's table is generated from. The two timing profiles are data
(``PROFILES``: the fields each one changes). Adding a setting: one such field, and the variable in
deploy/.env.example (tests check both the page and that file).

Django-free, and light to import: no HTTP or Redis client is loaded by parsing.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable, Mapping
from dataclasses import MISSING, Field, dataclass, field, fields, replace
from pathlib import Path, PurePath
from typing import Any

from registry.domain import constants as c
from registry.domain.endpoints import (
    Peer,
    PeerDns,
    Whitelist,
    parse_nameserver,
    parse_networks,
    parse_peer_dns,
    parse_peer_urls,
    parse_region_urls,
    parse_whitelist,
)
from registry.domain.leases import LEASE_EXPIRY_EUREKA

TIMINGS = ("fast", "eureka")
LEASE_EXPIRY_MODES = ("exact", "eureka")
# Spellings of a boolean (django-environ's true ones, and their opposites); anything else is an error.
_TRUE = frozenset({"true", "on", "ok", "y", "yes", "1"})
_FALSE = frozenset({"false", "off", "n", "no", "0", ""})
# The webhook log is pruned hourly; changes are queued every 200 ms (not tunable: no one needed to).
WEBHOOK_PRUNE_INTERVAL_MS = 3_600_000
WEBHOOK_FLUSH_MS = 200
# Start-up sync retries (Eureka's numberRegistrySyncRetries, 5 in the Java server's own config). The
# fallback of an older read site said 0 (Spring Cloud's bean default); settings always gave 5.
DEFAULT_SYNC_RETRIES = 5
# Paths the console may not take (the protocol, the admin, static files, the control endpoint, probes,
# the change feed).
RESERVED_DASHBOARD_PATHS = ("eureka", "admin", "static", "control", "healthz", "readyz", "metrics", "api")


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


def _items(raw: str) -> list[str]:
    """A comma-separated list; blanks dropped."""
    return [item.strip() for item in raw.split(",") if item.strip()]


def _peers(raw: str, _: Mapping[str, Any]) -> tuple[Peer, ...]:
    return tuple(parse_peer_urls(_items(raw)))


def _peer_dns(raw: str, _: Mapping[str, Any]) -> tuple[PeerDns, ...]:
    return parse_peer_dns(_items(raw))


def _nameservers(raw: str, _: Mapping[str, Any]) -> tuple[str, ...]:
    """``ip``, ``ip:port`` or ``[ipv6]:port`` entries, checked and written out with their port."""
    servers = []
    for entry in _items(raw):
        address, port = parse_nameserver(entry)
        servers.append(f"[{address}]:{port}" if ":" in address else f"{address}:{port}")
    return tuple(servers)


def _region_urls(raw: str, _: Mapping[str, Any]) -> dict[str, str]:
    return parse_region_urls(_items(raw))


def _whitelist(raw: str, read: Mapping[str, Any]) -> Whitelist:
    return parse_whitelist(_items(raw), read["urls"])


def _networks(raw: str, _: Mapping[str, Any]) -> tuple[str, ...]:
    allowed = tuple(_items(raw))
    parse_networks(",".join(allowed))
    return allowed


def _proxies(raw: str, _: Mapping[str, Any]) -> tuple[str, ...]:
    proxies = tuple(_items(raw))
    for proxy in proxies:
        try:
            ipaddress.ip_network(proxy, strict=False)
        except ValueError:
            raise ValueError(f"{proxy!r} is not an IP address or network") from None
    return proxies


def _base_url(raw: str, _: Mapping[str, Any]) -> str:
    return raw.rstrip("/")


def dashboard_prefix(path: str) -> str:
    """``/`` → ``""``, ``/console`` or ``/console/`` → ``"console/"`` (a URL pattern prefix). Raises
    BadSetting for a path that is not plain or that the registry serves itself."""
    clean = path.strip().strip("/")
    if clean and not re.fullmatch(r"[A-Za-z0-9._~-]+(/[A-Za-z0-9._~-]+)*", clean):
        raise BadSetting("EUREKA_DASHBOARD_PATH", f"{path!r} is not a plain URL path like /console")
    if clean.split("/")[0] in RESERVED_DASHBOARD_PATHS:
        raise BadSetting(
            "EUREKA_DASHBOARD_PATH",
            f"{path!r} collides with /{clean.split('/')[0]}/, which the registry serves",
        )
    return f"{clean}/" if clean else ""


def _dashboard_path(raw: str, _: Mapping[str, Any]) -> str:
    dashboard_prefix(raw)
    return raw


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

    # The fast profile's 500 ms: with replication's ~0.2 s, a peer serves a change within a second
    # (bench/README.md, "Replication"); builds are paced and from pieces, so refreshing this often is cheap.
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
    # request to its last byte (peer_timeout_ms bounds each read only). 64 MiB: a registry of 10,000
    # instances is ~10 MB of JSON (bench/README.md), so some 60,000 fit; a bomb costs 64 MiB at most.
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


@dataclass(frozen=True, slots=True)
class RedisConfig:
    """Production mode when ``url`` is set: Celery beat drives the jobs, the read-only tier is in Redis."""

    url: str = setting(
        "",
        "REDIS_URL",
        "Set: production mode (Redis: read-only cache, Celery broker); empty: embedded mode.",
    )
    # Key prefix of this node's data in Redis (nodes sharing one Redis need different ones).
    namespace: str = setting(
        "eureka", "EUREKA_REDIS_NAMESPACE", "Key prefix of this node's data in Redis (one per node)."
    )
    # "celery" whenever ``url`` is set (parse_config); a test's node may keep "embedded" with a Redis
    # read-only tier, replicating from its own process.
    jobs_driver: str = "embedded"


@dataclass(frozen=True, slots=True)
class WarmRestartConfig:
    """Snapshots of the lease map (registry/runtime/snapshots.py)."""

    enabled: bool = setting(
        True, "EUREKA_WARM_RESTART", "Save the lease map and begin a restart from it; false: start empty."
    )
    interval_ms: int = setting(
        5_000, "EUREKA_WARM_RESTART_INTERVAL_MS", "How often the snapshot is written.", minimum=100
    )
    max_age_ms: int = setting(
        90_000,
        "EUREKA_WARM_RESTART_MAX_AGE_MS",
        "A snapshot older than this at start is not used.",
        minimum=1,
    )
    # Relative: under the project's folder (parse_config's ``base_dir``); Django's SQLite file too.
    data_dir: str = setting(
        "var", "EUREKA_DATA_DIR", "Where the node keeps its files (snapshot; SQLite unless DATABASE_URL)."
    )


@dataclass(frozen=True, slots=True)
class ChangeFeedConfig:
    """GET /api/v1/changes and its SSE stream (registry/feed/)."""

    enabled: bool = setting(
        True, "EUREKA_CHANGE_FEED", "GET /api/v1/changes and its stream; false answers 404."
    )
    streams_max: int = setting(
        2_000, "EUREKA_CHANGE_STREAMS_MAX", "Open streams per node (more answer 503).", minimum=0
    )
    # Open streams per client address (registry/access/clients.py); 0: no limit.
    streams_per_address_max: int = setting(
        16,
        "EUREKA_CHANGE_STREAMS_PER_ADDRESS_MAX",
        "Open streams per client address (more answer 429); 0: no limit.",
        minimum=0,
    )
    keepalive_seconds: int = setting(
        15,
        "EUREKA_CHANGE_STREAM_KEEPALIVE_SECONDS",
        "A comment line on an idle stream this often.",
        minimum=1,
    )
    stream_max_seconds: int = setting(
        1_800,
        "EUREKA_CHANGE_STREAM_MAX_SECONDS",
        "A stream ends after this long (clients reconnect with Last-Event-ID).",
        minimum=1,
    )
    coalesce_ms: int = setting(
        50, "EUREKA_CHANGE_STREAM_COALESCE_MS", "Open streams are woken at most once per window.", minimum=0
    )
    redis_maxlen: int = setting(
        100_000,
        "EUREKA_CHANGE_FEED_REDIS_MAXLEN",
        "Production mode: entries the Redis stream of changes keeps, about.",
        minimum=1_000,
    )
    redis_buffer: int = setting(
        10_000,
        "EUREKA_CHANGE_FEED_REDIS_BUFFER",
        "Production mode: changes buffered for Redis (the oldest dropped when full).",
        minimum=100,
    )
    redis_flush_ms: int = setting(
        100,
        "EUREKA_CHANGE_FEED_REDIS_FLUSH_MS",
        "Production mode: how often buffered changes are sent to Redis.",
        minimum=10,
    )


@dataclass(frozen=True, slots=True)
class WebhooksConfig:
    """Webhook deliveries (registry/webhooks/)."""

    enabled: bool = setting(True, "EUREKA_WEBHOOKS_ENABLED", "false: no change is buffered, queued or sent.")
    timeout_ms: int = setting(
        5_000, "EUREKA_WEBHOOK_TIMEOUT_MS", "Per POST; an unanswered one is retried later.", minimum=100
    )
    max_attempts: int = setting(
        8, "EUREKA_WEBHOOK_MAX_ATTEMPTS", "Attempts per delivery before it fails.", minimum=1
    )
    retry_base_ms: int = setting(
        1_000, "EUREKA_WEBHOOK_RETRY_BASE_MS", "First wait before a retry (doubling after).", minimum=10
    )
    retry_max_ms: int = setting(
        300_000, "EUREKA_WEBHOOK_RETRY_MAX_MS", "Longest wait before a retry.", minimum=10
    )
    retention_days: int = setting(
        7, "EUREKA_WEBHOOK_RETENTION_DAYS", "Finished deliveries are deleted after this many days.", minimum=1
    )
    prune_interval_ms: int = WEBHOOK_PRUNE_INTERVAL_MS
    buffer_size: int = setting(
        10_000,
        "EUREKA_WEBHOOK_BUFFER_SIZE",
        "Changes waiting to be queued (the oldest dropped when full).",
        minimum=100,
    )
    flush_ms: int = WEBHOOK_FLUSH_MS
    refresh_ms: int = setting(
        5_000,
        "EUREKA_WEBHOOK_REFRESH_MS",
        "Subscriptions saved in another process apply within this long.",
        minimum=100,
    )
    poll_ms: int = setting(
        2_000,
        "EUREKA_WEBHOOK_POLL_MS",
        "Production mode: Celery beat runs the sender this often.",
        minimum=100,
    )


@dataclass(frozen=True, slots=True)
class HealthChecksConfig:
    """Active health checks (registry/health/); the intervals are defaults instances may override."""

    enabled: bool = setting(
        False, "EUREKA_HEALTH_CHECKS", "Probe instances whose metadata asks for it; mark DOWN after failures."
    )
    concurrency: int = setting(
        50, "EUREKA_HEALTH_CHECK_CONCURRENCY", "Probes running at once, at most.", minimum=1
    )
    dispatch_ms: int = setting(
        250, "EUREKA_HEALTH_CHECK_DISPATCH_MS", "How often due probes are handed out.", minimum=50
    )
    interval_ms: int = setting(
        10_000,
        "EUREKA_HEALTH_CHECK_INTERVAL_SECONDS",
        "Default probe interval (an instance's metadata may set its own).",
        minimum=1,
        scale=1000,
    )
    timeout_ms: int = setting(
        2_000,
        "EUREKA_HEALTH_CHECK_TIMEOUT_SECONDS",
        "Default probe timeout; at most EUREKA_HEALTH_CHECK_MAX_TIMEOUT_SECONDS.",
        minimum=1,
        scale=1000,
    )
    threshold: int = setting(
        3, "EUREKA_HEALTH_CHECK_THRESHOLD", "Default failures in a row that mark an instance DOWN.", minimum=1
    )
    recover: int = setting(
        2, "EUREKA_HEALTH_CHECK_RECOVER", "Default successes in a row that bring it back.", minimum=1
    )
    # Each probe holds a pool slot this long at most.
    max_timeout_ms: int = setting(
        10_000,
        "EUREKA_HEALTH_CHECK_MAX_TIMEOUT_SECONDS",
        "The longest timeout an instance may ask for.",
        minimum=1,
        scale=1000,
    )
    allowed_networks: tuple[str, ...] = setting(
        (),
        "EUREKA_HEALTH_CHECK_ALLOWED_NETWORKS",
        "CIDRs probes may reach although loopback, link-local or the node's own; empty: none.",
        read=_networks,
    )


@dataclass(frozen=True, slots=True)
class ProcessConfig:
    """The serving process: garbage collection, the event loop's watch, refusals in the log, the
    in-process scheduler."""

    # registry/runtime/gc_policy.py; 0 switches the freezing off.
    gc_freeze_interval_ms: int = setting(
        60_000,
        "EUREKA_GC_FREEZE_INTERVAL_MS",
        "How often young garbage is collected and the survivors frozen; 0: off.",
        minimum=0,
    )
    gc_full_collection_interval_ms: int = setting(
        3_600_000,
        "EUREKA_GC_FULL_COLLECTION_INTERVAL_MS",
        "How often one full collection reclaims frozen garbage.",
        minimum=1,
    )
    # registry/runtime/loop_watch.py; 0 switches the watch off.
    loop_stall_threshold_ms: int = setting(
        100,
        "EUREKA_LOOP_STALL_THRESHOLD_MS",
        "A turn of the event loop later than this is logged and counted; 0: off.",
        minimum=0,
    )
    # registry/domain/refusals.py: connections, requests and credentials refused, malformed requests.
    refusal_log_interval_seconds: int = setting(
        60,
        "EUREKA_REFUSAL_LOG_INTERVAL_SECONDS",
        "Refusals (and malformed requests) are logged at most once in this time per kind, with a count.",
        minimum=1,
    )
    embedded_scheduler: bool = setting(
        True,
        "EUREKA_EMBEDDED_SCHEDULER",
        "Run the periodic jobs in-process (with REDIS_URL: only those Celery beat left overdue).",
    )


@dataclass(frozen=True, slots=True)
class IdentityConfig:
    """What the console shows about this node (Spring Cloud's eureka.environment / datacenter)."""

    environment: str = setting("test", "EUREKA_ENVIRONMENT", "Shown as the console's Environment.")
    datacenter: str = setting("default", "EUREKA_DATACENTER", "Shown as the console's Data center.")
    # Empty: the address of the interface that routes outwards.
    instance_ip_address: str = setting(
        "",
        "EUREKA_INSTANCE_IP_ADDRESS",
        "This node's address on the console; empty: the outward interface's.",
    )


@dataclass(frozen=True, slots=True)
class AccessConfig:
    """API accounts and sign-ins (registry/access/)."""

    # With it on, every /eureka/ request needs HTTP Basic credentials of a Django user holding a role
    # (client, reader, peer). Off keeps Eureka's open API.
    api_auth: bool = setting(
        False, "EUREKA_API_AUTH", "Every /eureka/ request needs Basic credentials of an account with a role."
    )
    # A disabled account or a new password is refused within this time (changes made in the admin at once).
    api_auth_recheck_seconds: int = setting(
        5,
        "EUREKA_API_AUTH_RECHECK_SECONDS",
        "Verified credentials are trusted this long before the account is read again.",
        minimum=1,
    )
    # Failed sign-ins (the admin's form, which the console uses, and API Basic credentials): past these
    # within the lockout, an address or a user name is refused without a password check (429,
    # Retry-After; registry/access/throttle.py). Verified API credentials are never refused.
    signin_max_failures: int = setting(
        10,
        "EUREKA_SIGNIN_MAX_FAILURES",
        "Failed sign-ins from one address before it is locked out; 0: no limit.",
        minimum=0,
    )
    signin_max_failures_per_user: int = setting(
        30,
        "EUREKA_SIGNIN_MAX_FAILURES_PER_USER",
        "Failed sign-ins for one user name, from anywhere, before it is locked out; 0: no limit.",
        minimum=0,
    )
    signin_lockout_seconds: int = setting(
        60,
        "EUREKA_SIGNIN_LOCKOUT_SECONDS",
        "Seconds failures are counted over, and a lockout lasts.",
        minimum=1,
    )
    # Behind them, the client is the last address in X-Forwarded-For that is not a proxy. Default:
    # loopback (a proxy or reader on the same host), as gunicorn's forwarded_allow_ips.
    trusted_proxies: tuple[str, ...] = setting(
        ("127.0.0.1", "::1"),
        "EUREKA_TRUSTED_PROXIES",
        "Proxies (IPs or CIDRs) whose X-Forwarded-For gives the client address.",
        read=_proxies,
    )
    # Password checks that may wait for a hashing slot, per slot (registry/access/hashers.py); more
    # are refused at once with 503. 0: no limit.
    signin_waiting_per_core: int = setting(
        4,
        "EUREKA_SIGNIN_WAITING_PER_CORE",
        "Password checks that may wait per hashing core (more answer 503); 0: no limit.",
        minimum=0,
    )


@dataclass(frozen=True, slots=True)
class SecurityConfig:
    """The site around the protocol (eureka_site/settings.py turns these into Django's settings)."""

    # Without SECRET_KEY, embedded mode (make run, tests) signs sessions with a public development key;
    # production mode (REDIS_URL) refuses that key whatever this says.
    embedded: bool = setting(
        True, "EUREKA_EMBEDDED", "Without SECRET_KEY, sign sessions with the public development key."
    )
    # Over HTTPS through a TLS proxy that sets X-Forwarded-Proto: Secure cookies, HSTS, plain-HTTP
    # console and admin requests redirected (never the protocol, the probes or /metrics).
    https: bool = setting(
        False, "EUREKA_HTTPS", "The site is reached over HTTPS through a TLS proxy (Secure cookies, HSTS)."
    )
    hsts_seconds: int = setting(
        31_536_000, "EUREKA_HSTS_SECONDS", "Strict-Transport-Security max-age, with EUREKA_HTTPS.", minimum=0
    )
    hsts_include_subdomains: bool = setting(
        False, "EUREKA_HSTS_INCLUDE_SUBDOMAINS", "HSTS includeSubDomains, with EUREKA_HTTPS."
    )
    hsts_preload: bool = setting(False, "EUREKA_HSTS_PRELOAD", "HSTS preload, with EUREKA_HTTPS.")
    # Set it only behind a proxy that sets or strips that header itself.
    trust_forwarded_prefix: bool = setting(
        False,
        "EUREKA_TRUST_FORWARDED_PREFIX",
        "Honour X-Forwarded-Prefix (a proxy mounts the site under a path).",
    )


@dataclass(frozen=True, slots=True)
class DashboardConfig:
    """The status console (dashboard/)."""

    enabled: bool = setting(True, "EUREKA_DASHBOARD_ENABLED", "Serve the status console.")
    # Instance metadata often holds secrets, and a closed API should not leave them on an open page.
    login_required: bool = setting(
        False,
        "EUREKA_DASHBOARD_LOGIN_REQUIRED",
        "The console, /lastn and the instance pages only for signed-in staff users.",
        derived="EUREKA_API_AUTH",
    )
    path: str = setting(
        "/",
        "EUREKA_DASHBOARD_PATH",
        "Where the console lives, e.g. /console (not a path the registry serves).",
        read=_dashboard_path,
    )
    refresh_seconds: int = setting(
        10,
        "EUREKA_DASHBOARD_REFRESH_SECONDS",
        "Seconds between refreshes while the tab is visible (backing off when hidden); 0: off.",
        minimum=0,
    )
    page_size: int = setting(
        500, "EUREKA_DASHBOARD_PAGE_SIZE", "Instances per page of the console's table.", minimum=10
    )
    # A console view reads the whole registry: viewers of one page share its render for this long
    # (dashboard/shared_pages.py), so its cost does not grow with the number of viewers.
    cache_ms: int = setting(
        2_000,
        "EUREKA_DASHBOARD_CACHE_MS",
        "How long every viewer of a console page gets the same render (what it shows is at most "
        "this old); 0: each view renders.",
        minimum=0,
    )
    # The console's last-hour charts keep 3,600,000 / this many samples (360 at 10 s).
    history_interval_ms: int = setting(
        10_000,
        "EUREKA_DASHBOARD_HISTORY_INTERVAL_MS",
        "How often the node samples itself for the console's last-hour charts; 0: no charts.",
        minimum=0,
    )

    @property
    def prefix(self) -> str:
        """The console's URL pattern prefix: ``""`` or ``"console/"``."""
        return dashboard_prefix(self.path)


@dataclass(frozen=True, slots=True)
class MetricsConfig:
    """GET /metrics in Prometheus' text format (registry/protocol/metrics.py)."""

    enabled: bool = setting(
        True, "EUREKA_METRICS_ENABLED", "Serve /metrics and time protocol requests; false: 404."
    )
    token: str = setting(
        "",
        "EUREKA_METRICS_TOKEN",
        "Set: scrapers send it as Bearer credentials (else 401); empty: /metrics is open.",
        secret=True,
    )


@dataclass(frozen=True, slots=True)
class ReaderConfig:
    """A reader process (registry/reader/): how stale a payload it serves may be, and its node."""

    max_staleness_ms: int = setting(
        variable="EUREKA_READER_MAX_STALENESS_MS",
        doc="A payload the node has not confirmed for this long is not served (the node is asked).",
        minimum=1,
        derived="3 × EUREKA_RESPONSE_CACHE_UPDATE_INTERVAL_MS",
    )
    revalidate_ms: int = setting(
        variable="EUREKA_READER_REVALIDATE_MS",
        doc="How often a reader asks Redis whether a payload changed, at most (0: every request).",
        minimum=0,
        derived="EUREKA_RESPONSE_CACHE_UPDATE_INTERVAL_MS / 10, at most 100",
    )
    node_url: str = setting(
        variable="EUREKA_READER_NODE_URL",
        doc="Where a reader forwards writes, misses and stale reads (the node's base URL).",
        read=_base_url,
        derived="EUREKA_CONTROL_URL",
    )
    node_timeout_ms: int = setting(
        5_000,
        "EUREKA_READER_NODE_TIMEOUT_MS",
        "How long a reader waits for the node's answer before answering 503.",
        minimum=100,
    )


@dataclass(frozen=True, slots=True)
class ConnectionsConfig:
    """What one client may hold of a node's connections, and for how long (docs "Security model").

    The gunicorn worker (registry/serving/gunicorn_worker.py) counts open connections per client
    address and in all, and refuses a new one past either cap with a 503 before reading anything; the
    total stays below gunicorn's ``worker_connections`` so that the worker always accepts, and a
    refused client gets an answer instead of waiting in the kernel's queue. Addresses in
    EUREKA_TRUSTED_PROXIES (a proxy or reader in front carries many clients) are not capped per
    address. The timeouts are Tomcat's and nginx's: the request line and headers of a new connection,
    and a request body (no byte for ``body_idle_timeout_s``, or not all of it within
    ``body_timeout_s``), are given that long and then the connection is closed; so is a connection
    whose client takes no byte of its answer for ``write_timeout_s`` (nginx's ``send_timeout``), and
    the answers clients that stopped reading hold are bounded by ``slow_readers_max_bytes``
    (registry/serving/connections.py, SlowReaders). 0 switches one off."""

    max_per_address: int = setting(
        256,
        "EUREKA_MAX_CONNECTIONS_PER_ADDRESS",
        "Connections one client address may hold open (more get 503); 0: no cap.",
        minimum=0,
    )
    max_total: int = setting(
        9_000,
        "EUREKA_MAX_CONNECTIONS",
        "Connections open in all (kept below gunicorn's worker_connections); 0: no cap.",
        minimum=0,
    )
    header_timeout_s: float = setting(
        20.0,
        "EUREKA_HEADER_TIMEOUT_SECONDS",
        "A new connection's request line and headers must arrive within this; 0: off.",
        minimum=0,
    )
    body_idle_timeout_s: float = setting(
        20.0,
        "EUREKA_BODY_IDLE_TIMEOUT_SECONDS",
        "A request body may pause this long at most; 0: off.",
        minimum=0,
    )
    body_timeout_s: float = setting(
        60.0,
        "EUREKA_BODY_TIMEOUT_SECONDS",
        "A request body must arrive whole within this; 0: off.",
        minimum=0,
    )
    # A client that reads, however slowly, takes bytes: only one that takes none this long is cut.
    write_timeout_s: float = setting(
        20.0,
        "EUREKA_WRITE_TIMEOUT_SECONDS",
        "A client that takes no byte of its answer for this long is disconnected; 0: off.",
        minimum=0,
    )
    slow_readers_max_bytes: int = setting(
        64 * 1024 * 1024,
        "EUREKA_SLOW_READERS_MAX_BYTES",
        "Answers held for clients that stopped reading, in all; past it the oldest go; 0: no bound.",
        minimum=0,
    )
    # Also the limit after gunzip; Django's DATA_UPLOAD_MAX_MEMORY_SIZE is this too.
    max_body_bytes: int = setting(
        1024 * 1024,
        "EUREKA_MAX_BODY_BYTES",
        "Larger request bodies (also after gunzip) are refused with 413.",
        minimum=1024,
    )


@dataclass(frozen=True, slots=True)
class EurekaConfig:
    registry: RegistryRules
    response_cache: ResponseCacheConfig
    reader: ReaderConfig
    cluster: ClusterConfig = ClusterConfig()
    remote_regions: RemoteRegionsConfig = field(default_factory=RemoteRegionsConfig)
    redis: RedisConfig = RedisConfig()
    warm_restart: WarmRestartConfig = WarmRestartConfig()
    change_feed: ChangeFeedConfig = ChangeFeedConfig()
    webhooks: WebhooksConfig = WebhooksConfig()
    health_checks: HealthChecksConfig = HealthChecksConfig()
    process: ProcessConfig = ProcessConfig()
    identity: IdentityConfig = IdentityConfig()
    access: AccessConfig = AccessConfig()
    connections: ConnectionsConfig = ConnectionsConfig()
    security: SecurityConfig = SecurityConfig()
    dashboard: DashboardConfig = DashboardConfig()
    metrics: MetricsConfig = MetricsConfig()
    timings: str = setting(
        "fast",
        "EUREKA_TIMINGS",
        "Timing profile: fast (exact leases, quick jobs) or eureka (the Java server's timings).",
        choices=TIMINGS,
    )
    # The node's base URL for Celery tasks' calls to its control endpoint.
    control_url: str = setting(
        "http://127.0.0.1:8761",
        "EUREKA_CONTROL_URL",
        "Where Celery tasks and readers reach this node's registry process.",
        read=_base_url,
    )
    control_secret: str = setting(
        "",
        "EUREKA_CONTROL_SECRET",
        "Shared secret of Celery tasks and the control endpoint; required with REDIS_URL.",
        secret=True,
    )

    def with_changes(self, **changes: object) -> EurekaConfig:
        """A copy with ``section__field=value`` changes (``registry__disable_delta=True``), or whole
        fields (``timings="eureka"``): how tests and benchmarks vary one setting."""
        sections: dict[str, dict[str, object]] = {}
        top: dict[str, object] = {}
        for name, value in changes.items():
            section, _, attribute = name.partition("__")
            if attribute:
                sections.setdefault(section, {})[attribute] = value
            else:
                top[name] = value
        for section, values in sections.items():
            top[section] = replace(getattr(self, section), **values)
        return replace(self, **top)

    def job_intervals_ms(self) -> dict[str, int]:
        """Every node job's interval (registry/runtime/jobs.py), for the embedded scheduler and Celery
        beat alike (registry/runtime/schedule.py)."""
        return {
            "evict": self.registry.eviction_interval_ms,
            "sync_response_cache": self.response_cache.update_interval_ms,
            "prune_delta_queue": self.registry.delta_retention_timer_interval_ms,
            "recount_expected_clients": self.registry.renewal_threshold_update_interval_ms,
            "prune_webhook_deliveries": self.webhooks.prune_interval_ms,
            "fetch_remote_regions": self.remote_regions.fetch_interval_ms,
            "sample_history": self.dashboard.history_interval_ms,
        }


# The sections of EurekaConfig, in the order they are parsed (a derived default reads earlier ones).
SECTIONS: dict[str, type] = {
    part.name: part.type if isinstance(part.type, type) else globals()[part.type]
    for part in fields(EurekaConfig)
    if part.name not in {"timings", "control_url", "control_secret"}
}

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


class _Environment:
    """Typed reads of one variable each; a bad value raises BadSetting naming it."""

    def __init__(self, environ: Mapping[str, str]):
        self.environ = environ

    def raw(self, variable: Variable) -> str | None:
        if variable.secret:
            path = self.environ.get(f"{variable.name}_FILE", "")
            if path:
                return Path(path).read_text().strip()
        return self.environ.get(variable.name)

    def read(self, variable: Variable, default: Any, read_so_far: Mapping[str, Any]) -> Any:
        """The field's value: ``default`` when the variable is unset, else its value checked and typed
        as the default is (times ``scale``)."""
        raw = self.raw(variable)
        if raw is None:
            return default
        name = variable.name
        if variable.read is not None:
            try:
                return variable.read(raw, read_so_far)
            except BadSetting:
                raise
            except ValueError as exc:
                raise BadSetting(name, str(exc)) from None
        if variable.choices:
            if raw not in variable.choices:
                raise BadSetting(name, f"must be one of {', '.join(variable.choices)}, got {raw!r}")
            return raw
        if isinstance(default, bool):
            return self._bool(name, raw)
        if isinstance(default, int):
            return variable.scale * self._int(name, raw, variable.minimum)
        if isinstance(default, float):
            return self._float(name, raw, variable.minimum)
        return raw

    @staticmethod
    def _int(name: str, raw: str, minimum: float | None) -> int:
        try:
            value = int(raw.strip())
        except ValueError:
            raise BadSetting(name, f"expected a whole number, got {raw!r}") from None
        if minimum is not None and value < minimum:
            raise BadSetting(name, f"must be >= {minimum}, got {value}")
        return value

    @staticmethod
    def _float(name: str, raw: str, minimum: float | None) -> float:
        try:
            value = float(raw.strip())
        except ValueError:
            raise BadSetting(name, f"expected a number, got {raw!r}") from None
        if minimum is not None and not value >= minimum:  # NaN too
            raise BadSetting(name, f"must be >= {minimum}, got {raw.strip()}")
        return value

    @staticmethod
    def _bool(name: str, raw: str) -> bool:
        value = raw.strip().lower()
        if value in _TRUE:
            return True
        if value in _FALSE:
            return False
        raise BadSetting(name, f"expected true or false, got {raw!r}")

    def fields(self, cls: type, defaults: Mapping[str, Any]) -> dict[str, Any]:
        """Every field of ``cls`` that has a variable; ``defaults`` (a profile's, or derived from other
        settings) replace the declared ones."""
        values: dict[str, Any] = {}
        for part in fields(cls):
            variable = variable_of(part)
            if variable is not None:
                default = defaults[part.name] if part.name in defaults else declared_default(part)
                values[part.name] = self.read(variable, default, values)
        return values


def parse_config(environ: Mapping[str, str], *, base_dir: str = "") -> EurekaConfig:
    """The whole typed config from environment variables (``os.environ``, or a plain dict in tests).
    A relative EUREKA_DATA_DIR is under ``base_dir`` (settings.py gives the project's folder). Raises
    BadSetting for a malformed or out-of-range value."""
    env = _Environment(environ)
    top = env.fields(EurekaConfig, {})
    profile = PROFILES[top["timings"]]
    sections: dict[str, Any] = {}
    for name, cls in SECTIONS.items():
        defaults = {**profile.get(name, {}), **_derived(name, sections, top)}
        values = env.fields(cls, defaults)
        if name == "redis":
            values["jobs_driver"] = "celery" if values["url"] else "embedded"
        if name == "warm_restart" and base_dir:
            values["data_dir"] = str(PurePath(base_dir, values["data_dir"]))
        sections[name] = cls(**values)
    health = sections["health_checks"]
    if health.timeout_ms > health.max_timeout_ms:
        raise BadSetting(
            "EUREKA_HEALTH_CHECK_TIMEOUT_SECONDS", "must be <= EUREKA_HEALTH_CHECK_MAX_TIMEOUT_SECONDS"
        )
    return EurekaConfig(**sections, **top)


def _derived(section: str, parsed: Mapping[str, Any], top: Mapping[str, Any]) -> dict[str, Any]:
    """Defaults computed from settings parsed before (each field says so in its ``derived``)."""
    if section == "reader":
        update_ms = parsed["response_cache"].update_interval_ms
        # 3 cache-sync intervals (the node's sync or the node itself has stopped); a tenth of one.
        return {
            "max_staleness_ms": 3 * update_ms,
            "revalidate_ms": min(100, update_ms // 10),
            "node_url": top["control_url"],
        }
    if section == "dashboard":
        # Instance metadata often holds secrets: a closed API does not leave them on an open console.
        return {"login_required": parsed["access"].api_auth}
    return {}
