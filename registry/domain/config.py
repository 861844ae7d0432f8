"""The registry's settings as typed, frozen objects, parsed once from the environment.

``parse_config(os.environ)`` (called by eureka_site/settings.py, which keeps Django's own settings)
returns an ``EurekaConfig``; everything in registry/ and dashboard/ reads its attributes, never the
environment. Each default is written once, here. Adding a setting: a field on the dataclass of its
concern, one line in ``parse_config``, and the variable in deploy/.env.example (a test checks that).

Django-free, and light to import: no HTTP or Redis client is loaded by parsing.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from registry.domain import constants as c
from registry.domain.endpoints import (
    BadPeerUrl,
    BadRegionConfig,
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


class BadSetting(ValueError):
    """An environment variable whose value cannot be used; ``variable`` names it."""

    def __init__(self, variable: str, problem: str):
        super().__init__(f"{variable}: {problem}")
        self.variable = variable


@dataclass(frozen=True)
class RegistryRules:
    """The lease map's rules (``Registry`` in core.py applies them); names follow Eureka's
    ``eureka.server.*`` keys, defaults as in Spring Cloud."""

    enable_self_preservation: bool = True
    renewal_percent_threshold: float = 0.85
    expected_client_renewal_interval_secs: int = 30
    expected_number_of_clients_sending_renews: int = 1
    default_open_for_traffic_count: int = 1
    renewal_threshold_update_interval_ms: int = 900_000
    eviction_interval_ms: int = 60_000
    delta_retention_ms: int = 180_000
    delta_retention_timer_interval_ms: int = 30_000
    disable_delta: bool = False
    sync_when_timestamp_differs: bool = True
    lease_expiry: str = "exact"
    wait_time_in_ms_when_sync_empty: int = 0
    override_idle_expiry_ms: int = 3_600_000
    # Eureka moves the expected-clients count only while it is > 0 (so a node that starts at 0 never
    # evicts until its 15-minute recount). False counts every registration and cancel from 0 up.
    expected_clients_move_only_above_zero: bool = True
    # Limits against hostile or broken clients (the Java server has none of them).
    # A lastDirtyTimestamp decides which copy of an instance wins, so one far in the future would win
    # against every later registration of the real instance: none is kept further ahead of the
    # node's clock than this (clocks of real clients are seconds apart, not minutes).
    max_dirty_ahead_ms: int = 300_000
    # Lease durations and renewal intervals above this are lowered to it, not refused: a real
    # config (Spring's lease-expiration-duration-in-seconds) asking for more still registers, and an
    # instance that dies is not listed for days.
    max_lease_duration_secs: int = 3_600
    # Instances (app, id) clients may add; 0: no limit. Off by default: refusing a growing fleet's
    # new instances is an outage, memory is not, and the right number depends on the node's memory.
    # Peers' writes are never refused (see ``register``).
    max_instances: int = 0
    # One instance's metadata (keys, and UTF-8 bytes of keys plus values); 0: no limit. Spring Cloud
    # apps send 10-20 short keys (well under 1 KiB): the defaults leave room for build info and URLs,
    # and keep metadata PUTs, whose merges only add, from growing a record (and every full fetch).
    max_metadata_keys: int = 128
    max_metadata_bytes: int = 32_768
    # One whole record: UTF-8 bytes of every text it holds (``instances.record_bytes``); 0: no limit.
    # Real registrations hold 1-4 KB; the default leaves room for the metadata's 32 KiB on top, and
    # bounds what the fields metadata limits do not see (URLs, VIPs, appGroupName, the data center's
    # metadata) made 913 KB records. Peers' copies are held to it too (see ``register``).
    max_instance_bytes: int = 65_536

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

    update_interval_ms: int
    auto_expiration_ms: int
    use_read_only: bool = True


@dataclass(frozen=True, slots=True)
class ClusterConfig:
    """Peers and replication (README "Clusters"). ``peers`` are parsed once, credentials kept."""

    peers: tuple[Peer, ...] = ()
    # Names whose DNS records list peers (registry/cluster/discovery.py), looked up at start and every
    # peer_dns_interval_ms; ``dns_nameservers`` ("ip" or "ip:port") instead of the system's resolver.
    peer_dns: tuple[PeerDns, ...] = ()
    peer_dns_interval_ms: int = 30_000
    dns_nameservers: tuple[str, ...] = ()
    self_url: str = ""
    self_app_name: str = ""
    # Start-up sync (Eureka's syncUp): tries after the first, while no peer had any instance.
    sync_retries: int = DEFAULT_SYNC_RETRIES
    sync_retry_wait_ms: int = 5_000
    replication_flush_ms: int = 100
    replication_queue_size: int = 10_000
    peer_timeout_ms: int = 5_000
    # A peer's whole answer (cluster/transport.py read_answer): bytes once inflated, and time from the
    # request to its last byte (peer_timeout_ms bounds each read only). 64 MiB: a registry of 10,000
    # instances is ~10 MB of JSON (bench/README.md), so some 60,000 fit; a bomb costs 64 MiB at most.
    peer_max_answer_bytes: int = 64 * 1024 * 1024
    peer_total_timeout_ms: int = 30_000
    # Items a peer's batch may hold (registry/cluster/incoming.py); a larger one is refused whole (413).
    # Peers send at most 250: four times that is headroom, not a load the node is sized for.
    replication_batch_max_items: int = 1_000

    @property
    def peer_urls(self) -> tuple[str, ...]:
        return tuple(peer.url for peer in self.peers)

    @property
    def clustered(self) -> bool:
        """Peers are configured: static ones, or names whose DNS records list them."""
        return bool(self.peers or self.peer_dns)


@dataclass(frozen=True, slots=True)
class RemoteRegionsConfig:
    """Other deployments whose registries are fetched and merged (README "Remote regions")."""

    urls: Mapping[str, str] = field(default_factory=dict)
    fetch_interval_ms: int = 30_000
    connect_timeout_ms: int = 1_000
    read_timeout_ms: int = 1_000
    # A region's whole answer, as a peer's above (a region's registry is as large as a peer's).
    max_answer_bytes: int = 64 * 1024 * 1024
    total_timeout_ms: int = 10_000
    whitelist: Whitelist = field(default_factory=Whitelist)
    transparent_fallback: bool = True


@dataclass(frozen=True, slots=True)
class RedisConfig:
    """Production mode when ``url`` is set: Celery beat drives the jobs, the read-only tier is in Redis."""

    url: str = ""
    # Key prefix of this node's data in Redis (nodes sharing one Redis need different ones).
    namespace: str = "eureka"
    # "celery" whenever ``url`` is set (parse_config); a test's node may keep "embedded" with a Redis
    # read-only tier, replicating from its own process.
    jobs_driver: str = "embedded"


@dataclass(frozen=True, slots=True)
class WarmRestartConfig:
    """Snapshots of the lease map (registry/runtime/snapshots.py)."""

    enabled: bool = True
    interval_ms: int = 5_000
    max_age_ms: int = 90_000
    data_dir: str = "var"


@dataclass(frozen=True, slots=True)
class ChangeFeedConfig:
    """GET /api/v1/changes and its SSE stream (registry/feed/)."""

    enabled: bool = True
    streams_max: int = 2_000
    # Open streams per client address (registry/access/clients.py); 0: no limit.
    streams_per_address_max: int = 16
    keepalive_seconds: int = 15
    stream_max_seconds: int = 1_800
    coalesce_ms: int = 50
    redis_maxlen: int = 100_000
    redis_buffer: int = 10_000
    redis_flush_ms: int = 100


@dataclass(frozen=True, slots=True)
class WebhooksConfig:
    """Webhook deliveries (registry/webhooks/)."""

    enabled: bool = True
    timeout_ms: int = 5_000
    max_attempts: int = 8
    retry_base_ms: int = 1_000
    retry_max_ms: int = 300_000
    retention_days: int = 7
    prune_interval_ms: int = WEBHOOK_PRUNE_INTERVAL_MS
    buffer_size: int = 10_000
    flush_ms: int = WEBHOOK_FLUSH_MS
    refresh_ms: int = 5_000
    poll_ms: int = 2_000


@dataclass(frozen=True, slots=True)
class HealthChecksConfig:
    """Active health checks (registry/health/); the intervals are defaults instances may override."""

    enabled: bool = False
    concurrency: int = 50
    dispatch_ms: int = 250
    interval_ms: int = 10_000
    timeout_ms: int = 2_000
    threshold: int = 3
    recover: int = 2
    max_timeout_ms: int = 10_000
    allowed_networks: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class ProcessConfig:
    """The serving process: garbage collection, the event loop's watch, the in-process scheduler."""

    # registry/runtime/gc_policy.py; 0 switches the freezing off.
    gc_freeze_interval_ms: int = 60_000
    gc_full_collection_interval_ms: int = 3_600_000
    # registry/runtime/loop_watch.py; 0 switches the watch off.
    loop_stall_threshold_ms: int = 100
    embedded_scheduler: bool = True


