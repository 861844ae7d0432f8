"""Shared fixtures: a fresh registry node per test, driven by a fake clock."""

from __future__ import annotations

import os
import re

import pytest
from django.conf import settings
from rest_framework.test import APIClient
from xdist.remote import Producer
from xdist.scheduler import LoadScopeScheduling

from registry.runtime.composition import build_node
from registry.runtime.process import reset_node

START_MS = 1_796_000_000_000

# Markers of the tests that start server processes (pyproject.toml lists them).
LIVE_MARKERS = frozenset({"live", "interop", "integration", "cluster", "browser"})
# The HTTP server in a tests/interop test's id: ``test_x[gunicorn]``, ``test_x[eureka-client-2.0-granian]``.
INTEROP_SERVER_ID = re.compile(r"\[(?:.*-)?(gunicorn|granian)(?:-.*)?\]$")

# Nodes the tests start (gunicorn, Celery) inherit this: none restores a warm-restart snapshot left by
# another test, or by a `make run` node in var/. The warm-restart tests turn it on for their nodes.
os.environ["EUREKA_WARM_RESTART"] = "false"


class ModuleScheduling(LoadScopeScheduling):
    """pytest-xdist's scheduling (``make test``): each worker takes one test module at a time and runs it
    whole, so the servers its module-scoped fixtures start are started once. A module of tests/interop
    is two, one per HTTP server its tests run on, so its gunicorn and granian halves run side by side.
    Modules go out in collection order, which in a worker puts the live ones first
    (``pytest_collection_modifyitems``): the longest start early and the short unit modules fill in."""

    def __init__(self, config: pytest.Config, log: Producer) -> None:
        super().__init__(config, log)
        # The count of tests in a module says little about its time.
        config.option.loadscopereorder = False

    def _split_scope(self, nodeid: str) -> str:
        module, _, test = nodeid.partition("::")
        server = INTEROP_SERVER_ID.search(test) if module.startswith("tests/interop/") else None
        return f"{module}[{server.group(1)}]" if server else module


@pytest.hookimpl(tryfirst=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Producer) -> ModuleScheduling:
    return ModuleScheduling(config, log)


def _flushes_the_database(item: pytest.Item) -> bool:
    """A test on a transactional test database (pytest-django's ``transactional_db``, its in-process
    ``live_server``), which empties the tables when it ends: the roles the migrations made too, which
    later tests in the same process read. tests/interop's ``live_server`` is a fixture of its own."""
    if item.nodeid.startswith("tests/interop/"):
        return False
    marker = item.get_closest_marker("django_db")
    transaction = marker is not None and marker.kwargs.get("transaction", False)
    return transaction or "transactional_db" in item.fixturenames or "live_server" in item.fixturenames


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """In a pytest-xdist worker: the modules of tests/interop first, then the other live ones, then the
    rest, and last the modules with a test that empties the database (pytest-django runs those last
    too, so that no test after them in the same process misses what the migrations wrote); each
    module's tests in the order pytest gave them."""
    if not hasattr(config, "workerinput"):
        return

    def rank(item: pytest.Item) -> int:
        if _flushes_the_database(item):
            return 3
        if item.nodeid.startswith("tests/interop/"):
            return 0
        return 1 if LIVE_MARKERS.intersection(mark.name for mark in item.iter_markers()) else 2

    module_ranks: dict[str, int] = {}
    for item in items:
        module = item.nodeid.partition("::")[0]
        module_ranks[module] = max(module_ranks.get(module, 0), rank(item))
    items.sort(key=lambda item: module_ranks[item.nodeid.partition("::")[0]])


class FakeClock:
    """Epoch milliseconds that move only when a test says so."""

    def __init__(self, start: int = START_MS):
        self.now = start

    def __call__(self) -> int:
        return self.now

    def advance(self, ms: int) -> int:
        self.now += ms
        return self.now


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def eureka_options():
    """settings.EUREKA (typed, frozen: registry/config/eureka.py) as the test's nodes start from; a
    test builds its own variant with ``eureka_options.with_changes(registry__disable_delta=True, ...)``."""
    # Most API tests want to see writes at once; tests of the read-only tier turn it back on.
    return settings.EUREKA.with_changes(response_cache__use_read_only=False)


@pytest.fixture
def config_changes() -> dict:
    """Changes for the ``node`` fixture's config, made by fixtures requested before ``node``/``api``."""
    return {}


@pytest.fixture
def edit_config(config_changes):
    """``edit_config(registry__disable_delta=True)``: the ``node`` fixture (asked for later) gets it."""
    return config_changes.update


@pytest.fixture
def node(eureka_options, config_changes, clock):
    """The process node replaced by a fresh one on the fake clock; views see this one."""
    fresh = build_node(eureka_options.with_changes(**config_changes), clock=clock)
    reset_node(fresh)
    yield fresh
    reset_node(None)


@pytest.fixture
def api(node) -> APIClient:
    return APIClient()


@pytest.fixture(autouse=True)
def _reset_script_prefix():
    """Requests through the WSGI handler set the script prefix thread-wide; Django's test client never
    resets it, so a test that sent X-Forwarded-Prefix would leak its prefix into the next tests."""
    yield
    from django.urls import set_script_prefix

    set_script_prefix("/")


@pytest.fixture(autouse=True)
def _no_failed_signins_carried_over():
    """Failed sign-ins are counted per process (registry/access/throttle.py): one test's wrong
    passwords must not lock the next test's client out."""
    yield
    from registry.access import accounts

    accounts.reset_signin_throttle(None)
