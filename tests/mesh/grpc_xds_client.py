"""A proxyless gRPC client of the mesh: calls ``mesh.test.Who/Name`` (tests/mesh/backend.py) on an
``xds:///`` target in a loop and prints one JSON line per call: ``{"t": seconds since start,
"backend": name}`` or ``{"t": ..., "error": "..."}``.

    python -m tests.mesh.grpc_xds_client --target xds:///orders --bootstrap boot.json --rate 50 --duration 30

gRPC reads its xDS bootstrap (``GRPC_XDS_BOOTSTRAP``) when it first resolves an ``xds:`` target, so
this sets it before grpc is imported; a test runs it as a subprocess for that reason. It stops after
``--duration`` seconds, or at end of input when ``--duration`` is 0 (the test closes stdin).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", required=True, help="e.g. xds:///orders")
    parser.add_argument("--bootstrap", required=True, help="the xDS bootstrap JSON file")
    parser.add_argument("--rate", type=float, default=50.0, help="calls per second")
    parser.add_argument("--duration", type=float, default=0.0, help="seconds; 0: until stdin closes")
    parser.add_argument("--timeout", type=float, default=1.0, help="deadline of a call, seconds")
    args = parser.parse_args(argv)
    os.environ["GRPC_XDS_BOOTSTRAP"] = os.path.abspath(args.bootstrap)

    import grpc
    from google.protobuf import empty_pb2, wrappers_pb2

    stop = threading.Event()
    if args.duration <= 0:

        def watch_stdin() -> None:
            sys.stdin.read()
            stop.set()

        threading.Thread(target=watch_stdin, daemon=True).start()
    channel = grpc.insecure_channel(args.target)
    method = channel.unary_unary(
        "/mesh.test.Who/Name",
        request_serializer=empty_pb2.Empty.SerializeToString,
        response_deserializer=wrappers_pb2.StringValue.FromString,
    )
    started = time.monotonic()
    interval = 1.0 / args.rate
    next_call = started
    while not stop.is_set():
        now = time.monotonic()
        if args.duration > 0 and now - started >= args.duration:
            break
        try:
            line = {"backend": method(empty_pb2.Empty(), timeout=args.timeout).value}
        except grpc.RpcError as error:
            line = {"error": f"{error.code().name}: {error.details()}"}
        line["t"] = round(time.monotonic() - started, 4)
        sys.stdout.write(json.dumps(line) + "\n")
        sys.stdout.flush()
        next_call = max(next_call + interval, time.monotonic())
        stop.wait(max(0.0, next_call - time.monotonic()))
    channel.close()


if __name__ == "__main__":
    main()
