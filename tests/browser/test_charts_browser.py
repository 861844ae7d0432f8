"""The console's last-hour charts in a real browser (Debian's headless Chromium through Playwright).

1. A node that lived through a scripted hour on the fake clock (tests/dashboard/scripted_hour.py:
   evictions, a mass expiry that brings self-preservation, a recovery, an instance DOWN for five
   minutes), served by Django's live server thread from the test's own process: the charts' points,
   the shaded stretch, the eviction markers, an instance's timeline.
2. A two-node cluster of real gunicorn nodes sampling every half second: the peer is stopped while
   writes queue up for it, then started again; the peer chart shows the queue grow and drain.

Screenshots go to var/screenshots/browser/ (charts-*.png) for a person to look at.
"""

from __future__ import annotations

import time

import httpx
import pytest

from tests.browser.conftest import SCREENSHOTS, launched
from tests.dashboard.scripted_hour import live_through_an_hour
from tests.factories import instance_body
from tests.interop.conftest import running_server, wait_until
from tests.ports import free_port

pytestmark = pytest.mark.browser

playwright_api = pytest.importorskip(
    "playwright.sync_api", reason="playwright is a dev dependency: make install"
)


@pytest.fixture
def browser_on_live_server(transactional_db, live_server, chromium):
    """Chromium started after the test database and Django's live server: Playwright's synchronous API
    runs an event loop in this thread, and Django refuses database set-up inside one."""
    with launched(chromium) as browser:
        yield browser


def open_page(browser, url: str):
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.goto(url)
    return page, errors


def chart_shot(page, key: str, name: str) -> None:
    page.locator(f'figure[data-chart="{key}"]').screenshot(path=str(SCREENSHOTS / name))


def test_the_charts_of_a_scripted_hour(node, clock, live_server, browser_on_live_server):
    hour = live_through_an_hour(node, clock)
    expect = playwright_api.expect
    page, errors = open_page(browser_on_live_server, live_server.url + "/")

    renews = page.locator('figure[data-chart="renews"]')
    expect(renews).to_be_visible()
    expect(renews.locator('path[data-series="renews"]')).to_have_attribute("data-points", "360")
    expect(renews.locator('path[data-series="threshold"]')).to_have_attribute("data-points", "360")
    # The stretch self-preservation held eviction: renews fell at minute 20 and came back at 35.
    held = [
        (int(band.get_attribute("data-from")), int(band.get_attribute("data-to")))
        for band in renews.locator('rect[data-band="holding"]').all()
    ]
    assert any(hour.at(20) < begin <= hour.at(22) and hour.at(35) < end <= hour.at(37) for begin, end in held)
    # Drawn where it should be: the band's box spans about a quarter of the plot's width.
    band = renews.locator('rect[data-band="holding"]').last.bounding_box()
    plot = renews.locator("svg").first.bounding_box()
    assert 0.2 < band["width"] / plot["width"] < 0.3
    markers = renews.locator('[data-marker="eviction"]')
    assert sum(int(m.get_attribute("data-count")) for m in markers.all()) == len(hour.evicted) == 2
    # Hovering a band names the stretch (its SVG title).
    assert "held eviction" in renews.locator('rect[data-band="holding"] title').last.text_content()

    statuses = page.locator('figure[data-chart="statuses"]')
    expect(statuses.locator('path[data-series="UP"]')).to_have_count(1)
    expect(statuses.locator('path[data-series="DOWN"]')).to_have_count(1)
    expect(statuses.locator(".legend")).to_contain_text("DOWN")
    # The numbers behind the chart, for readers without the picture.
    statuses.locator("summary").click()
    expect(statuses.locator("table tbody tr").first).to_be_visible()
    expect(page.locator('figure[data-chart="writes"]')).to_be_visible()
    page.screenshot(path=str(SCREENSHOTS / "charts-01-status-page.png"), full_page=False)
    chart_shot(page, "renews", "charts-02-renews.png")
    chart_shot(page, "statuses", "charts-03-statuses.png")

    # An instance's timeline: ORDERS 3 went silent from minute 20 to 35 (a renewal gap); ORDERS 5 was
    # DOWN from minute 45 to 50.
    page.goto(f"{live_server.url}/instances/ORDERS/{hour.ids['orders-3']}/")
    gap = page.locator('figure[data-chart="instance"] [data-band="renew-gap"]')
    expect(gap).to_have_count(1)
    assert hour.at(19) < int(gap.get_attribute("data-from")) <= hour.at(20)
    chart_shot(page, "instance", "charts-04-instance-gap.png")
    page.goto(f"{live_server.url}/instances/ORDERS/{hour.ids['orders-5']}/")
    segments = page.locator('figure[data-chart="instance"] [data-segment]')
    assert [s.get_attribute("data-segment") for s in segments.all()] == ["UP", "DOWN", "UP"]
    chart_shot(page, "instance", "charts-05-instance-down.png")
    assert errors == []


