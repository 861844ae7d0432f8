"""The status page: Eureka's sections with their labels, values and banner rules, plus search and paging."""

from __future__ import annotations

import re

import pytest
from django.test import Client

from registry.console_data.console import (
    BANNER_BELOW_THRESHOLD_SELF_PRESERVATION_OFF,
    BANNER_EMERGENCY,
    BANNER_SELF_PRESERVATION_OFF,
)
from registry.domain import constants as c
from registry.domain.endpoints import parse_peer_urls
from tests.dashboard.conftest import cells, kv, register, soup
from tests.dashboard.test_console import GENERAL_INFO_ORDER

MIN = 60_000
ALL_BANNERS = (BANNER_EMERGENCY, BANNER_BELOW_THRESHOLD_SELF_PRESERVATION_OFF, BANNER_SELF_PRESERVATION_OFF)


def banners(page) -> list[str]:
    return [p.get_text(strip=True) for p in page.select("p.banner")]


def renew_for_a_minute(node, clock, instance_ids, app="ORDERS", times=2):
    """Renew each instance ``times`` times during the current minute bucket, then step into the next."""
    for _ in range(times):
        for instance_id in instance_ids:
            assert node.registry.renew(app, instance_id, clock()).outcome.value == 200
        clock.advance(1000)
    clock.advance(MIN)


# ---------------------------------------------------------------------------------- layout


def test_sections_come_in_eurekas_order(web):
    page = soup(web.get("/"))
    nav = [a.get_text(strip=True) for a in page.select("nav .nav-links a")]
    assert nav[:2] == ["Home", "Last 1000 since startup"]
    headings = [h.get_text(strip=True) for h in page.find_all("h1")]
    assert headings == [
        "System Status",
        "DS Replicas",
        "Instances currently registered with Eureka",
        "General Info",
        "Instance Info",
    ]
    html = str(page)
    banner = page.select_one("p.banner")
    assert banner is not None, "a fresh node is below its threshold of 0"
    assert html.index("System Status") < html.index(str(banner)) < html.index("DS Replicas")
    assert page.title.get_text() == "Eureka"


def test_system_status_shows_the_familiar_labels_and_values(make_node, clock):
    make_node(options={"identity__environment": "prod", "identity__datacenter": "eu-west"})
    clock.advance(27 * 60 * MIN + 12 * MIN)  # 1 day 03:12
    page = soup(Client().get("/"))
    left = kv(page.select_one("#system-status-left"))
    right = kv(page.select_one("#system-status-right"))
    assert left == {"Environment": "prod", "Data center": "eu-west"}
    assert list(right) == [
        "Current time",
        "Uptime",
        "Lease expiration enabled",
        "Renews threshold",
        "Renews (last min)",
    ]
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d \+0000", right["Current time"])
    assert right["Uptime"] == "1 day 03:12"
    assert right["Lease expiration enabled"] == "false"
    assert right["Renews threshold"] == "0" and right["Renews (last min)"] == "0"


# --------------------------------------------------------------------------------- banners


def test_no_banner_while_renewals_are_above_the_threshold(web, node, clock):
    ids = [register(web, host=f"10.0.0.{n}") for n in (1, 2, 3)]  # expected 3, threshold 5
    renew_for_a_minute(node, clock, ids)  # 6 renewals > 5
    page = soup(web.get("/"))
    assert banners(page) == []
    right = kv(page.select_one("#system-status-right"))
    assert (right["Renews threshold"], right["Renews (last min)"]) == ("5", "6")
    assert right["Lease expiration enabled"] == "true"
    assert "standing by" in page.select_one("#self-preservation summary").get_text()


def test_emergency_banner_when_renewals_are_at_or_below_the_threshold(web, node, clock):
    ids = [register(web, host=f"10.0.0.{n}") for n in (1, 2, 3)]
    renew_for_a_minute(node, clock, ids[:2], times=2)  # 4 renewals <= 5
    page = soup(web.get("/"))
    assert banners(page) == [BANNER_EMERGENCY]
    assert kv(page.select_one("#system-status-right"))["Lease expiration enabled"] == "false"
    panel = page.select_one("#self-preservation")
    assert panel.has_attr("open"), "the explanation opens itself when a banner is shown"
    text = " ".join(panel.get_text(" ", strip=True).split())
    assert "5 = int(3 expected clients × (60 s / 30 s) × 0.85)" in text
    assert "counted 4 renewals in the last full minute, not more than the threshold of 5" in text
    assert "at least 6 per minute" in text


def test_below_threshold_with_self_preservation_off_has_its_own_banner(make_node, clock):
    make_node(enable_self_preservation=False)
    web = Client()
    register(web)
    page = soup(web.get("/"))
    assert banners(page) == [BANNER_BELOW_THRESHOLD_SELF_PRESERVATION_OFF]
    assert kv(page.select_one("#system-status-right"))["Lease expiration enabled"] == "true"
    assert "turned off" in page.select_one("#self-preservation summary").get_text()


