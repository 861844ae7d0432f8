"""Fixtures of the console tests: a node built from edited options, and HTML parsing."""

from __future__ import annotations

import pytest
from bs4 import BeautifulSoup
from django.test import Client

from registry.runtime.node import build_node, reset_node
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
    """``make_node(**registry_overrides, options=...)`` replaces the process node; views see it."""

    def make(options: dict | None = None, **registry):
        eureka_options["REGISTRY"] = {**eureka_options["REGISTRY"], **registry}
        eureka_options.update(options or {})
        node = build_node(eureka_options, clock=clock)
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