@dataclass(frozen=True, slots=True)
class IdentityConfig:
    """What the console shows about this node (Spring Cloud's eureka.environment / datacenter)."""

    environment: str = "test"
    datacenter: str = "default"
    # Empty: the address of the interface that routes outwards.
    instance_ip_address: str = ""


@dataclass(frozen=True, slots=True)
class AccessConfig:
    """Sign-ins (registry/access/; the other sign-in settings are Django's, in eureka_site/settings.py)."""

    # Password checks that may wait for a hashing slot, per slot (registry/access/hashers.py); more
    # are refused at once with 503. 0: no limit.
    signin_waiting_per_core: int = 4


@dataclass(frozen=True, slots=True)
class ReaderConfig:
    """A reader process (registry/reader/): how stale a payload it serves may be, and its node."""

    max_staleness_ms: int
    revalidate_ms: int
    node_url: str
    node_timeout_ms: int = 5_000


@dataclass(frozen=True, slots=True)
class ConnectionsConfig:
    """What one client may hold of a node's connections, and for how long (README "Security model").

    The gunicorn worker (registry/runtime/gunicorn_worker.py) counts open connections per client
    address and in all, and refuses a new one past either cap with a 503 before reading anything; the
    total stays below gunicorn's ``worker_connections`` so that the worker always accepts, and a
    refused client gets an answer instead of waiting in the kernel's queue. Addresses in
    EUREKA_TRUSTED_PROXIES (a proxy or reader in front carries many clients) are not capped per
    address. The timeouts are Tomcat's and nginx's: the request line and headers of a new connection,
    and a request body (no byte for ``body_idle_timeout_s``, or not all of it within
    ``body_timeout_s``), are given that long and then the connection is closed. 0 switches one off."""

    max_per_address: int = 256
    max_total: int = 9_000
    header_timeout_s: float = 20.0
    body_idle_timeout_s: float = 20.0
    body_timeout_s: float = 60.0


