"""The console in a real browser: Debian's headless Chromium driven by Playwright against a live node
whose instances come from unmodified py-eureka-client processes.

Screenshots are written to var/screenshots/browser/ (see SCREENSHOTS) for a person to look at.
"""

from __future__ import annotations

import re
import time

import httpx
import pytest

from tests.browser.conftest import ADMIN_USER, SCREENSHOTS
from tests.factories import instance_body
from tests.interop.conftest import wait_until

pytestmark = pytest.mark.browser

playwright_api = pytest.importorskip(
    "playwright.sync_api", reason="playwright is a dev dependency: make install"
)


def shot(page, name: str) -> None:
    page.screenshot(path=str(SCREENSHOTS / name), full_page=True)


def test_console_filter_detail_and_take_out_of_service_through_the_admin(console, clients, browser):
    expect = playwright_api.expect
    billing = clients["billing"]
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))

    # 1. The console lists what the real clients registered.
    page.goto(console.url + "/")
    table = page.locator("#instances")
    expect(table).to_contain_text("SHOP-WEB")
    expect(table).to_contain_text("BILLING")
    expect(table.locator("tr", has_text="SHOP-WEB")).to_contain_text("UP (2)")
    expect(page.locator("h1").first).to_have_text("System Status")
    shot(page, "01-console.png")

    # 2. Filter by application (server-side, through the form).
    page.fill("input[name=app]", "billing")
    page.click("#instance-filters button[type=submit]")
    expect(page).to_have_url(re.compile(r"\?.*app=billing"))
    expect(table.locator("tbody tr")).to_have_count(1)
    expect(table).to_contain_text(billing)
    expect(table).not_to_contain_text("SHOP-WEB")
    shot(page, "02-filtered.png")

    # 3. Open the instance.
    page.click(f'#instances a.details[aria-label="Details of {billing}"]')
    expect(page.locator("h1")).to_have_text(billing)
    expect(page.locator("#instance-status")).to_have_text("UP")
    expect(page.locator("#fields")).to_contain_text("statusPageUrl")
    expect(page.locator("#instance-events")).to_contain_text("register")
    expect(page.locator("#manage-instance")).to_have_count(0)
    shot(page, "03-instance.png")

    # 4. Log in as staff (the console's own link), land back on the instance, go to the admin actions.
    page.click("nav >> text=Log in")
    page.fill("#id_username", ADMIN_USER)
    page.fill("#id_password", console.password)
    page.click("input[type=submit]")
    expect(page.locator("h1")).to_have_text(billing)
    page.click("#manage-instance")
    expect(page.locator(".instance-summary")).to_contain_text("UP")
    shot(page, "04-admin-instance.png")
    page.fill("#id_reason", "billing batch job paused for the database migration")
    page.click("button[value=take_out_of_service]")
    expect(page.locator("ul.messagelist")).to_contain_text(
        "Take out of service: UP → OUT_OF_SERVICE (applied)."
    )
    expect(page.locator("table.records")).to_contain_text("billing batch job paused")
    shot(page, "05-admin-done.png")

    # 5. The console and GET /eureka/apps show the new status (the cache syncs every second).
    page.goto(console.url + "/")
    row = page.locator("#instances tr", has_text="BILLING")
    expect(row.locator(".status-label.not-up")).to_contain_text("OUT_OF_SERVICE (1)", timeout=10_000)
    expect(page.locator("#instances a.manage").first).to_be_visible()
    shot(page, "06-console-out-of-service.png")
    wait_until(
        lambda: console.statuses().get(billing) == "OUT_OF_SERVICE",
        10,
        lambda: f"GET /eureka/apps: {console.statuses()}",
    )
    # The override holds across the client's own heartbeats (it keeps saying UP).
    since = console.server.mark()
    console.server.wait_for_requests("PUT", f"/eureka/apps/BILLING/{billing}", since=since, timeout=15)
    assert console.statuses()[billing] == "OUT_OF_SERVICE"
    assert console.statuses()[clients["shop-web-1"]] == "UP"

    # 6. The admin change is in "Last 1000 since startup", with who made it.
    page.goto(console.url + "/lastn")
    page.click("a[data-tab=overrides]")
    expect(page.locator("#events-overrides")).to_contain_text(f"BILLING({billing})")
    expect(page.locator("#events-overrides")).to_contain_text(f"by admin:{ADMIN_USER}")
    shot(page, "07-lastn-overrides.png")
    assert errors == [], f"JavaScript errors: {errors}"
    context.close()


