"""The test backend of the mesh's client scenarios: gRPC service ``mesh.test.Who`` whose one method
``Name`` takes ``google.protobuf.Empty`` and answers ``google.protobuf.StringValue``: the backend's
name, so a client can tell which instance answered.

In a test process: ``server = serve(name, port)`` (a started server on gRPC's own threads;
``server.stop(0)`` ends it). As a process:
``python -m tests.mesh.backend --name b1 --port 20001 [--host 127.0.0.1]``; it prints ``ready`` once
it listens and runs until killed.
"""

from __future__ import annotations

import argparse
import sys
from concurrent import futures

import grpc
from google.protobuf import empty_pb2, wrappers_pb2

SERVICE = "mesh.test.Who"
METHOD = f"/{SERVICE}/Name"


def _handler(name: str) -> grpc.GenericRpcHandler:
    def who(request: empty_pb2.Empty, context) -> wrappers_pb2.StringValue:
        return wrappers_pb2.StringValue(value=name)

    return grpc.method_handlers_generic_handler(
        SERVICE,
        {
            "Name": grpc.unary_unary_rpc_method_handler(
                who,
                request_deserializer=empty_pb2.Empty.FromString,
                response_serializer=wrappers_pb2.StringValue.SerializeToString,
            )
        },
    )


def serve(name: str, port: int, host: str = "127.0.0.1") -> grpc.Server:
    """A started synchronous server answering ``name`` on host:port; ``server.stop(0)`` ends it."""
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    server.add_generic_rpc_handlers((_handler(name),))
    address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    server.add_insecure_port(address)
    server.start()
    return server


def call(channel: grpc.Channel, timeout: float = 2.0) -> str:
    """Ask a channel's backend its name."""
    method = channel.unary_unary(
        METHOD,
        request_serializer=empty_pb2.Empty.SerializeToString,
        response_deserializer=wrappers_pb2.StringValue.FromString,
    )
    return method(empty_pb2.Empty(), timeout=timeout).value


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--name", required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--host", default="127.0.0.1")
    args = parser.parse_args(argv)
    server = serve(args.name, args.port, args.host)
    sys.stdout.write("ready\n")
    sys.stdout.flush()
    server.wait_for_termination()


if __name__ == "__main__":
    main()
