"""Peers' and remote regions' answers read record by record within limits (registry/wire/answers.py;
issue 44, item 1): a document under the byte cap that expands into millions of objects is refused at
the record cap without being built, one record too large is stepped over unbuilt, every shape of
Eureka's JSON gives the records a full parse gives, and the loop gets its turn as the parse goes."""

from __future__ import annotations

import time
import tracemalloc

import ijson
import orjson
import pytest

from registry.domain.core import Registry, RegistryRules
from registry.wire import answers
from registry.wire.answers import (
    TOO_LARGE,
    AnswerOverLimit,
    AnswerUnreadable,
    RecordLimits,
    Skipped,
    batch_answer,
    registry_answer,
)
from registry.wire.codecs import applications_dict, build_instance, render
from tests.factories import fleet_member, instance_body

MIB = 1024 * 1024
LIMITS = RecordLimits(100_000, 262_144, "EUREKA_TEST_INSTANCES", "EUREKA_TEST_RECORD_BYTES")


def records(document: dict | bytes, limits: RecordLimits = LIMITS, **kwargs) -> list:
    body = document if isinstance(document, bytes) else orjson.dumps(document)
    return list(registry_answer(body, limits, **kwargs))


def a_registry(instances: int) -> bytes:
    """``GET apps`` as a node renders it: ``instances`` over 50 apps, eight metadata keys each."""
    now = 1_700_000_000_000
    registry = Registry(RegistryRules(), now)
    for k in range(instances):
        body = fleet_member(k, 50)
        body["metadata"] = {f"management.key{j}": f"value-{j}-{k}" for j in range(8)}
        registry.register(build_instance(body, now), now)
    return render("applications", applications_dict(registry.reads.snapshot()), "json")


def expanding(count: int) -> bytes:
    """One app of ``count`` empty instances (the hostile answer's shape)."""
    return b'{"applications":{"application":[{"name":"A","instance":[' + b"{}," * (count - 1) + b"{}]}]}}"


def test_the_parser_is_ijsons_c_backend():
    # The pure-Python backend reads the same, an order of magnitude slower.
    assert ijson.backend == "yajl2_c"


def test_a_registry_reads_as_the_instances_a_full_parse_finds():
    body = a_registry(2_000)
    document = registry_answer(body, LIMITS)
    found = list(document)
    parsed = orjson.loads(body)["applications"]
    assert found == [instance for app in parsed["application"] for instance in app["instance"]]
    assert (document.records, document.groups, document.too_large) == (2_000, 50, 0)
    assert document.found and document.captured == parsed["apps__hashcode"] == "UP_2000_"


def test_every_shape_of_eurekas_json_is_read_and_the_rest_stepped_over():
    one = instance_body()["instance"]
    two = instance_body(host="10.0.0.2")["instance"]
    # A list of one written as the object alone (Eureka's older JSON), at either level.
    assert records({"applications": {"application": {"name": "A", "instance": one}}}) == [one]
    assert records({"applications": {"application": [{"name": "A", "instance": [one, two]}]}}) == [one, two]
    assert records({"applications": {"application": [{"instance": one}, {"instance": [two]}]}}) == [one, two]
    # Values of other keys, of the wrong type, nested lists: never built, never records.
    junk = {
        "applications": {
            "versions__delta": "1",
            "other": [{"instance": one}],
            "application": [
                {"name": "A", "instance": "text", "more": {"instance": one}},
                [{"instance": one}],
                7,
                {"instance": [one, "x", [two], None]},
            ],
        },
        "extra": {"applications": {"application": {"instance": two}}},
    }
    assert records(junk) == [one]
    document = registry_answer(orjson.dumps({"applications": {"application": []}}), LIMITS)
    assert list(document) == [] and document.found
    for not_a_registry in ({"nothing": 1}, [1, 2], "text"):
        document = registry_answer(orjson.dumps(not_a_registry), LIMITS)
        assert list(document) == [] and not document.found and document.captured is None


def test_twenty_two_million_empty_instances_are_refused_at_the_cap_without_being_built():
    """The hostile answer of issue 44: 66 MB of valid JSON (64 KB of gzip) under the byte cap."""
    body = expanding(22_000_000)
    assert len(body) < 64 * MIB
    tracemalloc.start()
    started = time.process_time()
    try:
        with pytest.raises(AnswerOverLimit) as refused:
            for _ in registry_answer(body, LIMITS):
                pass  # each record is dropped as it comes, as the node's readers do with a bad one
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    took = time.process_time() - started
    assert str(refused.value) == (
        "answer holds more than 100,000 instances, not read further (the limit is EUREKA_TEST_INSTANCES)"
    )
    # Read up to the cap and no further: 100,001 small dicts made and dropped one at a time (a full
    # parse made 22 million, 2 GB, in 22-26 s of one event loop).
    assert peak < 4 * MIB, f"{peak / MIB:.1f} MiB traced"
    assert took < 5, f"{took:.1f} s of CPU"


