"""Which new connections a node takes: open connections counted per client address and in all.

A registry is the service every other one needs at start-up, so no single client may hold it: one
address that opens thousands of connections and sends nothing (or a body one byte at a time) would
otherwise fill gunicorn's ``worker_connections`` and leave the fleet's heartbeats waiting in the
kernel's accept queue. The gunicorn worker (``registry/runtime/gunicorn_worker.py``) asks
``ConnectionAdmission.admit`` for every accepted connection before it reads a byte of it, and answers a
refused one with a short 503 and closes it: the refusal costs an accept and a write, no greenlet
stays, and the memory the node spends on connections is bounded by the caps times what one costs.

The total cap sits below ``worker_connections`` so the worker keeps accepting (a refused client gets
an answer, not a connect timeout) and the connections already open keep their slots. When the node
holds more than ``PRESSURE_SHARE`` of its total, it is under pressure: kept-alive connections then
wait for their next request only as long as a new connection waits for its first (Envoy's overload
manager shortens idle timeouts the same way), so idle clients make room for new ones.

Addresses that ``exempt`` says are proxies (EUREKA_TRUSTED_PROXIES: nginx, a reader, a load balancer
in front) carry many clients and are counted in the total only. Django-free; the worker counts on one
event loop, so no lock is taken.
"""

from __future__ import annotations

from collections.abc import Callable

# Above this share of the total cap, idle kept-alive connections are given less time.
PRESSURE_SHARE = 0.8

PER_ADDRESS = "per_address"
TOTAL = "total"
# A ticket of a connection counted in the total only (no address, or an exempt one).
UNCOUNTED_ADDRESS = ""


class ConnectionAdmission:
    """Counts of open connections; ``admit`` a new one, ``release`` its ticket when it is closed.

    A cap of 0 is no cap."""

    def __init__(self, max_per_address: int, max_total: int, exempt: Callable[[str], bool] = lambda a: False):
        self.max_per_address = max_per_address
        self.max_total = max_total
        # Asked once per connection; EUREKA_TRUSTED_PROXIES' answer keeps its own cache per address.
        self._exempt = exempt
        self._pressure_at = int(max_total * PRESSURE_SHARE) if max_total else 0
        self.open_total = 0
        self.open_by_address: dict[str, int] = {}
        self.refused = {PER_ADDRESS: 0, TOTAL: 0}

    def admit(self, address: str | None) -> tuple[bool, str]:
        """``(True, ticket)``: admitted, ``release(ticket)`` when closed (the ticket is the address it
        counts against, or ``UNCOUNTED_ADDRESS``); ``(False, reason)``: refused, ``PER_ADDRESS`` or
        ``TOTAL`` (and counted in ``refused``)."""
        if self.max_total and self.open_total >= self.max_total:
            self.refused[TOTAL] += 1
            return False, TOTAL
        ticket = UNCOUNTED_ADDRESS
        if address and self.max_per_address and not self._exempt(address):
            held = self.open_by_address.get(address, 0)
            if held >= self.max_per_address:
                self.refused[PER_ADDRESS] += 1
                return False, PER_ADDRESS
            self.open_by_address[address] = held + 1
            ticket = address
        self.open_total += 1
        return True, ticket

    def release(self, ticket: str) -> None:
        self.open_total -= 1
        if ticket:
            held = self.open_by_address.get(ticket, 0) - 1
            if held > 0:
                self.open_by_address[ticket] = held
            else:
                self.open_by_address.pop(ticket, None)

    @property
    def under_pressure(self) -> bool:
        return bool(self._pressure_at) and self.open_total >= self._pressure_at


def refusal_answer(reason: str) -> bytes:
    """The bytes sent to a refused connection, before anything of it is read: a complete HTTP/1.1
    response that closes the connection; every client tells it from a network error."""
    return _ANSWERS[reason]


def _answer(reason: str) -> bytes:
    if reason == PER_ADDRESS:
        message = b"Too many open connections from this address; close some and retry.\n"
    else:
        message = b"The node holds as many connections as it may; retry shortly.\n"
    return (
        b"HTTP/1.1 503 Service Unavailable\r\n"
        b"Content-Type: text/plain; charset=utf-8\r\n"
        b"Retry-After: 5\r\n"
        b"Connection: close\r\n"
        b"Content-Length: " + str(len(message)).encode() + b"\r\n\r\n" + message
    )


_ANSWERS = {reason: _answer(reason) for reason in (PER_ADDRESS, TOTAL)}

# The serving worker's admission, read by /metrics (None outside a gunicorn worker of ours).
CURRENT: ConnectionAdmission | None = None
