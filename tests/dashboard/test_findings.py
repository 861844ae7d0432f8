"""Suspicious registrations (registry/domain/findings.py) and their section on the status page."""

from __future__ import annotations

import time

import pytest

from registry.domain.findings import (
    DUPLICATE,
    LOOPBACK,
    PORT_ZERO,
    RegistrationSources,
    find_suspicious,
    is_loopback,
)
from registry.domain.instances import InstanceInfo
from tests.dashboard.conftest import cells, register, soup
from tests.factories import instance_body


def inst(app="ORDERS", instance_id="a", ip="10.0.0.1", port=8080, host=None, **kw) -> InstanceInfo:
    return InstanceInfo(instance_id=instance_id, app=app, host_name=host or ip, ip_addr=ip, port=port, **kw)


def kinds(findings) -> list[tuple[str, str]]:
    return [(finding.instance_id, finding.kind) for finding in findings]


def test_two_ids_on_one_address_and_port_are_duplicates_naming_each_other():
    instances = [
        ("ORDERS", [inst(instance_id="old"), inst(instance_id="new"), inst(instance_id="other", port=8081)]),
        ("BILLING", [inst(app="BILLING", instance_id="b", ip="10.0.0.2")]),
    ]
    findings = find_suspicious(instances, {})
    assert kinds(findings) == [("new", DUPLICATE), ("old", DUPLICATE)]
    assert findings[0].reason == "10.0.0.1:8080 is also registered as ORDERS/old"


def test_the_same_port_across_applications_and_on_the_secure_port_counts():
    instances = [
        ("A", [inst(app="A", instance_id="a", port=8080)]),
        ("B", [inst(app="B", instance_id="b", port=9000, secure_port=8080, secure_port_enabled=True)]),
    ]
    assert kinds(find_suspicious(instances, {})) == [("a", DUPLICATE), ("b", DUPLICATE)]
    # One instance whose port and secure port are the same is not a duplicate of itself.
    alone = [("A", [inst(app="A", instance_id="a", port=8443, secure_port=8443, secure_port_enabled=True)])]
    assert find_suspicious(alone, {}) == []


def test_thousands_of_ids_on_one_endpoint_each_name_three_others_and_cost_one_sort():
    # Each instance's reason used to sort every other id sharing its endpoint: 10,000 of them on one
    # address took half a minute, holding the event loop for every view of the status page.
    crowd = [inst(instance_id=f"i{n:05d}") for n in range(10_000)]
    started = time.perf_counter()
    findings = find_suspicious([("ORDERS", crowd)], {})
    assert time.perf_counter() - started < 3.0
    assert len(findings) == 10_000
    assert findings[0].reason == (
        "10.0.0.1:8080 is also registered as ORDERS/i00001, ORDERS/i00002, ORDERS/i00003 and 9996 more"
    )
    assert findings[2].reason == (
        "10.0.0.1:8080 is also registered as ORDERS/i00000, ORDERS/i00001, ORDERS/i00003 and 9996 more"
    )


def test_the_scan_gives_turns_as_it_goes():
    turns = []
    instances = [("A", [inst(instance_id="x"), inst(instance_id="y"), inst(instance_id="z", port=9)])]
    find_suspicious(instances, {}, pause=lambda: turns.append(1))
    assert len(turns) == 4  # after each instance and after the one shared endpoint


def test_a_disabled_port_is_not_an_endpoint():
    instances = [
        ("A", [inst(instance_id="x", port_enabled=False), inst(instance_id="y", port_enabled=False)])
    ]
    assert find_suspicious(instances, {}) == []


def test_port_zero_is_reported_and_never_as_a_duplicate():
    instances = [("A", [inst(instance_id="x", port=0), inst(instance_id="y", port=0)])]
    assert kinds(find_suspicious(instances, {})) == [("x", PORT_ZERO), ("y", PORT_ZERO)]


