"""The console's charts of the last hour, as geometry for inline SVG (templates/dashboard/_charts.html).

Drawn on the server from the node's history (``registry/domain/history.py``): no JavaScript library
and no network, so the charts render wherever the page does and refresh with its live sections.
Each series has its own line style or fill pattern and a text label, so no chart depends on colour
alone, and each chart carries a table of the same numbers for screen readers and copying.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, tzinfo

from registry.domain.changes import Change
from registry.domain.history import STATUS_ORDER, WINDOW_MS, Sample, holding_stretches, per_minute

WIDTH = 720
HEIGHT = 180
# Room for the y labels on the left and the time labels below.
LEFT, RIGHT, TOP, BOTTOM = 48, 12, 10, 24
# Time ticks: the first of these steps that puts at most MAX_TICKS ticks across the span drawn.
TICK_STEPS_MS = (10_000, 30_000, 60_000, 300_000, 600_000)
MAX_TICKS = 7
# A node younger than the hour has its charts drawn across its lifetime, but never across less.
MIN_SPAN_MS = 60_000
# Rows of a chart's table at most (one a minute over the hour).
TABLE_ROWS = 60


@dataclass(frozen=True)
class Line:
    key: str
    label: str
    style: str  # a CSS class: the stroke's dash pattern (and colour)
    path: str
    points: int
    latest: float | None


@dataclass(frozen=True)
class Area:
    key: str
    label: str
    # A fill pattern defined in each chart's SVG (hatch, cross, dots, bars), or "" for a plain fill.
    pattern: str
    path: str
    latest: int


@dataclass(frozen=True)
class Band:
    """A shaded stretch of time (self-preservation holding eviction)."""

    x: float
    width: float
    title: str
    from_ms: int
    to_ms: int


@dataclass(frozen=True)
class Marker:
    x: float
    y: float
    count: int
    title: str


@dataclass(frozen=True)
class Segment:
    """A stretch of time in one status (an instance's timeline)."""

    x: float
    width: float
    status: str
    pattern: str
    title: str
    from_ms: int
    to_ms: int


@dataclass(frozen=True)
class Tick:
    at: float  # x for time ticks, y for value ticks
    label: str


@dataclass
class Chart:
    key: str
    title: str
    summary: str
    lines: list[Line] = field(default_factory=list)
    areas: list[Area] = field(default_factory=list)
    bands: list[Band] = field(default_factory=list)
    markers: list[Marker] = field(default_factory=list)
    segments: list[Segment] = field(default_factory=list)
    x_ticks: list[Tick] = field(default_factory=list)
    y_ticks: list[Tick] = field(default_factory=list)
    # The same numbers as a table: column headings, then one row a sample (times as labels).
    columns: list[str] = field(default_factory=list)
    rows: list[list[str]] = field(default_factory=list)
    width: int = WIDTH
    height: int = HEIGHT
    plot_left: int = LEFT
    plot_right: int = WIDTH - RIGHT
    plot_top: int = TOP
    plot_bottom: int = HEIGHT - BOTTOM

    @property
    def segment_statuses(self) -> list[Segment]:
        """The first segment of each status, for the legend."""
        seen: dict[str, Segment] = {}
        for segment in self.segments:
            seen.setdefault(segment.status, segment)
        return list(seen.values())

    @property
    def plot_height(self) -> int:
        return self.plot_bottom - self.plot_top

    @property
    def empty(self) -> bool:
        return not (self.lines or self.areas or self.segments)

    @property
    def table(self) -> list[list[str]]:
        """The rows for the page's table: at most one a minute (the newest always), so an hour is ~60."""
        step = max(1, -(-len(self.rows) // TABLE_ROWS))
        return self.rows[::-1][::step][::-1]


def nice_ceiling(value: float) -> float:
    """The smallest of 1, 2, 2.5, 5 times a power of ten at or above ``value`` (at least 1)."""
    if value <= 1:
        return 1
    power = 10 ** math.floor(math.log10(value))
    for step in (1, 2, 2.5, 5, 10):
        if step * power >= value:
            return step * power
    return 10 * power  # pragma: no cover - the loop always returns


def _top(values: Iterable[float]) -> float:
    """The value axis' top for these values: a round number at or above the largest (at least 1)."""
    return nice_ceiling(max(values, default=1))


class Frame:
    """Maps (time, value) to the plot area: ``start`` to ``now`` across (the hour ending at ``now``
    unless told otherwise), 0..top up."""

    def __init__(self, now: int, top: float, start: int | None = None):
        self.start = now - WINDOW_MS if start is None else start
        self.now = now
        self.span = max(now - self.start, 1)
        self.top = top if top > 0 else 1

    @classmethod
    def of(cls, samples: Sequence[Sample], now: int, top: float) -> Frame:
        """The hour ending at ``now``, or the samples' own span when they began later (a young node),
        so that a few minutes of history fill the chart instead of its right edge."""
        start = now - WINDOW_MS
        if samples:
            start = min(max(samples[0].at_ms, start), now - MIN_SPAN_MS)
        return cls(now, top, start)

    def x(self, at_ms: int) -> float:
        share = (min(max(at_ms, self.start), self.now) - self.start) / self.span
        return round(LEFT + share * (WIDTH - LEFT - RIGHT), 1)

    def y(self, value: float) -> float:
        share = min(max(value, 0), self.top) / self.top
        return round(HEIGHT - BOTTOM - share * (HEIGHT - BOTTOM - TOP), 1)

    def path(self, points: Sequence[tuple[int, float]]) -> str:
        """An SVG path through the points (``M x,y L x,y ...``)."""
        steps = []
        for index, (at, value) in enumerate(points):
            steps.append(f"{'M' if index == 0 else 'L'}{self.x(at):g},{self.y(value):g}")
        return " ".join(steps)


def _clock(at_ms: int, tz: tzinfo) -> str:
    return datetime.fromtimestamp(at_ms / 1000, tz).strftime("%H:%M")


def _seconds_clock(at_ms: int, tz: tzinfo) -> str:
    return datetime.fromtimestamp(at_ms / 1000, tz).strftime("%H:%M:%S")


def _axes(chart: Chart, frame: Frame, tz: tzinfo) -> None:
    chart.x_ticks = _time_ticks(frame, tz)
    chart.y_ticks = [Tick(frame.y(frame.top * share), f"{frame.top * share:g}") for share in (0, 0.5, 1)]


def _time_ticks(frame: Frame, tz: tzinfo) -> list[Tick]:
    step = next((s for s in TICK_STEPS_MS if frame.span // s < MAX_TICKS), TICK_STEPS_MS[-1])
    label = _clock if step >= 60_000 else _seconds_clock
    first = frame.start + (-frame.start) % step
    return [Tick(frame.x(at), label(at, tz)) for at in range(first, frame.now + 1, step)]


def _pairs(samples: Sequence[Sample]) -> zip:
    """Each sample with the one after it."""
    return zip(samples, samples[1:], strict=False)


def _recent(samples: Sequence[Sample], now: int) -> list[Sample]:
    return [sample for sample in samples if now - WINDOW_MS <= sample.at_ms <= now]


def renews_chart(samples: Sequence[Sample], now: int, tz: tzinfo) -> Chart:
    """Renews per minute against the threshold, with self-preservation's stretches and evictions."""
    taken = _recent(samples, now)
    chart = Chart(
        "renews",
        "Renews per minute against the threshold",
        "Heartbeats received in the last minute and the threshold below which self-preservation "
        "keeps expired leases; shaded: self-preservation held eviction; triangles: evictions.",
    )
    top = _top(max(s.renews_last_minute, s.renews_threshold) for s in taken)
    frame = Frame.of(taken, now, top)
    _axes(chart, frame, tz)
    if not taken:
        return chart
    for key, label, style, values in (
        ("renews", "Renews (last min)", "line-solid", [(s.at_ms, s.renews_last_minute) for s in taken]),
        ("threshold", "Renews threshold", "line-dashed", [(s.at_ms, s.renews_threshold) for s in taken]),
    ):
        chart.lines.append(Line(key, label, style, frame.path(values), len(values), values[-1][1]))
    for start, end in holding_stretches(taken):
        x = frame.x(start)
        chart.bands.append(
            Band(
                x,
                max(frame.x(end) - x, 1.0),
                f"Self-preservation held eviction {_seconds_clock(start, tz)}–{_seconds_clock(end, tz)}",
                start,
                end,
            )
        )
    # Evictions between each sample and the one before it (a restart's reset counts as none).
    evicted = [0] + [max(after.evictions - before.evictions, 0) for before, after in _pairs(taken)]
    chart.markers = [
        Marker(frame.x(s.at_ms), TOP, count, f"{count} evicted by {_seconds_clock(s.at_ms, tz)}")
        for s, count in zip(taken, evicted, strict=True)
        if count
    ]
    chart.columns = ["Time", "Renews (last min)", "Renews threshold", "Self-preservation holding", "Evicted"]
    chart.rows = [
        [
            _seconds_clock(s.at_ms, tz),
            str(s.renews_last_minute),
            str(s.renews_threshold),
            "yes" if s.preservation_holding else "no",
            str(count),
        ]
        for s, count in zip(taken, evicted, strict=True)
    ]
    return chart


# UP plain, every other status a pattern of its own (the stack reads in grey print too).
STATUS_PATTERNS = {
    "UP": "",
    "STARTING": "hatch",
    "OUT_OF_SERVICE": "cross",
    "DOWN": "dots",
    "UNKNOWN": "bars",
}


def statuses_chart(samples: Sequence[Sample], now: int, tz: tzinfo) -> Chart:
    """Instances by status, stacked (UP at the bottom)."""
    taken = _recent(samples, now)
    chart = Chart(
        "statuses",
        "Instances by status",
        "Registered instances by status, stacked: UP at the bottom, then STARTING, OUT_OF_SERVICE, "
        "DOWN and UNKNOWN, each with its own fill pattern.",
    )
    frame = Frame.of(taken, now, _top(s.instances for s in taken))
    _axes(chart, frame, tz)
    if not taken:
        return chart
    below = [0] * len(taken)
    for index, status in enumerate(STATUS_ORDER):
        above = [base + s.statuses[index] for base, s in zip(below, taken, strict=True)]
        if any(s.statuses[index] for s in taken):
            upper = [(s.at_ms, value) for s, value in zip(taken, above, strict=True)]
            lower = [(s.at_ms, value) for s, value in zip(taken, below, strict=True)]
            path = frame.path(upper) + " " + frame.path(list(reversed(lower))).replace("M", "L", 1) + " Z"
            chart.areas.append(Area(status, status, STATUS_PATTERNS[status], path, taken[-1].statuses[index]))
        below = above
    chart.columns = ["Time", *STATUS_ORDER]
    chart.rows = [[_seconds_clock(s.at_ms, tz), *(str(count) for count in s.statuses)] for s in taken]
    return chart


def writes_chart(samples: Sequence[Sample], now: int, tz: tzinfo) -> Chart:
    """Registrations, cancels and evictions per minute."""
    taken = _recent(samples, now)
    chart = Chart(
        "writes",
        "Registrations, cancels and evictions per minute",
        "Each a rate per minute between two samples.",
    )
    series = [
        ("registrations", "Registrations", "line-solid", per_minute(taken, "registrations")),
        ("cancels", "Cancels", "line-dashed", per_minute(taken, "cancels")),
        ("evictions", "Evictions", "line-dotted", per_minute(taken, "evictions")),
    ]
    frame = Frame.of(taken, now, _top(rate for *_, values in series for _, rate in values))
    _axes(chart, frame, tz)
    for key, label, style, values in series:
        if values:
            chart.lines.append(
                Line(key, label, style, frame.path(values), len(values), round(values[-1][1], 1))
            )
    chart.columns = ["Time", "Registrations/min", "Cancels/min", "Evictions/min"]
    chart.rows = [
        [_seconds_clock(at, tz), *(f"{values[i][1]:.1f}" for *_, values in series)]
        for i, (at, _) in enumerate(series[0][3])
    ]
    return chart


PEER_STYLES = ("line-solid", "line-dashed", "line-dotted", "line-dashdot")


def _line_per_name(
    chart: Chart,
    taken: list[Sample],
    now: int,
    tz: tzinfo,
    names: list[str],
    read: Callable[[Sample, str], float | None],
    missing: str = "",
) -> Chart:
    """One line a name (a peer, a region), each in its own dash pattern: ``read(sample, name)`` is the
    name's value in a sample, None where it has none (no point, and ``missing`` in the table)."""
    per_name = {name: [(s.at_ms, v) for s in taken if (v := read(s, name)) is not None] for name in names}
    frame = Frame.of(taken, now, _top(v for values in per_name.values() for _, v in values))
    _axes(chart, frame, tz)
    for index, name in enumerate(names):
        values = per_name[name]
        if values:
            style = PEER_STYLES[index % len(PEER_STYLES)]
            chart.lines.append(Line(name, name, style, frame.path(values), len(values), values[-1][1]))
    chart.columns = ["Time", *names]
    chart.rows = [
        [
            _seconds_clock(s.at_ms, tz),
            *(missing if (v := read(s, name)) is None else f"{v:g}" for name in names),
        ]
        for s in taken
    ]
    return chart


def peers_charts(samples: Sequence[Sample], now: int, tz: tzinfo) -> list[Chart]:
    """Per peer, the replication queue's length and its oldest item's age; [] without peers."""
    taken = _recent(samples, now)
    urls = sorted({peer.url for s in taken for peer in s.peers})
    if not urls:
        return []

    def reader(attribute: str, unit: int) -> Callable[[Sample, str], float | None]:
        def read(sample: Sample, url: str) -> float | None:
            found = next((peer for peer in sample.peers if peer.url == url), None)
            return None if found is None else getattr(found, attribute) / unit

        return read

    summary = "One line a peer, each in its own dash pattern."
    return [
        _line_per_name(
            Chart("peer-queue", "Replication queue per peer (items)", summary),
            taken,
            now,
            tz,
            urls,
            reader("queued", 1),
        ),
        _line_per_name(
            Chart("peer-lag", "Replication lag per peer (oldest queued item, seconds)", summary),
            taken,
            now,
            tz,
            urls,
            reader("lag_ms", 1000),
        ),
    ]


def regions_chart(samples: Sequence[Sample], now: int, tz: tzinfo) -> Chart | None:
    """Per remote region, the age of its last successful fetch (seconds); None without regions."""
    taken = _recent(samples, now)
    names = sorted({region.region for s in taken for region in s.regions})
    if not names:
        return None

    def age(sample: Sample, name: str) -> float | None:
        found = next((region for region in sample.regions if region.region == name), None)
        return None if found is None or found.age_ms is None else found.age_ms / 1000

    chart = Chart(
        "regions",
        "Remote regions: age of the last successful fetch (seconds)",
        "One line a region, each in its own dash pattern; a gap: never fetched yet.",
    )
    return _line_per_name(chart, taken, now, tz, names, age, missing="never")


def node_charts(
    samples: Sequence[Sample], now: int, tz: tzinfo, pause: Callable[[], None] = lambda: None
) -> list[Chart]:
    """Every chart of the status page, in page order (peers and regions only when configured);
    ``pause`` is called after each (a turn for others while a page is drawn)."""
    charts = []
    for draw in (renews_chart, statuses_chart, writes_chart):
        charts.append(draw(samples, now, tz))
        pause()
    charts.extend(peers_charts(samples, now, tz))
    pause()
    regions = regions_chart(samples, now, tz)
    if regions is not None:
        charts.append(regions)
    return charts


# The instance timeline: a status row above a renewals row (templates/dashboard/_instance_chart.html).
TIMELINE_HEIGHT = 96


def instance_chart(
    changes: Sequence[Change],
    gaps: Sequence[tuple[int, int]],
    status: str,
    last_renewal_ts: int,
    gap_after_ms: int,
    now: int,
    tz: tzinfo,
) -> Chart:
    """One instance's last hour: its status over time (from its changes, ``status`` now) and the
    stretches with no renewal for longer than ``gap_after_ms`` (``gaps``, and one still open when
    the last renewal is that old)."""
    chart = Chart(
        "instance",
        "Status and renewals over the last hour",
        "Top row: the instance's status over time, one fill pattern a status. Bottom row, hatched: "
        "stretches with no renewal for longer than one and a half renewal intervals.",
        height=TIMELINE_HEIGHT,
        plot_bottom=TIMELINE_HEIGHT - BOTTOM,
    )
    frame = Frame(now, 1)
    chart.x_ticks = _time_ticks(frame, tz)
    window = [change for change in changes if frame.start <= change.timestamp <= now]
    # The status at the window's start: what the first change in it changed from, else the status now.
    start_status = (window[0].old_status if window else status) or ""
    edges = [(frame.start, start_status)] + [(change.timestamp, change.new_status or "") for change in window]
    for (begin, state), (end, _) in zip(edges, [*edges[1:], (now, "")], strict=True):
        if end <= begin or not state:
            continue  # no time in it, or not registered (between a cancel and a registration)
        x = frame.x(begin)
        chart.segments.append(
            Segment(
                x,
                max(frame.x(end) - x, 1.0),
                state,
                STATUS_PATTERNS.get(state, "bars"),
                f"{state} {_seconds_clock(begin, tz)}–{_seconds_clock(end, tz)}",
                begin,
                end,
            )
        )
    stretches = [(begin, end) for begin, end in gaps if end >= frame.start]
    if now - last_renewal_ts > gap_after_ms:
        stretches.append((last_renewal_ts, now))
    for begin, end in stretches:
        x = frame.x(begin)
        seconds = (end - begin) // 1000
        chart.bands.append(
            Band(
                x,
                max(frame.x(end) - x, 1.0),
                f"No renewal for {seconds} s ({_seconds_clock(begin, tz)}–{_seconds_clock(end, tz)})",
                begin,
                end,
            )
        )
    chart.columns = ["Time", "Change", "From", "To"]
    chart.rows = [
        [
            _seconds_clock(change.timestamp, tz),
            change.action,
            change.old_status or "",
            change.new_status or "",
        ]
        for change in window
    ]
    return chart
