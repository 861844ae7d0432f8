"""Console pages shared by their viewers and rendered one at a time (dashboard/shared_pages.py), and
the console's views through it."""

from __future__ import annotations

import logging
import threading

import pytest

from dashboard.shared_pages import Busy, Page, SharedPages
from registry.domain.refusals import RefusalLines
from tests.conftest import FakeClock
from tests.dashboard.conftest import register, soup
from tests.protocol.test_metrics import scrape, value


class Renders:
    """A page renderer that counts its renders and numbers its pages."""

    def __init__(self, size: int = 10):
        self.count = 0
        self.size = size

    def __call__(self) -> Page:
        self.count += 1
        return Page(200, str(self.count).encode().ljust(self.size), "text/html")


def pages(clock, share_ms=2_000, wait_s=0.0, **kwargs) -> SharedPages:
    return SharedPages(share_ms, clock, wait_s=lambda: wait_s, **kwargs)


def test_viewers_of_one_page_share_its_render_until_it_is_share_ms_old():
    clock, render = FakeClock(), Renders()
    shared = pages(clock)

    first = shared.get("/", render)
    clock.advance(1_999)
    assert shared.get("/", render) is first
    clock.advance(1)
    again = shared.get("/", render)

    assert render.count == 2 and again.content.startswith(b"2")
    assert again.rendered_at == clock()
    assert (shared.rendered, shared.shared) == (2, 1)


def test_each_page_is_rendered_for_itself_and_zero_shares_nothing():
    clock, render = FakeClock(), Renders()
    shared = pages(clock)
    shared.get("/", render)
    shared.get("/?page=2", render)
    assert render.count == 2

    unshared = pages(clock, share_ms=0)
    unshared.get("/", render)
    unshared.get("/", render)
    assert render.count == 4


def test_while_a_page_is_rendered_another_gets_its_last_copy_however_old():
    clock, render = FakeClock(), Renders()
    shared = pages(clock)
    old = shared.get("/lastn", render)
    clock.advance(60_000)
    seen = {}

    def render_home() -> Page:
        # Another view arrives while this one renders (on gevent: during one of its pauses).
        seen["lastn"] = shared.get("/lastn", render)
        return render()

    shared.get("/", render_home)

    assert seen["lastn"] is old
    assert shared.stale == 1


def test_while_a_page_is_rendered_one_without_a_copy_is_refused_when_it_may_not_wait(caplog):
    clock, render = FakeClock(), Renders()
    shared = pages(clock)
    refused = []

    def render_home() -> Page:
        with pytest.raises(Busy):
            shared.get("/instances/ORDERS/a/", render)
        refused.append(True)
        return render()

    with caplog.at_level(logging.WARNING, logger="dashboard.shared_pages"):
        shared.get("/", render_home)

    assert refused and shared.refused == 1 and render.count == 1
    # The turn was given back: the refused page renders now.
    shared.get("/instances/ORDERS/a/", render)
    assert render.count == 2


def test_refusals_are_logged_at_most_once_an_interval_with_their_count(caplog):
    clock, render, now = FakeClock(), Renders(), [0.0]
    shared = pages(clock, refusal_lines=RefusalLines(60, clock=lambda: now[0]))

    def refuse(times: int) -> None:
        def render_home() -> Page:
            for _ in range(times):
                with pytest.raises(Busy):
                    shared.get("/other", render)
            return render()

        clock.advance(5_000)  # "/" is rendered again each time
        shared.get("/", render_home)

    with caplog.at_level(logging.WARNING, logger="dashboard.shared_pages"):
        refuse(3)
        now[0] = 59.0
        refuse(4)
        now[0] = 60.0
        refuse(1)

    lines = [record.getMessage() for record in caplog.records]
    line = "console page refused with 503: no turn to render it, another page was being rendered"
    assert lines == [line, line + " (6 more since the last such line)"]
    assert [record.refusals for record in caplog.records] == [1, 7]
    assert shared.refused == 8


def test_a_view_that_may_wait_waits_for_the_render_under_way_and_shares_it():
    clock = FakeClock()
    shared = pages(clock, wait_s=10.0)
    rendering, finish = threading.Event(), threading.Event()
    renders = []

    def slow() -> Page:
        renders.append("slow")
        rendering.set()
        assert finish.wait(10)
        return Page(200, b"first", "text/html")

    answers = {}
    first = threading.Thread(target=lambda: answers.setdefault("first", shared.get("/", slow)))
    first.start()
    assert rendering.wait(10)
    second = threading.Thread(
        target=lambda: answers.setdefault("second", shared.get("/", lambda: Page(200, b"own", "text/html")))
    )
    second.start()
    finish.set()
    first.join(10)
    second.join(10)

    assert answers["first"] is answers["second"]
    assert renders == ["slow"]


