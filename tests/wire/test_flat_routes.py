"""The flat routes resolve every protocol path exactly as Django's resolver does, or leave it to Django."""

from __future__ import annotations

import pytest
from django.test import RequestFactory
from django.urls import Resolver404, get_resolver, re_path
from hypothesis import given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from registry.wire.codecs import BadInput
from registry.wire.flat_routes import FlatRoutes
from registry.wire.handlers import PROTOCOL_URLCONF
from registry.wire.http import query_values

# eureka_site/reader_wsgi.py needs a Redis to import; its URLconf is this module.
READER_URLCONF = "eureka_site.reader_urls"

FIELDS = (
    "func",
    "args",
    "kwargs",
    "url_name",
    "app_names",
    "namespaces",
    "view_name",
    "route",
    "captured_kwargs",
    "extra_kwargs",
)

PREFIXES = ["/eureka/", "/eureka/v2/", "/eureka/v1/", "/eureka//", "/eureka//v2//"]
TAILS = [
    "apps",
    "apps/",
    "apps/delta",
    "apps/delta/",
    "apps/ORDERS",
    "apps/orders/",
    "apps/ORDERS/host-1:orders:8080",
    "apps/ORDERS/host-1:orders:8080/",
    "apps/ORDERS/i-1/status",
    "apps/ORDERS/i-1/status/",
    "apps/ORDERS/i-1/metadata",
    "apps/delta/i-1",
    "instances/i-1",
    "vips/orders-vip",
    "svips/orders-vip/",
    "asg/orders-asg/status",
    "status",
    "serverinfo/statusoverrides",
    "peerreplication/batch/",
    "apps/ORDERS/i-1/status/extra",
    "apps//ORDERS",
    "v2/apps",
    "",
    "nothing-here",
]


def _resolve_like_django(urlconf, path):
    try:
        return get_resolver(urlconf).resolve(path)
    except Resolver404:
        return None


def _assert_same(urlconf, routes, path):
    expected = _resolve_like_django(urlconf, path)
    flat = routes.resolve(path)
    if expected is None:
        assert flat is None, f"{path!r}: Django answers 404, the flat routes {flat.view_name}"
        return
    if flat is None:
        # Allowed only for routes after the point where flattening stopped.
        assert routes.not_flat, f"{path!r}: Django resolves {expected.view_name}, the flat routes nothing"
        assert expected.url_name not in {route.url_name for route in routes.routes}, path
        return
    for field in FIELDS:
        assert getattr(flat, field) == getattr(expected, field), (path, field)
    # Every attribute Django's match has, derived ones included (the flat match copies them from the
    # route's template); "tried" only Django's resolver fills in.
    assert vars(flat).keys() == vars(expected).keys(), path
    for field in vars(expected).keys() - {"tried"}:
        assert getattr(flat, field) == getattr(expected, field), (path, field)


@pytest.mark.parametrize("urlconf", [PROTOCOL_URLCONF, READER_URLCONF])
def test_every_route_shape_resolves_as_django_does(urlconf):
    routes = FlatRoutes(urlconf)
    if urlconf == PROTOCOL_URLCONF:
        assert routes.not_flat == "" and len(routes.routes) == 13
    else:
        # The reader's five reads are flat; its catch-all forward and path() probes are Django's.
        assert [route.url_name for route in routes.routes] == ["apps", "delta", "app", "vip", "svip"]
        assert "unanchored" in routes.not_flat
    for prefix in PREFIXES:
        for tail in TAILS:
            _assert_same(urlconf, routes, prefix + tail)
    for path in ["/", "/eureka", "/eurekaapps", "/admin/", "/eureka/v3/apps", "/x/eureka/apps"]:
        _assert_same(urlconf, routes, path)


@hypothesis_settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.sampled_from(
            ["eureka", "v2", "v1", "apps", "delta", "status", "metadata", "APP", "i-1", "vips", ""]
        ),
        max_size=6,
    ),
    st.booleans(),
)
def test_random_paths_resolve_as_django_does(segments, trailing):
    path = "/" + "/".join(segments) + ("/" if trailing else "")
    _assert_same(PROTOCOL_URLCONF, FlatRoutes(PROTOCOL_URLCONF), path)


