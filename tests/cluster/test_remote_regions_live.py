"""Remote regions between two live nodes of ours: node B is node A's remote region ``us-west``
(``EUREKA_REMOTE_REGION_URLS``, fetched every second). What a client of A sees of B's instances,
through A's ``GET apps?regions=us-west`` and ``apps/delta?regions=us-west``, as a Java client with
``fetchRemoteRegionsRegistry=us-west`` reads them. Loopback only; every wait is bounded."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import httpx
import pytest

from tests.factories import instance_body
from tests.interop.conftest import LiveServer, running_server, wait_until
from tests.ports import free_port

pytestmark = pytest.mark.live

JSON = {"Accept": "application/json"}
DEADLINE_S = 15.0


def region_env(remote: LiveServer | str, **extra: str) -> dict[str, str]:
    url = remote.url if isinstance(remote, LiveServer) else remote
    return {
        "EUREKA_REMOTE_REGION_URLS": f"us-west={url}",
        "EUREKA_REMOTE_REGION_FETCH_INTERVAL_SECONDS": "1",
        **extra,
    }


@contextmanager
def node(
    tmp_path_factory, name: str, extra_env: dict[str, str] | None = None, port: int | None = None
) -> Iterator[LiveServer]:
    with running_server(tmp_path_factory.mktemp(name), extra_env, port=port) as server:
        yield server


@pytest.fixture(scope="module")
def west(tmp_path_factory) -> Iterator[LiveServer]:
    with node(tmp_path_factory, "region_b") as server:
        yield server


@pytest.fixture(scope="module")
def home(tmp_path_factory, west) -> Iterator[LiveServer]:
    with node(tmp_path_factory, "region_a", region_env(west)) as server:
        yield server


def register(server: LiveServer, app: str, host: str, status: str = "UP") -> str:
    body = instance_body(app=app, host=host, status=status)
    response = httpx.post(f"{server.url}apps/{app}", json=body, timeout=5)
    assert response.status_code == 204, response.text
    return body["instance"]["instanceId"]


def get(server: LiveServer, path: str, **headers: str) -> httpx.Response:
    return httpx.get(f"{server.url}{path}", headers={**JSON, **headers}, timeout=5)


def instances(doc: dict) -> list[dict]:
    apps = doc["applications"]["application"]
    return [inst for app in apps for inst in app["instance"]]


def hashcode_over(held) -> str:
    """What a Eureka client computes over the instances it holds (``getReconcileHashCode``)."""
    counts = Counter(inst["status"] for inst in held)
    return "".join(f"{status}_{counts[status]}_" for status in sorted(counts))


def wait_for(what: str, check: Callable[[], object]) -> object:
    return wait_until(check, DEADLINE_S, what, interval=0.2)


def ids(doc: dict) -> set[str]:
    return {inst["instanceId"] for inst in instances(doc)}


def test_an_instance_registered_in_the_remote_region_is_served_by_the_home_node(home, west):
    local = register(home, "ORDERS", "10.1.0.1")
    remote = register(west, "PAYMENTS", "10.2.0.1")
    down = register(west, "PAYMENTS", "10.2.0.2", status="DOWN")

    def merged():
        doc = get(home, "apps?regions=us-west").json()
        return doc if {local, remote, down} <= ids(doc) else None

    doc = wait_for("B's instances in A's GET apps?regions=us-west", merged)
    assert doc["applications"]["apps__hashcode"] == hashcode_over(instances(doc))
    # B's record as B serves it: nothing rewritten on the way.
    served = {inst["instanceId"]: inst for inst in instances(doc)}[remote]
    at_west = get(west, f"apps/PAYMENTS/{remote}").json()["instance"]
    assert served["leaseInfo"]["registrationTimestamp"] == at_west["leaseInfo"]["registrationTimestamp"]
    assert served["lastDirtyTimestamp"] == at_west["lastDirtyTimestamp"]
    # In XML too.
    xml = httpx.get(f"{home.url}apps?regions=us-west", headers={"Accept": "application/xml"}, timeout=5)
    assert f"<instanceId>{remote}</instanceId>" in xml.text
    # Transparent fallback (Spring Cloud Eureka Server's default): plain GET apps has them too, and
    # GET apps/PAYMENTS, which A does not hold, answers from B.
    assert {local, remote, down} <= ids(get(home, "apps").json())
    assert get(home, "apps/PAYMENTS").status_code == 200
    # A Eureka server reading A (a peer's start-up sync) gets A's own instances only.
    assert ids(get(home, "apps", **{"DiscoveryIdentity-Name": "DefaultServer"}).json()) == {local}
    # B, read by A as a server, never echoes A's instances back.
    assert local not in ids(get(west, "apps").json())


def test_a_client_following_the_delta_with_regions_reconciles_and_sees_a_remote_cancel(home, west):
    """A Java client with fetchRemoteRegionsRegistry=us-west: a full fetch, then deltas; its copy's
    hashcode must equal the server's at every step, and a cancel at B must leave its copy."""
    gone = register(west, "BILLING", "10.2.1.1")
    wait_for("BILLING at A", lambda: gone in ids(get(home, "apps?regions=us-west").json()))
    held = {inst["instanceId"]: inst for inst in instances(get(home, "apps?regions=us-west").json())}

    def follow_delta() -> dict:
        delta = get(home, "apps/delta?regions=us-west").json()
        for inst in instances(delta):
            if inst["actionType"] == "DELETED":
                held.pop(inst["instanceId"], None)
            else:
                held[inst["instanceId"]] = inst
        return delta

    added = register(west, "BILLING", "10.2.1.2", status="STARTING")
    assert httpx.delete(f"{west.url}apps/BILLING/{gone}", timeout=5).status_code == 200

    def applied():
        delta = follow_delta()
        assert delta["applications"]["apps__hashcode"] == hashcode_over(held.values())
        return added in held and gone not in held

    wait_for("B's register and cancel through A's delta", applied)
    cancelled = [
        i for i in instances(get(home, "apps/delta?regions=us-west").json()) if i["instanceId"] == gone
    ]
    assert cancelled and cancelled[0]["actionType"] == "DELETED"
    wait_for(
        "the cancel at B gone from A's full registry",
        lambda: gone not in ids(get(home, "apps?regions=us-west").json()),
    )


