"""What the status console shows, computed from the node. No Django.

Labels, formats and rules follow Eureka's status page (shared/reference/status-console.md): the
three self-preservation sentences are quoted exactly because they are what operators search for.
"""

from __future__ import annotations

import dataclasses
import socket
from dataclasses import dataclass
from datetime import datetime, tzinfo
from functools import cache
from typing import TYPE_CHECKING

from registry.cluster.peers import PeerState
from registry.domain import constants as c
from registry.domain.counters import RecentEvent
from registry.domain.leases import LeaseView
from registry.domain.preservation import SelfPreservation
from registry.domain.redact import link_url, scrub_credentials
from registry.runtime.status import application_stats, format_uptime, general_stats

if TYPE_CHECKING:
    from registry.cluster.regions import RegionHealth
    from registry.runtime.node import Node

BANNER_EMERGENCY = (
    "EMERGENCY! EUREKA MAY BE INCORRECTLY CLAIMING INSTANCES ARE UP WHEN THEY'RE NOT. "
    "RENEWALS ARE LESSER THAN THRESHOLD AND HENCE THE INSTANCES ARE NOT BEING EXPIRED JUST TO BE SAFE."
)
BANNER_BELOW_THRESHOLD_SELF_PRESERVATION_OFF = (
    "RENEWALS ARE LESSER THAN THE THRESHOLD. THE SELF PRESERVATION MODE IS TURNED OFF. "
    "THIS MAY NOT PROTECT INSTANCE EXPIRY IN CASE OF NETWORK/OTHER PROBLEMS."
)
BANNER_SELF_PRESERVATION_OFF = (
    "THE SELF PRESERVATION MODE IS TURNED OFF. "
    "THIS MAY NOT PROTECT INSTANCE EXPIRY IN CASE OF NETWORK/OTHER PROBLEMS."
)


def banner(sp: SelfPreservation) -> str | None:
    """Eureka's one red line: chosen by "below threshold" and whether self-preservation is on."""
    if sp.below_threshold:
        return BANNER_EMERGENCY if sp.enabled else BANNER_BELOW_THRESHOLD_SELF_PRESERVATION_OFF
    if not sp.enabled:
        return BANNER_SELF_PRESERVATION_OFF
    return None


def format_time(ms: int, tz: tzinfo) -> str:
    """``yyyy-MM-dd'T'HH:mm:ss Z``, e.g. ``2026-08-21T19:05:07 +0000``."""
    return datetime.fromtimestamp(ms / 1000, tz).strftime("%Y-%m-%dT%H:%M:%S %z")


# ------------------------------------------------------------------------------ the node


@dataclass(frozen=True)
class SystemStatus:
    environment: str
    datacenter: str
    current_time: str
    uptime: str
    banner: str | None
    # Lease expiration enabled, Renews threshold and Renews (last min) are read from here.
    self_preservation: SelfPreservation


def system_status(node: Node, now: int, tz: tzinfo) -> SystemStatus:
    sp = node.registry.reads.self_preservation(now)
    return SystemStatus(
        environment=node.config.identity.environment,
        datacenter=node.config.identity.datacenter,
        current_time=format_time(now, tz),
        uptime=format_uptime(now - node.started_at),
        banner=banner(sp),
        self_preservation=sp,
    )


@dataclass(frozen=True)
class Recount:
    """When the expected-clients recount (Eureka's renewal threshold update) last ran and runs next."""

    last_run: int | None
    next_run: int


def recount_schedule(node: Node) -> Recount:
    interval = node.registry.config.renewal_threshold_update_interval_ms
    last = node.job_records["recount_expected_clients"].last_run
    return Recount(last, (last if last is not None else node.started_at) + interval)


def general_info(node: Node, now: int) -> list[tuple[str, str]]:
    """General Info rows in the order screenshots of the Eureka page show them."""
    rows = {**general_stats(node, now), **application_stats(node.peers.states(), now)}
    order = (
        "total-avail-memory",
        "environment",
        "num-of-cpus",
        "current-memory-usage",
        "server-uptime",
        "registered-replicas",
        "unavailable-replicas",
        "available-replicas",
    )
    return [(name, rows[name]) for name in order]


