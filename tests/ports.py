"""Ports for the processes a test starts, that no other test process hands out at the same time.

A port found by binding to port 0 comes from the kernel's ephemeral range, the same range every
outgoing connection and every other ``bind(0)`` on the machine draws from: between the moment a
test picks it and the moment its JVM or server binds it, another xdist worker's connection may take
it ("Port ... was already in use"). So ports are handed out below the ephemeral range instead, each
pytest-xdist worker from its own slice, in turn, and only when nothing is bound there now.
"""

from __future__ import annotations

import itertools
import os
import socket
import threading

# Below Linux's default ephemeral range (32768-60999), above the ports of common services.
FIRST_PORT, END_PORT = 20000, 32768


def _ephemeral_start() -> int:
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as ranges:
            return int(ranges.read().split()[0])
    except (OSError, ValueError, IndexError):
        return END_PORT


def _worker_slice() -> range:
    """This test process's own ports: its share of the range by xdist worker number."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    index = int(worker[2:]) if worker.startswith("gw") and worker[2:].isdigit() else 0
    count = max(int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1") or 1), index + 1)
    end = min(END_PORT, _ephemeral_start())
    size = (end - FIRST_PORT) // count
    return range(FIRST_PORT + index * size, FIRST_PORT + (index + 1) * size)


_ports = itertools.cycle(_worker_slice())
_lock = threading.Lock()


def _bindable(host: str, port: int) -> bool:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    for kind in (socket.SOCK_STREAM, socket.SOCK_DGRAM):
        with socket.socket(family, kind) as probe:
            try:
                probe.bind((host, port))
            except OSError:
                return False
    return True


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP (and UDP) port on ``host`` that nothing is bound to now and that no other test process
    of this run will be handed; a port is handed out again only after the whole slice went round."""
    with _lock:
        for _ in range(len(_worker_slice())):
            port = next(_ports)
            if _bindable(host, port):
                return port
    raise RuntimeError(f"no free port left in {_worker_slice()} on {host}")
