"""The status page's last-hour charts and an instance's timeline, after a scripted hour on the fake
clock (tests/dashboard/scripted_hour.py); the history's job, its sampler and its warm restart."""

from __future__ import annotations

import pytest
from django.test import Client

from registry.domain.history import STATUS_ORDER
from registry.runtime.sampler import take_sample
from tests.dashboard.conftest import soup
from tests.dashboard.scripted_hour import MIN, live_through_an_hour


@pytest.fixture
def hour(node, clock):
    return live_through_an_hour(node, clock)


def test_the_history_holds_the_hour_sampled_every_ten_seconds(node, hour):
    samples = node.history.samples()
    assert len(samples) == 360 == node.history.capacity
    assert [b.at_ms - a.at_ms for a, b in zip(samples, samples[1:], strict=False)] == [10_000] * 359
    assert samples[-1].at_ms == hour.ended_at


def test_renews_chart_shows_the_threshold_the_held_stretch_and_the_evictions(node, hour):
    page = soup(Client().get("/"))
    chart = page.select_one('figure[data-chart="renews"]')
    assert chart is not None
    lines = {path["data-series"]: int(path["data-points"]) for path in chart.select("path[data-series]")}
    # The first sample (minute 0) left the window: the hour's other 360 are drawn.
    assert lines == {"renews": 360, "threshold": 360}
    bands = [
        (int(rect["data-from"]), int(rect["data-to"])) for rect in chart.select('rect[data-band="holding"]')
    ]
    # Self-preservation held from when renews fell (minute 20, counted a minute later) until they came
    # back (minute 35, counted within the next minute).
    held = [(begin, end) for begin, end in bands if begin >= hour.at(20)]
    assert len(held) == 1
    begin, end = held[0]
    assert hour.at(20) < begin <= hour.at(22) and hour.at(35) < end <= hour.at(37)
    assert "held eviction" in chart.select_one('rect[data-band="holding"] title').get_text()
    markers = chart.select('[data-marker="eviction"]')
    assert sum(int(marker["data-count"]) for marker in markers) == len(hour.evicted) == 2
    # Both evictions between minute 11 and minute 13 (90 s leases, and the eviction's compensation).
    legend = chart.select_one(".legend").get_text(" ", strip=True)
    assert "Renews (last min)" in legend and "Renews threshold" in legend and "evictions" in legend
    rows = chart.select("details table tbody tr")
    assert 50 <= len(rows) <= 61


def test_statuses_chart_stacks_up_and_down(node, hour):
    page = soup(Client().get("/"))
    chart = page.select_one('figure[data-chart="statuses"]')
    series = [path["data-series"] for path in chart.select("path[data-series]")]
    assert series == ["UP", "DOWN"]
    assert [cell.get_text() for cell in chart.select("thead th")] == ["Time", *STATUS_ORDER]
    # ORDERS 5 was DOWN from minute 45 to minute 50.
    down = [int(row.select("td")[4].get_text()) for row in chart.select("tbody tr")]
    assert max(down) == 1 and down[-1] == 0


def test_writes_chart_and_no_peer_or_region_charts_on_a_standalone_node(hour):
    page = soup(Client().get("/"))
    assert [f["data-chart"] for f in page.select("figure[data-chart]")] == ["renews", "statuses", "writes"]
    writes = page.select_one('figure[data-chart="writes"]')
    assert {p["data-series"] for p in writes.select("path[data-series]")} == {
        "registrations",
        "cancels",
        "evictions",
    }


def test_the_charts_come_with_the_live_fragment(hour):
    fragment = soup(Client().get("/live"))
    assert fragment.select_one('[data-live="charts"] figure[data-chart="renews"]') is not None


@pytest.mark.django_db
def test_an_instances_page_shows_its_status_changes_and_renewal_gaps(node, hour):
    orders_5 = soup(Client().get(f"/instances/ORDERS/{hour.ids['orders-5']}/"))
    timeline = orders_5.select_one('figure[data-chart="instance"]')
    segments = [
        (g["data-segment"], int(g["data-from"]), int(g["data-to"])) for g in timeline.select("[data-segment]")
    ]
    assert [status for status, *_ in segments] == ["UP", "DOWN", "UP"]
    assert segments[1][1:] == (hour.at(45), hour.at(50))
    assert timeline.select('[data-band="renew-gap"]') == []

    orders_3 = soup(Client().get(f"/instances/ORDERS/{hour.ids['orders-3']}/"))
    gaps = orders_3.select('figure[data-chart="instance"] [data-band="renew-gap"]')
    assert len(gaps) == 1
    begin, end = int(gaps[0]["data-from"]), int(gaps[0]["data-to"])
    assert hour.at(19) < begin <= hour.at(20) and hour.at(35) <= end < hour.at(36)
    assert "No renewal for" in gaps[0].select_one("title").get_text()


@pytest.mark.django_db
def test_an_instance_that_stopped_renewing_shows_an_open_gap(node, hour, clock):
    name = "orders-6"
    now = clock.advance(2 * MIN)  # two minutes with no renewal from anyone
    page = soup(Client().get(f"/instances/ORDERS/{hour.ids[name]}/"))
    gaps = page.select('figure[data-chart="instance"] [data-band="renew-gap"]')
    assert len(gaps) == 1 and int(gaps[0]["data-to"]) == now


def test_no_charts_when_the_history_is_off(make_node, clock):
    node = make_node(options={"dashboard__history_interval_ms": 0})
    assert node.history is None and node.status_trail is None
    assert "sample_history" not in node.jobs
    page = soup(Client().get("/"))
    assert page.select("figure[data-chart]") == []


def test_an_empty_history_draws_empty_charts(node):
    page = soup(Client().get("/"))
    assert "No samples yet" in page.select_one('figure[data-chart="renews"]').get_text()


def test_charts_are_behind_the_consoles_sign_in(node, settings):
    settings.EUREKA = settings.EUREKA.with_changes(dashboard__login_required=True)
    assert Client().get("/").status_code == 302
    assert Client().get("/live").status_code == 302


def test_a_sample_reads_the_nodes_numbers(node, clock, hour):
    sample = take_sample(node, clock())
    stats = node.registry.reads.stats(clock())
    assert sample.renews_last_minute == stats["renews_last_minute"]
    assert sample.instances == stats["instances"] == 18
    assert (sample.registrations, sample.evictions) == (22, 2)
    assert sample.peers == () and sample.regions == ()
