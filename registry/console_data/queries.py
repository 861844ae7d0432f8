"""Searching, grouping and paging the registry for the status console and the admin. Plain Python.

Everything here works on the immutable instance records ``MapReads.instances`` hands out (references
taken under the lock in one pass, no copies), so filtering 10,000 instances neither holds up a
heartbeat nor allocates an object per instance.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from registry.domain import constants as c
from registry.domain.instances import InstanceInfo
from registry.domain.redact import link_url

# Eureka keeps status groups in a Java HashMap (no order); we show them in this fixed order.
STATUS_ORDER = (c.UP, c.DOWN, c.STARTING, c.OUT_OF_SERVICE, c.UNKNOWN)
_STATUS_RANK = {status: rank for rank, status in enumerate(STATUS_ORDER)}

# What Eureka's console shows for the AMI and zone of an instance outside AWS.
NO_AMI = "n/a"
NO_ZONE = ""


class BadQuery(ValueError):
    """A filter the console cannot apply; the message names the problem."""


@dataclass(frozen=True)
class InstanceQuery:
    """Filters of the instances table; empty fields match everything.

    ``app`` and ``instance`` are case-insensitive substrings (``instance`` is tried against the
    instance id, the host name and the IP address); ``status`` is exact; ``metadata_key`` with
    ``metadata_value`` None matches instances that have the key at all.
    """

    app: str = ""
    instance: str = ""
    status: str = ""
    metadata_key: str = ""
    metadata_value: str | None = None
    not_up: bool = False

    def __post_init__(self):
        if self.status and self.status not in c.STATUSES:
            raise BadQuery(f"Unknown status {self.status[:40]!r}: expected one of {', '.join(STATUS_ORDER)}")

    @property
    def active(self) -> bool:
        return bool(self.app or self.instance or self.status or self.metadata_key or self.not_up)

    def matches(self, instance: InstanceInfo) -> bool:
        if self.not_up and instance.status == c.UP:
            return False
        if self.status and instance.status != self.status:
            return False
        if self.app and self.app.lower() not in instance.app.lower():
            return False
        if self.instance:
            needle = self.instance.lower()
            if not any(
                needle in field.lower()
                for field in (instance.instance_id, instance.host_name, instance.ip_addr)
            ):
                return False
        if self.metadata_key:
            value = instance.metadata.get(self.metadata_key)
            if value is None or (self.metadata_value is not None and value != self.metadata_value):
                return False
        return True


def parse_metadata_filter(text: str) -> tuple[str, str | None]:
    """``key=value`` (exact value) or ``key`` (the key is present); blank means no filter."""
    text = text.strip()
    if not text:
        return "", None
    key, sep, value = text.partition("=")
    key = key.strip()
    if not key:
        raise BadQuery("Metadata filter needs a key: write key=value, or key alone to match any value")
    return key, (value.strip() if sep else None)


def instance_sort_key(instance: InstanceInfo) -> tuple[int, str]:
    return _STATUS_RANK.get(instance.status, len(STATUS_ORDER)), instance.instance_id


def _no_pause() -> None:
    pass


def select(
    apps: Iterable[tuple[str, Sequence[InstanceInfo]]],
    query: InstanceQuery,
    pause: Callable[[], None] = _no_pause,
) -> list[tuple[str, list[InstanceInfo]]]:
    """The matching instances grouped by app: apps by name, instances by status order then id.
    ``pause`` is called after each application (a turn for others in a long scan)."""
    selected = []
    for name, instances in sorted(apps, key=lambda item: item[0]):
        matching = [i for i in instances if query.matches(i)] if query.active else list(instances)
        if matching:
            matching.sort(key=instance_sort_key)
            selected.append((name, matching))
        pause()
    return selected


# --------------------------------------------------------------------------------- pages


@dataclass(frozen=True)
class InstanceLink:
    app: str
    instance_id: str
    # The instance's status page when it is an http(s) URL (credentials removed), else None.
    url: str | None


@dataclass(frozen=True)
class StatusGroup:
    status: str
    count: int
    instances: list[InstanceLink]

    @property
    def not_up(self) -> bool:
        return self.status != c.UP

    @property
    def on_other_pages(self) -> int:
        return self.count - len(self.instances)


@dataclass(frozen=True)
class AppRow:
    """One row of "Instances currently registered with Eureka"; counts cover every matching instance
    of the app, ``groups`` list the ids on this page (an app larger than a page is split)."""

    name: str
    amis: list[tuple[str, int]]
    zones: list[tuple[str, int]]
    groups: list[StatusGroup]
    total: int
    first: int  # 1-based position of this page's first id within the app
    shown: int

    @property
    def split(self) -> bool:
        return self.shown < self.total


@dataclass(frozen=True)
class InstancePage:
    rows: list[AppRow]
    number: int
    num_pages: int
    per_page: int
    matching_instances: int
    matching_apps: int

    @property
    def has_previous(self) -> bool:
        return self.number > 1

    @property
    def has_next(self) -> bool:
        return self.number < self.num_pages


def ami_of(instance: InstanceInfo) -> str:
    dc = instance.data_center_info
    return dc.metadata.get("ami-id", NO_AMI) if dc.is_amazon else NO_AMI


def zone_of(instance: InstanceInfo) -> str:
    dc = instance.data_center_info
    return dc.metadata.get("availability-zone", NO_ZONE) if dc.is_amazon else NO_ZONE


def _page_bounds(sizes: list[int], per_page: int) -> list[list[tuple[int, int, int]]]:
    """Pack apps into pages of at most ``per_page`` instances, keeping apps whole where they fit.

    Each page is a list of ``(app index, start, stop)``; an app larger than a page fills pages of
    its own, and its last part may share a page with the apps after it.
    """
    pages: list[list[tuple[int, int, int]]] = []
    current: list[tuple[int, int, int]] = []
    used = 0
    for index, size in enumerate(sizes):
        if current and used + size > per_page >= size:
            # The app fits on a page of its own but not in what is left of this one: no split.
            pages.append(current)
            current, used = [], 0
        start = 0
        while start < size:
            take = min(size - start, per_page - used)
            current.append((index, start, start + take))
            used += take
            start += take
            if used == per_page:
                pages.append(current)
                current, used = [], 0
    if current or not pages:
        pages.append(current)
    return pages


def _app_row(name: str, instances: list[InstanceInfo], start: int, stop: int) -> AppRow:
    amis = Counter(ami_of(instance) for instance in instances)
    zones = Counter(zone_of(instance) for instance in instances)
    counts = Counter(instance.status for instance in instances)
    shown: dict[str, list[InstanceLink]] = {}
    for instance in instances[start:stop]:
        shown.setdefault(instance.status, []).append(
            InstanceLink(instance.app, instance.instance_id, link_url(instance.status_page_url))
        )
    groups = [
        StatusGroup(status, counts[status], shown.get(status, []))
        for status in sorted(counts, key=lambda s: _STATUS_RANK.get(s, len(STATUS_ORDER)))
    ]
    return AppRow(
        name=name,
        amis=sorted(amis.items()),
        zones=sorted(zones.items()),
        groups=groups,
        total=len(instances),
        first=start + 1,
        shown=stop - start,
    )


def page_of(
    groups: list[tuple[str, list[InstanceInfo]]],
    number: int,
    per_page: int,
    pause: Callable[[], None] = _no_pause,
) -> InstancePage:
    """Page ``number`` (1-based, clamped to the last page) of the grouped instances; ``pause`` is
    called after each row."""
    if per_page < 1:
        raise BadQuery("per_page must be at least 1")
    bounds = _page_bounds([len(instances) for _, instances in groups], per_page)
    number = min(max(1, number), len(bounds))
    rows = []
    for index, start, stop in bounds[number - 1]:
        rows.append(_app_row(groups[index][0], groups[index][1], start, stop))
        pause()
    return InstancePage(
        rows=rows,
        number=number,
        num_pages=len(bounds),
        per_page=per_page,
        matching_instances=sum(len(instances) for _, instances in groups),
        matching_apps=len(groups),
    )
