"""The mesh process's copy of the registry follows a live node: its registry page, then its change
stream with instances, resuming after the stream ends and starting over after a too-old id."""

from __future__ import annotations

import json
import time

import httpx
import pytest

from registry.mesh.catalog import Catalog
from registry.mesh.follower import NodeFollower, TooOld, _events
from tests.factories import instance_body
from tests.interop.conftest import running_server, wait_until

pytestmark = pytest.mark.live


def test_events_are_split_per_network_read_and_comments_skipped():
    chunks = [
        b"retry: 2000\n\n",
        b'id: 1\nevent: change\ndata: {"a":1}\n\nid: 2\nevent: chan',
        b'ge\ndata: {"a":2}\n\n: keep-alive\n\n',
        b'id: 3\nevent: too-old\ndata: {"lastId":3}\n\n',
    ]
    assert list(_events(iter(chunks))) == [
        [("change", b'{"a":1}')],
        [("change", b'{"a":2}')],
        [("too-old", b'{"lastId":3}')],
    ]


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    # Streams end after 2 s, so the follower's reconnection from its last id is exercised too.
    env = {"EUREKA_CHANGE_STREAM_MAX_SECONDS": "2", "EUREKA_CHANGE_STREAM_KEEPALIVE_SECONDS": "1"}
    with running_server(tmp_path_factory.mktemp("mesh_follower"), env, server="gunicorn") as server:
        yield server


def register(node, app: str, instance_id: str, **fields) -> None:
    body = instance_body(app=app, instance_id=instance_id, **fields)
    answer = httpx.post(f"{node.url}apps/{app}", json=body, timeout=5)
    assert answer.status_code == 204, answer.text


def test_the_catalog_follows_registrations_status_changes_and_cancels(node):
    register(node, "ORDERS", "before-1", ipAddr="10.0.0.1")
    catalog = Catalog()
    follower = NodeFollower(catalog, node.base_url)
    follower.start()
    try:
        assert catalog.ready.wait(10), follower.state.last_error
        assert [e.instance_id for e in catalog.endpoints("orders")] == ["before-1"]

        started = time.monotonic()
        register(node, "ORDERS", "after-1", ipAddr="10.0.0.2")
        wait_until(lambda: len(catalog.endpoints("orders")) == 2, timeout=5, message="registration")
        took = time.monotonic() - started
        # The node wakes streams every 50 ms; one round trip more. Far under the 1 s the mesh promises.
        assert took < 1.0, took

        assert (
            httpx.put(f"{node.url}apps/ORDERS/after-1/status?value=OUT_OF_SERVICE", timeout=5).status_code
            == 200
        )
        wait_until(
            lambda: (
                {e.instance_id: e.status for e in catalog.endpoints("orders")}.get("after-1")
                == "OUT_OF_SERVICE"
            ),
            timeout=5,
            message="status override",
        )
        # Past the node's 2 s stream lifetime: the follower reopened from its last id and missed nothing.
        time.sleep(2.5)
        assert httpx.delete(f"{node.url}apps/ORDERS/before-1", timeout=5).status_code == 200
        wait_until(
            lambda: [e.instance_id for e in catalog.endpoints("orders")] == ["after-1"],
            timeout=5,
            message="cancel",
        )
        assert follower.state.snapshots == 1 and follower.state.connected
    finally:
        follower.stop()


def test_a_follower_behind_the_retention_window_reads_the_registry_again(node):
    catalog = Catalog()
    follower = NodeFollower(catalog, node.base_url)
    # An id the node never handed out: the stream answers too-old and the follower starts over.
    page = json.loads(httpx.get(f"{node.base_url}/api/v1/registry", timeout=5).content)
    assert follower.load_registry() == page["lastId"]
    with pytest.raises(TooOld):
        follower.follow(page["lastId"] + 10**9)
    follower.stop()


def test_a_node_that_cannot_be_reached_leaves_the_catalog_as_it_was_and_is_retried():
    catalog = Catalog()
    naps: list[float] = []

    def nap(seconds: float) -> None:
        naps.append(seconds)
        if len(naps) == 5:
            follower._stopping.set()

    follower = NodeFollower(catalog, "http://127.0.0.1:9", sleep=nap)
    follower.run()
    # Doubling waits, at most 5 s apart.
    assert naps == [0.5, 1.0, 2.0, 4.0, 5.0]
    assert not follower.state.connected and "ConnectError" in follower.state.last_error
    assert len(catalog) == 0 and not catalog.ready.is_set()
    follower.stop()