_CONNECTIONS = ConnectionsConfig()


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
    timings: str = "fast"
    # The node's base URL for Celery tasks' calls to its control endpoint.
    control_url: str = "http://127.0.0.1:8761"

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
        """Every periodic job's interval, for the embedded scheduler and Celery beat alike."""
        return {
            "evict": self.registry.eviction_interval_ms,
            "sync_response_cache": self.response_cache.update_interval_ms,
            "prune_delta_queue": self.registry.delta_retention_timer_interval_ms,
            "recount_expected_clients": self.registry.renewal_threshold_update_interval_ms,
            "prune_webhook_deliveries": self.webhooks.prune_interval_ms,
            "fetch_remote_regions": self.remote_regions.fetch_interval_ms,
        }


def _nameservers(env: _Environment) -> tuple[str, ...]:
    """``EUREKA_DNS_NAMESERVERS``: ``ip``, ``ip:port`` or ``[ipv6]:port`` entries, checked here."""
    servers = []
    for entry in env.list("EUREKA_DNS_NAMESERVERS"):
        try:
            address, port = parse_nameserver(entry)
        except ValueError as exc:
            raise BadSetting("EUREKA_DNS_NAMESERVERS", str(exc)) from None
        servers.append(f"[{address}]:{port}" if ":" in address else f"{address}:{port}")
    return tuple(servers)


