"""The whole config, ``settings.EUREKA``: every section in one frozen ``EurekaConfig``, parsed once.

``parse_config(os.environ)`` (called by eureka_site/settings.py, which derives the Django settings it
needs from the result) returns it; everything in registry/ and dashboard/ reads its attributes, never
the environment. Eureka's own sections and the timing profiles are in registry/domain/config.py, the
node's services' in services.py, the site's in site.py. Adding a setting: one ``setting()`` field in the
section of its concern, and the variable in deploy/.env.example (tests check both docs/configuration.md
and that file).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import PurePath
from typing import Any

from registry.config.environment import Environment
from registry.config.services import (
    ChangeFeedConfig,
    HealthChecksConfig,
    MeshConfig,
    OutboundTlsConfig,
    ReaderConfig,
    RedisConfig,
    WarmRestartConfig,
    WebhooksConfig,
    base_url,
)
from registry.config.site import (
    AccessConfig,
    ConnectionsConfig,
    DashboardConfig,
    IdentityConfig,
    MetricsConfig,
    ProcessConfig,
    SecurityConfig,
    TlsConfig,
)
from registry.domain.config import (
    PROFILES,
    TIMINGS,
    BadSetting,
    ClusterConfig,
    RegistryRules,
    RemoteRegionsConfig,
    ResponseCacheConfig,
    setting,
)
from registry.domain.outbound_tls import OutboundTlsError, check_files


@dataclass(frozen=True, slots=True)
class EurekaConfig:
    """Every section of the node's settings, and the few of its own: the timing profile, and how Celery
    tasks and readers reach the node's registry process."""

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
    outbound_tls: OutboundTlsConfig = OutboundTlsConfig()
    mesh: MeshConfig = MeshConfig()
    process: ProcessConfig = ProcessConfig()
    identity: IdentityConfig = IdentityConfig()
    access: AccessConfig = AccessConfig()
    connections: ConnectionsConfig = ConnectionsConfig()
    tls: TlsConfig = TlsConfig()
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
        read=base_url,
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


def parse_config(environ: Mapping[str, str], *, base_dir: str = "") -> EurekaConfig:
    """The whole typed config from environment variables (``os.environ``, or a plain dict in tests).
    A relative EUREKA_DATA_DIR is under ``base_dir`` (settings.py gives the project's folder). Raises
    BadSetting for a malformed or out-of-range value."""
    env = Environment(environ)
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
    outbound = sections["outbound_tls"]
    try:
        check_files(outbound.ca_file, outbound.cert_file, outbound.key_file)
    except OutboundTlsError as exc:
        raise BadSetting(exc.variable, exc.message) from None
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
    if section == "mesh":
        return {"node_url": top["control_url"]}
    if section == "dashboard":
        # Instance metadata often holds secrets: a closed API does not leave them on an open console.
        return {"login_required": parsed["access"].api_auth}
    return {}
