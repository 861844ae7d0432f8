"""Which new connections a node takes (registry/serving/connections.py) and how long the gunicorn
worker gives a connection to send a request (registry/serving/gunicorn_worker.py, the sweeper's limits).
The live behaviour, with real sockets: tests/deploy/test_slow_clients_live.py."""

from __future__ import annotations

import time

import gevent

from registry.serving import gunicorn_worker
from registry.serving.connections import (
    HELD_BYTES,
    PER_ADDRESS,
    SHED,
    STALLED_S,
    TOTAL,
    UNCOUNTED_ADDRESS,
    WRITE_TIMEOUT,
    ConnectionAdmission,
    SlowReaders,
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


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def slow_readers(timeout_s=20.0, max_held_bytes=0, queued=None):
    """SlowReaders on a fake clock; ``queued`` maps a write's socket to what its queue holds."""
    clock = Clock()
    queues = queued if queued is not None else {}
    return SlowReaders(timeout_s, max_held_bytes, clock=clock, queue=queues.get), clock


def test_a_reader_that_takes_nothing_for_the_write_timeout_is_closed_and_one_that_reads_is_not():
    readers, clock = slow_readers(timeout_s=20.0)
    stuck = readers.begin("stuck", b"x" * 1000)
    reading = readers.begin("reading", b"x" * 1000)

    for _ in range(19):
        clock.now += 1
        readers.moved(reading)  # the socket took more of its answer
        assert readers.due() == []
    clock.now += 1

    assert readers.due() == [stuck]
    assert stuck.closing == WRITE_TIMEOUT and readers.closed[WRITE_TIMEOUT] == 1
    assert readers.due() == [], "a write being closed is named once"
    readers.end(stuck)
    readers.end(reading)
    assert readers.writes == {}


def test_a_reader_whose_socket_queue_shrinks_is_moving_though_nothing_was_added_to_it():
    """A slow reader takes a little at a time: the kernel's queue shrinks while the server, waiting
    for room, adds nothing. That is progress; a queue that stays as it was is not."""
    queued = {}
    looked_at = []

    class Queues(dict):
        def get(self, sock):
            looked_at.append(sock)
            return queued[sock]

    readers, clock = slow_readers(timeout_s=5.0, queued=Queues())
    trickle = readers.begin("trickle", b"x" * 100_000, sock="trickle socket")
    stuck = readers.begin("stuck", b"x" * 100_000, sock="stuck socket")
    queued["trickle socket"] = queued["stuck socket"] = 65_000

    closed = []
    for _ in range(12):
        clock.now += 1
        queued["trickle socket"] -= 100
        closed += readers.due()

    assert closed == [stuck] and trickle.closing is None
    # Asked about when first seen quiet and at the timeout, not at every sweep.
    assert looked_at.count("stuck socket") == 2 and looked_at.count("trickle socket") <= 6


def test_under_pressure_the_readers_stalled_longest_are_closed_until_the_node_is_below_the_mark():
    admission = ConnectionAdmission(max_per_address=0, max_total=10)  # pressure from 8 open
    readers, clock = slow_readers()
    writes = []
    for n in range(9):
        admission.admit(f"10.0.0.{n}")
        writes.append(readers.begin(n, b"x" * 1000))
        clock.now += 0.1
    clock.now += STALLED_S
    readers.moved(writes[0])  # it just took something: not stalled

    closing = readers.due(admission)

    # 9 open, below the mark means 7: the two stalled longest (1 and 2) go, not the one that moved.
    assert closing == [writes[1], writes[2]]
    assert all(write.closing == SHED for write in closing) and readers.closed[SHED] == 2
    assert readers.due(ConnectionAdmission(max_per_address=0, max_total=10)) == [], (
        "no pressure, nothing shed"
    )


def test_a_write_stalled_less_than_a_second_is_not_shed_by_the_sweep():
    admission = ConnectionAdmission(max_per_address=0, max_total=2)
    readers, clock = slow_readers()
    admission.admit("10.0.0.1")
    admission.admit("10.0.0.2")
    readers.begin("fresh", b"x")
    clock.now += STALLED_S / 2

    assert readers.due(admission) == []


def test_at_the_cap_the_reader_blocked_longest_gives_its_place_to_a_new_connection():
    readers, clock = slow_readers()
    shed = []

    def make_room() -> bool:
        write = readers.shed()
        if write is None:
            return False
        shed.append(write.owner)
        return True

    admission = ConnectionAdmission(max_per_address=2, max_total=3, make_room=make_room)
    for owner in ("a", "b", "c"):
        assert admission.admit(f"10.0.0.{owner}")[0]
        readers.begin(owner, b"x" * 1000)
        clock.now += 0.5
    readers.moved(readers.current("a"))

    # Before any sweep, and however briefly blocked: b, then c, then a, then nothing left to shed.
    assert admission.admit("10.0.1.1") == (True, "10.0.1.1")
    assert admission.admit("10.0.1.2") == (True, "10.0.1.2")
    assert shed == ["b", "c"] and readers.closed[SHED] == 2
    assert admission.open_total == 5, "the shed ones count until they are released"
    assert admission.admit("10.0.1.3")[0] and shed == ["b", "c", "a"]
    assert admission.admit("10.0.1.4") == (False, TOTAL)
    # An address over its own cap is refused for that, and sheds nobody.
    readers.begin("d", b"x")
    assert admission.admit("10.0.1.1") == (True, "10.0.1.1")
    assert admission.admit("10.0.1.1") == (False, PER_ADDRESS) and shed == ["b", "c", "a", "d"]


def test_the_shed_order_skips_writes_that_ended_or_moved_and_forgets_ended_ones():
    readers, clock = slow_readers()
    first, second, third = (readers.begin(n, b"x" * 10) for n in range(3))
    clock.now += 1
    readers.end(first)
    readers.moved(second)
    clock.now += 1
    fourth = readers.begin(3, b"x")

    assert [readers.shed() for _ in range(4)] == [third, second, fourth, None]

    for n in range(1000):
        readers.end(readers.begin(("brief", n), b"x"))
    assert len(readers._by_moved) <= 2 * len(readers.writes) + 64, "ended writes are not kept"


def test_the_answers_stalled_readers_hold_are_bounded_oldest_version_first():
    """Each rebuild of the registry is a new answer; slow readers each hold the one they started on.
    Past the bound, the readers of the oldest answers go; the newest is never let go for it."""
    readers, clock = slow_readers(timeout_s=0, max_held_bytes=25)
    versions = [bytes([n]) * 10 for n in range(4)]  # 10 bytes each
    holders = {}
    for number, version in enumerate(versions):
        holders[number] = [readers.begin((number, n), version) for n in range(3)]
        clock.now += 1
    clock.now += STALLED_S

    closing = readers.due()

    # 40 bytes held: versions 0 and 1 go (20 left, within 25); 2 and 3 stay.
    assert set(closing) == set(holders[0] + holders[1])
    assert all(write.closing == HELD_BYTES for write in closing) and readers.closed[HELD_BYTES] == 6
    assert readers.due() == []

    # One answer larger than the bound alone, the newest: kept.
    readers, clock = slow_readers(timeout_s=0, max_held_bytes=5)
    readers.begin("only", versions[0])
    clock.now += STALLED_S
    assert readers.due() == []


def test_an_answer_that_moving_readers_hold_is_not_counted():
    readers, clock = slow_readers(timeout_s=0, max_held_bytes=15)
    old, new = b"o" * 10, b"n" * 10
    reading = readers.begin("reading", old)
    readers.begin("stalled", new)
    clock.now += STALLED_S
    readers.moved(reading)

    assert readers.due() == []