def test_where_views_may_wait_they_take_turns_each_giving_way_first():
    # Under gevent a shared copy too waits for its turn, after what was ready to run (heartbeats).
    clock = FakeClock()
    ways = []
    shared = SharedPages(2_000, clock, wait_s=lambda: 10.0, give_way=lambda: ways.append(1))
    cached = shared.get("/cached", Renders())
    rendering, finish = threading.Event(), threading.Event()

    def slow() -> Page:
        rendering.set()
        assert finish.wait(10)
        return Page(200, b"slow", "text/html")

    answers = {}
    first = threading.Thread(target=lambda: answers.setdefault("slow", shared.get("/slow", slow)))
    first.start()
    assert rendering.wait(10)
    second = threading.Thread(target=lambda: answers.setdefault("cached", shared.get("/cached", Renders())))
    second.start()
    second.join(0.2)
    assert second.is_alive(), "the copy was served while another view had the turn"
    finish.set()
    first.join(10)
    second.join(10)

    assert answers["cached"] is cached
    assert len(ways) == 3


def test_a_view_that_waits_past_its_wait_is_refused():
    clock = FakeClock()
    shared = pages(clock, wait_s=0.05)

    def render_home() -> Page:
        with pytest.raises(Busy):
            shared.get("/other", Renders())
        return Page(200, b"home", "text/html")

    shared.get("/", render_home)
    assert shared.refused == 1


def test_a_render_that_fails_gives_its_turn_back():
    clock, render = FakeClock(), Renders()
    shared = pages(clock)

    def broken() -> Page:
        raise RuntimeError("template error")

    with pytest.raises(RuntimeError):
        shared.get("/", broken)
    assert shared.get("/", render).content.startswith(b"1")


def test_the_copies_kept_are_bounded_in_bytes_oldest_render_first():
    clock, render = FakeClock(), Renders(size=400)
    shared = pages(clock, max_bytes=1_000)
    for path in ("/a", "/b", "/c"):
        shared.get(path, render)
    assert shared.kept_bytes == 800  # "/a" went to make room for "/c"
    assert shared.get("/b", render).content.startswith(b"2")
    assert shared.get("/a", render).content.startswith(b"4")

    huge = pages(clock, max_bytes=100)
    huge.get("/", render)
    assert huge.kept_bytes == 0


# ------------------------------------------------------------------------------ the views


def test_the_status_page_is_shared_for_the_cache_time_then_rendered_anew(make_node, clock, web):
    node = make_node(options={"dashboard__cache_ms": 2_000})
    register(web, app="ORDERS", host="10.0.0.1")
    assert "10.0.0.1:orders:8080" in web.get("/").content.decode()

    register(web, app="BILLING", host="10.0.0.2")
    assert "BILLING" not in web.get("/").content.decode()
    clock.advance(2_000)
    assert "10.0.0.2:billing:8080" in web.get("/").content.decode()
    assert node.console_pages.shared == 1


@pytest.mark.django_db
def test_every_console_page_is_shared(make_node, clock, web):
    node = make_node(options={"dashboard__cache_ms": 2_000})
    instance_id = register(web)
    paths = ["/", "/live", "/lastn", f"/instances/ORDERS/{instance_id}/", "/?app=ORD&page=1"]
    first = [web.get(path) for path in paths]
    again = [web.get(path) for path in paths]
    assert [response.status_code for response in first] == [200] * 5
    assert [a.content for a in first] == [b.content for b in again]
    assert (node.console_pages.rendered, node.console_pages.shared) == (5, 5)


@pytest.mark.django_db
def test_staff_and_other_viewers_get_pages_of_their_own(make_node, web, django_user_model):
    make_node(options={"dashboard__cache_ms": 2_000})
    register(web)
    anonymous = soup(web.get("/"))
    staff = django_user_model.objects.create_user("ops", password="pw", is_staff=True)
    web.force_login(staff)
    as_staff = soup(web.get("/"))
    assert [a.get_text() for a in as_staff.select("nav .nav-links a")][-1] == "Admin"
    assert [a.get_text() for a in anonymous.select("nav .nav-links a")][-1] == "Log in"


def test_a_page_asked_for_while_another_renders_is_answered_503_and_not_logged_each_time(
    make_node, web, caplog
):
    node = make_node()
    web.get("/")  # the console's shared pages exist
    pages = node.console_pages
    assert pages._slot.acquire(blocking=False)  # another page is being rendered
    try:
        with caplog.at_level(logging.WARNING):
            answers = [web.get("/lastn") for _ in range(3)]
            shared = web.get("/")  # a copy of its own: served
    finally:
        pages._slot.release()

    assert [answer.status_code for answer in answers] == [503] * 3
    assert answers[0]["Retry-After"] == "1"
    assert b"try again" in answers[0].content
    assert shared.status_code == 200
    assert [record.name for record in caplog.records] == ["dashboard.shared_pages"]


def test_metrics_count_the_views_by_how_they_were_answered(make_node, web):
    node = make_node(options={"dashboard__cache_ms": 2_000})
    web.get("/")
    web.get("/")
    assert node.console_pages._slot.acquire(blocking=False)
    try:
        assert web.get("/lastn").status_code == 503
    finally:
        node.console_pages._slot.release()

    samples = scrape(web)

    assert {
        outcome: value(samples, "eureka_console_views_total", outcome=outcome)
        for outcome in ("rendered", "shared", "stale", "busy")
    } == {"rendered": 1, "shared": 1, "stale": 0, "busy": 1}
