"""A backend of the mesh's end-to-end test, as a service is deployed: the gRPC service of
tests/mesh/backend.py (``mesh.test.Who/Name`` answers NAME), registered in the registry by an
unmodified py-eureka-client, which heartbeats until the process ends. Killed (SIGKILL), it stops
heartbeating without cancelling, and the node evicts it once its lease runs out.

usage: python -m tests.mesh.registered_backend SERVICE_URL APP NAME PORT [RENEWAL_SECS DURATION_SECS]
"""

from __future__ import annotations

import asyncio
import sys

from py_eureka_client.eureka_client import EurekaClient

from tests.mesh.backend import serve


async def main(url: str, app: str, name: str, port: int, renewal: int, duration: int) -> None:
    server = serve(name, port)
    client = EurekaClient(
        eureka_server=url,
        app_name=app,
        instance_id=name,
        instance_host="127.0.0.1",
        instance_ip="127.0.0.1",
        instance_port=port,
        renewal_interval_in_secs=renewal,
        duration_in_secs=duration,
        should_discover=False,
    )
    await client.start()
    sys.stdout.write(f"registered {name} on port {port}\n")
    sys.stdout.flush()
    try:
        await asyncio.Event().wait()
    finally:
        server.stop(0)


if __name__ == "__main__":
    url, app, name, port = sys.argv[1:5]
    renewal, duration = (int(sys.argv[5]), int(sys.argv[6])) if len(sys.argv) > 6 else (1, 3)
    asyncio.run(main(url, app, name, int(port), renewal, duration))
