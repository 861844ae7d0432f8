"""Where the console lives: its configurable path, behind a path-prefixing proxy, and its static files."""

from __future__ import annotations

import importlib

import pytest
from django.test import Client
from django.urls import clear_url_caches

from eureka_site import urls as site_urls
from registry.config.site import dashboard_prefix
from registry.domain.config import BadSetting
from registry.wire.handlers import RoutingApplication
from tests.dashboard.conftest import soup
from tests.deploy.test_wsgi_routing import call


def local_urls(page) -> list[str]:
    found = [tag.get("href") for tag in page.find_all(["a", "link"]) if tag.get("href")]
    found += [tag["src"] for tag in page.find_all(["script", "img"]) if tag.get("src")]
    found += [tag["data-live-url"] for tag in page.find_all(attrs={"data-live-url": True})]
    return [url for url in found if url.startswith("/")]


def test_console_links_and_assets_carry_a_trusted_proxy_prefix(node, settings, db):
    settings.EUREKA = settings.EUREKA.with_changes(dashboard__refresh_seconds=5)
    app = RoutingApplication(trust_forwarded_prefix=True)
    status, _, content = call(app, "GET", "/", HTTP_X_FORWARDED_PREFIX="/registry")
    assert status == 200
    urls = local_urls(soup_of(content))
    assert urls and all(url.startswith("/registry/") for url in urls), urls
    assert "/registry/static/dashboard/console.css" in urls
    assert "/registry/lastn" in urls and "/registry/live" in urls
    # The prefix belongs to that request only: the next one, without a proxy, has none.
    status, _, content = call(app, "GET", "/")
    assert "/static/dashboard/console.css" in local_urls(soup_of(content))
    assert not any(url.startswith("/registry/") for url in local_urls(soup_of(content)))


def test_assets_are_found_under_the_prefixed_urls_the_page_gives(node, db):
    app = RoutingApplication(trust_forwarded_prefix=True)
    # The proxy strips /registry before passing the request on, and says so in the header.
    status, headers, content = call(
        app, "GET", "/static/dashboard/console.css", HTTP_X_FORWARDED_PREFIX="/registry"
    )
    assert status == 200 and headers["Content-Type"].startswith("text/css")
    assert b".navbar" in content


def test_lastn_and_instance_pages_also_carry_the_prefix(node, db):
    app = RoutingApplication(trust_forwarded_prefix=True)
    for path in ("/lastn", "/instances/ORDERS/x/"):
        _, _, content = call(app, "GET", path, HTTP_X_FORWARDED_PREFIX="/registry")
        urls = local_urls(soup_of(content))
        assert urls and all(url.startswith("/registry/") for url in urls), (path, urls)


def soup_of(content: bytes):
    class Response:
        pass

    response = Response()
    response.content = content
    return soup(response)


def test_static_files_are_served_in_production_too(node, settings):
    settings.DEBUG = False
    client = Client()
    for path, kind in (
        ("/static/dashboard/console.css", "text/css"),
        ("/static/dashboard/console.js", "text/javascript"),
        ("/static/dashboard/eureka.svg", "image/svg+xml"),
        ("/static/admin/css/base.css", "text/css"),
    ):
        response = client.get(path)
        assert response.status_code == 200, path
        assert response["Content-Type"].startswith(kind), (path, response["Content-Type"])
        assert "max-age" in response["Cache-Control"]
    assert client.get("/static/dashboard/nope.css").status_code == 404


@pytest.mark.parametrize(
    ("path", "prefix"),
    [
        ("/", ""),
        ("", ""),
        ("/console", "console/"),
        ("console/", "console/"),
        ("/ops/eureka-ui/", "ops/eureka-ui/"),
    ],
)
def test_dashboard_path_setting_becomes_a_url_prefix(path, prefix):
    assert dashboard_prefix(path) == prefix


@pytest.mark.parametrize(
    "path", ["/eureka", "/admin/console", "/static", "/healthz", "/my console", "/a//b", "/?x"]
)
def test_dashboard_path_may_not_take_reserved_or_odd_paths(path):
    with pytest.raises(BadSetting, match="EUREKA_DASHBOARD_PATH"):
        dashboard_prefix(path)


@pytest.fixture
def rebuild_urls(settings):
    """Rebuild the root URLconf under the test's settings, and restore it afterwards."""

    def rebuild():
        importlib.reload(site_urls)
        clear_url_caches()

    before = settings.EUREKA
    yield rebuild
    settings.EUREKA = before
    rebuild()


def test_dashboard_can_move_to_another_path(node, settings, rebuild_urls):
    settings.EUREKA = settings.EUREKA.with_changes(dashboard__path="/console")
    rebuild_urls()
    client = Client()
    assert client.get("/").status_code == 404
    page = soup(client.get("/console/"))
    assert page.find("h1", string="System Status") is not None
    assert "/console/lastn" in local_urls(page)
    assert client.get("/console/lastn").status_code == 200
    assert client.get("/eureka/apps").status_code == 200


@pytest.mark.django_db
def test_dashboard_can_be_turned_off_while_the_admin_stays(node, settings, rebuild_urls, admin_client):
    settings.EUREKA = settings.EUREKA.with_changes(dashboard__enabled=False)
    rebuild_urls()
    response = Client().get("/")
    assert response.status_code == 404 and b"Not found" in response.content
    assert Client().get("/lastn").status_code == 404
    assert admin_client.get("/admin/registry/instances/").status_code == 200
    admin_page = soup(admin_client.get("/admin/"))
    assert admin_page.find("a", string="View site") is None, "no console to link to"
