"""Documents other servers answer with, read in bounded steps: a peer's or a remote region's ``GET
apps`` and ``apps/delta``, and a peer's answer to a replication batch.

A document under the byte cap can still expand into millions of Python objects (an empty ``{}``
instance is three bytes of JSON, and gzip shrinks such repetition a thousandfold), and one parse of
it holds the event loop for as long as it takes. So such a document is never parsed whole:

1. ijson's C parser reads the body a piece at a time and hands over its events;
2. only records are built as Python objects, one at a time: the instances of a registry (each app's
   ``instance``, a list or one object), the items of a batch answer (``responseList``). Everything
   else (app names, fields nobody reads, values of the wrong type) is stepped over unbuilt;
3. at most ``max_records`` records, and as many applications, are read; one more and the document is
   refused (``AnswerOverLimit``), so that no part of it is applied;
4. a record larger than ``max_record_bytes`` (its names and texts, and one for every other value) is
   built no further and handed over as ``TOO_LARGE``;
5. every ``STEP_EVENTS`` events ``tick`` is called (``PACER.tick`` unless given: under gevent the
   event loop gets a turn once a slice of a few milliseconds is used up; under granian the parser's
   C calls are short, so the interpreter hands the GIL to the request threads between them).

A body that is not JSON is ``AnswerUnreadable``. Plain Python, no Django.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import ijson

from registry.cache.pacing import PACER

# Events between two ticks: a few hundred microseconds of parsing, so a tick's clock read is noise.
STEP_EVENTS = 512
# Bytes ijson's parser reads at a time: one C call makes the events of this many bytes.
READ_BYTES = 64 * 1024
# A record nested deeper than this is not built (a registry instance is four levels deep).
MAX_RECORD_DEPTH = 32


class AnswerOverLimit(Exception):
    """An answer larger than this node reads: in bytes, time (transport.py) or records (here). Not
    read further; the message names the limit and the setting that changes it."""


class AnswerUnreadable(Exception):
    """An answer that is not the JSON document asked for."""


class _TooLarge:
    def __repr__(self) -> str:
        return "TOO_LARGE"


# What a record larger than ``max_record_bytes`` is handed over as (it was not built).
TOO_LARGE: Any = _TooLarge()


@dataclass(frozen=True)
class RecordLimits:
    """How much of a document is built: ``max_records`` records (and as many applications), each of
    at most ``max_record_bytes``; the settings that change them, for the error message."""

    max_records: int
    max_record_bytes: int
    records_setting: str
    record_bytes_setting: str


# The setting that bounds one record (``max_record_bytes``) of a peer's or a region's answer.
RECORD_BYTES_SETTING = "EUREKA_MAX_ANSWER_RECORD_BYTES"

# Where the records of each document are: keys from the root, each leading to an object or a list of
# them (Eureka's older JSON writes a list of one as the object alone); the objects the last key leads
# to are the records.
REGISTRY_PATH = ("applications", "application", "instance")
BATCH_ANSWER_PATH = ("responseList",)


def registry_answer(body: bytes | bytearray, limits: RecordLimits, what: str = "registry") -> AnswerDocument:
    """A ``GET apps`` or ``apps/delta`` answer: its instances are the records, its applications are
    counted against the same limit, its ``apps__hashcode`` is kept (``captured``)."""
    return AnswerDocument(
        body,
        REGISTRY_PATH,
        limits,
        what=what,
        records_are="instances",
        groups_are="applications",
        capture="apps__hashcode",
    )


def batch_answer(body: bytes | bytearray, sent: int, max_record_bytes: int) -> AnswerDocument:
    """A peer's answer to a replication batch of ``sent`` items: at most one answer per item."""
    limits = RecordLimits(sent, max_record_bytes, f"the {sent} items sent", RECORD_BYTES_SETTING)
    return AnswerDocument(body, BATCH_ANSWER_PATH, limits, what="batch answer", records_are="items")


class Skipped:
    """Records of an answer left out, counted by why, each why with its first example: what the log's
    one line per answer says (never one line per record)."""

    def __init__(self) -> None:
        self.counts: dict[str, int] = {}
        self.examples: dict[str, str] = {}

    def add(self, why: str, example: str = "") -> None:
        self.counts[why] = self.counts.get(why, 0) + 1
        if example and why not in self.examples:
            self.examples[why] = example[:200]

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    def __bool__(self) -> bool:
        return bool(self.counts)

    def __str__(self) -> str:
        parts = []
        for why, count in self.counts.items():
            example = self.examples.get(why)
            parts.append(f"{count:,} {why}" + (f" (the first: {example})" if example else ""))
        return ", ".join(parts)