def test_self_preservation_off_banner_when_renewals_are_fine(make_node, clock):
    node = make_node(enable_self_preservation=False)
    web = Client()
    instance_id = register(web)
    renew_for_a_minute(node, clock, [instance_id])
    assert banners(soup(web.get("/"))) == [BANNER_SELF_PRESERVATION_OFF]


def test_no_banner_during_the_startup_wait_then_the_emergency_one(make_node, clock):
    make_node(wait_time_in_ms_when_sync_empty=5 * MIN)
    web = Client()
    page = soup(web.get("/"))
    assert banners(page) == []
    assert "start-up wait" in page.select_one("#self-preservation summary").get_text()
    assert kv(page.select_one("#instance-info"))["status"] == c.STARTING
    clock.advance(5 * MIN + 1)
    page = soup(web.get("/"))
    assert banners(page) == [BANNER_EMERGENCY]
    assert kv(page.select_one("#instance-info"))["status"] == c.UP


def test_exactly_one_banner_sentence_is_ever_shown(web):
    text = soup(web.get("/")).get_text()
    assert sum(text.count(sentence) for sentence in ALL_BANNERS) == 1


def test_the_panel_explains_a_threshold_of_zero(web):
    text = soup(web.get("/")).select_one("#self-preservation").get_text(" ", strip=True)
    assert "No client is expected yet (threshold 0)" in " ".join(text.split())


def test_the_panel_shows_when_the_next_recount_happens(web, node, clock):
    interval = node.registry.config.renewal_threshold_update_interval_ms
    clock.advance(60_000)
    row = kv(soup(web.get("/")).select_one("#self-preservation table"))["Next recount of expected clients"]
    assert f"in {(interval - 60_000) // 60_000} min 0 s" in row


# ------------------------------------------------------------------------------- replicas


def test_standalone_node_lists_no_replicas(web):
    page = soup(web.get("/"))
    assert "this node runs standalone" in page.select_one("#replicas").get_text()
    info = kv(page.select_one("#general-info"))
    assert info["registered-replicas"] == info["available-replicas"] == info["unavailable-replicas"] == ""


def test_replicas_show_health_from_replication_results_without_credentials(make_node, clock):
    node = make_node(
        options={
            "cluster__peers": tuple(
                parse_peer_urls(["http://admin:s3cret@peer2:8762/eureka/", "http://peer3:8763/eureka/"])
            )
        }
    )
    node.peers.record_success("http://peer2:8762/eureka/", clock() - 5_000)
    node.peers.set_queued("http://peer2:8762/eureka/", 3, lag_ms=1200)
    node.peers.record_failure("http://peer3:8763/eureka/", clock() - 2_000, "connection refused")
    response = Client().get("/")
    assert b"s3cret" not in response.content and b"admin:" not in response.content
    page = soup(response)
    rows = page.select("#replicas li")
    assert [row.a.get_text() for row in rows] == ["peer2", "peer3"]
    assert [row.a["href"] for row in rows] == ["http://peer2:8762/eureka/", "http://peer3:8763/eureka/"]
    peer2, peer3 = (" ".join(row.get_text(" ", strip=True).split()) for row in rows)
    assert "available" in peer2 and "last success: 5 s ago" in peer2
    assert "queued events: 3 (oldest waiting 1200 ms)" in peer2
    assert "unavailable" in peer3 and "last error 2 s ago: connection refused" in peer3
    assert "last success: never" in peer3
    info = kv(page.select_one("#general-info"))
    assert info["registered-replicas"] == "http://peer2:8762/eureka/, http://peer3:8763/eureka/"
    assert info["available-replicas"] == "http://peer2:8762/eureka/,"
    assert info["unavailable-replicas"] == "http://peer3:8763/eureka/,"


# ------------------------------------------------------------------------------ instances


def instance_rows(page) -> list[list[str]]:
    return cells(page.select_one("#instances"))


def test_no_instances_available(web):
    assert instance_rows(soup(web.get("/"))) == [["No instances available"]]


