"""What an instance asks to be checked with: its metadata read into a ``CheckConfig``. No Django.

Metadata keys (per instance, so per application when every instance of it carries them)::

    eureka-django.health-check            http | tcp
    eureka-django.health-check.interval   seconds between probes (default 10, at least 1)
    eureka-django.health-check.timeout    seconds a probe may take (default 2, at most the node's cap)
    eureka-django.health-check.threshold  consecutive failures before DOWN (default 3)
    eureka-django.health-check.recover    consecutive successes before the checker lifts its DOWN (default 2)

A bad kind, an http check without a URL to probe, or a URL on another host than the instance's own
``ipAddr`` or ``hostName``, means no check (``config`` is None) and an error the instance page shows
(to staff); a bad number falls back to the default, with the reason shown too.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from registry.domain.instances import InstanceInfo
from registry.health.addresses import parse_address

PREFIX = "eureka-django.health-check"
KEY_KIND = PREFIX
KEY_INTERVAL = f"{PREFIX}.interval"
KEY_TIMEOUT = f"{PREFIX}.timeout"
KEY_THRESHOLD = f"{PREFIX}.threshold"
KEY_RECOVER = f"{PREFIX}.recover"

HTTP = "http"
TCP = "tcp"
KINDS = (HTTP, TCP)

# Bounds that keep one odd registration from costing the node much: a probe a second at most (a probe
# slot is held for the node's timeout cap at most, ``CheckDefaults.max_timeout_ms``).
MIN_INTERVAL_S = 1.0
MAX_INTERVAL_S = 3600.0
MAX_COUNT = 100


@dataclass(frozen=True)
class CheckDefaults:
    """The node's defaults (``EUREKA_HEALTH_CHECK_*`` settings) for what the metadata leaves out."""

    interval_ms: int = 10_000
    timeout_ms: int = 2_000
    threshold: int = 3
    recover: int = 2
    # The longest timeout an instance may ask for (EUREKA_HEALTH_CHECK_MAX_TIMEOUT_SECONDS): a probe
    # holds one of the pool's slots that long, so hanging targets could otherwise starve the others.
    max_timeout_ms: int = 10_000


@dataclass(frozen=True)
class CheckConfig:
    """One instance's check: what to probe and how often, and when to act."""

    kind: str
    # http: the URL to GET; tcp: host and port to connect to.
    url: str | None
    host: str
    port: int
    interval_ms: int
    timeout_ms: int
    threshold: int
    recover: int

    @property
    def target(self) -> str:
        return self.url if self.kind == HTTP and self.url else f"{self.host}:{self.port}"


@dataclass(frozen=True)
class ParsedCheck:
    """``config`` None: the instance is not checked (no kind asked for, or the ask cannot be met)."""

    config: CheckConfig | None
    errors: tuple[str, ...] = field(default=())

    @property
    def requested(self) -> bool:
        return self.config is not None or bool(self.errors)


NOT_REQUESTED = ParsedCheck(None)


def parse_check(instance: InstanceInfo, defaults: CheckDefaults) -> ParsedCheck:
    """Read one instance's check from its metadata and addresses (see the module docstring)."""
    metadata = instance.metadata
    raw_kind = metadata.get(KEY_KIND)
    if raw_kind is None:
        return NOT_REQUESTED
    kind = raw_kind.strip().lower()
    if kind not in KINDS:
        return ParsedCheck(None, (f"{KEY_KIND}={raw_kind[:40]!r} is not one of http, tcp: not checked",))
    errors: list[str] = []
    interval_s = _seconds(
        metadata, KEY_INTERVAL, defaults.interval_ms, MIN_INTERVAL_S, MAX_INTERVAL_S, errors
    )
    timeout_s = _timeout(metadata, defaults, errors)
    threshold = _count(metadata, KEY_THRESHOLD, defaults.threshold, errors)
    recover = _count(metadata, KEY_RECOVER, defaults.recover, errors)
    host, port = _address(instance)
    url = None
    if kind == HTTP:
        url, problem = http_target(instance)
        if problem:
            return ParsedCheck(None, (*errors, problem))
    elif port is None:
        return ParsedCheck(
            None,
            (
                *errors,
                "tcp check: neither port nor securePort is enabled: not checked",
            ),
        )
    config = CheckConfig(
        kind=kind,
        url=url,
        host=host,
        port=port or 0,
        interval_ms=round(interval_s * 1000),
        timeout_ms=max(1, round(timeout_s * 1000)),
        threshold=threshold,
        recover=recover,
    )
    return ParsedCheck(config, tuple(errors))


