"""The mesh process's copy of the registry: one ``Endpoint`` per instance, grouped by service name.
Plain Python, no Django.

A **service name** is an app's name in lower case (``ORDERS`` → ``orders``) or one of the instance's VIP
addresses (``vipAddress`` / ``secureVipAddress``, comma-separated, lower-cased). A name answers every
instance whose app or VIP address is that name, so a Spring app, whose VIP address is its app name,
is one service however it is asked for. xDS resources and DNS names are named by service name.

The catalog is fed whole (``replace_all``, from the node's snapshot) or one instance at a time
(``put``/``remove``, from the change stream), and tells its listeners which service names changed, in
one call per feed step. Reads (``services``, ``endpoints``) take a copy made under the lock: servers
read it from other threads or an event loop.
"""

from __future__ import annotations

import ipaddress
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

UP = "UP"
DOWN = "DOWN"
STARTING = "STARTING"
OUT_OF_SERVICE = "OUT_OF_SERVICE"
UNKNOWN = "UNKNOWN"

# Instance metadata key whose value is the endpoint's load-balancing weight (EUREKA_XDS_WEIGHT_KEY
# changes it): Envoy and gRPC weigh endpoints by it, so a canary with weight 1 beside instances of 100
# gets about 1 % of the calls.
DEFAULT_WEIGHT_KEY = "weight"
DEFAULT_WEIGHT = 100
# Envoy's bound on an endpoint's weight is uint32 ≥ 1, and a locality's weights must sum below 2^32.
MAX_WEIGHT = 1_000_000


@dataclass(frozen=True, slots=True)
class Endpoint:
    """One instance as the mesh serves it."""

    app: str  # the Eureka app name as registered (upper case)
    instance_id: str
    host_name: str
    address: str  # ipAddr, an IPv4 or IPv6 address (instances without a valid one are not served)
    port: int  # the secure port when it is enabled, else the plain port
    secure: bool  # ``port`` is the secure port
    status: str
    zone: str  # "" when the instance says none
    region: str  # "" when the instance says none
    weight: int
    metadata: Mapping[str, str] = field(default_factory=dict)
    names: frozenset[str] = frozenset()  # every service name this instance answers to

    @property
    def ipv6(self) -> bool:
        return ":" in self.address

    @property
    def up(self) -> bool:
        return self.status == UP


def _port(raw: Any) -> tuple[int, bool] | None:
    """Eureka's ``{"$": 8080, "@enabled": "true"}`` → (port, enabled); None when it is not one."""
    if not isinstance(raw, Mapping):
        return None
    try:
        port = int(raw.get("$"))
    except (TypeError, ValueError):
        return None
    enabled = str(raw.get("@enabled", "true")).lower() == "true"
    return port, enabled


def _names(app: str, *vip_fields: Any) -> frozenset[str]:
    names = {app.lower()}
    for raw in vip_fields:
        if isinstance(raw, str):
            names.update(part.strip().lower() for part in raw.split(",") if part.strip())
    return frozenset(names)


def _zone_and_region(raw: Mapping[str, Any], metadata: Mapping[str, str]) -> tuple[str, str]:
    """Spring Cloud puts the zone in metadata ``zone``; an Amazon instance has its availability zone in
    its data-centre info (``us-east-1c``, whose region is ``us-east-1``)."""
    zone = metadata.get("zone", "")
    region = metadata.get("region", "")
    data_center = raw.get("dataCenterInfo")
    if isinstance(data_center, Mapping) and isinstance(data_center.get("metadata"), Mapping):
        availability_zone = str(data_center["metadata"].get("availability-zone") or "")
        if availability_zone:
            zone = zone or availability_zone
            region = region or availability_zone.rstrip("abcdefghijklmnopqrstuvwxyz")
    return zone, region


def weight_of(metadata: Mapping[str, str], weight_key: str) -> int:
    """The weight the metadata asks for, within [1, MAX_WEIGHT]; DEFAULT_WEIGHT when absent or not a
    whole number (an instance is served whatever its metadata says)."""
    raw = metadata.get(weight_key)
    if raw is None:
        return DEFAULT_WEIGHT
    try:
        value = int(str(raw).strip())
    except ValueError:
        return DEFAULT_WEIGHT
    return min(max(value, 1), MAX_WEIGHT)


