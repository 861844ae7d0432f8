"""Builders of registration bodies in the shapes real clients send, and of instances as the registry
holds them."""

from __future__ import annotations

import copy
from typing import Any

from registry.domain.instances import InstanceInfo


def instance_body(
    app: str = "ORDERS",
    host: str = "10.0.0.1",
    port: int = 8080,
    instance_id: str | None = None,
    status: str = "UP",
    vip: str | None = None,
    last_dirty: int | None = None,
    **extra: Any,
) -> dict[str, Any]:
    """A registration in the Java legacy codec's shape (strings for timestamps and @enabled)."""
    body: dict[str, Any] = {
        "instanceId": instance_id or f"{host}:{app.lower()}:{port}",
        "hostName": host,
        "app": app,
        "ipAddr": host,
        "status": status,
        "overriddenStatus": "UNKNOWN",
        "port": {"$": port, "@enabled": "true"},
        "securePort": {"$": 443, "@enabled": "false"},
        "countryId": 1,
        "dataCenterInfo": {
            "@class": "com.netflix.appinfo.InstanceInfo$DefaultDataCenterInfo",
            "name": "MyOwn",
        },
        "leaseInfo": {"renewalIntervalInSecs": 30, "durationInSecs": 90},
        "metadata": {"@class": "java.util.Collections$EmptyMap"},
        "homePageUrl": f"http://{host}:{port}/",
        "vipAddress": vip or app.lower(),
        "secureVipAddress": vip or app.lower(),
        "isCoordinatingDiscoveryServer": "false",
    }
    if last_dirty is not None:
        body["lastDirtyTimestamp"] = str(last_dirty)
    body.update(copy.deepcopy(extra))
    return {"instance": body}


def instance_info(app: str = "ORDERS", n: int = 1, **fields: Any) -> InstanceInfo:
    """Instance ``n`` of ``app`` as the registry holds it: id ``host{n}:{app}:8080``, host ``host{n}``,
    address ``10.0.0.{n}``; ``fields`` set the others (or replace these)."""
    identity = {
        "instance_id": f"host{n}:{app.lower()}:8080",
        "app": app,
        "host_name": f"host{n}",
        "ip_addr": f"10.0.0.{n}",
    }
    return InstanceInfo(**{**identity, **fields})


def fleet_member(k: int, apps: int) -> dict[str, Any]:
    """Instance number ``k`` of a benchmark fleet spread over ``apps`` applications (``APP-0``...),
    each with a host name and address of its own."""
    app = f"APP-{k % apps}"
    body = instance_body(app=app, host="10.0.0.1", instance_id=f"i-{k}", vip="app")["instance"]
    body.update(hostName=f"host-{k}", ipAddr=f"10.{k >> 16 & 255}.{k >> 8 & 255}.{k & 255}")
    return body


def register_item(instance: dict[str, Any]) -> dict[str, Any]:
    """``instance`` (the ``instance`` of ``instance_body``) as a replication batch's Register item."""
    return {
        "appName": instance["app"],
        "id": instance["instanceId"],
        "lastDirtyTimestamp": "1000",
        "status": instance.get("status", "UP"),
        "instanceInfo": instance,
        "action": "Register",
    }
