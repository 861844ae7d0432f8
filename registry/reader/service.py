"""The reader of this process: its payload source and its forwarder, built from settings once.

The counterpart of ``registry/runtime/process.py`` for reader processes, which must never call
``get_node()`` (``eureka_site/reader_wsgi.py`` forbids it there).
"""

from __future__ import annotations

import os
import re
import threading
from dataclasses import dataclass

from django.core.exceptions import ImproperlyConfigured

from registry.cache.redis_tier import TierReader, connect
from registry.reader.forwarding import NodeForwarder
from registry.reader.source import MARKS_PER_EXPIRY, PayloadSource
from registry.runtime.process import holds_node

_NODE_URL = re.compile(r"https?://[^/@\s]+(/[^@\s]*)?")


def check_settings(settings) -> None:
    """What a reader needs, or ImproperlyConfigured at start-up (not at the first request)."""
    if not settings.EUREKA.redis.url:
        raise ImproperlyConfigured(
            "A reader serves the node's Redis read-only cache: set REDIS_URL to the node's Redis "
            "(and EUREKA_REDIS_NAMESPACE if the node sets it)"
        )
    if not _NODE_URL.fullmatch(settings.EUREKA.reader.node_url):
        raise ImproperlyConfigured(
            "EUREKA_READER_NODE_URL must be the node's http(s) base URL without credentials, e.g. "
            "http://registry:8761 (each client's own Authorization is forwarded)"
        )


@dataclass
class Reader:
    source: PayloadSource
    forwarder: NodeForwarder

    def status(self) -> dict:
        """The reader's /readyz: 503 only when Redis does not answer (a balancer should then send
        reads to the node itself); ``degraded`` when the node has not synced the tier within the
        bound, so that every read goes on to the node. Counts are this worker process's."""
        redis = self.source.status()
        age = redis["last_sync_ms_ago"]
        synced = age is not None and age <= self.source.max_staleness_ms
        status = "ok" if redis["healthy"] and synced else "degraded" if redis["healthy"] else "unavailable"
        return {
            "status": status,
            "role": "reader",
            "pid": os.getpid(),
            # By construction False: a reader never builds a node (get_node() is forbidden here).
            "lease_map": holds_node(),
            "redis": redis,
            "max_staleness_ms": self.source.max_staleness_ms,
            "reads": dict(self.source.counts),
            "node": {
                "url": self.forwarder.shown_url,
                "answering": not self.forwarder.node_down,
                "forwarded": self.forwarder.forwarded,
                "failures": self.forwarder.failures,
                "last_error": self.forwarder.last_error,
            },
        }


def build_reader(settings) -> Reader:
    check_settings(settings)
    config = settings.EUREKA
    tier = TierReader(connect(config.redis.url), config.redis.namespace)
    return Reader(
        source=PayloadSource(
            tier,
            config.reader.max_staleness_ms,
            revalidate_ms=config.reader.revalidate_ms,
            # The node's expiry (same settings): it drops keys unread for that long, readers' reads included.
            mark_every_ms=max(1, config.response_cache.auto_expiration_ms // MARKS_PER_EXPIRY),
        ),
        forwarder=NodeForwarder(config.reader.node_url, config.reader.node_timeout_ms),
    )


_reader: Reader | None = None
_reader_lock = threading.Lock()


def get_reader() -> Reader:
    global _reader
    if _reader is None:
        with _reader_lock:
            if _reader is None:
                from django.conf import settings

                _reader = build_reader(settings)
    return _reader


def reset_reader(reader: Reader | None = None) -> Reader | None:
    """Replace the process's reader (tests)."""
    global _reader
    with _reader_lock:
        if _reader is not None and _reader is not reader:
            _reader.forwarder.close()
        _reader = reader
    return reader
