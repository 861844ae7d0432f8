"""Helpers of the DNS interface's tests: endpoints as the catalog holds them, queries, and the server
on an event loop of its own thread (as ``manage.py mesh`` runs it beside other work)."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import threading
from collections.abc import Iterator
from typing import Any

import dns.message
import dns.rdatatype
import dns.rrset

from registry.config.services import MeshConfig
from registry.mesh.catalog import Catalog, Endpoint, endpoint_from_instance
from registry.mesh.dns import DnsServer, start_dns
from tests.factories import instance_body


def endpoint(app: str = "ORDERS", host: str = "10.0.0.1", port: int = 8080, **fields: Any) -> Endpoint:
    """An endpoint from a registration (``tests.factories.instance_body``'s fields; ``weight`` goes
    into the metadata, ``secure_port`` enables the secure port)."""
    weight = fields.pop("weight", None)
    secure_port = fields.pop("secure_port", None)
    body = instance_body(app=app, host=host, port=port, **fields)["instance"]
    if weight is not None:
        body["metadata"] = {"weight": str(weight)}
    if secure_port is not None:
        body["securePort"] = {"$": secure_port, "@enabled": "true"}
    made = endpoint_from_instance(body)
    assert made is not None
    return made


def catalog_of(*endpoints: Endpoint) -> Catalog:
    catalog = Catalog()
    catalog.replace_all(endpoints)
    return catalog


def fleet(app: str, count: int, first_octet: int = 10) -> list[Endpoint]:
    """``count`` UP instances of one app on distinct IPv4 addresses."""
    return [endpoint(app, f"{first_octet}.{i // 250}.{i % 250 // 10}.{i % 10 + 1}") for i in range(count)]


def query(name: str, rdtype: str | int = "A", **kwargs: Any) -> dns.message.Message:
    return dns.message.make_query(name, rdtype, **kwargs)


def config(**fields: Any) -> MeshConfig:
    return dataclasses.replace(MeshConfig(), **fields)


def records(section: list[dns.rrset.RRset], rdtype: str = "A") -> list[str]:
    """The records of one type in a section, as text, in their order."""
    wanted = dns.rdatatype.from_text(rdtype)
    return [rdata.to_text() for rrset in section if rrset.rdtype == wanted for rdata in rrset]


@contextlib.contextmanager
def dns_server(catalog: Catalog, mesh_config: MeshConfig, **kwargs: Any) -> Iterator[DnsServer]:
    """``start_dns`` on an event loop running in a thread of its own; closed on leaving, when no
    exception may have reached the loop (the server handles every one itself)."""
    loop = asyncio.new_event_loop()
    escaped: list[dict[str, Any]] = []
    loop.set_exception_handler(lambda _, context: escaped.append(context))
    thread = threading.Thread(target=loop.run_forever, name="dns-loop", daemon=True)
    thread.start()
    try:
        server = asyncio.run_coroutine_threadsafe(start_dns(catalog, mesh_config, **kwargs), loop).result(10)
        try:
            yield server
        finally:

            async def stop() -> None:
                server.close()
                await server.wait_closed()

            asyncio.run_coroutine_threadsafe(stop(), loop).result(10)
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()
    assert escaped == [], f"exceptions reached the event loop: {escaped}"
