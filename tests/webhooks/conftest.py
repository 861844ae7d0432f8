"""Fixtures of the webhook tests: subscriptions, a relay on the test's node (no threads), a receiver."""

from __future__ import annotations

import dataclasses

import pytest
from django.conf import settings

from registry.webhooks.models import WebhookSubscription
from registry.webhooks.relay import WebhookRelay
from registry.webhooks.sender import DeliveryConfig, new_client

from .receiver import Receiver


@pytest.fixture
def webhook_options():
    return dataclasses.replace(
        settings.EUREKA.webhooks, timeout_ms=1_000, max_attempts=3, retry_base_ms=1_000, retry_max_ms=60_000
    )


@pytest.fixture
def relay(node, webhook_options, db):
    """The relay of the test's node, driven by the test (``flush``), sending nothing itself."""
    relay = WebhookRelay(node.registry, webhook_options, deliver_here=False)
    relay.start(threads=False)
    node.webhooks = relay
    yield relay
    relay.stop()
    node.webhooks = None


@pytest.fixture
def receiver():
    with Receiver() as running:
        yield running


@pytest.fixture
def config(webhook_options) -> DeliveryConfig:
    return DeliveryConfig.from_config(webhook_options)


@pytest.fixture
def http(config):
    with new_client(config) as client:
        yield client


def subscribe(url: str, name: str = "ops", secret: str = "s3cret", **fields) -> WebhookSubscription:
    return WebhookSubscription.objects.create(name=name, url=url, secret=secret, **fields)