def queued_for(node_url: str) -> list[int]:
    peers = httpx.get(f"{node_url}/readyz", timeout=5).json()["replication"]["peers"]
    return [peer["queued"] for peer in peers]


def register(node_url: str, app: str, port: int) -> None:
    body = instance_body(app=app, host="127.0.0.1", port=port)
    response = httpx.post(f"{node_url}/eureka/apps/{app}", json=body, timeout=5)
    assert response.status_code == 204, response.text


def test_the_peer_chart_of_a_two_node_cluster(tmp_path, browser):
    port_a, port_b = free_port(), free_port()
    common = {
        "EUREKA_DASHBOARD_HISTORY_INTERVAL_MS": "500",
        "EUREKA_ENABLE_SELF_PRESERVATION": "false",
        "GUNICORN_CMD_ARGS": "--graceful-timeout 2",
    }
    env_a = {**common, "EUREKA_PEER_URLS": f"http://127.0.0.1:{port_b}/eureka/"}
    env_b = {**common, "EUREKA_PEER_URLS": f"http://127.0.0.1:{port_a}/eureka/"}
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    with running_server(tmp_path / "a", env_a, port=port_a) as node_a:
        peer = running_server(tmp_path / "b", env_b, port=port_b)
        peer.__enter__()
        try:
            register(node_a.base_url, "BEFORE", 9000)
            wait_until(lambda: queued_for(node_a.base_url) == [0], 20, "A never sent B its first write")
        finally:
            peer.__exit__(None, None, None)
        # B is down: A's writes for it queue up.
        for n in range(30):
            register(node_a.base_url, f"WHILE-DOWN-{n}", 9100 + n)
        wait_until(lambda: queued_for(node_a.base_url)[0] > 0, 10, "nothing queued for the stopped peer")
        with running_server(tmp_path / "b", env_b, port=port_b):
            wait_until(lambda: queued_for(node_a.base_url) == [0], 60, "the queue for B never drained")
            # A few samples (every 0.5 s) after the drain, so the chart ends at 0.
            time.sleep(1.5)
            page, errors = open_page(browser, node_a.base_url + "/")
            queue = page.locator('figure[data-chart="peer-queue"]')
            playwright_api.expect(queue).to_be_visible()
            line = queue.locator("path[data-series]")
            playwright_api.expect(line).to_have_count(1)
            assert f"127.0.0.1:{port_b}" in line.get_attribute("data-series")
            queue.locator("summary").click()
            values = [
                int(cell) for cell in queue.locator("tbody tr td:nth-child(2)").all_text_contents() if cell
            ]
            assert max(values) > 0 and values[-1] == 0, values
            playwright_api.expect(page.locator('figure[data-chart="peer-lag"]')).to_be_visible()
            chart_shot(page, "peer-queue", "charts-06-peer-queue.png")
            chart_shot(page, "peer-lag", "charts-07-peer-lag.png")
            assert errors == []
