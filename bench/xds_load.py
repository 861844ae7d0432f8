"""xDS clients for bench/mesh.py: ``--streams`` state-of-the-world ADS streams in one process, each
subscribed to every cluster (CDS wildcard) and every cluster's endpoints (EDS), ACKing as Envoy does.

Prints JSON lines on stdout:

- ``{"snapshot": S, "stream": i}`` once per stream: seconds from opening the stream to holding every
  cluster's endpoints (``--names`` of them);
- ``{"seen": SEQ, "at": T, "stream": i}`` when a stream receives the endpoints of a watched change: the
  controller writes ``watch SEQ APP INSTANCE_ID HEALTH`` lines on stdin before it makes change SEQ, and
  ``T`` is the wall clock (the controller and the clients share one machine's clock);
- ``{"ready": true}`` once every stream holds the full snapshot; ``{"error": ...}`` on a failure.

Only the watched app's assignments are decoded past their names; the others are counted.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time

import grpc
from envoy.config.core.v3 import base_pb2, health_check_pb2
from envoy.config.endpoint.v3 import endpoint_pb2
from envoy.service.discovery.v3 import ads_pb2_grpc, discovery_pb2

CDS = "type.googleapis.com/envoy.config.cluster.v3.Cluster"
EDS = "type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment"
HEALTH = {
    "HEALTHY": health_check_pb2.HEALTHY,
    "UNHEALTHY": health_check_pb2.UNHEALTHY,
    "DRAINING": health_check_pb2.DRAINING,
}


def emit(record: dict) -> None:
    sys.stdout.write(json.dumps(record) + "\n")
    sys.stdout.flush()


class Watches:
    """Changes the controller announced: SEQ → (cluster, instance id, health)."""

    def __init__(self) -> None:
        self.pending: dict[int, tuple[str, str, int]] = {}

    def by_cluster(self, cluster: str) -> list[tuple[int, str, int]]:
        return [(seq, iid, health) for seq, (name, iid, health) in self.pending.items() if name == cluster]


async def read_watches(watches: Watches) -> None:
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    while line := await reader.readline():
        parts = line.decode().split()
        if len(parts) == 5 and parts[0] == "watch":
            watches.pending[int(parts[1])] = (parts[2].lower(), parts[3], HEALTH[parts[4]])


async def one_stream(index: int, target: str, names: int, watches: Watches, ready: asyncio.Event) -> None:
    queue: asyncio.Queue = asyncio.Queue()
    node = base_pb2.Node(id=f"bench-{index}", cluster="bench")

    async def requests():
        while True:
            yield await queue.get()

    async with grpc.aio.insecure_channel(
        target, options=[("grpc.max_receive_message_length", 64 << 20)]
    ) as channel:
        stub = ads_pb2_grpc.AggregatedDiscoveryServiceStub(channel)
        started = time.monotonic()
        await queue.put(discovery_pb2.DiscoveryRequest(node=node, type_url=CDS))
        call = stub.StreamAggregatedResources(requests())
        clusters: list[str] = []
        held: set[str] = set()
        seen: dict[int, bool] = {}
        snapshot_done = False
        async for response in call:
            if response.type_url == CDS:
                fresh = sorted({_cluster_name(any_) for any_ in response.resources})
                await queue.put(
                    discovery_pb2.DiscoveryRequest(
                        node=node,
                        type_url=CDS,
                        version_info=response.version_info,
                        response_nonce=response.nonce,
                    )
                )
                if fresh != clusters:
                    clusters = fresh
                    await queue.put(
                        discovery_pb2.DiscoveryRequest(node=node, type_url=EDS, resource_names=clusters)
                    )
                continue
            if response.type_url != EDS:
                continue
            now = time.time()
            for any_ in response.resources:
                assignment = endpoint_pb2.ClusterLoadAssignment.FromString(any_.value)
                held.add(assignment.cluster_name)
                for seq, instance_id, health in watches.by_cluster(assignment.cluster_name):
                    if seq in seen:
                        continue
                    if _has(assignment, instance_id, health):
                        seen[seq] = True
                        emit({"seen": seq, "at": now, "stream": index})
            await queue.put(
                discovery_pb2.DiscoveryRequest(
                    node=node,
                    type_url=EDS,
                    resource_names=clusters,
                    version_info=response.version_info,
                    response_nonce=response.nonce,
                )
            )
            if not snapshot_done and len(held) >= names:
                snapshot_done = True
                emit({"snapshot": time.monotonic() - started, "stream": index})
                ready.set()


def _cluster_name(any_) -> str:
    from envoy.config.cluster.v3 import cluster_pb2

    return cluster_pb2.Cluster.FromString(any_.value).name


def _has(assignment, instance_id: str, health: int) -> bool:
    for locality in assignment.endpoints:
        for endpoint in locality.lb_endpoints:
            fields = endpoint.metadata.filter_metadata["eureka"].fields
            if fields["instanceId"].string_value == instance_id:
                return endpoint.health_status == health
    return False


async def main(args: argparse.Namespace) -> None:
    watches = Watches()
    # Held: the loop keeps only a weak reference to a task, and a collected reader drops the watches.
    reader = asyncio.create_task(read_watches(watches))
    events = [asyncio.Event() for _ in range(args.streams)]
    tasks = []
    for index in range(args.streams):
        tasks.append(
            asyncio.create_task(
                one_stream(args.first + index, args.target, args.names, watches, events[index])
            )
        )
    await asyncio.gather(*(event.wait() for event in events))
    emit({"ready": True})
    done, _ = await asyncio.wait([*tasks, reader], timeout=args.duration)
    for task in done:
        if task is not reader and task.exception() is not None:
            emit({"error": repr(task.exception())})


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--target", required=True, help="host:port of the xDS server")
    parser.add_argument("--streams", type=int, default=50)
    parser.add_argument("--first", type=int, default=0, help="number of the first stream (for node ids)")
    parser.add_argument("--names", type=int, required=True, help="clusters a full snapshot holds")
    parser.add_argument("--duration", type=float, default=600, help="seconds to run at most")
    asyncio.run(main(parser.parse_args()))