@cache
def detected_ip_address() -> str:
    """The address of the interface that routes outwards (no packet is sent), else loopback."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
            probe.connect(("10.255.255.255", 1))
            return probe.getsockname()[0]
    except OSError:
        return "127.0.0.1"


def instance_info(node: Node, now: int) -> list[tuple[str, str]]:
    """This node's own address and status: STARTING until it opens for traffic, then UP."""
    ip = node.config.identity.instance_ip_address or detected_ip_address()
    status = c.UP if node.registry.allows_reads(now) else c.STARTING
    return [("ipAddr", ip), ("status", status)]


# ------------------------------------------------------------------------ one instance


@dataclass(frozen=True)
class LeaseDetail:
    view: LeaseView
    override: str | None
    # When eviction may remove the lease if no renewal comes (the exact or Eureka expiry rule).
    eviction_deadline: int
    expired: bool
    events: list[RecentEvent]


def lease_detail(node: Node, app: str, instance_id: str, now: int) -> LeaseDetail | None:
    found = node.registry.reads.lease(app, instance_id)
    if found is None:
        return None
    view, override = found
    deadline = view.last_renewal_ts + view.instance.duration_secs * 1000
    return LeaseDetail(
        view=view,
        override=override,
        eviction_deadline=deadline,
        expired=now > deadline,
        events=events_of(node, app, instance_id),
    )


def events_of(node: Node, app: str, instance_id: str) -> list[RecentEvent]:
    """This instance's entries in the three "last 1000" lists, newest first."""
    registered, cancelled, overrides = node.registry.reads.recent_events()
    mine = [
        event
        for events in (registered, cancelled, overrides)
        for event in events
        if event.instance_id == instance_id and event.app == app
    ]
    mine.sort(key=lambda event: event.seq, reverse=True)
    return mine


@dataclass(frozen=True)
class RecentLists:
    registered: list[RecentEvent]
    cancelled: list[RecentEvent]
    overrides: list[RecentEvent]


def recent_lists(node: Node) -> RecentLists:
    """The "Last 1000 since startup" lists, newest first (cancelled includes evictions)."""
    registered, cancelled, overrides = node.registry.reads.recent_events()
    return RecentLists(registered[::-1], cancelled[::-1], overrides[::-1])


# Wire names of the InstanceInfo fields whose name is not plain camelCase of ours.
_WIRE_NAMES = {
    "port_enabled": "port @enabled",
    "secure_port_enabled": "securePort @enabled",
    "renewal_interval_secs": "leaseInfo.renewalIntervalInSecs",
    "duration_secs": "leaseInfo.durationInSecs",
    "asg_name": "asgName",
}
_TIME_FIELDS = frozenset({"last_updated_timestamp", "last_dirty_timestamp"})
_URL_FIELDS = frozenset({"home_page_url", "status_page_url", "health_check_url", "secure_health_check_url"})


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.capitalize() for part in rest)


@dataclass(frozen=True)
class Field:
    name: str
    value: str
    kind: str = "text"  # "time" (epoch ms), "url" (an http(s) link) or "text"


def instance_fields(view: LeaseView) -> list[Field]:
    """Every field of the instance under its Eureka name (metadata and data center apart)."""
    instance = view.instance
    rows = []
    for spec in dataclasses.fields(instance):
        if spec.name in ("metadata", "data_center_info"):
            continue
        value = getattr(instance, spec.name)
        kind = "time" if spec.name in _TIME_FIELDS else "url" if spec.name in _URL_FIELDS else "text"
        if value is None:
            text = ""
        elif isinstance(value, bool):
            text = "true" if value else "false"
        elif kind == "url":
            text = scrub_credentials(value)
            if link_url(value) is None:
                kind = "text"  # links are http(s) only, as on the status page: javascript: is text
        else:
            text = str(value)
        rows.append(Field(_WIRE_NAMES.get(spec.name, _camel(spec.name)), text, kind))
    dc = instance.data_center_info
    rows.append(Field("dataCenterInfo.name", dc.name))
    rows.extend(Field(f"dataCenterInfo.metadata.{key}", value) for key, value in sorted(dc.metadata.items()))
    return rows


@dataclass(frozen=True)
class ReplicaHealth:
    peer: PeerState
    available: bool
    reason: str | None


def replica_health(node: Node, now: int) -> list[ReplicaHealth]:
    """DS Replicas with their health from replication results (empty while the node is standalone)."""
    return [
        ReplicaHealth(peer, peer.available(now), peer.unavailable_reason(now)) for peer in node.peers.states()
    ]


def remote_regions(node: Node) -> list[RegionHealth]:
    """Each remote region's fetch health (registry/cluster/regions.py); empty when none is configured."""
    return node.remote_regions.health() if node.remote_regions is not None else []
