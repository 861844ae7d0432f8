"""Who may read the registry through the mesh process: the node's own API accounts and rules.

With ``EUREKA_API_AUTH`` off, everyone (as ``GET /eureka/apps``). With it on:

- **xDS**: each stream is checked once, when it opens, as a request is: a client certificate of the
  TLS connection (the xDS port speaks TLS with the node's ``EUREKA_TLS_*`` files) identifies an
  account by its certificate names, the stream's ``authorization`` metadata (``Basic ...``, what
  Envoy's ``initial_metadata`` sends) by its credentials. The account needs the reader role (or
  client, or peer): the read permission, as for ``GET /eureka/apps``. No credentials, or wrong ones:
  UNAUTHENTICATED; an account without the permission: PERMISSION_DENIED (``Forbidden``).
- **DNS** carries no credentials, so it answers only the networks in ``EUREKA_DNS_ALLOWED_NETWORKS``,
  by default loopback only: a node-local resolver, or the networks of the operator's choosing.

Django code (the accounts are Django users): only the ``mesh`` management command imports it.
"""

from __future__ import annotations

import asyncio
import ipaddress
from collections.abc import Awaitable, Callable

from django.db import close_old_connections

from registry.access import accounts, roles
from registry.access.certificates import BadCertificate, from_der
from registry.access.drf import principal_of
from registry.domain.endpoints import parse_networks
from registry.mesh.xds.server import Forbidden

LOOPBACK = "127.0.0.0/8,::1/128"
NO_CREDENTIALS = (
    "credentials required: a client certificate of an API account, or authorization metadata "
    "'Basic <base64 user:password>' of an account with the reader role"
)


def _check(authorization: str | None, certificate_der: bytes | None, address: str) -> str | None:
    """The node's rules (registry/access/drf.py ``principal_of``): a certificate that names an
    account signs in as it, Basic credentials too (both: the same account), a certificate that names
    none adds nothing to credentials that hold."""
    close_old_connections()
    try:
        certificate = from_der(certificate_der) if certificate_der else None
    except BadCertificate as exc:
        return f"unreadable client certificate: {exc}"
    try:
        principal = principal_of(authorization, certificate, lambda: address)
    except accounts.Refused as refused:
        return refused.reason
    if principal is None:
        return NO_CREDENTIALS
    if roles.READ not in principal.permissions:
        return Forbidden(
            f"account {principal.username!r} may not read the registry (it needs the reader role)"
        )
    return None


def xds_authorizer(
    api_auth: bool,
) -> Callable[[str | None, bytes | None, str], Awaitable[str | None]] | None:
    """The ``authorize`` of ``start_xds``: None (open) unless API accounts are on. A password check
    costs CPU and a database read, so it runs off the event loop. Failed sign-ins count against the
    client's address, as the node counts them (registry/access/throttle.py): one client's guesses
    lock out that client, not every xDS client."""
    if not api_auth:
        return None

    async def authorize(authorization: str | None, certificate_der: bytes | None, address: str) -> str | None:
        return await asyncio.to_thread(_check, authorization, certificate_der, address)

    return authorize


def dns_allowed(networks: tuple[str, ...], api_auth: bool) -> Callable[[str], bool] | None:
    """The ``allowed`` of ``start_dns``: None (everyone) when no network is set and API accounts are
    off; else whether a client address is in the networks (loopback when none is set)."""
    if not networks and not api_auth:
        return None
    parsed = parse_networks(",".join(networks) if networks else LOOPBACK)

    def allowed(address: str) -> bool:
        try:
            ip = ipaddress.ip_address(address.split("%")[0])
        except ValueError:
            return False
        # An IPv4 client of a dual-stack socket comes as ::ffff:a.b.c.d: either form may be named.
        mapped = ip.ipv4_mapped if ip.version == 6 else None
        return any(ip in network or (mapped is not None and mapped in network) for network in parsed)

    return allowed
