"""Operator logs: one line per state change (eviction, self-preservation, peers, Redis), never a
secret in any line, and LOG_FORMAT=json for log shippers (the node, Celery, gunicorn)."""

from __future__ import annotations

import base64
import json
import logging
import os
import re
import subprocess
import sys
import threading
import time
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest
from django.core.exceptions import DisallowedHost
from rest_framework.test import APIClient

from registry.cluster.peers import PeerSet
from registry.domain.core import EvictionRun
from registry.domain.endpoints import parse_peer_urls
from registry.runtime.composition import build_node
from registry.runtime.logs import RefusalLinesFilter
from registry.runtime.process import reset_node
from registry.runtime.state_log import LISTED, StateLog
from tests.conftest import FakeClock
from tests.factories import instance_body
from tests.ports import free_port

ROOT = Path(__file__).resolve().parents[2]
GUNICORN = Path(sys.executable).with_name("gunicorn")

PEER_USER = "replicator"
PEER_PASSWORD = "Peer-Pass-7f3a9c"
REDIS_PASSWORD = "Redis-Pass-51d0e2"
CONTROL_SECRET = "Control-Secret-c4b8e6"
DJANGO_SECRET = "Django-Secret-Key-0a9f17"
SECRETS = [
    PEER_PASSWORD,
    base64.b64encode(f"{PEER_USER}:{PEER_PASSWORD}".encode()).decode(),  # its Basic-auth header
    REDIS_PASSWORD,
    CONTROL_SECRET,
    DJANGO_SECRET,
]
SEC = 1000
INSTANCES = 20
DEAD = ("10.0.0.18:orders:8080", "10.0.0.19:orders:8080")