def test_regions_are_refused_until_the_region_was_fetched_once(tmp_path_factory):
    west_port = free_port()
    with node(tmp_path_factory, "early_a", region_env(f"http://127.0.0.1:{west_port}/eureka/")) as early:
        # B is not up: A cannot have fetched it.
        assert get(early, "apps?regions=us-west").status_code == 403
        assert get(early, "apps/delta?regions=us-west").status_code == 403
        assert get(early, "apps").status_code == 200
        with node(tmp_path_factory, "late_b", port=west_port) as late:
            remote = register(late, "PAYMENTS", "10.2.0.7")
            wait_for(
                "A ready once B answers",
                lambda: (
                    get(early, "apps?regions=us-west").status_code == 200
                    and remote in ids(get(early, "apps?regions=us-west").json())
                ),
            )


def test_the_whitelist_limits_what_the_home_node_merges(tmp_path_factory, west):
    kept = register(west, "INVENTORY", "10.2.2.1")
    left = register(west, "SHIPPING", "10.2.2.2")
    env = region_env(west, EUREKA_REMOTE_REGION_APP_WHITELIST="us-west:INVENTORY")
    with node(tmp_path_factory, "whitelisted_a", env) as home:

        def merged():
            doc = get(home, "apps?regions=us-west").json()
            return doc if kept in ids(doc) else None

        doc = wait_for("INVENTORY at A", merged)
        assert left not in ids(doc)
        assert {inst["app"] for inst in instances(doc)} == {"INVENTORY"}
        assert doc["applications"]["apps__hashcode"] == hashcode_over(instances(doc))


def test_the_console_shows_the_region(home, west):
    def region_block() -> str | None:
        page = httpx.get(f"{home.base_url}/", timeout=5).text
        start = page.find('id="remote-regions"')
        return page[start:].split("</ul>")[0] if start >= 0 else None

    block = wait_for(
        "the region ready on A's console", lambda: (b := region_block()) and ">ready<" in b and b
    )
    assert 'data-region="us-west"' in block
    assert west.url in block
    assert "last fetch: never" not in block


@pytest.mark.integration
def test_in_production_mode_celery_beat_drives_the_fetches_in_the_registry_process(tmp_path_factory, west):
    from tests.integration.conftest import production_topology

    env = {**region_env(west), "EUREKA_RESPONSE_CACHE_UPDATE_INTERVAL_MS": "1000"}
    with production_topology(tmp_path_factory.mktemp("production_a"), env) as production:
        base = f"{production.url}/eureka/"
        wait_for(
            "the first fetch", lambda: httpx.get(f"{base}apps?regions=us-west", timeout=5).status_code == 200
        )
        later = register(west, "LATECOMER", "10.2.4.1")
        wait_for(
            "an instance registered at B after A started, through beat's fetches",
            lambda: later in ids(httpx.get(f"{base}apps?regions=us-west", headers=JSON, timeout=5).json()),
        )
        # Beat's worker may boot after the job is first overdue on a loaded machine, and the node's
        # watchdog then runs a fetch or two itself; beat must have the job back and drive it.
        wait_for(
            "Celery beat running the fetches",
            lambda: production.ready()["jobs"]["fetch_remote_regions"]["last_source"] == "celery",
        )
