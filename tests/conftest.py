"""Shared fixtures: a fresh registry node per test, driven by a fake clock."""

from __future__ import annotations

import os

import pytest
from django.conf import settings
from rest_framework.test import APIClient

from registry.runtime.composition import build_node
from registry.runtime.process import reset_node

START_MS = 1_796_000_000_000

# Nodes the tests start (gunicorn, Celery) inherit this: none restores a warm-restart snapshot left by
# another test, or by a `make run` node in var/. The warm-restart tests turn it on for their nodes.
os.environ["EUREKA_WARM_RESTART"] = "false"


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
