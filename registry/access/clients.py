"""Who a request comes from, for the failed sign-in throttle (registry/access/throttle.py)."""

from __future__ import annotations

import functools
import ipaddress

from django.conf import settings


@functools.lru_cache(maxsize=8)
def _proxy_networks(proxies: tuple[str, ...]) -> tuple:
    return tuple(ipaddress.ip_network(proxy, strict=False) for proxy in proxies)


@functools.lru_cache(maxsize=1024)
def _is_proxy(address: str, proxies: tuple[str, ...]) -> bool:
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return False
    return any(ip in network for network in _proxy_networks(proxies))


def client_address(request) -> str:
    """The address failed sign-ins are counted for: the connection's peer, or, when that is one of
    EUREKA_TRUSTED_PROXIES, the last X-Forwarded-For hop that is not (each proxy appends the address
    it was reached from, so what is left of that was written by the client and is not believed)."""
    meta = request.META
    peer = meta.get("REMOTE_ADDR", "?")
    proxies = settings.EUREKA.access.trusted_proxies
    if not proxies or not _is_proxy(peer, proxies):
        return peer
    hops = [hop.strip() for hop in meta.get("HTTP_X_FORWARDED_FOR", "").split(",") if hop.strip()]
    for hop in reversed(hops):
        if not _is_proxy(hop, proxies):
            return hop
    return hops[0] if hops else peer


def is_trusted_proxy(address: str) -> bool:
    """Whether a connection's peer is one of EUREKA_TRUSTED_PROXIES (a proxy or reader that carries
    many clients: the gunicorn worker does not cap its connections per address)."""
    proxies = settings.EUREKA.access.trusted_proxies
    return bool(proxies) and _is_proxy(address, proxies)
