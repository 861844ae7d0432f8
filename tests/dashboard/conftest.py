"""Fixtures of the console tests: a node built from edited options, and HTML parsing."""

from __future__ import annotations

import pytest
from bs4 import BeautifulSoup
from django.test import Client

from registry.runtime.composition import build_node
from registry.runtime.process import reset_node
from tests.factories import instance_body


def soup(response) -> BeautifulSoup:
    return BeautifulSoup(response.content.decode(), "html.parser")


def cells(table) -> list[list[str]]:
    """A table's body rows as lists of cell texts, whitespace collapsed."""
    return [
        [" ".join(cell.get_text(" ", strip=True).split()) for cell in row.find_all(["td", "th"])]
        for row in (table.tbody or table).find_all("tr")
    ]


def kv(table) -> dict[str, str]:
    return {row[0]: row[1] for row in cells(table) if len(row) == 2}


@pytest.fixture
def make_node(eureka_options, clock):
    """``make_node(**registry_overrides, options={"section__field": value})`` replaces the process
    node; views see it."""

    config = eureka_options

    def make(options: dict | None = None, **registry):
        # Each call adds to the changes of the calls before it.
        nonlocal config
        changes = {f"registry__{name}": value for name, value in registry.items()}
        changes.update(options or {})
        config = config.with_changes(**changes)
        node = build_node(config, clock=clock)
        reset_node(node)
        return node

    yield make
    reset_node(None)


@pytest.fixture
def web(node) -> Client:
    return Client()


def register(client, app="ORDERS", host="10.0.0.1", **extra):
    body = instance_body(app=app, host=host, **extra)
    response = client.post(f"/eureka/apps/{app}", body, content_type="application/json")
    assert response.status_code == 204, response.content
    return body["instance"]["instanceId"]