def test_instances_are_grouped_by_app_and_status_in_a_stable_order(web, node):
    register(web, app="ORDERS", host="10.0.0.2", statusPageUrl="http://10.0.0.2:8080/info")
    register(web, app="ORDERS", host="10.0.0.1", status="STARTING", statusPageUrl="ftp://10.0.0.1/x")
    register(web, app="ORDERS", host="10.0.0.3", status="DOWN")
    register(web, app="GATEWAY", host="10.0.0.9", statusPageUrl="https://10.0.0.9/status")
    register(web, app="GATEWAY", host="10.0.0.8")
    assert node.registry.set_status_override("GATEWAY", "10.0.0.8:gateway:8080", c.OUT_OF_SERVICE, node.now())
    page = soup(web.get("/"))
    assert [h.get_text(strip=True) for h in page.select("#instances thead th")] == [
        "Application",
        "AMIs",
        "Availability Zones",
        "Status",
    ]
    rows = instance_rows(page)
    assert rows == [
        [
            "GATEWAY",
            "n/a (2)",
            "(2)",
            "UP (1) - 10.0.0.9:gateway:8080 OUT_OF_SERVICE (1) - 10.0.0.8:gateway:8080",
        ],
        [
            "ORDERS",
            "n/a (3)",
            "(3)",
            "UP (1) - 10.0.0.2:orders:8080 DOWN (1) - 10.0.0.3:orders:8080 "
            "STARTING (1) - 10.0.0.1:orders:8080",
        ],
    ]
    labels = page.select("#instances .status-label")
    assert [(label.b.get_text(), "not-up" in label["class"]) for label in labels] == [
        ("UP", False),
        ("OUT_OF_SERVICE", True),
        ("UP", False),
        ("DOWN", True),
        ("STARTING", True),
    ]
    links = {a.get_text(): a for a in page.select("#instances .instance a[target=_blank]")}
    assert set(links) == {"10.0.0.9:gateway:8080", "10.0.0.2:orders:8080"}, "only http(s) status pages"
    assert links["10.0.0.9:gateway:8080"]["href"] == "https://10.0.0.9/status"
    assert links["10.0.0.2:orders:8080"]["rel"] == ["noopener"]


def test_each_instance_links_to_its_detail_page_and_staff_also_to_the_admin(web, admin_client):
    register(web, host="10.0.0.1")
    page = soup(web.get("/"))
    details = page.select_one("#instances a.details")
    assert details["href"] == "/instances/ORDERS/10.0.0.1%3Aorders%3A8080/"
    assert web.get(details["href"]).status_code == 200
    assert page.select("#instances a.manage") == [], "anonymous readers get no admin links"
    staff_page = soup(admin_client.get("/"))
    manage = staff_page.select_one("#instances a.manage")
    assert manage["href"] == "/admin/registry/instances/ORDERS/10.0.0.1%3Aorders%3A8080/"
    assert admin_client.get(manage["href"]).status_code == 200


def test_amazon_instances_show_their_ami_and_zone(web):
    dc = {
        "@class": "com.netflix.appinfo.AmazonInfo",
        "name": "Amazon",
        "metadata": {"ami-id": "ami-123", "availability-zone": "us-east-1a", "instance-id": "i-1"},
    }
    register(web, host="10.0.0.1", dataCenterInfo=dc)
    register(web, host="10.0.0.2")
    assert instance_rows(soup(web.get("/")))[0][1:3] == ["ami-123 (1), n/a (1)", "(1), us-east-1a (1)"]


@pytest.mark.django_db
def test_html_in_registry_data_is_escaped(web):
    register(web, host="10.0.0.1", metadata={"note": "<script>alert(1)</script>"}, appGroupName="<b>x</b>")
    response = web.get("/instances/ORDERS/10.0.0.1:orders:8080/")
    assert b"<script>alert(1)</script>" not in response.content
    assert b"&lt;script&gt;alert(1)&lt;/script&gt;" in response.content


# ------------------------------------------------------------------------------- filters


@pytest.fixture
def fleet(web, node):
    register(web, app="ORDERS", host="10.0.0.1", metadata={"zone": "a", "version": "2"})
    register(web, app="ORDERS", host="10.0.0.2", status="DOWN", metadata={"zone": "b"})
    register(web, app="PAYMENTS", host="10.0.1.1", metadata={"zone": "a"})
    register(web, app="GATEWAY", host="10.0.2.1", status="STARTING")
    return web


def listed(page) -> list[str]:
    return [a["aria-label"].removeprefix("Details of ") for a in page.select("#instances a.details")]


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        (
            "",
            [
                "10.0.2.1:gateway:8080",
                "10.0.0.1:orders:8080",
                "10.0.0.2:orders:8080",
                "10.0.1.1:payments:8080",
            ],
        ),
        ("app=ord", ["10.0.0.1:orders:8080", "10.0.0.2:orders:8080"]),
        ("instance=10.0.1", ["10.0.1.1:payments:8080"]),
        ("status=DOWN", ["10.0.0.2:orders:8080"]),
        ("metadata=zone%3Da", ["10.0.0.1:orders:8080", "10.0.1.1:payments:8080"]),
        ("metadata=version", ["10.0.0.1:orders:8080"]),
        ("not_up=on", ["10.0.2.1:gateway:8080", "10.0.0.2:orders:8080"]),
        ("app=orders&not_up=on", ["10.0.0.2:orders:8080"]),
        ("app=nothing", []),
    ],
)
def test_filters_narrow_the_table_server_side(fleet, query, expected):
    response = fleet.get(f"/?{query}")
    assert response.status_code == 200
    page = soup(response)
    assert listed(page) == expected
    if not expected:
        assert instance_rows(page) == [["No instances match these filters"]]