class FakePeer(BaseHTTPRequestHandler):
    """A peer that accepts every replication batch."""

    def do_POST(self):  # noqa: N802
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])) or b"{}")
        items = body.get("replicationList", [])
        answer = json.dumps({"responseList": [{"statusCode": 200} for _ in items]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def log_message(self, *args):
        pass


class AnsweringRedis:
    """Stands in for Redis once it is back: answers as an empty Redis would."""

    def hmget(self, name, *fields):
        return [None] * len(fields)

    def hset(self, name, mapping):
        return len(mapping)

    def scan_iter(self, pattern):
        return iter(())

    def delete(self, *names):
        return 0

    def ping(self):
        return True


def all_loggers_at_debug(caplog) -> None:
    """Every record of every logger reaches caplog, whatever LOGGING set (httpx, django.request...)."""
    caplog.set_level(logging.DEBUG)
    for name in list(logging.root.manager.loggerDict):
        caplog.set_level(logging.DEBUG, logger=name)


def events(caplog) -> list[str]:
    return [record.event for record in caplog.records if hasattr(record, "event")]


def job_events(caplog) -> list[str]:
    """The events of the node's jobs and replication, without those of the change feed's publisher
    thread, whose timing the test does not drive."""
    return [event for event in events(caplog) if not event.startswith("change_feed_")]


def assert_no_secret(caplog) -> None:
    assert caplog.records
    texts = [caplog.text] + [record.getMessage() for record in caplog.records]
    texts += [repr(record.__dict__) for record in caplog.records]  # args, extras, exception
    for secret in SECRETS:
        leaks = [text for text in texts if secret in text]
        assert not leaks, f"{secret!r} logged: {leaks[0][:300]}"


def test_each_state_change_is_logged_once_and_no_record_holds_a_secret(
    caplog, settings, eureka_options, clock
):
    settings.EUREKA = settings.EUREKA.with_changes(control_secret=CONTROL_SECRET)
    settings.SECRET_KEY = DJANGO_SECRET
    peer_port, redis_port = free_port(), free_port()
    eureka_options = eureka_options.with_changes(
        cluster__peers=tuple(
            parse_peer_urls([f"http://{PEER_USER}:{PEER_PASSWORD}@127.0.0.1:{peer_port}/eureka/"])
        ),
        cluster__peer_timeout_ms=2000,
        redis__url=f"redis://:{REDIS_PASSWORD}@127.0.0.1:{redis_port}/0",
        redis__jobs_driver="embedded",
        response_cache__use_read_only=True,
    )
    all_loggers_at_debug(caplog)
    start = clock()
    node = build_node(eureka_options, clock=clock)  # clears its Redis tier: Redis is not there
    reset_node(node)
    api = APIClient()
    replicator = node.cluster.replicator
    (peer_key,) = replicator.peer_keys()
    server = None

    def at(seconds: float) -> int:
        clock.now = start + int(seconds * SEC)
        return clock.now

    def evict(seconds: float) -> None:
        # Two runs 2 s apart, as the scheduler makes them (a late run adds the delay to every lease).
        for when in (seconds - 2, seconds):
            at(when)
            answer = api.post("/control/jobs/evict", HTTP_X_EUREKA_CONTROL_SECRET=CONTROL_SECRET)
            assert answer.status_code == 200

    def heartbeat(count: int) -> None:
        for i in range(count):
            assert api.put(f"/eureka/apps/ORDERS/10.0.0.{i}:orders:8080").status_code == 200

    def replicate() -> bool:
        replicator.flush(clock())
        try:
            while replicator.send_next_batch(peer_key, clock()):
                pass
        except Exception:
            return False
        return True

    try:
        assert job_events(caplog) == ["redis_lost"]
        for i in range(INSTANCES):
            body = instance_body(host=f"10.0.0.{i}")
            assert api.post("/eureka/apps/ORDERS", body, format="json").status_code == 204
        # 20 expected clients: threshold int(20 x 2 x 0.85) = 34 renews a minute; none renewed yet.
        evict(3)
        evict(5)
        assert not replicate() and not replicate()  # the peer's port is closed: down, said once
        at(14)
        assert api.get("/eureka/apps", HTTP_ACCEPT="application/json").status_code == 200  # Redis still down
        assert job_events(caplog) == [
            "redis_lost",
            "self_preservation_entered",
            "peer_unavailable",
        ]

        at(15)
        heartbeat(INSTANCES)
        at(45)
        heartbeat(INSTANCES)
        evict(61)  # 40 renews in the last minute > 34: self-preservation ends
        at(75)
        heartbeat(INSTANCES - len(DEAD))
        at(105)
        heartbeat(INSTANCES - len(DEAD))
        assert not replicate()
        evict(140)  # the two silent since 45 s expired at 135 s; 36 renews > 34
        assert job_events(caplog)[3:] == ["self_preservation_left", "eviction"]
        eviction = next(r for r in caplog.records if getattr(r, "event", None) == "eviction")
        assert eviction.evicted == 2 and eviction.expired == 2
        assert eviction.instances == [f"ORDERS/{instance_id}" for instance_id in DEAD]
        assert all(instance_id in eviction.getMessage() for instance_id in DEAD)

        server = ThreadingHTTPServer(("127.0.0.1", peer_port), FakePeer)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        at(150)
        assert replicate() and replicate()
        node.cache.read_only._redis = AnsweringRedis()
        at(160)
        assert api.get("/eureka/apps", HTTP_ACCEPT="application/json").status_code == 200
        assert api.get("/eureka/apps", HTTP_ACCEPT="application/json").status_code == 200
        evict(170)
        # No heartbeat since 105 s: the minute 120-180 s had none, so the next one starts it again.
        evict(182)
        evict(184)
        assert job_events(caplog)[5:] == ["peer_available", "redis_back", "self_preservation_entered"]
        entered = [r for r in caplog.records if getattr(r, "event", None) == "self_preservation_entered"]
        assert (entered[0].renews_last_minute, entered[0].renews_threshold) == (0, 34)
        assert (entered[1].renews_last_minute, entered[1].renews_threshold) == (0, 30)
        peer_lines = [r for r in caplog.records if getattr(r, "event", "").startswith("peer_")]
        assert {r.peer for r in peer_lines} == {f"http://127.0.0.1:{peer_port}/eureka/"}
        assert "Connect" in peer_lines[0].getMessage()  # the reason is there, without the password
        # The change feed's Redis publisher runs on a thread of its own and real time: its outage is
        # said once, whenever its first flush finds Redis gone (and the line holds no password).
        assert events(caplog).count("change_feed_redis_lost") <= 1
        assert_no_secret(caplog)
    finally:
        reset_node(None)
        if server is not None:
            server.shutdown()
            server.server_close()


def test_a_long_eviction_names_the_first_instances_and_counts_the_rest(caplog):
    caplog.set_level(logging.DEBUG)
    evicted = [("ORDERS", f"10.0.{i // 100}.{i % 100}:orders:8080") for i in range(LISTED + 13)]
    run = EvictionRun(
        evicted,
        expired=90,
        preserving=False,
        renews_last_minute=500,
        renews_threshold=400,
        expected_clients=250,
    )
    state = StateLog()
    state.eviction(run, size=200)
    (line,) = [r for r in caplog.records if getattr(r, "event", None) == "eviction"]
    message = line.getMessage()
    assert message.startswith(f"evicted {LISTED + 13} expired leases of 90 (at most {LISTED + 13} per run)")
    assert message.endswith(" and 13 more")
    assert len(line.instances) == LISTED and line.limited and line.apps == ["ORDERS"]
    # Outside self-preservation from the start: nothing to say about it.
    assert events(caplog) == ["eviction"]


def test_an_empty_registry_says_nothing_about_self_preservation(caplog):
    caplog.set_level(logging.DEBUG)
    state = StateLog()
    empty = EvictionRun(
        [], expired=0, preserving=True, renews_last_minute=0, renews_threshold=0, expected_clients=0
    )
    state.eviction(empty, size=0)
    assert events(caplog) == []
    state.eviction(empty, size=3)
    state.eviction(empty, size=3)
    assert events(caplog) == ["self_preservation_entered"]


def test_a_peer_error_that_names_its_url_is_logged_and_shown_without_the_password(caplog):
    caplog.set_level(logging.DEBUG)
    url = f"http://{PEER_USER}:{PEER_PASSWORD}@10.0.0.9:8761/eureka/"
    peers = PeerSet([url])
    # A worker's report (production mode) may carry any library's text.
    peers.record_failure(url, 1, f"ConnectError: [Errno 111] for url '{url}apps/'")
    peers.record_failure(url, 2, "ReadTimeout")
    peers.record_success(url, 3)
    peers.record_success(url, 4)
    assert events(caplog) == ["peer_unavailable", "peer_available"]
    assert PEER_PASSWORD not in (peers.state(url).last_error or "")
    assert "10.0.0.9:8761" in caplog.records[0].getMessage()
    assert_no_secret(caplog)


def test_a_job_beat_left_overdue_is_logged_when_the_node_takes_it_and_when_beat_is_back(
    caplog, eureka_options, clock
):
    caplog.set_level(logging.DEBUG)
    node = build_node(eureka_options, clock=clock)
    interval = node.job_intervals()["sync_response_cache"]
    for _ in range(3):
        clock.advance(4 * interval)
        node.watchdog.run_if_overdue(node, "sync_response_cache", clock())
    node.run_job("sync_response_cache", clock.advance(interval), "celery")
    node.run_job("sync_response_cache", clock.advance(interval), "celery")
    assert events(caplog) == ["job_overdue", "job_back"]
    assert node.job_records["sync_response_cache"].runs == 5


# ---------------------------------------------------------------------------------- LOG_FORMAT


def run_python(code: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    full_env = {**os.environ, "DJANGO_SETTINGS_MODULE": "eureka_site.settings", **env}
    return subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=full_env, capture_output=True, text=True, timeout=60
    )


JSON_SCRIPT = """
import logging, os
import django

django.setup()
from eureka_site.celery import app

app.log.setup(loglevel="INFO")  # what `celery worker` and `celery beat` do when they start

from registry.cluster.peers import PeerSet
from registry.domain.core import EvictionRun
from registry.runtime.state_log import StateLog

evicted = [("ORDERS", f"10.0.0.{i}:orders:8080") for i in range(25)]
StateLog().eviction(EvictionRun(evicted, 25, False, 60, 34, 20), size=30)
peer = os.environ["EUREKA_PEER_URLS"]
PeerSet([peer]).record_failure(peer, 0, "refused")
logging.getLogger("celery.worker.consumer").warning("cannot connect to %s", os.environ["REDIS_URL"])
try:
    raise RuntimeError("control secret " + os.environ["EUREKA_CONTROL_SECRET"])
except RuntimeError:
    logging.getLogger("registry.runtime").exception("a job failed")
"""


def test_log_format_json_writes_one_object_per_line_with_the_extras_and_secrets_masked():
    peer = f"http://{PEER_USER}:{PEER_PASSWORD}@127.0.0.1:9/eureka/"
    result = run_python(
        JSON_SCRIPT,
        {
            "LOG_FORMAT": "json",
            "LOG_LEVEL": "INFO",
            "EUREKA_PEER_URLS": peer,
            "REDIS_URL": f"redis://:{REDIS_PASSWORD}@127.0.0.1:9/0",
            "EUREKA_CONTROL_SECRET": CONTROL_SECRET,
            "SECRET_KEY": DJANGO_SECRET,
        },
    )
    assert result.returncode == 0, result.stderr
    lines = [json.loads(line) for line in result.stderr.splitlines() if line.strip()]
    by_event = {line.get("event"): line for line in lines}

    eviction = by_event["eviction"]
    assert (eviction["level"], eviction["logger"]) == ("WARNING", "registry.events")
    assert datetime.fromisoformat(eviction["timestamp"]).utcoffset().total_seconds() == 0
    assert eviction["evicted"] == 25 and eviction["apps"] == ["ORDERS"]
    assert len(eviction["instances"]) == LISTED and eviction["message"].endswith(" and 5 more")
    assert by_event["peer_unavailable"]["peer"] == "http://127.0.0.1:9/eureka/"
    # Celery's own loggers go through the registry's handler, not one Celery installed.
    (celery_line,) = [line for line in lines if line["logger"] == "celery.worker.consumer"]
    assert celery_line["message"] == "cannot connect to redis://127.0.0.1:9/0"
    (failure,) = [line for line in lines if line["message"] == "a job failed"]
    assert "RuntimeError: control secret ***" in failure["exc_info"]
    for secret in SECRETS:
        assert secret not in result.stderr


def test_log_format_plain_masks_secrets_too():
    result = run_python(
        "import django, logging, os\ndjango.setup()\n"
        "logging.getLogger('x').warning('key %s', os.environ['SECRET_KEY'])",
        {"LOG_FORMAT": "plain", "SECRET_KEY": DJANGO_SECRET},
    )
    assert result.returncode == 0, result.stderr
    assert result.stderr.strip().endswith("WARNING x: key ***")


def test_a_bad_log_format_stops_the_start_with_the_variable_named():
    result = run_python("import django; django.setup()", {"LOG_FORMAT": "xml"})
    assert result.returncode != 0
    assert "ImproperlyConfigured: LOG_FORMAT must be one of plain, json, got 'xml'" in result.stderr


def test_gunicorn_writes_its_own_lines_in_the_log_format(tmp_path):
    env = {**os.environ, "LOG_FORMAT": "json", "EUREKA_DATA_DIR": str(tmp_path)}
    process = subprocess.Popen(
        [str(GUNICORN), "-c", "deploy/gunicorn.conf.py", "--bind", "127.0.0.1:0"],
        cwd=ROOT,
        env=env,
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
    )
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(process.stderr), daemon=True)
    reader.start()
    try:
        deadline = time.monotonic() + 60
        port = None
        while port is None and time.monotonic() < deadline and process.poll() is None:
            found = [re.search(r"Listening at: http://127.0.0.1:(\d+)", line) for line in list(lines)]
            port = next((int(match.group(1)) for match in found if match), None)
            time.sleep(0.1)
        assert port, "".join(lines)
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.1)
    finally:
        process.terminate()
        process.wait(timeout=30)
        reader.join(10)
    records = [json.loads(line) for line in lines]
    assert records[0]["logger"] == "gunicorn.error" and records[0]["message"].startswith("Starting gunicorn")
    assert any(record["message"].startswith("Booting worker") for record in records)
    assert records[-1]["message"] == "Shutting down: Master"


