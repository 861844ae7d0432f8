"""Registrations that are probably mistakes, each with a one-line reason, for the status console.

Plain Python over the registry's instance records. Three kinds:

* ``duplicate``: two or more instance ids on one address and port. Usually an instance that came
  back under a new id (a new random id per start) while the old registration waits to expire, or
  two services configured with the same port; clients then call one endpoint twice as often.
* ``port 0``: an enabled port of 0, which no client can call (a service that took a random port
  and registered before it knew which).
* ``loopback``: an instance that names a loopback address or ``localhost`` although it registered
  from another host: clients elsewhere would call themselves. Only client registrations have a
  known source (``RegistrationSources``); behind a proxy the source is the proxy's address.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from .instances import InstanceInfo

DUPLICATE = "duplicate"
PORT_ZERO = "port 0"
LOOPBACK = "loopback"

_LOCAL_NAMES = {"localhost", "localhost.localdomain", "ip6-localhost", "ip6-loopback"}
# Sources kept at most; the oldest go first (a registry of 100,000 instances keeps them all).
SOURCES_KEPT = 200_000


@dataclass(frozen=True, slots=True)
class Finding:
    app: str
    instance_id: str
    kind: str
    reason: str


class RegistrationSources:
    """Which address each instance last registered from (client registrations only). A plain dict:
    a store is atomic under the GIL, and a stale entry of a cancelled instance is only ever read
    for an instance of the same id registered again, which overwrites it first."""

    def __init__(self, kept: int = SOURCES_KEPT):
        self._kept = kept
        self._sources: dict[tuple[str, str], str] = {}

    def record(self, app: str, instance_id: str, address: str) -> None:
        key = (app, instance_id)
        self._sources.pop(key, None)
        self._sources[key] = address
        if len(self._sources) > self._kept:
            self._sources.pop(next(iter(self._sources)), None)

    def get(self, app: str, instance_id: str) -> str | None:
        return self._sources.get((app, instance_id))

    def as_mapping(self) -> Mapping[tuple[str, str], str]:
        return self._sources


def is_loopback(address: str | None) -> bool:
    if not address:
        return False
    if address.lower() in _LOCAL_NAMES:
        return True
    if ":" not in address and not address.startswith(("127.", "0.")):
        # A host name, or an IPv4 address outside 127/8 and 0.0.0.0: parsing would say no, slowly.
        return False
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return False
    return ip.is_loopback or ip.is_unspecified


def _endpoints(instance: InstanceInfo) -> list[tuple[str, int]]:
    ports = []
    if instance.port_enabled:
        ports.append(instance.port)
    if instance.secure_port_enabled:
        ports.append(instance.secure_port)
    return [(instance.ip_addr or instance.host_name, port) for port in ports]


def find_suspicious(
    instances: Iterable[tuple[str, list[InstanceInfo]]],
    sources: Mapping[tuple[str, str], str],
    pause: Callable[[], None] = lambda: None,
) -> list[Finding]:
    """Every finding, by application then instance id (an instance may have several). ``pause`` is
    called after each instance and each shared endpoint (a turn for others in a long scan)."""
    findings: list[Finding] = []
    by_endpoint: dict[tuple[str, int], list[InstanceInfo]] = {}
    for _, records in instances:
        for instance in records:
            for endpoint in _endpoints(instance):
                if endpoint[1] == 0:
                    continue
                by_endpoint.setdefault(endpoint, []).append(instance)
            findings.extend(_own_findings(instance, sources))
            pause()
    for (address, port), sharing in by_endpoint.items():
        if len(sharing) < 2:
            continue
        # One instance whose port and secure port are the same is listed twice: it is not its own
        # duplicate. Names are sorted once per endpoint and each instance names the first three
        # others, so thousands of ids on one endpoint cost a sort, not one per id.
        unique = list({id(instance): instance for instance in sharing}.values())
        if len(unique) < 2:
            continue
        names = sorted((f"{other.app}/{other.instance_id}", index) for index, other in enumerate(unique))
        for index, instance in enumerate(unique):
            others = [name for name, at in names[:4] if at != index][:3]
            more = len(unique) - 1 - len(others)
            listed = ", ".join(others) + (f" and {more} more" if more else "")
            findings.append(
                Finding(
                    instance.app,
                    instance.instance_id,
                    DUPLICATE,
                    f"{address}:{port} is also registered as {listed}",
                )
            )
        pause()
    findings.sort(key=lambda finding: (finding.app, finding.instance_id, finding.kind))
    return findings


def _own_findings(instance: InstanceInfo, sources: Mapping[tuple[str, str], str]) -> list[Finding]:
    found = []
    if (instance.port_enabled and instance.port == 0) or (
        instance.secure_port_enabled and instance.secure_port == 0
    ):
        found.append(
            Finding(
                instance.app,
                instance.instance_id,
                PORT_ZERO,
                "registered with port 0: no client can call it (it registered before its server had a port?)",
            )
        )
    local = instance.ip_addr if is_loopback(instance.ip_addr) else None
    if local is None and is_loopback(instance.host_name):
        local = instance.host_name
    source = sources.get((instance.app, instance.instance_id))
    if local is not None and source is not None and not is_loopback(source):
        found.append(
            Finding(
                instance.app,
                instance.instance_id,
                LOOPBACK,
                f"names {local} but registered from {source}: clients on other hosts would call themselves",
            )
        )
    return found