def test_loopback_names_count_only_when_registered_from_another_host():
    local_ip = inst(app="A", instance_id="ip", ip="127.0.0.1", host="box-1")
    local_name = inst(app="A", instance_id="name", ip="10.0.0.9", host="localhost")
    from_here = inst(app="A", instance_id="here", ip="127.0.0.1", port=9001)
    replicated = inst(app="A", instance_id="peer", ip="127.0.0.1", port=9002)  # no known source
    sources = {("A", "ip"): "10.1.2.3", ("A", "name"): "10.1.2.4", ("A", "here"): "127.0.0.1"}
    findings = find_suspicious([("A", [local_ip, local_name, from_here, replicated])], sources)
    assert kinds(findings) == [("ip", LOOPBACK), ("name", LOOPBACK)]
    assert findings[0].reason.startswith("names 127.0.0.1 but registered from 10.1.2.3")
    assert findings[1].reason.startswith("names localhost but registered from 10.1.2.4")


def test_is_loopback():
    assert all(map(is_loopback, ["127.0.0.1", "127.8.9.1", "::1", "0.0.0.0", "LOCALHOST"]))
    assert not any(map(is_loopback, ["10.0.0.1", "box-1", "", None, "::ffff:10.0.0.1"]))


def test_sources_keep_the_latest_address_and_a_bounded_number():
    sources = RegistrationSources(kept=2)
    sources.record("A", "1", "10.0.0.1")
    sources.record("A", "2", "10.0.0.2")
    sources.record("A", "1", "10.0.0.9")  # again, from elsewhere: now the newest entry
    sources.record("A", "3", "10.0.0.3")  # over the bound: the oldest (A/2) goes
    assert (sources.get("A", "1"), sources.get("A", "2"), sources.get("A", "3")) == (
        "10.0.0.9",
        None,
        "10.0.0.3",
    )


@pytest.mark.django_db  # the instance page reads the audit records
def test_status_page_lists_suspicious_registrations_with_their_reason_and_a_link(web):
    register(web, app="ORDERS", host="10.0.0.1", instance_id="orders-old")
    register(web, app="ORDERS", host="10.0.0.1", instance_id="orders-new")
    register(web, app="PAYMENTS", host="10.0.0.5", port=0)
    # Registered from another host while naming the loopback address.
    web.defaults["REMOTE_ADDR"] = "10.9.9.9"
    register(web, app="LOCAL", host="127.0.0.1", instance_id="local-1")
    web.defaults["REMOTE_ADDR"] = "127.0.0.1"
    register(web, app="LOCAL", host="127.0.0.1", instance_id="local-2", port=9090)  # from this host: fine
    register(web, app="FINE", host="10.0.0.7")

    page = soup(web.get("/"))
    rows = cells(page.find("table", id="findings"))
    reasons = [
        row.find_all("td")[2].get_text() for row in page.find("table", id="findings").tbody.find_all("tr")
    ]
    assert [row[:2] for row in rows] == [
        ["LOCAL", "local-1"],
        ["ORDERS", "orders-new"],
        ["ORDERS", "orders-old"],
        ["PAYMENTS", "10.0.0.5:payments:0"],
    ]
    assert reasons[0] == (
        "loopback: names 127.0.0.1 but registered from 10.9.9.9: clients on other hosts would call themselves"
    )
    assert reasons[1] == "duplicate: 10.0.0.1:8080 is also registered as ORDERS/orders-old"
    assert reasons[3].startswith("port 0: registered with port 0")
    link = page.find("table", id="findings").find("a", string="local-1")
    assert link["href"] == "/instances/LOCAL/local-1/"
    assert web.get(link["href"]).status_code == 200


def test_a_clean_registry_shows_no_section(web):
    register(web, app="ORDERS", host="10.0.0.1")
    page = soup(web.get("/"))
    assert page.find("table", id="findings") is None
    assert page.find(id="suspicious") is None


def test_replicated_registrations_have_no_source(web):
    web.defaults["REMOTE_ADDR"] = "10.9.9.9"
    body = instance_body(app="LOCAL", host="127.0.0.1")
    response = web.post(
        "/eureka/apps/LOCAL",
        body,
        content_type="application/json",
        HTTP_X_NETFLIX_DISCOVERY_REPLICATION="true",
    )
    assert response.status_code == 204
    assert soup(web.get("/")).find("table", id="findings") is None
