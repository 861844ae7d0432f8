"""The settings of the node's services beside the lease map, as typed, frozen objects.

Warm-restart snapshots, the change feed, webhooks, active health checks, outbound TLS, and production
mode's Redis and readers: each a section of ``EurekaConfig`` (registry/config/eureka.py), its fields
declared with ``setting()`` as Eureka's own are (registry/domain/config.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from registry.domain.config import comma_list, setting
from registry.domain.endpoints import parse_networks
from registry.domain.outbound_tls import OutboundTls, shared

# The webhook log is pruned hourly; changes are queued every 200 ms (not tunable: no one needed to).
WEBHOOK_PRUNE_INTERVAL_MS = 3_600_000
WEBHOOK_FLUSH_MS = 200


def base_url(raw: str, _: Mapping[str, Any]) -> str:
    """A base URL as written, without its trailing slash."""
    return raw.rstrip("/")


def _networks(raw: str, _: Mapping[str, Any]) -> tuple[str, ...]:
    allowed = tuple(comma_list(raw))
    parse_networks(",".join(allowed))
    return allowed


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
        read=base_url,
        derived="EUREKA_CONTROL_URL",
    )
    node_timeout_ms: int = setting(
        5_000,
        "EUREKA_READER_NODE_TIMEOUT_MS",
        "How long a reader waits for the node's answer before answering 503.",
        minimum=100,
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
class OutboundTlsConfig:
    """TLS of the requests this node sends (registry/domain/outbound_tls.py): https:// peers, remote
    regions, health-check targets and webhook receivers. The files are checked at start
    (``parse_config``) and reloaded when they change."""

    ca_file: str = setting(
        "",
        "EUREKA_OUTBOUND_CA_FILE",
        "PEM bundle that https:// peers, remote regions, health-check targets and webhook receivers "
        "must chain to; empty: the system's trust store (health checks then do not verify).",
    )
    cert_file: str = setting(
        "",
        "EUREKA_OUTBOUND_CERT_FILE",
        "PEM certificate (chain) this node presents to https:// peers and remote regions only; "
        "needs EUREKA_OUTBOUND_KEY_FILE.",
    )
    key_file: str = setting(
        "",
        "EUREKA_OUTBOUND_KEY_FILE",
        "PEM private key (unencrypted) of EUREKA_OUTBOUND_CERT_FILE.",
    )

    def contexts(self) -> OutboundTls:
        """The process's TLS contexts for these files (one shared object, reloaded as they change)."""
        return shared(self.ca_file, self.cert_file, self.key_file)


def _host(raw: str, _: Mapping[str, Any]) -> str:
    import ipaddress

    text = raw.strip()
    try:
        ipaddress.ip_address(text)
    except ValueError:
        raise ValueError(f"{raw!r} is not an IP address to listen on") from None
    return text


def _dns_domain(raw: str, _: Mapping[str, Any]) -> str:
    import re

    domain = raw.strip().strip(".").lower()
    labels = domain.split(".")
    if not domain or not all(re.fullmatch(r"[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?", label) for label in labels):
        raise ValueError(f"{raw!r} is not a domain name (letters, digits, '-', dot-separated)")
    return domain


@dataclass(frozen=True, slots=True)
class MeshConfig:
    """``manage.py mesh`` (registry/mesh/, docs/mesh.md): an xDS control plane and a DNS interface
    served beside the node from a copy of its registry. Both are off until given a port."""

    node_url: str = setting(
        "http://127.0.0.1:8761",
        "EUREKA_MESH_NODE_URL",
        "The node whose registry the mesh process serves (its base URL).",
        read=base_url,
        derived="EUREKA_CONTROL_URL",
    )
    node_user: str = setting(
        "", "EUREKA_MESH_NODE_USER", "API account (reader role) the mesh process reads the node with."
    )
    node_password: str = setting(
        "", "EUREKA_MESH_NODE_PASSWORD", "Password of EUREKA_MESH_NODE_USER.", secret=True
    )
    xds_port: int = setting(
        0, "EUREKA_XDS_PORT", "gRPC port of the xDS control plane (ADS); 0: off.", minimum=0
    )
    xds_bind: str = setting("0.0.0.0", "EUREKA_XDS_BIND", "Address the xDS port listens on.", read=_host)
    xds_weight_key: str = setting(
        "weight",
        "EUREKA_XDS_WEIGHT_KEY",
        "Instance metadata key holding an endpoint's load-balancing weight (1-1,000,000; 100 if absent).",
    )
    xds_streams_max: int = setting(
        5_000, "EUREKA_XDS_STREAMS_MAX", "Open xDS streams in all (more are refused).", minimum=1
    )
    xds_streams_per_address_max: int = setting(
        256,
        "EUREKA_XDS_STREAMS_PER_ADDRESS_MAX",
        "Open xDS streams per client address (more are refused); 0: no limit.",
        minimum=0,
    )
    xds_metadata_max_bytes: int = setting(
        4_096,
        "EUREKA_XDS_METADATA_MAX_BYTES",
        "Instance metadata copied into an endpoint's metadata, at most (bigger values are left out).",
        minimum=0,
    )
    dns_port: int = setting(0, "EUREKA_DNS_PORT", "UDP and TCP port of the DNS interface; 0: off.", minimum=0)
    dns_bind: str = setting("127.0.0.1", "EUREKA_DNS_BIND", "Address the DNS port listens on.", read=_host)
    dns_domain: str = setting(
        "eureka",
        "EUREKA_DNS_DOMAIN",
        "DNS names are NAME.service.DOMAIN (and _NAME._tcp.service.DOMAIN for SRV).",
        read=_dns_domain,
    )
    dns_ttl_seconds: int = setting(5, "EUREKA_DNS_TTL_SECONDS", "TTL of DNS answers.", minimum=0)
    dns_allowed_networks: tuple[str, ...] = setting(
        (),
        "EUREKA_DNS_ALLOWED_NETWORKS",
        "CIDRs whose clients the DNS interface answers (others: REFUSED); empty: everyone, or only "
        "loopback when EUREKA_API_AUTH is on.",
        read=_networks,
    )
    dns_rate_per_address: int = setting(
        200,
        "EUREKA_DNS_RATE_PER_ADDRESS",
        "UDP answers per second to one client address (more are cut short to TCP); 0: no limit.",
        minimum=0,
    )