class _Environment:
    """Typed reads of one variable each; a bad value raises BadSetting naming it."""

    def __init__(self, environ: Mapping[str, str]):
        self.environ = environ

    def str(self, name: str, default: str) -> str:
        return self.environ.get(name, default)

    def choice(self, name: str, default: str, choices: tuple[str, ...]) -> str:
        value = self.str(name, default)
        if value not in choices:
            raise BadSetting(name, f"must be one of {', '.join(choices)}, got {value!r}")
        return value

    def int(self, name: str, default: int, minimum: int | None = None) -> int:
        raw = self.environ.get(name)
        if raw is None:
            value = default
        else:
            try:
                value = int(raw.strip())
            except ValueError:
                raise BadSetting(name, f"expected a whole number, got {raw!r}") from None
        if minimum is not None and value < minimum:
            raise BadSetting(name, f"must be >= {minimum}, got {value}")
        return value

    def float(self, name: str, default: float, minimum: float | None = None) -> float:
        raw = self.environ.get(name)
        if raw is None:
            return default
        try:
            value = float(raw.strip())
        except ValueError:
            raise BadSetting(name, f"expected a number, got {raw!r}") from None
        if minimum is not None and not value >= minimum:  # NaN too
            raise BadSetting(name, f"must be >= {minimum}, got {raw.strip()}")
        return value

    def bool(self, name: str, default: bool) -> bool:
        raw = self.environ.get(name)
        if raw is None:
            return default
        value = raw.strip().lower()
        if value in _TRUE:
            return True
        if value in _FALSE:
            return False
        raise BadSetting(name, f"expected true or false, got {raw!r}")

    def list(self, name: str) -> list[str]:
        return [item.strip() for item in self.environ.get(name, "").split(",") if item.strip()]


