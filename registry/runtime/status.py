"""What a node reports about itself: Eureka's ``generalStats`` and ``applicationStats``.

``GET /eureka/status`` serves them and the status console's General Info shows them, so they live
here, beside the node, rather than in either of those. No Django.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

import psutil

from registry.cluster.peers import PeerState

if TYPE_CHECKING:
    from registry.runtime.node import Node

MIB = 1024 * 1024


def format_uptime(ms: int) -> str:
    """``HH:MM``, with ``1 day `` or ``N days `` in front from the first day on (Eureka's format)."""
    minutes = max(0, ms) // 60_000
    days, minutes = divmod(minutes, 24 * 60)
    clock = f"{minutes // 60:02d}:{minutes % 60:02d}"
    if days == 0:
        return clock
    return f"{days} day{'s' if days > 1 else ''} {clock}"


def memory_limit_bytes() -> int:
    """What the process may use: the container's cgroup limit when there is one, else physical memory."""
    total = psutil.virtual_memory().total
    for path in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            raw = Path(path).read_text().strip()
        except OSError:
            continue
        if raw.isdigit() and 0 < int(raw) < total:
            return int(raw)
    return total


def cpu_count() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def general_stats(node: Node, now: int) -> dict[str, str]:
    """Eureka's ``generalStats`` (memory in MB as the Java page shows it, here for the whole process)."""
    limit = memory_limit_bytes()
    rss = psutil.Process().memory_info().rss
    stats = {
        "total-avail-memory": f"{limit // MIB}mb",
        "environment": node.config.identity.environment,
        "num-of-cpus": str(cpu_count()),
        "current-memory-usage": f"{rss // MIB}mb ({round(100 * rss / limit) if limit else 0}%)",
        "server-uptime": format_uptime(now - node.started_at),
    }
    note = warm_restart_note(node)
    if note:
        stats["warm-restart"] = note
    return stats


def warm_restart_note(node: Node) -> str | None:
    """``restored 1000 instances from a snapshot of 1.4 s`` after a warm restart (docs/warm-restart.md),
    why a snapshot was refused, or None: only then is the row there at all."""
    restored = node.registry.saved_state.restored
    if restored is not None:
        return f"restored {restored.instances} instances from a snapshot of {restored.age_ms / 1000:.1f} s"
    keeper = node.warm_restart
    if keeper is not None and keeper.refused:
        return f"started empty: {keeper.refused}"
    return None


def application_stats(peers: list[PeerState], now: int) -> dict[str, str]:
    """Eureka's ``applicationStats``, with availability from replication results, not host names."""
    return {
        "registered-replicas": ", ".join(peer.url for peer in peers),
        "unavailable-replicas": "".join(f"{peer.url}," for peer in peers if not peer.available(now)),
        "available-replicas": "".join(f"{peer.url}," for peer in peers if peer.available(now)),
    }
