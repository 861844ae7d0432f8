"""This process's node: built from settings the first time it is asked for, then the one every view,
page, job and server of the process uses.

One node is one lease map, so a serving process holds exactly one: each server runs the application
in a single worker process (``deploy/gunicorn.conf.py``, ``registry/serving/granian_server.py``).
Tests replace the node (``reset_node``); a reader forbids one (``forbid_node``), since it must never
hold a map of its own.
"""

from __future__ import annotations

import threading

from django.conf import settings

from registry.runtime.composition import build_node
from registry.runtime.node import Node

_node: Node | None = None
_node_lock = threading.Lock()
# Set in processes that must never hold a lease map (a reader: registry/reader/): why not.
_forbidden: str | None = None


def get_node() -> Node:
    """The process's node, built from ``settings.EUREKA`` on first use."""
    global _node
    if _node is None:
        with _node_lock:
            if _forbidden is not None:
                raise RuntimeError(f"this process holds no registry node: {_forbidden}")
            if _node is None:
                _node = build_node(settings.EUREKA)
    return _node


def forbid_node(reason: str | None) -> None:
    """From now on ``get_node()`` raises instead of building a node (None lifts it, for tests)."""
    global _forbidden
    with _node_lock:
        _forbidden = reason


def holds_node() -> bool:
    """Whether this process has built (or been given) a node."""
    return _node is not None


def reset_node(node: Node | None = None) -> Node | None:
    """Replace the process's node (tests use this for a fresh map or a fake clock)."""
    global _node
    with _node_lock:
        if _node is not None:
            _node.stop()
        _node = node
    return node
