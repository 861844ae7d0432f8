"""An unmodified py-eureka-client in its own process: registers, heartbeats, runs until killed.

usage: python py_client_process.py SERVICE_URL APP PORT RENEWAL_SECS DURATION_SECS
"""

import asyncio
import sys

from py_eureka_client.eureka_client import EurekaClient


async def main(url: str, app: str, port: int, renewal: int, duration: int) -> None:
    client = EurekaClient(
        eureka_server=url,
        app_name=app,
        instance_host="127.0.0.1",
        instance_ip="127.0.0.1",
        instance_port=port,
        renewal_interval_in_secs=renewal,
        duration_in_secs=duration,
        should_discover=False,
    )
    await client.start()
    await asyncio.Event().wait()


if __name__ == "__main__":
    url, app, port, renewal, duration = sys.argv[1:6]
    asyncio.run(main(url, app, int(port), int(renewal), int(duration)))
