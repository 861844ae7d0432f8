"""Kept JSON bytes hold their length, not orjson's output buffer."""

from __future__ import annotations

import tracemalloc

import orjson

from registry.domain.jsonbytes import dumps_to_keep

ROW = [
    "host-1:orders:8080",
    "ORDERS",
    "host-1",
    "10.0.0.1",
    "UP",
    8080,
    True,
    {"zone": "z1"},
    1_700_000_000_000,
]


def _traced_bytes_of(make) -> int:
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        kept = [make() for _ in range(500)]
        return (tracemalloc.get_traced_memory()[0] - before) // len(kept)
    finally:
        tracemalloc.stop()


def test_kept_bytes_are_the_json_and_cost_about_their_length():
    encoded = dumps_to_keep(ROW)
    assert encoded == orjson.dumps(ROW) and isinstance(encoded, bytes)
    per_row = _traced_bytes_of(lambda: dumps_to_keep(ROW))
    # The bytes object's header (~33 bytes) and the list slot over the JSON itself.
    assert per_row <= len(encoded) + 100, per_row


def test_an_orjson_fragment_of_kept_bytes_embeds_them_unchanged():
    row = orjson.Fragment(dumps_to_keep(ROW))
    assert orjson.dumps([row, 1]) == b"[" + orjson.dumps(ROW) + b",1]"
