"""A control plane on its own thread and event loop (as the mesh process runs it), and a raw ADS
client on a real gRPC channel that sends the requests a test writes and collects every response."""

from __future__ import annotations

import asyncio
import dataclasses
import queue
import threading
from collections.abc import Callable, Iterator
from typing import Any

import grpc
from envoy.service.discovery.v3 import ads_pb2_grpc, discovery_pb2
from google.rpc import status_pb2

from registry.config.services import MeshConfig
from registry.mesh.catalog import Catalog, endpoint_from_instance
from registry.mesh.xds import XdsServer, start_xds


def instance(app: str, instance_id: str, ip: str = "10.0.0.1", port: int = 8080, **fields: Any) -> dict:
    """An instance in Eureka's JSON form."""
    raw: dict[str, Any] = {
        "app": app,
        "instanceId": instance_id,
        "hostName": f"{instance_id}.example",
        "ipAddr": ip,
        "port": {"$": port, "@enabled": "true"},
        "securePort": {"$": 443, "@enabled": "false"},
        "status": "UP",
        "vipAddress": app.lower(),
        "metadata": {},
    }
    raw.update(fields)
    return raw


def endpoint(*args: Any, **fields: Any):
    made = endpoint_from_instance(instance(*args, **fields))
    assert made is not None
    return made


class XdsThread:
    """``start_xds`` on an event loop of its own thread; ``stop()`` ends both."""

    def __init__(self, catalog: Catalog, config: MeshConfig | None = None, **options: Any):
        self.catalog = catalog
        self.config = config or dataclasses.replace(MeshConfig(), xds_bind="127.0.0.1", xds_port=0)
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.server: XdsServer = self.run(start_xds(catalog, self.config, **options))
        self.port = self.server.port

    def run(self, coroutine, timeout: float = 10):
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(timeout)

    def on_loop(self, function: Callable[[], Any]) -> Any:
        async def call():
            return function()

        return self.run(call())

    def stop(self) -> None:
        self.run(self.server.stop(0))
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)
        self.loop.close()


_END = object()


class AdsClient:
    """One ADS stream (``delta`` picks the variant): ``send`` a request, ``recv`` the next response."""

    def __init__(
        self,
        target: str,
        delta: bool = False,
        channel: grpc.Channel | None = None,
        metadata: tuple[tuple[str, str], ...] = (),
    ):
        self.channel = channel or grpc.insecure_channel(target)
        self.delta = delta
        self._requests: queue.Queue = queue.Queue()
        self.responses: queue.Queue = queue.Queue()
        self.error: grpc.RpcError | None = None
        stub = ads_pb2_grpc.AggregatedDiscoveryServiceStub(self.channel)
        method = stub.DeltaAggregatedResources if delta else stub.StreamAggregatedResources
        self.call = method(self._iterate(), metadata=metadata)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _iterate(self) -> Iterator:
        while True:
            item = self._requests.get()
            if item is _END:
                return
            yield item

    def _read(self) -> None:
        try:
            for response in self.call:
                self.responses.put(response)
        except grpc.RpcError as error:
            self.error = error
        self.responses.put(_END)

    def send(self, type_url: str, names: tuple[str, ...] | list[str] = (), **fields: Any) -> None:
        if self.delta:
            request = discovery_pb2.DeltaDiscoveryRequest(
                type_url=type_url, resource_names_subscribe=list(names), **fields
            )
        else:
            request = discovery_pb2.DiscoveryRequest(type_url=type_url, resource_names=list(names), **fields)
        if not fields.get("node"):
            request.node.id = "test-client"
        self._requests.put(request)

    def send_raw(self, message: Any) -> None:
        self._requests.put(message)

    def ack(self, response, names: tuple[str, ...] | list[str] = ()) -> None:
        if self.delta:
            self.send(response.type_url, response_nonce=response.nonce)
        else:
            self.send(
                response.type_url, names, version_info=response.version_info, response_nonce=response.nonce
            )

    def nack(self, response, names: tuple[str, ...] | list[str] = (), reason: str = "bad") -> None:
        detail = status_pb2.Status(code=3, message=reason)
        if self.delta:
            self.send(response.type_url, response_nonce=response.nonce, error_detail=detail)
        else:
            self.send(response.type_url, names, response_nonce=response.nonce, error_detail=detail)

    def recv(self, timeout: float = 5.0):
        try:
            item = self.responses.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError(f"no response within {timeout} s") from None
        if item is _END:
            self.responses.put(_END)
            raise AssertionError(f"the stream ended: {self.error}")
        return item

    def quiet(self, seconds: float = 0.3) -> list:
        """The responses that came within ``seconds`` (a test expecting none asserts ``== []``)."""
        got = []
        try:
            while True:
                item = self.responses.get(timeout=seconds)
                if item is _END:
                    self.responses.put(_END)
                    return got
                got.append(item)
        except queue.Empty:
            return got

    def ended(self, timeout: float = 5.0) -> grpc.RpcError | None:
        """Wait for the stream's end; its error (None for a clean end)."""
        self._reader.join(timeout)
        assert not self._reader.is_alive(), "the stream did not end"
        return self.error

    def close(self) -> None:
        self._requests.put(_END)
        self.call.cancel()
        self.channel.close()
