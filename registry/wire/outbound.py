"""The HTTP transport of every ``httpx.Client`` this node sends requests with (peers, remote regions,
webhook receivers): TLS as ``OutboundTls`` (registry/domain/outbound_tls.py) says, kept current.

``ReloadingTransport`` opens connections with the context ``OutboundTls`` gives now. When its files
change (a new generation), the next request gets a new connection pool built on the new context, so
new connections present the rotated certificate; the old pool is closed once the requests it still
carries are done, so nothing in flight is cut. Imported only by modules that send HTTP requests: a node
that sends none does not load httpx (tests/runtime/test_lazy_imports.py).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import httpx

from registry.domain.outbound_tls import OutboundTls


class _Pool:
    """One connection pool of one generation, and the requests it carries now."""

    def __init__(self, generation: int, transport: httpx.HTTPTransport):
        self.generation = generation
        self.transport = transport
        self.in_flight = 0
        self.retired = False


class _CountedStream(httpx.SyncByteStream):
    """A response body that tells its pool when it is closed (the request is done then)."""

    def __init__(self, stream: httpx.SyncByteStream, done):
        self._stream = stream
        self._done = done
        self._closed = False

    def __iter__(self) -> Iterator[bytes]:
        yield from self._stream

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            self._stream.close()
        finally:
            self._done()


class ReloadingTransport(httpx.BaseTransport):
    """``httpx.HTTPTransport`` with the TLS context of ``tls`` (the node's certificate presented when
    ``client_cert``), a new pool whenever that context is rebuilt. ``options`` go to each pool
    (``limits``...)."""

    def __init__(self, tls: OutboundTls, client_cert: bool, **options: Any):
        self._tls = tls
        self._client_cert = client_cert
        self._options = options
        self._lock = threading.Lock()
        self._pool: _Pool | None = None

    def _current(self) -> _Pool:
        generation, context = self._tls.current(self._client_cert)
        with self._lock:
            pool = self._pool
            if pool is None or pool.generation != generation:
                if pool is not None:
                    pool.retired = True
                    self._close_if_idle(pool)
                pool = self._pool = _Pool(generation, httpx.HTTPTransport(verify=context, **self._options))
            pool.in_flight += 1
            return pool

    def _done(self, pool: _Pool) -> None:
        with self._lock:
            pool.in_flight -= 1
            self._close_if_idle(pool)

    @staticmethod
    def _close_if_idle(pool: _Pool) -> None:
        if pool.retired and pool.in_flight == 0:
            pool.transport.close()

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        pool = self._current()
        try:
            response = pool.transport.handle_request(request)
        except BaseException:
            self._done(pool)
            raise
        assert isinstance(response.stream, httpx.SyncByteStream)
        return httpx.Response(
            response.status_code,
            headers=response.headers,
            stream=_CountedStream(response.stream, lambda: self._done(pool)),
            extensions=response.extensions,
        )

    def close(self) -> None:
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.transport.close()


def outbound_client(
    tls: OutboundTls, *, client_cert: bool, limits: httpx.Limits | None = None, **options: Any
):
    """An ``httpx.Client`` whose connections use ``tls`` (``options``: timeout, headers...). Proxies from
    the environment are not used: a request goes straight to the peer, region or receiver it names."""
    transport = ReloadingTransport(tls, client_cert, **({"limits": limits} if limits is not None else {}))
    return httpx.Client(transport=transport, trust_env=False, **options)