def endpoint_from_instance(raw: Mapping[str, Any], weight_key: str = DEFAULT_WEIGHT_KEY) -> Endpoint | None:
    """An Endpoint from an instance in Eureka's JSON form (``GET /eureka/apps``); None when it cannot be
    reached by address (no valid ``ipAddr``, or no enabled port)."""
    try:
        app = str(raw["app"])
        instance_id = str(raw.get("instanceId") or raw.get("hostName") or "")
        address = str(raw.get("ipAddr") or "").strip()
    except (KeyError, TypeError):
        return None
    if not app or not instance_id:
        return None
    try:
        address = str(ipaddress.ip_address(address.split("%")[0]))
    except ValueError:
        return None
    plain = _port(raw.get("port"))
    secure = _port(raw.get("securePort"))
    if secure is not None and secure[1] and 0 < secure[0] < 65536:
        port, is_secure = secure[0], True
    elif plain is not None and plain[1] and 0 < plain[0] < 65536:
        port, is_secure = plain[0], False
    else:
        return None
    metadata_raw = raw.get("metadata")
    metadata = (
        {str(key): str(value) for key, value in metadata_raw.items() if not str(key).startswith("@")}
        if isinstance(metadata_raw, Mapping)
        else {}
    )
    zone, region = _zone_and_region(raw, metadata)
    return Endpoint(
        app=app.upper(),
        instance_id=instance_id,
        host_name=str(raw.get("hostName") or ""),
        address=address,
        port=port,
        secure=is_secure,
        status=str(raw.get("status") or UNKNOWN).upper(),
        zone=zone,
        region=region,
        weight=weight_of(metadata, weight_key),
        metadata=metadata,
        names=_names(app, raw.get("vipAddress"), raw.get("secureVipAddress")),
    )


Listener = Callable[[frozenset[str]], None]


class Catalog:
    """Endpoints by (app, instance id), and by service name. Thread-safe (see the module docstring)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._instances: dict[tuple[str, str], Endpoint] = {}
        self._by_name: dict[str, dict[tuple[str, str], Endpoint]] = {}
        self._listeners: list[Listener] = []
        # Grows by one per feed step that changed something: a version for whole-catalog answers.
        self.version = 0
        # False until the first snapshot: servers may wait for it before answering.
        self.ready = threading.Event()

    # ------------------------------------------------------------------ feeding

    def subscribe(self, listener: Listener) -> Callable[[], None]:
        """``listener(changed_names)`` after each feed step that changed a service; returns the
        unsubscribe function. Called on the feeding thread: it must be quick (hand work off)."""
        with self._lock:
            self._listeners.append(listener)

        def unsubscribe() -> None:
            with self._lock:
                if listener in self._listeners:
                    self._listeners.remove(listener)

        return unsubscribe

    def replace_all(self, endpoints: Iterable[Endpoint]) -> frozenset[str]:
        """The whole registry at once (a snapshot); tells listeners of every name added, changed or gone."""
        fresh = {(e.app, e.instance_id): e for e in endpoints}
        with self._lock:
            changed = set()
            for key, old in self._instances.items():
                if fresh.get(key) != old:
                    changed |= old.names
            for key, new in fresh.items():
                if self._instances.get(key) != new:
                    changed |= new.names
            self._instances = fresh
            self._by_name = {}
            for key, endpoint in fresh.items():
                for name in endpoint.names:
                    self._by_name.setdefault(name, {})[key] = endpoint
        self.ready.set()
        return self._changed(frozenset(changed))

    def apply(self, puts: Iterable[Endpoint] = (), removes: Iterable[tuple[str, str]] = ()) -> frozenset[str]:
        """Instances that changed (``puts``) and left (``removes``: (app, instance id)), as one step."""
        changed: set[str] = set()
        with self._lock:
            for app, instance_id in removes:
                old = self._instances.pop((app.upper(), instance_id), None)
                if old is not None:
                    changed |= old.names
                    self._unindex(old)
            for endpoint in puts:
                key = (endpoint.app, endpoint.instance_id)
                old = self._instances.get(key)
                if old == endpoint:
                    continue
                if old is not None:
                    changed |= old.names
                    self._unindex(old)
                self._instances[key] = endpoint
                for name in endpoint.names:
                    self._by_name.setdefault(name, {})[key] = endpoint
                changed |= endpoint.names
        return self._changed(frozenset(changed))

    def _unindex(self, endpoint: Endpoint) -> None:
        key = (endpoint.app, endpoint.instance_id)
        for name in endpoint.names:
            members = self._by_name.get(name)
            if members is not None:
                members.pop(key, None)
                if not members:
                    del self._by_name[name]

    def _changed(self, names: frozenset[str]) -> frozenset[str]:
        if not names:
            return names
        with self._lock:
            self.version += 1
            listeners = list(self._listeners)
        for listener in listeners:
            listener(names)
        return names

    # ------------------------------------------------------------------ reading

    def names(self) -> list[str]:
        """Every service name, sorted."""
        with self._lock:
            return sorted(self._by_name)

    def endpoints(self, name: str) -> tuple[Endpoint, ...]:
        """The instances a service name answers, in a stable order (app, instance id); () if unknown."""
        with self._lock:
            members = self._by_name.get(name.lower())
            if not members:
                return ()
            return tuple(members[key] for key in sorted(members))

    def services(self) -> dict[str, tuple[Endpoint, ...]]:
        """Every service name with its instances (a copy)."""
        with self._lock:
            by_name = self._by_name.items()
            return {name: tuple(members[key] for key in sorted(members)) for name, members in by_name}

    def __len__(self) -> int:
        with self._lock:
            return len(self._instances)
