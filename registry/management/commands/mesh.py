"""``manage.py mesh``: the registry for clients that are not Eureka clients (docs/mesh.md).

One process beside the node. It keeps a copy of the node's registry (registry/mesh/follower.py, over
the node's change feed) and serves it as an xDS control plane (``EUREKA_XDS_PORT``: Envoy, proxyless
gRPC) and as DNS (``EUREKA_DNS_PORT``), on one event loop. Being its own process, its work (building
resources for hundreds of xDS clients, answering DNS) never holds the node's lock or its GIL: the node
pays for one more change-stream reader. SIGTERM or SIGINT stops it: xDS streams get a short grace, then
both ports close.
"""

from __future__ import annotations

import asyncio
import signal

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from registry.mesh.access import dns_allowed, xds_authorizer
from registry.mesh.catalog import Catalog
from registry.mesh.follower import NodeFollower
from registry.wire.outbound import ReloadingTransport

# How long open xDS streams get to end when the process stops.
STOP_GRACE_S = 2.0


def _xds_tls(config) -> tuple[bytes, bytes, bytes | None, bool] | None:
    """The xDS port speaks TLS with the node's own certificate, and asks for a client certificate when
    the node requires one. grpcio either requires a verified client certificate or asks for none: with
    ``EUREKA_TLS_CLIENT_AUTH=optional`` it asks for none, and xDS clients sign in with metadata."""
    tls = config.tls
    if not tls.cert_file:
        return None
    with open(tls.cert_file, "rb") as chain, open(tls.key_file, "rb") as key:
        chain_pem, key_pem = chain.read(), key.read()
    client_ca = None
    if tls.client_auth == "required":
        with open(tls.client_ca_file, "rb") as ca:
            client_ca = ca.read()
    return chain_pem, key_pem, client_ca, tls.client_auth == "required"


class Command(BaseCommand):
    help = "Serve the node's registry to xDS clients (EUREKA_XDS_PORT) and DNS (EUREKA_DNS_PORT)."

    def handle(self, *args, **options):
        config = settings.EUREKA
        mesh = config.mesh
        if not mesh.xds_port and not mesh.dns_port:
            raise CommandError("nothing to serve: set EUREKA_XDS_PORT and/or EUREKA_DNS_PORT (docs/mesh.md)")
        if config.tls.cert_file and config.tls.key_password:
            raise CommandError(
                "the xDS port cannot use an encrypted EUREKA_TLS_KEY_FILE (gRPC reads it as is)"
            )
        catalog = Catalog()
        auth = (mesh.node_user, mesh.node_password) if mesh.node_user else None
        transport = None
        if mesh.node_url.startswith("https://"):
            transport = ReloadingTransport(config.outbound_tls.contexts(), client_cert=True)
        follower = NodeFollower(
            catalog, mesh.node_url, auth=auth, weight_key=mesh.xds_weight_key, transport=transport
        )
        follower.start()
        try:
            asyncio.run(self._serve(catalog, config))
        finally:
            follower.stop()

    async def _serve(self, catalog: Catalog, config) -> None:
        mesh = config.mesh
        api_auth = config.access.api_auth
        stopping = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, stopping.set)
        xds = dns = None
        try:
            if mesh.xds_port:
                from registry.mesh.xds import start_xds

                xds = await start_xds(catalog, mesh, authorize=xds_authorizer(api_auth), tls=_xds_tls(config))
                self.stdout.write(f"mesh: xDS (ADS) on {mesh.xds_bind}:{xds.port}, following {mesh.node_url}")
                if config.tls.cert_file and config.tls.client_auth == "optional":
                    self.stdout.write(
                        "mesh: EUREKA_TLS_CLIENT_AUTH=optional: the xDS port asks no client certificate "
                        "(gRPC asks for one only when it is required); xDS clients sign in with "
                        "authorization metadata"
                    )
            if mesh.dns_port:
                from registry.mesh.dns import start_dns

                allowed = dns_allowed(mesh.dns_allowed_networks, api_auth)
                dns = await start_dns(catalog, mesh, allowed=allowed)
                self.stdout.write(
                    f"mesh: DNS on {mesh.dns_bind}:{dns.port} (UDP and TCP), "
                    f"names <name>.service.{mesh.dns_domain}"
                )
            await stopping.wait()
        finally:
            if xds is not None:
                await xds.stop(STOP_GRACE_S)
            if dns is not None:
                dns.close()
