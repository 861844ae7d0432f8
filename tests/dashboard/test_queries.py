"""Searching, grouping and paging the registry for the console (registry/console_data/queries.py),
without Django."""

from __future__ import annotations

import pytest

from registry.console_data.queries import (
    BadQuery,
    InstanceQuery,
    _page_bounds,
    page_of,
    parse_metadata_filter,
    select,
)
from registry.domain import constants as c
from registry.domain.instances import DataCenterInfo, InstanceInfo, freeze
from tests.factories import instance_info


def record(app="ORDERS", n=1, status=c.UP, metadata=None, status_page=None, dc=None) -> InstanceInfo:
    return instance_info(
        app,
        n,
        host_name=f"host{n}.example.org",
        status=status,
        metadata=freeze(metadata),
        status_page_url=status_page,
        data_center_info=dc or DataCenterInfo(),
    )


def ids(groups) -> list[tuple[str, list[str]]]:
    return [(app, [instance.instance_id for instance in instances]) for app, instances in groups]


REGISTRY = [
    (
        "PAYMENTS",
        [record("PAYMENTS", 3, c.DOWN, {"zone": "b"}), record("PAYMENTS", 1, metadata={"zone": "a"})],
    ),
    (
        "ORDERS",
        [record("ORDERS", 2, c.OUT_OF_SERVICE), record("ORDERS", 1, metadata={"zone": "a", "v": "2"})],
    ),
    ("GATEWAY", [record("GATEWAY", 9, c.STARTING), record("GATEWAY", 5, c.UNKNOWN), record("GATEWAY", 4)]),
]


def test_select_sorts_apps_by_name_and_instances_by_status_order_then_id():
    assert ids(select(REGISTRY, InstanceQuery())) == [
        ("GATEWAY", ["host4:gateway:8080", "host9:gateway:8080", "host5:gateway:8080"]),
        ("ORDERS", ["host1:orders:8080", "host2:orders:8080"]),
        ("PAYMENTS", ["host1:payments:8080", "host3:payments:8080"]),
    ]


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        (InstanceQuery(app="pay"), [("PAYMENTS", ["host1:payments:8080", "host3:payments:8080"])]),
        (InstanceQuery(instance="HOST2"), [("ORDERS", ["host2:orders:8080"])]),
        (InstanceQuery(instance="10.0.0.9"), [("GATEWAY", ["host9:gateway:8080"])]),
        (InstanceQuery(instance="host4.example"), [("GATEWAY", ["host4:gateway:8080"])]),
        (InstanceQuery(status=c.DOWN), [("PAYMENTS", ["host3:payments:8080"])]),
        (
            InstanceQuery(metadata_key="zone", metadata_value="a"),
            [("ORDERS", ["host1:orders:8080"]), ("PAYMENTS", ["host1:payments:8080"])],
        ),
        (InstanceQuery(metadata_key="v"), [("ORDERS", ["host1:orders:8080"])]),
        (InstanceQuery(metadata_key="zone", metadata_value="A"), []),
        (
            InstanceQuery(not_up=True),
            [
                ("GATEWAY", ["host9:gateway:8080", "host5:gateway:8080"]),
                ("ORDERS", ["host2:orders:8080"]),
                ("PAYMENTS", ["host3:payments:8080"]),
            ],
        ),
        (InstanceQuery(app="orders", not_up=True), [("ORDERS", ["host2:orders:8080"])]),
        (InstanceQuery(status=c.UP, not_up=True), []),
    ],
)
def test_filters_combine(query, expected):
    assert ids(select(REGISTRY, query)) == expected


def test_unknown_status_filter_is_refused():
    with pytest.raises(BadQuery, match="Unknown status 'SLEEPING'"):
        InstanceQuery(status="SLEEPING")