@pytest.mark.parametrize("level", ["INFO", "WARNING"])
def test_state_lines_that_close_an_episode_are_warnings_too(level, caplog):
    """At LOG_LEVEL=WARNING an operator still sees both ends of an episode."""
    caplog.set_level(level)
    state = StateLog()
    numbers = dict(renews_last_minute=0, renews_threshold=10, expected_clients=6)
    state.eviction(EvictionRun([], 0, True, **numbers), size=6)
    state.eviction(EvictionRun([], 0, False, **{**numbers, "renews_last_minute": 12}), size=6)
    assert events(caplog) == ["self_preservation_entered", "self_preservation_left"]


def library_line(name: str, message: str, *args, exc_info=None) -> logging.LogRecord:
    return logging.LogRecord(name, logging.WARNING, __file__, 1, message, args, exc_info)


def test_the_lines_libraries_write_per_refused_request_come_once_an_interval_with_a_count():
    """Django's django.security.* lines (with a traceback each) and gunicorn's "Invalid request" line,
    one per request a client sends: issue 44, item 6 (tests/deploy/test_log_floods_live.py: live)."""
    clock = FakeClock(0)
    refusals = RefusalLinesFilter(interval_s=60, clock=clock)
    try:
        raise DisallowedHost("Invalid HTTP_HOST header: 'evil.example'.")
    except DisallowedHost:
        traceback = sys.exc_info()

    def host() -> logging.LogRecord:
        return library_line(
            "django.security.DisallowedHost", "Invalid HTTP_HOST header: %r.", "evil", exc_info=traceback
        )

    def csrf() -> logging.LogRecord:
        return library_line(
            "django.security.csrf", "Forbidden (%s): %s", "CSRF cookie not set.", "/admin/login/"
        )

    def malformed() -> logging.LogRecord:
        return library_line(
            "gunicorn.error", "Invalid request from ip=127.0.0.9: Invalid HTTP request line: ''"
        )

    first = host()
    assert (
        refusals.filter(first)
        and first.exc_info is None
        and first.getMessage() == "Invalid HTTP_HOST header: 'evil'."
    )
    assert [refusals.filter(host()) for _ in range(999)] == [False] * 999
    assert refusals.filter(csrf()) and refusals.filter(malformed())
    assert not any(refusals.filter(line()) for line in (csrf, malformed) for _ in range(100))
    # Every other line passes as it is, and so do refusal lines the node counted itself.
    other = library_line("gunicorn.error", "Booting worker with pid: %s", 7)
    assert refusals.filter(other) and other.getMessage() == "Booting worker with pid: 7"
    counted = library_line("django.security.DisallowedHost", "GET / refused")
    counted.event = "refusals"
    assert refusals.filter(counted) and counted.getMessage() == "GET / refused"

    clock.advance(60)
    due = host()
    assert refusals.filter(due)
    assert due.getMessage() == "Invalid HTTP_HOST header: 'evil'. (999 more since the last such line)"
    assert (due.event, due.kind, due.refusals, due.exc_info) == (
        "refusals",
        "django.security.DisallowedHost",
        1000,
        None,
    )
    due = malformed()
    assert refusals.filter(due) and due.getMessage().endswith("(100 more since the last such line)")


def test_the_configured_log_cuts_refusal_lines(caplog):
    """settings.LOGGING puts the filter on the one handler every logger writes through."""
    from django.conf import settings

    config = settings.LOGGING
    assert "refusals" in config["handlers"]["console"]["filters"]
    assert config["filters"]["refusals"]["interval_s"] == settings.EUREKA.process.refusal_log_interval_seconds