def test_filter_form_keeps_what_was_asked(fleet):
    page = soup(fleet.get("/?app=ord&status=DOWN&metadata=zone%3Db&not_up=on"))
    form = page.select_one("#instance-filters")
    assert form.select_one("input[name=app]")["value"] == "ord"
    assert form.select_one("select[name=status] option[selected]")["value"] == "DOWN"
    assert form.select_one("input[name=metadata]")["value"] == "zone=b"
    assert form.select_one("input[name=not_up]").has_attr("checked")
    summary = page.select_one(".table-summary").get_text(" ", strip=True)
    assert "1 of 4 instances match, in 1 application." in " ".join(summary.split())


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ("status=SLEEPING", "Select a valid choice"),
        ("metadata=%3Dx", "Metadata filter needs a key"),
        ("page=abc", "Enter a whole number"),
        ("page=0", "greater than or equal to 1"),
        ("per_page=7", "Select a valid choice"),
    ],
)
def test_bad_filters_are_a_400_with_the_reason(fleet, query, message):
    response = fleet.get(f"/?{query}")
    assert response.status_code == 400
    page = soup(response)
    assert message in page.select_one("#instance-filters .form-error").get_text()
    assert page.select_one("#instances") is None
    assert page.find("h1", string="General Info") is not None, "the rest of the page still renders"


def test_pages_split_a_large_registry(web, node):
    for n in range(60):
        register(web, app=f"APP{n // 20}", host=f"10.0.{n // 20}.{n % 20}")
    first = soup(web.get("/?per_page=50"))
    assert [row[0] for row in instance_rows(first)] == ["APP0", "APP1"]
    pager = first.select_one("nav.pager")
    assert "page 1 / 2" in pager.get_text()
    second_href = pager.find("a", string=re.compile("next"))["href"]
    second = soup(web.get("/" + second_href))
    assert [row[0] for row in instance_rows(second)] == ["APP2"]
    assert "per_page=50" in second_href, "paging keeps the filters"
    assert len(listed(first)) == 40 and len(listed(second)) == 20


def test_an_app_larger_than_a_page_is_split_and_says_so(web):
    for n in range(60):
        register(web, app="BIG", host=f"10.1.0.{n}")
    page = soup(web.get("/?per_page=50&page=2"))
    (row,) = instance_rows(page)
    assert row[0] == "BIG ids 51–60 of 60"
    assert row[3].startswith("UP (60) - ")
    assert len(listed(page)) == 10


# ----------------------------------------------------------------------- info and refresh


def test_general_and_instance_info(make_node, clock):
    make_node(options={"identity__environment": "staging", "identity__instance_ip_address": "198.51.100.7"})
    page = soup(Client().get("/"))
    assert [row[0] for row in cells(page.select_one("#general-info"))] == GENERAL_INFO_ORDER
    info = kv(page.select_one("#general-info"))
    assert info["environment"] == "staging" and info["server-uptime"] == "00:00"
    assert re.fullmatch(r"\d+mb \(\d+%\)", info["current-memory-usage"])
    assert kv(page.select_one("#instance-info")) == {"ipAddr": "198.51.100.7", "status": "UP"}


def test_live_fragment_has_the_changing_sections_only(fleet):
    response = fleet.get("/live?status=DOWN")
    assert response.status_code == 200
    page = soup(response)
    assert [div["data-live"] for div in page.find_all(attrs={"data-live": True})] == [
        "header",
        "charts",
        "instances",
        "info",
    ]
    assert page.find("nav") is None and page.find("form") is None
    assert listed(page) == ["10.0.0.2:orders:8080"]
    assert fleet.get("/live?status=NOPE").status_code == 400


def test_page_asks_for_auto_refresh_of_the_same_query(fleet, settings):
    settings.EUREKA = settings.EUREKA.with_changes(dashboard__refresh_seconds=7)
    box = soup(fleet.get("/?app=ord")).select_one("#auto-refresh")
    assert box["data-refresh"] == "7" and box["data-live-url"] == "/live?app=ord"
    settings.EUREKA = settings.EUREKA.with_changes(dashboard__refresh_seconds=0)
    assert soup(fleet.get("/")).select_one("#auto-refresh") is None


def test_console_pages_refuse_writes(web):
    assert web.post("/").status_code == 405
    assert web.delete("/lastn").status_code == 405


def test_page_is_usable_on_a_phone(web):
    page = soup(web.get("/"))
    assert page.select_one("meta[name=viewport]")["content"] == "width=device-width, initial-scale=1"
    assert page.select_one("#instances").find_parent(class_="table-scroll") is not None