@pytest.mark.parametrize(
    ("text", "parsed"),
    [
        ("", ("", None)),
        ("  ", ("", None)),
        ("zone=a", ("zone", "a")),
        ("zone", ("zone", None)),
        (" k = v ", ("k", "v")),
        ("k=", ("k", "")),
        ("k=a=b", ("k", "a=b")),
    ],
)
def test_metadata_filter_syntax(text, parsed):
    assert parse_metadata_filter(text) == parsed


def test_metadata_filter_without_key_is_refused():
    with pytest.raises(BadQuery, match="needs a key"):
        parse_metadata_filter("=value")


@pytest.mark.parametrize(
    ("sizes", "per_page", "pages"),
    [
        ([3, 3, 3], 5, [[(0, 0, 3)], [(1, 0, 3)], [(2, 0, 3)]]),
        ([2, 3, 1], 5, [[(0, 0, 2), (1, 0, 3)], [(2, 0, 1)]]),
        ([12], 5, [[(0, 0, 5)], [(0, 5, 10)], [(0, 10, 12)]]),
        ([2, 12, 1], 5, [[(0, 0, 2), (1, 0, 3)], [(1, 3, 8)], [(1, 8, 12), (2, 0, 1)]]),
        ([], 5, [[]]),
    ],
)
def test_pages_keep_apps_whole_when_they_fit(sizes, per_page, pages):
    assert _page_bounds(sizes, per_page) == pages
    # Every instance is on exactly one page.
    covered = sorted((i, n) for page in pages for i, start, stop in page for n in range(start, stop))
    assert covered == [(i, n) for i, size in enumerate(sizes) for n in range(size)]


def test_app_rows_count_amis_zones_and_statuses_over_the_whole_app():
    amazon = DataCenterInfo("Amazon", freeze({"ami-id": "ami-1", "availability-zone": "us-east-1a"}))
    groups = select(
        [
            (
                "ORDERS",
                [
                    record("ORDERS", 1, status_page="http://host1:8080/info"),
                    record("ORDERS", 2, c.DOWN, status_page="ftp://host2/info"),
                    record("ORDERS", 3, dc=amazon, status_page="HTTPS://user:pw@host3/info"),
                ],
            )
        ],
        InstanceQuery(),
    )
    page = page_of(groups, 1, 50)
    (row,) = page.rows
    assert row.amis == [("ami-1", 1), ("n/a", 2)]
    assert row.zones == [("", 2), ("us-east-1a", 1)]
    assert [(g.status, g.count, g.not_up) for g in row.groups] == [(c.UP, 2, False), (c.DOWN, 1, True)]
    links = {link.instance_id: link.url for group in row.groups for link in group.instances}
    assert links == {
        "host1:orders:8080": "http://host1:8080/info",
        "host2:orders:8080": None,
        "host3:orders:8080": "https://host3/info",
    }


def test_a_split_app_keeps_its_counts_and_says_which_ids_are_shown():
    groups = select([("ORDERS", [record("ORDERS", n) for n in range(1, 13)])], InstanceQuery())
    second = page_of(groups, 2, 5)
    (row,) = second.rows
    assert (row.total, row.first, row.shown, row.split) == (12, 6, 5, True)
    assert row.groups[0].count == 12 and row.groups[0].on_other_pages == 7
    assert (second.number, second.num_pages, second.has_previous, second.has_next) == (2, 3, True, True)


def test_page_numbers_beyond_the_end_show_the_last_page():
    groups = select(REGISTRY, InstanceQuery())
    page = page_of(groups, 99, 3)
    assert page.number == page.num_pages == 3
    assert page.matching_instances == 7 and page.matching_apps == 3


def test_select_and_paging_give_turns_as_they_go():
    # A console render holds the event loop (gevent): long scans pause for it (registry/cache/pacing.py).
    turns = []
    groups = select(REGISTRY, InstanceQuery(), pause=lambda: turns.append("app"))
    assert turns == ["app"] * 3
    turns.clear()
    page_of(groups, 1, 500, pause=lambda: turns.append("row"))
    assert turns == ["row"] * 3
