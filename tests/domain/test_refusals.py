"""Refusals as log lines (registry/domain/refusals.py): one line per kind an interval, with a count."""

from __future__ import annotations

from registry.domain.refusals import RefusalLines, refusal_fields, since_last_line
from tests.conftest import FakeClock


def test_the_first_refusal_of_a_kind_gets_a_line_and_the_rest_of_the_interval_are_counted_for_the_next():
    clock = FakeClock(0)
    lines = RefusalLines(interval_s=60, clock=clock)

    assert lines.note("host") == 1
    assert [lines.note("host") for _ in range(5_000)] == [0] * 5_000
    clock.advance(59)
    assert lines.note("host") == 0
    clock.advance(1)
    # This one and the 5,001 held back since the last line.
    assert lines.note("host") == 5_002
    assert lines.note("host") == 0


def test_each_kind_has_its_own_interval():
    clock = FakeClock(0)
    lines = RefusalLines(interval_s=60, clock=clock)

    assert lines.note("host") == 1
    assert lines.note("malformed") == 1
    assert lines.note("host") == 0
    clock.advance(30)
    assert lines.note("csrf") == 1
    clock.advance(30)
    assert lines.note("host") == 2
    assert lines.note("csrf") == 0
    assert lines.note("malformed") == 1


def test_a_quiet_kind_logs_its_next_refusal_at_once():
    clock = FakeClock(0)
    lines = RefusalLines(interval_s=60, clock=clock)

    assert lines.note("host") == 1
    clock.advance(3_600)
    assert lines.note("host") == 1


def test_a_line_says_how_many_more_it_stands_for():
    assert since_last_line(1) == ""
    assert since_last_line(5_002) == " (5001 more since the last such line)"
    assert refusal_fields("host", 3) == {"event": "refusals", "kind": "host", "refusals": 3}
