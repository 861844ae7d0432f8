"""The API roles and what each may do. Plain Python: the views and the migration both read it."""

from __future__ import annotations

APP_LABEL = "registry"

# Permission codenames (on the unmanaged ``registry.RegistryApi`` model).
READ = "read_registry"
WRITE = "write_instances"
REPLICATE = "replicate_registry"

PERMISSIONS = {
    READ: "Can read the registry (Eureka API)",
    WRITE: "Can register, renew, cancel and change instances (Eureka API)",
    REPLICATE: "Can send peer replication (Eureka API)",
}

# Role → Django group name → the permissions the group holds.
ROLE_GROUPS = {
    "client": "eureka-client",
    "reader": "eureka-reader",
    "peer": "eureka-peer",
}
ROLE_PERMISSIONS = {
    "client": (READ, WRITE),
    "reader": (READ,),
    "peer": (READ, WRITE, REPLICATE),
}

SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


def required_permission(method: str, replication: bool, replication_endpoint: bool) -> str:
    """What a request needs: reads need READ, writes WRITE, anything a peer sends REPLICATE.

    A write marked ``x-netflix-discovery-replication: true`` is applied as a peer's (not sent on to
    other peers, other timestamp rules), so only peers may send one.
    """
    if replication_endpoint:
        return REPLICATE
    if method in SAFE_METHODS:
        return READ
    return REPLICATE if replication else WRITE