class AnswerDocument:
    """One document's records, read as it is iterated (once). Afterwards ``records`` and ``groups``
    (a registry's applications) are counted, ``too_large`` of the records were handed over unbuilt,
    ``found`` says whether the path's first key was there, and ``captured`` holds the text of the
    ``capture`` key beside it (a registry's ``apps__hashcode``)."""

    def __init__(
        self,
        body: bytes | bytearray | memoryview,
        path: tuple[str, ...],
        limits: RecordLimits,
        tick: Callable[[], None] | None = None,
        *,
        what: str = "answer",
        records_are: str = "records",
        groups_are: str = "groups",
        capture: str | None = None,
    ):
        self._body = memoryview(body)
        self._path = path
        self._limits = limits
        self._tick = tick
        self.what = what
        self._records_are = records_are
        self._groups_are = groups_are
        self._capture = capture
        self.groups = 0
        self.records = 0
        self.too_large = 0
        self.found = False
        self.captured: str | None = None

    def __iter__(self) -> Iterator[Any]:
        """The records as dicts (or ``TOO_LARGE``), in document order. Raises AnswerOverLimit past
        ``max_records`` records or groups, AnswerUnreadable for a body that is not JSON."""
        try:
            yield from self._walk()
        except (ijson.JSONError, ValueError) as exc:
            # ValueError: a number Python refuses to convert (thousands of digits), or bad UTF-8.
            raise AnswerUnreadable(f"unreadable {self.what}: {str(exc)[:120]}") from None

    def _over(self, what: str) -> AnswerOverLimit:
        return AnswerOverLimit(
            f"answer holds more than {self._limits.max_records:,} {what}, not read further "
            f"(the limit is {self._limits.records_setting})"
        )

    def _walk(self) -> Iterator[Any]:
        path, last = self._path, len(self._path)
        max_records = self._limits.max_records
        max_bytes = self._limits.max_record_bytes
        tick = self._tick or PACER.tick
        events = ijson.basic_parse(_Reader(self._body), buf_size=READ_BYTES, use_float=True)
        # Outside records: a stack of frames, (is_map, level): an object at ``level`` (whose key
        # ``path[level]`` leads on), or a list of values at ``level``. ``pending``: the level of the
        # value a key just led to (_STEP_OVER: a key nobody reads; _CAPTURE: the capture key).
        # ``skip``: the depth of a value being stepped over.
        frames: list[tuple[bool, int]] = []
        pending = 0
        skip = 0
        # Inside a record: the containers being built and the key awaited in each (None in a list),
        # the size so far; ``too_large``: the depth of a record being stepped over.
        building: list[Any] = []
        keys: list[Any] = []
        size = 0
        too_large = 0
        count = 0
        for event, value in events:
            count += 1
            if count == STEP_EVENTS:
                count = 0
                tick()
            if building:
                # The hot path: one record's events, in the order of their frequency.
                if event == "map_key":
                    keys[-1] = value
                    size += len(value) + 1
                elif event == "string":
                    key = keys[-1]
                    if key is None:
                        building[-1].append(value)
                    else:
                        building[-1][key] = value
                    size += len(value) + 1
                elif event == "start_map" or event == "start_array":
                    item: Any = {} if event == "start_map" else []
                    key = keys[-1]
                    if key is None:
                        building[-1].append(item)
                    else:
                        building[-1][key] = item
                    building.append(item)
                    keys.append(None)
                    size += 1 if len(building) <= MAX_RECORD_DEPTH else max_bytes
                elif event == "end_map" or event == "end_array":
                    done = building.pop()
                    keys.pop()
                    size += 1
                    if not building:
                        yield done
                        continue
                else:
                    key = keys[-1]
                    if key is None:
                        building[-1].append(value)
                    else:
                        building[-1][key] = value
                    size += 1
                if size > max_bytes:
                    too_large = len(building)
                    building.clear()
                    keys.clear()
                continue
            if too_large:
                if event == "start_map" or event == "start_array":
                    too_large += 1
                elif event == "end_map" or event == "end_array":
                    too_large -= 1
                    if not too_large:
                        self.too_large += 1
                        yield TOO_LARGE
                continue
            if skip:
                if event == "start_map" or event == "start_array":
                    skip += 1
                elif event == "end_map" or event == "end_array":
                    skip -= 1
                continue
            if pending is not None:
                level, pending = pending, None
            else:
                is_map, level = frames[-1]
                if is_map:
                    if event == "map_key":
                        if level < last and value == path[level]:
                            self.found = self.found or level == 0
                            pending = level + 1
                        elif level == 1 and value == self._capture:
                            pending = _CAPTURE
                        else:
                            pending = _STEP_OVER
                    else:  # end_map
                        frames.pop()
                    continue
                if event == "end_array":
                    frames.pop()
                    continue
                if event == "start_array":  # a list in a list: not read
                    skip = 1
                    continue
            # The start of a value at ``level`` (a list's values are at the list's level).
            if event == "start_map" and level >= 0:
                if level == last:
                    self.records += 1
                    if self.records > max_records:
                        raise self._over(self._records_are)
                    building.append({})
                    keys.append(None)
                    size = 1
                    continue
                if level == last - 1 and level > 0:
                    self.groups += 1
                    if self.groups > max_records:
                        raise self._over(self._groups_are)
                frames.append((True, level))
            elif event == "start_array" and level > 0:
                frames.append((False, level))
            elif event == "start_map" or event == "start_array":
                skip = 1
            elif level == _CAPTURE and event == "string":
                self.captured = value


_STEP_OVER = -1
_CAPTURE = -2


class _Reader:
    """A file-like view of the body for ijson: its bytes a piece at a time, never copied whole."""

    def __init__(self, body: memoryview):
        self._body = body
        self._at = 0

    def read(self, size: int = -1) -> bytes:
        end = len(self._body) if size < 0 else self._at + size
        piece = bytes(self._body[self._at : end])
        self._at += len(piece)
        return piece