def test_auto_refresh_shows_changes_and_backs_off_while_hidden(console, clients, browser):
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    live_requests: list[float] = []
    page.on("request", lambda request: "/live" in request.url and live_requests.append(time.monotonic()))
    page.goto(console.url + "/")
    playwright_api.expect(page.locator("#auto-refresh")).to_have_attribute("data-ready", "true")

    # A registration made after the page loaded appears without a reload.
    body = instance_body(
        app="LATECOMER", host="127.0.0.9", port=18099, statusPageUrl="http://127.0.0.9:18099/"
    )
    assert httpx.post(f"{console.url}/eureka/apps/LATECOMER", json=body, timeout=5).status_code == 204
    playwright_api.expect(page.locator("#instances")).to_contain_text("LATECOMER", timeout=10_000)

    # Visible: about one refresh a second.
    start = time.monotonic()
    page.wait_for_timeout(6000)  # not time.sleep: Playwright delivers events only while it waits
    visible = sum(1 for t in live_requests if t >= start)

    # Hidden: the delay doubles (1 s, 2 s, 4 s ...).
    page.evaluate(
        """() => {
            Object.defineProperty(document, "hidden", {configurable: true, get: () => true});
            document.dispatchEvent(new Event("visibilitychange"));
        }"""
    )
    start = time.monotonic()
    page.wait_for_timeout(6000)  # not time.sleep: Playwright delivers events only while it waits
    hidden = sum(1 for t in live_requests if t >= start)

    # Visible again: one refresh at once.
    before = len(live_requests)
    page.evaluate(
        """() => {
            Object.defineProperty(document, "hidden", {configurable: true, get: () => false});
            document.dispatchEvent(new Event("visibilitychange"));
        }"""
    )
    page.wait_for_timeout(1500)
    assert len(live_requests) > before, "no refresh when the tab became visible again"
    assert visible >= 4, f"only {visible} refreshes in 6 s while visible (every 1 s expected)"
    assert hidden <= 3, f"{hidden} refreshes in 6 s while hidden: no back-off"
    assert hidden < visible
    httpx.delete(f"{console.url}/eureka/apps/LATECOMER/127.0.0.9:latecomer:18099", timeout=5)
    page.close()


def test_console_fits_a_phone_screen(console, clients, browser):
    page = browser.new_page(viewport={"width": 390, "height": 844}, is_mobile=True, has_touch=True)
    page.goto(console.url + "/")
    playwright_api.expect(page.locator("#instances")).to_contain_text("SHOP-WEB")
    overflow = page.evaluate("() => document.documentElement.scrollWidth - window.innerWidth")
    assert overflow <= 0, f"the page is {overflow}px wider than the phone screen"
    menu = page.locator("label.nav-toggle-label")
    playwright_api.expect(menu).to_be_visible()
    playwright_api.expect(page.locator("nav .nav-links")).to_be_hidden()
    menu.click()
    playwright_api.expect(page.locator("nav .nav-links >> text=Last 1000 since startup")).to_be_visible()
    shot(page, "08-phone.png")
    page.close()


def test_pages_work_under_their_content_security_policy(console, clients, browser):
    """Every page the console and the admin serve runs under the policy they send: live updates still
    come, tabs switch, the admin's scripts run, and Chromium reports no violation. A javascript: URL a
    registrant sent is no link."""
    expect = playwright_api.expect
    hostile = "javascript:document.title='pwned'"
    body = instance_body(
        app="HOSTILE", host="127.0.0.8", port=18098, homePageUrl=hostile, statusPageUrl=hostile
    )
    assert httpx.post(f"{console.url}/eureka/apps/HOSTILE", json=body, timeout=5).status_code == 204
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    messages: list[str] = []
    page.on("console", lambda message: messages.append(f"{message.type}: {message.text}"))
    page.on("pageerror", lambda exc: messages.append(f"pageerror: {exc}"))
    policies: dict[str, str] = {}

    def visit(path: str) -> None:
        response = page.goto(console.url + path)
        assert response is not None and response.ok, path
        policies[path] = response.headers.get("content-security-policy", "")

    # The status page refreshes itself (fetch of /live) and shows what changed.
    visit("/")
    expect(page.locator("#auto-refresh")).to_have_attribute("data-ready", "true")
    expect(page.locator("#refresh-state")).to_contain_text("updated", timeout=10_000)
    expect(page.locator("#instances")).to_contain_text("HOSTILE")
    assert page.locator("#instances a[href^='javascript:' i]").count() == 0

    # The instance page shows the URLs as text; following the one link there is does no harm.
    visit("/instances/HOSTILE/127.0.0.8:hostile:18098/")
    expect(page.locator("#fields")).to_contain_text(hostile)
    assert page.locator("a[href^='javascript:' i]").count() == 0
    assert page.title() != "pwned"

    # The tabs of "Last 1000" switch (console.js).
    visit("/lastn")
    page.click("a[data-tab=cancelled]")
    expect(page.locator(".tab-pane[data-pane=cancelled]")).to_have_class(re.compile(r"\bactive\b"))

    # The admin: sign in, the instances' pages, and Django's own forms and scripts.
    visit("/admin/login/")
    page.fill("#id_username", ADMIN_USER)
    page.fill("#id_password", console.password)
    page.click("input[type=submit]")
    expect(page.locator("#site-name")).to_be_visible()
    for path in (
        "/admin/",
        "/admin/registry/instances/",
        "/admin/registry/instances/HOSTILE/127.0.0.8:hostile:18098/",
        "/admin/auth/user/",
        "/admin/auth/user/add/",
    ):
        visit(path)
    expect(page.locator("#id_username")).to_be_visible()
    page.wait_for_timeout(500)  # late console messages (a blocked resource) arrive after load

    assert set(policies) and all("script-src 'self'" in policy for policy in policies.values()), policies
    violations = [text for text in messages if "Content Security Policy" in text or "pageerror" in text]
    assert violations == [], violations
    assert page.title() != "pwned"
    httpx.delete(f"{console.url}/eureka/apps/HOSTILE/127.0.0.8:hostile:18098", timeout=5)
    context.close()