def _view(request, **kwargs):
    return None


class _Unflattenable:
    # An unnamed group: Django passes it positionally, which the flat routes do not reproduce; the
    # route after it must stay Django's too, or it could answer a path the first one takes.
    urlpatterns = [
        re_path(r"^eureka/(apps)/$", _view, name="positional"),
        re_path(r"^eureka/(?P<name>[^/]+)/$", _view, name="named"),
    ]


class _Defaults:
    urlpatterns = [re_path(r"^eureka/apps/(?P<app>[^/]+)/$", _view, {"fmt": "json", "app": "X"}, name="app")]


def test_a_urlconf_it_cannot_reproduce_is_left_to_django():
    routes = FlatRoutes(_Unflattenable)
    assert routes.routes == () and "unnamed" in routes.not_flat
    assert routes.resolve("/eureka/apps/") is None
    assert routes.resolve("/eureka/other/") is None


def test_default_kwargs_override_captured_ones_as_in_django():
    routes = FlatRoutes(_Defaults)
    match = routes.resolve("/eureka/apps/ORDERS/")
    expected = get_resolver(_Defaults).resolve("/eureka/apps/ORDERS/")
    assert match.kwargs == expected.kwargs == {"app": "X", "fmt": "json"}
    assert match.captured_kwargs == expected.captured_kwargs == {"app": "ORDERS"}
    assert match.view_name == expected.view_name == "app"


def test_each_match_has_its_own_mutable_parts():
    routes = FlatRoutes(PROTOCOL_URLCONF)
    first = routes.resolve("/eureka/apps/ORDERS/i-1")
    first.kwargs["app"] = "changed"
    first.extra_kwargs["x"] = 1
    first.namespaces.append("changed")
    second = routes.resolve("/eureka/apps/ORDERS/i-1")
    assert second.kwargs == {"app": "ORDERS", "instance_id": "i-1"}
    assert second.extra_kwargs == {} and second.namespaces == ["eureka"]


@pytest.mark.parametrize(
    "query",
    [
        "",
        "status=UP&lastDirtyTimestamp=1700000000000",
        "value=OUT_OF_SERVICE&value=UP",
        "a=&b",
        "name=caf%C3%A9&x=%ZZ",
        "plus=a+b&semi=1;2",
        "raw=caf\u00c3\u00a9",  # UTF-8 bytes as WSGI hands them over (latin-1 text)
        "bad=\u00e9",  # a lone latin-1 byte that is not UTF-8
    ],
)
def test_query_values_read_as_django_get_reads_them(query):
    request = RequestFactory().put("/eureka/apps/A/i")
    request.META["QUERY_STRING"] = query
    values = query_values(request)
    assert values == {key: request.GET.get(key) for key in request.GET}


@hypothesis_settings(max_examples=400, deadline=None)
@given(st.text(alphabet="ab=&%+;2C\u00e9\u00c3\u00a9", max_size=24))
def test_any_query_string_reads_as_django_get_reads_it(query):
    # Plain ASCII strings take query_values' fast path, the rest parse_qsl: both must agree with Django.
    request = RequestFactory().put("/eureka/apps/A/i")
    request.META["QUERY_STRING"] = query
    assert query_values(request) == {key: request.GET.get(key) for key in request.GET}


@pytest.mark.parametrize("query", ["a=1&b=2&c=3&d=4", "a=1&b=%202&c=3&d=4"])
def test_too_many_query_parameters_are_a_bad_request(settings, query):
    settings.DATA_UPLOAD_MAX_NUMBER_FIELDS = 3
    request = RequestFactory().put("/eureka/apps/A/i")
    request.META["QUERY_STRING"] = query
    with pytest.raises(BadInput, match="More than 3 query parameters"):
        query_values(request)


def test_no_field_limit_reads_every_field(settings):
    settings.DATA_UPLOAD_MAX_NUMBER_FIELDS = None
    request = RequestFactory().put("/eureka/apps/A/i")
    request.META["QUERY_STRING"] = "&".join(f"k{i}=v" for i in range(2000))
    assert len(query_values(request)) == 2000
