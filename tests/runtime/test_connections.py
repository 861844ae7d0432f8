"""Which new connections a node takes (registry/runtime/connections.py) and how long the gunicorn
worker gives a connection to send a request (registry/runtime/gunicorn_worker.py, the sweeper's limits).
The live behaviour, with real sockets: tests/deploy/test_slow_clients_live.py."""

from __future__ import annotations

import time

import gevent

from registry.runtime import gunicorn_worker
from registry.runtime.connections import (
    PER_ADDRESS,
    TOTAL,
    UNCOUNTED_ADDRESS,
    ConnectionAdmission,
    refusal_answer,
)


def test_one_address_gets_its_cap_and_no_more_while_others_are_admitted():
    admission = ConnectionAdmission(max_per_address=2, max_total=100)

    tickets = [admission.admit("10.0.0.1") for _ in range(2)]

    assert tickets == [(True, "10.0.0.1"), (True, "10.0.0.1")]
    assert admission.admit("10.0.0.1") == (False, PER_ADDRESS)
    assert admission.admit("10.0.0.2") == (True, "10.0.0.2")
    assert admission.open_total == 3 and admission.refused == {PER_ADDRESS: 1, TOTAL: 0}

    admission.release("10.0.0.1")
    assert admission.admit("10.0.0.1") == (True, "10.0.0.1")


def test_the_total_cap_refuses_everyone_until_a_connection_closes():
    admission = ConnectionAdmission(max_per_address=2, max_total=3)
    for address in ("10.0.0.1", "10.0.0.2", "10.0.0.3"):
        assert admission.admit(address)[0]

    assert admission.admit("10.0.0.4") == (False, TOTAL)

    admission.release("10.0.0.2")
    assert admission.admit("10.0.0.4") == (True, "10.0.0.4")
    assert admission.open_by_address == {"10.0.0.1": 1, "10.0.0.3": 1, "10.0.0.4": 1}
    assert admission.refused[TOTAL] == 1


def test_a_trusted_proxy_is_counted_in_the_total_only():
    admission = ConnectionAdmission(max_per_address=1, max_total=10, exempt=lambda a: a == "10.9.9.9")

    assert [admission.admit("10.9.9.9") for _ in range(3)] == [(True, UNCOUNTED_ADDRESS)] * 3
    assert admission.open_by_address == {} and admission.open_total == 3
    assert admission.admit("10.0.0.1") == (True, "10.0.0.1")
    assert admission.admit("10.0.0.1") == (False, PER_ADDRESS)
    admission.release("10.0.0.1")
    admission.release(UNCOUNTED_ADDRESS)
    assert admission.open_total == 2


def test_a_released_address_leaves_no_entry_behind():
    admission = ConnectionAdmission(max_per_address=5, max_total=0)
    for port in range(1000):
        ok, ticket = admission.admit(f"10.0.{port // 256}.{port % 256}")
        admission.release(ticket)

    assert admission.open_by_address == {} and admission.open_total == 0


def test_the_node_is_under_pressure_past_four_fifths_of_its_total():
    admission = ConnectionAdmission(max_per_address=0, max_total=10)
    for _ in range(7):
        admission.admit("10.0.0.1")
    assert not admission.under_pressure

    admission.admit("10.0.0.1")

    assert admission.under_pressure
    assert not ConnectionAdmission(max_per_address=0, max_total=0).under_pressure


def test_a_refusal_is_a_whole_http_answer_that_closes_the_connection():
    answer = refusal_answer(PER_ADDRESS)
    head, _, body = answer.partition(b"\r\n\r\n")

    assert head.startswith(b"HTTP/1.1 503 Service Unavailable\r\n")
    assert b"\r\nConnection: close" in head and b"\r\nRetry-After: 5" in head
    assert f"Content-Length: {len(body)}".encode() in head
    assert b"from this address" in body and b"as many connections" in refusal_answer(TOTAL)


def worker(keepalive_s: float, header_timeout_s: float, admission=None):
    from gunicorn.config import Config

    registry_worker = gunicorn_worker.RegistryWorker(0, 0, [], None, 30, Config(), log=None)
    registry_worker.keepalive_s = keepalive_s
    registry_worker.header_timeout_s = header_timeout_s
    registry_worker.admission = admission
    registry_worker.alive = True
    return registry_worker


def test_a_new_connection_gets_the_header_timeout_and_a_kept_alive_one_the_keepalive_time():
    assert worker(75, 20).wait_limits() == (20, 75)
    # Off (0), or longer than the keep-alive time: the keep-alive time.
    assert worker(75, 0).wait_limits() == (75, 75)
    assert worker(5, 20).wait_limits() == (5, 5)


def test_under_pressure_a_kept_alive_connection_gets_the_header_timeout_too():
    admission = ConnectionAdmission(max_per_address=0, max_total=5)
    busy = worker(75, 20, admission)
    for _ in range(4):
        admission.admit("10.0.0.1")

    assert busy.wait_limits() == (20, 20)


def test_the_sweeper_ends_a_new_connections_wait_at_the_header_timeout_and_not_a_kept_alive_ones():
    sweeping = worker(keepalive_s=30, header_timeout_s=0.2)
    ended = {}

    def connection(name: str, requests_before: int):
        for _ in range(requests_before):
            with sweeping.timeout_ctx():
                gevent.sleep(0.01)
        started = time.monotonic()
        with sweeping.timeout_ctx():
            gevent.sleep(1.5)
        ended[name] = time.monotonic() - started

    greenlets = [gevent.spawn(connection, "new", 0), gevent.spawn(connection, "kept alive", 1)]
    gevent.joinall(greenlets, timeout=5)
    sweeping.alive = False

    assert all(greenlet.successful() for greenlet in greenlets)
    assert ended["new"] < 1.0  # the header timeout (0.2 s) plus at most a sweep (0.05 s)
    assert ended["kept alive"] >= 1.5  # its keep-alive time is 30 s: the wait ran to its end