def parse_config(environ: Mapping[str, str], *, data_dir: str = "var") -> EurekaConfig:
    """The whole typed config from environment variables (``os.environ``, or a plain dict in tests).
    ``data_dir`` is where the node keeps its files (settings.py resolves EUREKA_DATA_DIR for Django's
    database too). Raises BadSetting for a malformed or out-of-range value."""
    env = _Environment(environ)
    # Two timing profiles. "fast" (default): exact 90 s leases, eviction every 2 s and cache sync
    # every 500 ms, expected clients counted exactly. "eureka": the Java server's timings and arithmetic.
    timings = env.choice("EUREKA_TIMINGS", "fast", TIMINGS)
    fast = timings == "fast"
    registry = RegistryRules(
        enable_self_preservation=env.bool("EUREKA_ENABLE_SELF_PRESERVATION", True),
        renewal_percent_threshold=env.float("EUREKA_RENEWAL_PERCENT_THRESHOLD", 0.85),
        expected_client_renewal_interval_secs=env.int("EUREKA_EXPECTED_CLIENT_RENEWAL_INTERVAL_SECONDS", 30),
        expected_number_of_clients_sending_renews=env.int(
            "EUREKA_EXPECTED_NUMBER_OF_CLIENTS_SENDING_RENEWS", 0 if fast else 1, minimum=0
        ),
        default_open_for_traffic_count=env.int(
            "EUREKA_DEFAULT_OPEN_FOR_TRAFFIC_COUNT", 0 if fast else 1, minimum=0
        ),
        renewal_threshold_update_interval_ms=env.int(
            "EUREKA_RENEWAL_THRESHOLD_UPDATE_INTERVAL_MS", 900_000, minimum=1
        ),
        eviction_interval_ms=env.int("EUREKA_EVICTION_INTERVAL_MS", 2_000 if fast else 60_000, minimum=1),
        delta_retention_ms=env.int("EUREKA_RETENTION_TIME_IN_DELTA_QUEUE_MS", 180_000, minimum=1),
        delta_retention_timer_interval_ms=env.int(
            "EUREKA_DELTA_RETENTION_TIMER_INTERVAL_MS", 30_000, minimum=1
        ),
        disable_delta=env.bool("EUREKA_DISABLE_DELTA", False),
        sync_when_timestamp_differs=env.bool("EUREKA_SYNC_WHEN_TIMESTAMP_DIFFERS", True),
        lease_expiry=env.choice("EUREKA_LEASE_EXPIRY", "exact" if fast else "eureka", LEASE_EXPIRY_MODES),
        wait_time_in_ms_when_sync_empty=env.int("EUREKA_WAIT_TIME_IN_MS_WHEN_SYNC_EMPTY", 0, minimum=0),
        override_idle_expiry_ms=env.int("EUREKA_OVERRIDE_IDLE_EXPIRY_MS", 3_600_000, minimum=1),
        expected_clients_move_only_above_zero=env.bool(
            "EUREKA_EXPECTED_CLIENTS_MOVE_ONLY_ABOVE_ZERO", not fast
        ),
        # Limits on what clients may store (registry/domain/core.py RegistryRules says why each default).
        max_instances=env.int("EUREKA_MAX_INSTANCES", 0, minimum=0),
        max_metadata_keys=env.int("EUREKA_MAX_METADATA_KEYS", 128, minimum=0),
        max_metadata_bytes=env.int("EUREKA_MAX_METADATA_BYTES", 32_768, minimum=0),
        max_instance_bytes=env.int("EUREKA_MAX_INSTANCE_BYTES", 65_536, minimum=0),
        max_lease_duration_secs=env.int("EUREKA_MAX_LEASE_DURATION_SECONDS", 3_600, minimum=90),
    )
    response_cache = ResponseCacheConfig(
        # 500 ms: with replication's ~0.2 s, a peer serves a change within a second (bench/README.md,
        # "Replication"); builds are paced and from pieces, so refreshing this often is cheap.
        update_interval_ms=env.int(
            "EUREKA_RESPONSE_CACHE_UPDATE_INTERVAL_MS", 500 if fast else 30_000, minimum=1
        ),
        auto_expiration_ms=1000 * env.int("EUREKA_RESPONSE_CACHE_AUTO_EXPIRATION_SECONDS", 180, minimum=1),
        use_read_only=env.bool("EUREKA_USE_READ_ONLY_RESPONSE_CACHE", True),
    )
    try:
        peers = tuple(parse_peer_urls(env.list("EUREKA_PEER_URLS")))
    except BadPeerUrl as exc:
        raise BadSetting("EUREKA_PEER_URLS", str(exc)) from None
    try:
        peer_dns = parse_peer_dns(env.list("EUREKA_PEER_DNS"))
    except BadPeerUrl as exc:
        raise BadSetting("EUREKA_PEER_DNS", str(exc)) from None
    cluster = ClusterConfig(
        peers=peers,
        peer_dns=peer_dns,
        peer_dns_interval_ms=1000 * env.int("EUREKA_PEER_DNS_INTERVAL_SECONDS", 30, minimum=1),
        dns_nameservers=_nameservers(env),
        self_url=env.str("EUREKA_SELF_URL", ""),
        self_app_name=env.str("EUREKA_SELF_APP_NAME", ""),
        sync_retries=env.int("EUREKA_REGISTRY_SYNC_RETRIES", DEFAULT_SYNC_RETRIES, minimum=0),
        sync_retry_wait_ms=env.int(
            "EUREKA_REGISTRY_SYNC_RETRY_WAIT_MS", 5_000 if fast else 30_000, minimum=0
        ),
        replication_flush_ms=env.int("EUREKA_REPLICATION_FLUSH_MS", 100, minimum=10),
        replication_queue_size=env.int("EUREKA_REPLICATION_QUEUE_SIZE", 10_000, minimum=250),
        peer_timeout_ms=env.int("EUREKA_PEER_TIMEOUT_MS", 5_000, minimum=100),
        peer_max_answer_bytes=env.int("EUREKA_PEER_MAX_ANSWER_BYTES", 64 * 1024 * 1024, minimum=65_536),
        peer_total_timeout_ms=env.int("EUREKA_PEER_TOTAL_TIMEOUT_MS", 30_000, minimum=100),
        # At least 250: the Java server's batches and ours hold up to 250 items.
        replication_batch_max_items=env.int("EUREKA_REPLICATION_BATCH_MAX_ITEMS", 1_000, minimum=250),
    )
    redis_url = env.str("REDIS_URL", "")
    control_url = env.str("EUREKA_CONTROL_URL", "http://127.0.0.1:8761").rstrip("/")
    return EurekaConfig(
        timings=timings,
        registry=registry,
        response_cache=response_cache,
        cluster=cluster,
        remote_regions=_remote_regions(env),
        redis=RedisConfig(
            url=redis_url,
            namespace=env.str("EUREKA_REDIS_NAMESPACE", "eureka"),
            jobs_driver="celery" if redis_url else "embedded",
        ),
        reader=ReaderConfig(
            # Default: 3 cache-sync intervals (the node's sync or the node itself has stopped).
            max_staleness_ms=env.int(
                "EUREKA_READER_MAX_STALENESS_MS", 3 * response_cache.update_interval_ms, minimum=1
            ),
            # Default: a tenth of the sync interval, at most 100 ms.
            revalidate_ms=env.int(
                "EUREKA_READER_REVALIDATE_MS", min(100, response_cache.update_interval_ms // 10), minimum=0
            ),
            node_url=env.str("EUREKA_READER_NODE_URL", control_url).rstrip("/"),
            node_timeout_ms=env.int("EUREKA_READER_NODE_TIMEOUT_MS", 5_000, minimum=100),
        ),
        warm_restart=WarmRestartConfig(
            enabled=env.bool("EUREKA_WARM_RESTART", True),
            interval_ms=env.int("EUREKA_WARM_RESTART_INTERVAL_MS", 5_000, minimum=100),
            max_age_ms=env.int("EUREKA_WARM_RESTART_MAX_AGE_MS", 90_000, minimum=1),
            data_dir=data_dir,
        ),
        change_feed=ChangeFeedConfig(
            enabled=env.bool("EUREKA_CHANGE_FEED", True),
            streams_max=env.int("EUREKA_CHANGE_STREAMS_MAX", 2_000, minimum=0),
            streams_per_address_max=env.int("EUREKA_CHANGE_STREAMS_PER_ADDRESS_MAX", 16, minimum=0),
            keepalive_seconds=env.int("EUREKA_CHANGE_STREAM_KEEPALIVE_SECONDS", 15, minimum=1),
            stream_max_seconds=env.int("EUREKA_CHANGE_STREAM_MAX_SECONDS", 1_800, minimum=1),
            coalesce_ms=env.int("EUREKA_CHANGE_STREAM_COALESCE_MS", 50, minimum=0),
            redis_maxlen=env.int("EUREKA_CHANGE_FEED_REDIS_MAXLEN", 100_000, minimum=1_000),
            redis_buffer=env.int("EUREKA_CHANGE_FEED_REDIS_BUFFER", 10_000, minimum=100),
            redis_flush_ms=env.int("EUREKA_CHANGE_FEED_REDIS_FLUSH_MS", 100, minimum=10),
        ),
        webhooks=WebhooksConfig(
            enabled=env.bool("EUREKA_WEBHOOKS_ENABLED", True),
            timeout_ms=env.int("EUREKA_WEBHOOK_TIMEOUT_MS", 5_000, minimum=100),
            max_attempts=env.int("EUREKA_WEBHOOK_MAX_ATTEMPTS", 8, minimum=1),
            retry_base_ms=env.int("EUREKA_WEBHOOK_RETRY_BASE_MS", 1_000, minimum=10),
            retry_max_ms=env.int("EUREKA_WEBHOOK_RETRY_MAX_MS", 300_000, minimum=10),
            retention_days=env.int("EUREKA_WEBHOOK_RETENTION_DAYS", 7, minimum=1),
            buffer_size=env.int("EUREKA_WEBHOOK_BUFFER_SIZE", 10_000, minimum=100),
            refresh_ms=env.int("EUREKA_WEBHOOK_REFRESH_MS", 5_000, minimum=100),
            poll_ms=env.int("EUREKA_WEBHOOK_POLL_MS", 2_000, minimum=100),
        ),
        health_checks=_health_checks(env),
        process=ProcessConfig(
            gc_freeze_interval_ms=env.int("EUREKA_GC_FREEZE_INTERVAL_MS", 60_000, minimum=0),
            gc_full_collection_interval_ms=env.int(
                "EUREKA_GC_FULL_COLLECTION_INTERVAL_MS", 3_600_000, minimum=1
            ),
            loop_stall_threshold_ms=env.int("EUREKA_LOOP_STALL_THRESHOLD_MS", 100, minimum=0),
            embedded_scheduler=env.bool("EUREKA_EMBEDDED_SCHEDULER", True),
        ),
        identity=IdentityConfig(
            environment=env.str("EUREKA_ENVIRONMENT", "test"),
            datacenter=env.str("EUREKA_DATACENTER", "default"),
            instance_ip_address=env.str("EUREKA_INSTANCE_IP_ADDRESS", ""),
        ),
        access=AccessConfig(
            signin_waiting_per_core=env.int("EUREKA_SIGNIN_WAITING_PER_CORE", 4, minimum=0),
        ),
        connections=ConnectionsConfig(
            max_per_address=env.int(
                "EUREKA_MAX_CONNECTIONS_PER_ADDRESS", _CONNECTIONS.max_per_address, minimum=0
            ),
            max_total=env.int("EUREKA_MAX_CONNECTIONS", _CONNECTIONS.max_total, minimum=0),
            header_timeout_s=env.float(
                "EUREKA_HEADER_TIMEOUT_SECONDS", _CONNECTIONS.header_timeout_s, minimum=0
            ),
            body_idle_timeout_s=env.float(
                "EUREKA_BODY_IDLE_TIMEOUT_SECONDS", _CONNECTIONS.body_idle_timeout_s, minimum=0
            ),
            body_timeout_s=env.float("EUREKA_BODY_TIMEOUT_SECONDS", _CONNECTIONS.body_timeout_s, minimum=0),
        ),
        control_url=control_url,
    )


def _remote_regions(env: _Environment) -> RemoteRegionsConfig:
    try:
        urls = parse_region_urls(env.list("EUREKA_REMOTE_REGION_URLS"))
    except BadRegionConfig as exc:
        raise BadSetting("EUREKA_REMOTE_REGION_URLS", str(exc)) from None
    try:
        # APP (from every region) or region:APP (from that region); a region with entries of its own
        # uses those, the others the plain entries; none at all: every app.
        whitelist = parse_whitelist(env.list("EUREKA_REMOTE_REGION_APP_WHITELIST"), urls)
    except BadRegionConfig as exc:
        raise BadSetting("EUREKA_REMOTE_REGION_APP_WHITELIST", str(exc)) from None
    return RemoteRegionsConfig(
        urls=urls,
        fetch_interval_ms=1000 * env.int("EUREKA_REMOTE_REGION_FETCH_INTERVAL_SECONDS", 30, minimum=1),
        connect_timeout_ms=env.int("EUREKA_REMOTE_REGION_CONNECT_TIMEOUT_MS", 1_000, minimum=100),
        read_timeout_ms=env.int("EUREKA_REMOTE_REGION_READ_TIMEOUT_MS", 1_000, minimum=100),
        max_answer_bytes=env.int("EUREKA_REMOTE_REGION_MAX_ANSWER_BYTES", 64 * 1024 * 1024, minimum=65_536),
        total_timeout_ms=env.int("EUREKA_REMOTE_REGION_TOTAL_TIMEOUT_MS", 10_000, minimum=100),
        whitelist=whitelist,
        # Eureka's transparent fallback: requests without regions= get every region too.
        transparent_fallback=env.bool("EUREKA_REMOTE_REGION_TRANSPARENT_FALLBACK", True),
    )


def _health_checks(env: _Environment) -> HealthChecksConfig:
    allowed = tuple(env.list("EUREKA_HEALTH_CHECK_ALLOWED_NETWORKS"))
    try:
        parse_networks(",".join(allowed))
    except ValueError as exc:
        raise BadSetting("EUREKA_HEALTH_CHECK_ALLOWED_NETWORKS", str(exc)) from None
    config = HealthChecksConfig(
        enabled=env.bool("EUREKA_HEALTH_CHECKS", False),
        concurrency=env.int("EUREKA_HEALTH_CHECK_CONCURRENCY", 50, minimum=1),
        dispatch_ms=env.int("EUREKA_HEALTH_CHECK_DISPATCH_MS", 250, minimum=50),
        interval_ms=1000 * env.int("EUREKA_HEALTH_CHECK_INTERVAL_SECONDS", 10, minimum=1),
        timeout_ms=1000 * env.int("EUREKA_HEALTH_CHECK_TIMEOUT_SECONDS", 2, minimum=1),
        threshold=env.int("EUREKA_HEALTH_CHECK_THRESHOLD", 3, minimum=1),
        recover=env.int("EUREKA_HEALTH_CHECK_RECOVER", 2, minimum=1),
        # Each probe holds a pool slot this long at most.
        max_timeout_ms=1000 * env.int("EUREKA_HEALTH_CHECK_MAX_TIMEOUT_SECONDS", 10, minimum=1),
        allowed_networks=allowed,
    )
    if config.timeout_ms > config.max_timeout_ms:
        raise BadSetting(
            "EUREKA_HEALTH_CHECK_TIMEOUT_SECONDS", "must be <= EUREKA_HEALTH_CHECK_MAX_TIMEOUT_SECONDS"
        )
    return config