def http_target(instance: InstanceInfo) -> tuple[str | None, str | None]:
    """The URL an http check GETs: ``healthCheckUrl``, else ``secureHealthCheckUrl``; (url, problem).

    No URL is guessed when the instance gave none: a guessed ``/`` answers 404 on many services,
    which would take a healthy instance out of rotation. Such an instance needs a tcp check.
    The URL must name the instance itself (its ``ipAddr`` or ``hostName``): a registrant checks its
    own instance, it does not get the node to GET any URL it likes."""
    for candidate in (instance.health_check_url, instance.secure_health_check_url):
        if not candidate:
            continue
        parts = urlsplit(candidate.strip())
        if parts.scheme not in ("http", "https") or not parts.hostname:
            return None, f"http check: {candidate[:80]!r} is not an http(s) URL: not checked"
        try:
            parts.port  # noqa: B018 (raises on a port out of range)
        except ValueError:
            return None, f"http check: {candidate[:80]!r} has a bad port: not checked"
        if not _is_own_host(parts.hostname, instance):
            ip_addr, host_name = (instance.ip_addr or "")[:60], (instance.host_name or "")[:60]
            return None, (
                f"http check: the host of {candidate[:80]!r} is neither the instance's ipAddr "
                f"({ip_addr!r}) nor its hostName ({host_name!r}): not checked"
            )
        return candidate.strip(), None
    return None, "http check: the instance has no healthCheckUrl (use tcp): not checked"


def _is_own_host(url_host: str, instance: InstanceInfo) -> bool:
    """The URL's host is the instance's ipAddr or hostName: names compared without case, addresses
    as addresses (``[::1]`` in a URL is ``0:0:0:0:0:0:0:1`` in an ipAddr)."""
    url_host = url_host.strip().lower()
    url_address = parse_address(url_host)
    for own in (instance.ip_addr, instance.host_name):
        own = (own or "").strip().lower()
        if not own:
            continue
        if url_address is not None:
            if parse_address(own) == url_address:
                return True
        elif own == url_host:
            return True
    return False


def _address(instance: InstanceInfo) -> tuple[str, int | None]:
    """ipAddr (host name when empty) and the port a tcp check connects to: port, or securePort when
    only it is enabled."""
    host = instance.ip_addr or instance.host_name
    if instance.port_enabled:
        return host, instance.port
    if instance.secure_port_enabled:
        return host, instance.secure_port
    return host, None


def _seconds(
    metadata: Mapping[str, str],
    key: str,
    default_ms: int,
    minimum: float,
    maximum: float,
    errors: list[str],
) -> float:
    raw = metadata.get(key)
    if raw is None:
        return default_ms / 1000
    value = _number(raw)
    if not math.isfinite(value) or not minimum <= value <= maximum:
        errors.append(
            f"{key}={raw[:40]!r} is not a number of seconds from {minimum:g} to {maximum:g}: "
            f"using {default_ms / 1000:g}"
        )
        return default_ms / 1000
    return value


def _number(raw: str) -> float:
    """A metadata value as a float; NaN when it is not a number."""
    try:
        return float(raw)
    except ValueError:
        return math.nan


def _timeout(metadata: Mapping[str, str], defaults: CheckDefaults, errors: list[str]) -> float:
    """The instance's timeout, at most the node's cap (above it: the cap, with the reason shown)."""
    cap_s = defaults.max_timeout_ms / 1000
    default_ms = min(defaults.timeout_ms, defaults.max_timeout_ms)
    raw = metadata.get(KEY_TIMEOUT)
    if raw is not None and math.isfinite(_number(raw)) and _number(raw) > cap_s:
        errors.append(f"{KEY_TIMEOUT}={raw[:40]!r} is above the node's cap of {cap_s:g} s: using {cap_s:g}")
        return cap_s
    return _seconds(metadata, KEY_TIMEOUT, default_ms, 0.001, cap_s, errors)


def _count(metadata: Mapping[str, str], key: str, default: int, errors: list[str]) -> int:
    raw = metadata.get(key)
    if raw is None:
        return default
    try:
        value = int(raw.strip())
    except ValueError:
        value = 0
    if not 1 <= value <= MAX_COUNT:
        errors.append(f"{key}={raw[:40]!r} is not a whole number from 1 to {MAX_COUNT}: using {default}")
        return default
    return value