def test_applications_are_held_to_the_same_cap():
    limits = RecordLimits(1_000, 262_144, "EUREKA_TEST_INSTANCES", "B")
    empty_apps = b'{"applications":{"application":[' + b",".join([b'{"name":"A"}'] * 1_001) + b"]}}"
    with pytest.raises(AnswerOverLimit, match="more than 1,000 applications.*EUREKA_TEST_INSTANCES"):
        records(empty_apps, limits)
    assert records(expanding(1_000), limits) == [{}] * 1_000
    with pytest.raises(AnswerOverLimit, match="more than 1,000 instances"):
        records(expanding(1_001), limits)


def test_an_instance_larger_than_the_record_limit_is_stepped_over_unbuilt():
    limits = RecordLimits(100, 10_000, "I", "EUREKA_TEST_RECORD_BYTES")
    one = instance_body()["instance"]
    # 300,000 empty objects in one instance: 900 KB of JSON, ~20 MB as Python objects.
    huge = b'{"instanceId":"x","junk":[' + b"{}," * 299_999 + b"{}]}"
    body = b'{"applications":{"application":{"instance":[' + huge + b"," + orjson.dumps(one) + b"]}}}"
    tracemalloc.start()
    try:
        document = registry_answer(body, limits)
        found = list(document)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert found == [TOO_LARGE, one] and document.too_large == 1 and document.records == 2
    assert peak < 8 * MIB, f"{peak / MIB:.1f} MiB traced"
    # Long texts count by their length, and so does nesting deeper than any instance.
    long_text = {"instanceId": "x", "metadata": {"k": "v" * 10_001}}
    deep = {"instanceId": "x", "a": [[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[["x"]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]}
    assert records({"applications": {"application": {"instance": [long_text, deep, one]}}}, limits) == [
        TOO_LARGE,
        TOO_LARGE,
        one,
    ]


def test_nesting_outside_records_costs_no_objects():
    body = b'{"applications":{"junk":' + b"[" * 100_000 + b"]" * 100_000 + b',"application":[]}}'
    document = registry_answer(body, LIMITS)
    assert list(document) == [] and document.found


def test_a_body_that_is_not_json_is_unreadable():
    whole = orjson.dumps({"applications": {"application": {"instance": [instance_body()["instance"]] * 3}}})
    for broken in (whole[: len(whole) // 2], b"{]", b'{"applications":1e99999999' + b"9" * 10_000 + b"}"):
        with pytest.raises(AnswerUnreadable, match="^unreadable registry: "):
            records(broken)
    with pytest.raises(AnswerUnreadable, match="^unreadable delta: "):
        records(b"not json", what="delta")


def test_the_parse_gives_the_loop_a_turn_every_few_hundred_events():
    body = a_registry(500)
    ticks = []
    document = registry_answer(body, LIMITS)
    document._tick = lambda: ticks.append(1)
    list(document)
    events = sum(1 for _ in ijson.basic_parse(body))
    assert len(ticks) == events // answers.STEP_EVENTS > 50


def test_a_batch_answer_holds_at_most_one_answer_per_item_sent():
    ok = {"statusCode": 200}
    conflict = {"statusCode": 409, "responseEntity": instance_body()["instance"]}
    body = orjson.dumps({"responseList": [ok, conflict]})
    assert list(batch_answer(body, 2, 262_144)) == [ok, conflict]
    assert list(batch_answer(orjson.dumps({"responseList": ok}), 1, 262_144)) == [ok]
    with pytest.raises(AnswerOverLimit) as refused:
        list(batch_answer(body, 1, 262_144))
    assert str(refused.value) == (
        "answer holds more than 1 items, not read further (the limit is the 1 items sent)"
    )
    big = orjson.dumps({"responseList": [{"statusCode": 409, "responseEntity": {"x": "y" * 5_000}}, ok]})
    assert list(batch_answer(big, 2, 4_096)) == [TOO_LARGE, ok]
    empty = batch_answer(b'{"responseList":[]}', 0, 4_096)
    assert list(empty) == [] and empty.found
    missing = batch_answer(b'{"other":[{}]}', 5, 4_096)
    assert list(missing) == [] and not missing.found


def test_what_was_skipped_is_one_line_of_counts_with_the_first_reason_of_each():
    skipped = Skipped()
    assert not skipped and str(skipped) == ""
    for n in range(3):
        skipped.add("not valid registrations", f"Missing hostname {n}")
    skipped.add("larger than EUREKA_MAX_ANSWER_RECORD_BYTES")
    assert skipped.total == 4
    assert str(skipped) == (
        "3 not valid registrations (the first: Missing hostname 0), "
        "1 larger than EUREKA_MAX_ANSWER_RECORD_BYTES"
    )
