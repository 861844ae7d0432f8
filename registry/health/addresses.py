"""Which addresses a health probe may connect to. No Django.

A registrant chooses the URL a probe GETs, so without a rule the node would open connections, from
inside the network, to wherever it is told: its own admin ports, a cloud's metadata service at
169.254.169.254, anything on loopback. ``AddressPolicy`` refuses the address classes no instance of a
fleet lives at (loopback, link-local, unspecified, multicast and broadcast) and the node's own
addresses (its interfaces', its ``EUREKA_INSTANCE_IP_ADDRESS``, the ones it listens on), unless one of
the operator's ``EUREKA_HEALTH_CHECK_ALLOWED_NETWORKS`` holds the address. Cloud metadata services
(``CLOUD_METADATA``), several of them outside link-local, are refused even inside an allowed network
unless that network is the one address. The probe checks the very address it then connects to
(``probes.py``), so a name that resolves to something else on the next lookup (DNS rebinding) gains
nothing.
"""

from __future__ import annotations

import ipaddress
import threading
import time
from collections.abc import Callable, Iterable

import psutil

from registry.domain.endpoints import parse_networks

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network

ALLOWED_NETWORKS_SETTING = "EUREKA_HEALTH_CHECK_ALLOWED_NETWORKS"
# Interfaces come and go (containers, DHCP): their addresses are read again after this long.
INTERFACES_TTL_S = 60.0

# 0.0.0.0/8 is "this network": Linux connects 0.x.y.z to the host itself, as it does 0.0.0.0.
_THIS_NETWORK = ipaddress.ip_network("0.0.0.0/8")
_BROADCAST = ipaddress.ip_address("255.255.255.255")
# NAT64's well-known prefix (RFC 6052): 64:ff9b::a9fe:a9fe reaches 169.254.169.254 through a NAT64
# gateway, so it is judged as the IPv4 address it carries.
_NAT64 = ipaddress.ip_network("64:ff9b::/96")

# Cloud metadata services: from inside an instance they hand out its credentials and start-up secrets
# to whoever asks. Several sit outside link-local (a ULA, CGNAT or public address), where the classes
# above do not catch them. They are refused even inside an allowed network (10.0.0.0/8, 0.0.0.0/0,
# ::/0, 169.254.0.0/16 for a fleet on link-local addresses) unless the network is the address alone.
CLOUD_METADATA: frozenset[Address] = frozenset(
    ipaddress.ip_address(address)
    for address in (
        "169.254.169.254",  # AWS, GCP, Azure, Oracle Cloud, OpenStack, DigitalOcean, Hetzner, ...
        "169.254.170.2",  # AWS ECS task metadata and credentials
        "169.254.170.23",  # AWS EKS Pod Identity agent
        "fd00:ec2::254",  # AWS instance metadata (IMDS) over IPv6
        "fd00:ec2::23",  # AWS EKS Pod Identity agent over IPv6
        "fd20:ce::254",  # GCP metadata server over IPv6
        "100.100.100.200",  # Alibaba Cloud metadata
        "168.63.129.16",  # Azure WireServer (platform agent and extensions' configuration)
        "192.0.0.192",  # Oracle Cloud Infrastructure Classic metadata
        "169.254.42.42",  # Scaleway metadata
        "fd00:42::42",  # Scaleway metadata over IPv6
    )
)


def parse_address(text: str) -> Address | None:
    """An IP address written in a URL, a sockaddr or a setting (``[::1]``, ``fe80::1%eth0``); None
    when it is not one (a host name)."""
    value = text.strip().strip("[]").split("%", 1)[0]
    try:
        return _plain(ipaddress.ip_address(value))
    except ValueError:
        return None


def _plain(address: Address) -> Address:
    """``::ffff:127.0.0.1`` is 127.0.0.1 on the wire, ``64:ff9b::7f00:1`` through a NAT64 gateway:
    judged as the IPv4 address they carry."""
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            return address.ipv4_mapped
        if address in _NAT64:
            return ipaddress.IPv4Address(int(address) & 0xFFFF_FFFF)
    return address


def interface_addresses() -> frozenset[Address]:
    """Every IP address of this host's network interfaces."""
    found = set()
    for entries in psutil.net_if_addrs().values():
        for entry in entries:
            address = parse_address(entry.address or "")
            if address is not None:
                found.add(address)
    return frozenset(found)


class AddressPolicy:
    """``refusal(address)``: None when a probe may connect to it, else the reason it may not.

    Thread-safe; ``add_own`` takes addresses learnt later (where gunicorn listens, what the node tells
    a Celery worker)."""

    def __init__(
        self,
        allowed: Iterable[Network] = (),
        own: Iterable[str] = (),
        interfaces: Callable[[], frozenset[Address]] | None = interface_addresses,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.allowed = tuple(allowed)
        self._own: frozenset[Address] = frozenset()
        self._interfaces = interfaces
        self._interface_cache: frozenset[Address] = frozenset()
        self._interfaces_read_at: float | None = None
        self._clock = clock
        self._lock = threading.Lock()
        self.add_own(own)

    def add_own(self, addresses: Iterable[str]) -> None:
        parsed = {address for address in map(parse_address, addresses) if address is not None}
        with self._lock:
            self._own = self._own | parsed

    def own_addresses(self) -> frozenset[Address]:
        """The node's addresses as this policy knows them: the ones given and the interfaces'."""
        with self._lock:
            own = self._own
            if self._interfaces is None:
                return own
            now = self._clock()
            if self._interfaces_read_at is None or now - self._interfaces_read_at >= INTERFACES_TTL_S:
                try:
                    self._interface_cache = self._interfaces()
                except OSError:
                    pass  # keep what was read last; the given addresses still count
                self._interfaces_read_at = now
            return own | self._interface_cache

    def refusal(self, address: Address) -> str | None:
        address = _plain(address)
        if address in CLOUD_METADATA:
            if any(network.num_addresses == 1 and address in network for network in self.allowed):
                return None
            return (
                f"{address} is a cloud metadata address: not probed unless {ALLOWED_NETWORKS_SETTING} "
                f"lists {address}/{address.max_prefixlen} itself"
            )
        if any(address in network for network in self.allowed if network.version == address.version):
            return None
        problem = self._problem(address)
        if problem is None:
            return None
        return f"{address} is {problem}: not probed unless {ALLOWED_NETWORKS_SETTING} allows it"

    def _problem(self, address: Address) -> str | None:
        if address.is_loopback:
            return "a loopback address"
        if address.is_link_local:
            return "a link-local address"
        if address.is_unspecified or (address.version == 4 and address in _THIS_NETWORK):
            return "an unspecified address"
        if address.is_multicast or address == _BROADCAST:
            return "a multicast or broadcast address"
        if address in self.own_addresses():
            return "one of the node's own addresses"
        return None


def own_address_policy(allowed_networks: Iterable[str], instance_ip_address: str) -> AddressPolicy:
    """Where this process's probes may connect (the node's and Celery workers' alike): never to the
    node's own addresses (its interfaces', EUREKA_INSTANCE_IP_ADDRESS, and where it listens, added when
    gunicorn says), unless EUREKA_HEALTH_CHECK_ALLOWED_NETWORKS allows them."""
    own = [instance_ip_address] if instance_ip_address else []
    return AddressPolicy(parse_networks(",".join(allowed_networks)), own)
