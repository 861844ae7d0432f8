"""What every server does with the node: start it once the application is loaded, before the first
request, and stop it after the last.

gunicorn calls these from its hooks (``deploy/gunicorn.conf.py``: ``post_worker_init`` and
``worker_exit``), granian from its worker (``registry/serving/granian_server.py``), so a node starts
and stops the same way under either.
"""

from __future__ import annotations

from collections.abc import Callable

from registry.runtime import memory
from registry.runtime.node import Node
from registry.runtime.process import get_node, holds_node


def start_serving(
    listening: list[tuple[str, int]],
    snapshot_runner: Callable[[Callable[[], None]], None] | None = None,
) -> Node:
    """Start the process's node before the server answers: restore its warm-restart snapshot, join
    the cluster, settle the garbage collector and the allocator.

    ``listening`` is where the server listens; ``snapshot_runner`` runs a warm-restart snapshot's
    write where the server wants it (gevent's thread pool), None on the calling thread.
    """
    node = get_node()
    # Warm restart: the last snapshot is restored before the node serves and before its start-up
    # sync (which then merges the peers' copies in).
    if node.warm_restart is not None:
        if snapshot_runner is not None:
            node.warm_restart.runner = snapshot_runner
        node.start_warm_restart()
    # The node leaves its own URL out of EUREKA_PEER_URLS by host and port, so it needs to know where
    # it listens before it starts replicating (and syncing from its peers).
    node.start_cluster(listening)
    # What loading the application made (modules, settings, URL patterns) lives as long as the
    # process: frozen now, it is out of the collector's full walks from the start rather than from
    # the GC policy's first freeze (registry/runtime/gc_policy.py).
    if "freeze_gc" in node.jobs and node.gc_policy is not None:
        node.gc_policy.run_at_start()
    # Freed payloads and snapshots go back to the system instead of staying in glibc's heap and arenas.
    memory.tune()
    return node


def stop_serving() -> None:
    """Once the server has stopped accepting and finished its requests (a graceful stop): the node
    stops its jobs and writes its last warm-restart snapshot."""
    if holds_node():
        get_node().stop()
