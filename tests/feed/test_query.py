"""The feed's parameters (registry/feed/query.py): every filter, the limit, the resume point."""

from __future__ import annotations

import pytest
from django.http import QueryDict

from registry.domain.changes import ACTIONS, REGISTERED, STATUS_CHANGED
from registry.feed.query import DEFAULT_LIMIT, MAX_LIMIT, BadParameter, parse_query


def parse(query: str, last_event_id: str | None = None):
    return parse_query(QueryDict(query), last_event_id)


def test_no_parameters_mean_everything_from_the_oldest_change_in_pages_of_500():
    query = parse("")
    assert (query.since, query.apps, query.actions, query.limit) == (None, None, None, DEFAULT_LIMIT)


def test_apps_are_comma_separated_repeatable_trimmed_and_case_insensitive():
    assert parse("app=orders, Billing&app=stock,").apps == {"ORDERS", "BILLING", "STOCK"}


def test_actions_are_comma_separated_and_case_insensitive():
    assert parse("action=registered,Status_Changed").actions == {REGISTERED, STATUS_CHANGED}
    assert parse("action=" + ",".join(ACTIONS)).actions == set(ACTIONS)


def test_the_last_event_id_header_wins_over_since_because_eventsource_reconnects_to_the_first_url():
    assert parse("since=5", last_event_id="9").since == 9
    assert parse("since=5", last_event_id=" ").since == 5
    assert parse("since=0").since == 0


@pytest.mark.parametrize(
    ("query", "header", "parameter"),
    [
        ("since=abc", None, "since"),
        ("since=-1", None, "since"),
        ("since=", None, "since"),
        ("since=1.5", None, "since"),
        ("since=" + "9" * 20, None, "since"),
        ("since=١٢", None, "since"),  # Arabic-Indic digits: isdigit() but not a change id
        ("", "x", "Last-Event-ID"),
        ("app=", None, "app"),
        ("app=,,", None, "app"),
        ("app=" + "A" * 201, None, "app"),
        ("app=" + ",".join(f"A{i}" for i in range(101)), None, "app"),
        ("action=RENEWED", None, "action"),
        ("action=", None, "action"),
        ("limit=0", None, "limit"),
        (f"limit={MAX_LIMIT + 1}", None, "limit"),
        ("limit=ten", None, "limit"),
        ("limit=-5", None, "limit"),
        ("limit=99999999999", None, "limit"),
    ],
)
def test_a_bad_value_names_its_parameter(query, header, parameter):
    with pytest.raises(BadParameter) as refused:
        parse(query, header)
    assert refused.value.parameter == parameter


def test_the_limit_goes_up_to_its_maximum():
    assert parse(f"limit={MAX_LIMIT}").limit == MAX_LIMIT
    assert parse("limit=1").limit == 1
