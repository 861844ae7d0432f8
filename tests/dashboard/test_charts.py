"""The console's charts as geometry (registry/console_data/charts.py), from a history on a fake clock."""

from __future__ import annotations

from datetime import UTC

from registry.console_data.charts import (
    HEIGHT,
    LEFT,
    RIGHT,
    TOP,
    WIDTH,
    Frame,
    instance_chart,
    nice_ceiling,
    node_charts,
    peers_charts,
    regions_chart,
    renews_chart,
    statuses_chart,
    writes_chart,
)
from registry.domain.changes import Change
from registry.domain.history import PeerPoint, RegionPoint, Sample, status_tuple

T0 = 1_796_000_400_000  # 01:00 UTC, on a ten-minute boundary
SEC = 1_000
MIN = 60 * SEC


def hour(**overrides):
    """360 samples, 10 s apart, ending at T0 + 1 h: renews fall below the threshold for minutes
    20-30 (self-preservation holds), 4 instances are evicted at minute 35 and then 2 come back DOWN."""
    samples = []
    evictions = registrations = 0
    for n in range(1, 361):
        at = T0 + n * 10 * SEC
        minute = n // 6
        holding = 20 <= minute < 30
        if minute == 35 and n % 6 == 0:
            evictions += 4
        if minute == 40 and n % 6 == 0:
            registrations += 2
        samples.append(
            Sample(
                at_ms=at,
                renews_last_minute=40 if holding else 200,
                renews_threshold=170,
                preservation_holding=holding,
                statuses=status_tuple({"UP": 100 if minute < 35 else 96, "DOWN": 2 if minute >= 40 else 0}),
                registrations=registrations,
                cancels=0,
                evictions=evictions,
                **overrides,
            )
        )
    return samples


NOW = T0 + 60 * MIN


def test_nice_ceiling():
    assert [nice_ceiling(v) for v in (0, 1, 3, 7, 12, 200, 201, 2_400)] == [1, 1, 5, 10, 20, 200, 250, 2_500]


def test_the_frame_puts_the_hour_across_and_zero_at_the_bottom():
    frame = Frame(NOW, 200)
    assert frame.x(NOW - 60 * MIN) == LEFT and frame.x(NOW) == WIDTH - RIGHT
    assert frame.x(NOW - 2 * 60 * MIN) == LEFT  # older than the window: at its edge
    assert frame.y(0) == HEIGHT - 24 and frame.y(200) == TOP and frame.y(500) == TOP
    assert frame.path([(NOW - 60 * MIN, 0), (NOW, 200)]) == f"M{LEFT},{HEIGHT - 24} L{WIDTH - RIGHT},{TOP}"


def test_a_young_nodes_charts_span_its_lifetime_with_finer_ticks():
    samples = hour()[-18:]  # its last three minutes
    frame = Frame.of(samples, NOW, 10)
    assert frame.start == samples[0].at_ms and frame.x(samples[0].at_ms) == LEFT
    chart = renews_chart(samples, NOW, UTC)
    assert [tick.label for tick in chart.x_ticks] == [
        "01:57:30",
        "01:58:00",
        "01:58:30",
        "01:59:00",
        "01:59:30",
        "02:00:00",
    ]
    # Never narrower than a minute.
    assert Frame.of(samples[-1:], NOW, 10).start == NOW - MIN


def test_renews_against_the_threshold_with_the_held_stretch_and_the_evictions():
    samples = hour()
    chart = renews_chart(samples, NOW, UTC)
    assert [(line.key, line.points, line.latest) for line in chart.lines] == [
        ("renews", 360, 200),
        ("threshold", 360, 170),
    ]
    # Self-preservation held from minute 20 until the first sample of minute 30.
    assert [(band.from_ms, band.to_ms) for band in chart.bands] == [(T0 + 20 * MIN, T0 + 30 * MIN)]
    band = chart.bands[0]
    assert band.x == Frame.of(samples, NOW, 250).x(T0 + 20 * MIN) and band.width > 0
    assert "held eviction" in band.title
    assert [marker.count for marker in chart.markers] == [4]
    assert chart.markers[0].title.startswith("4 evicted by")
    assert len(chart.rows) == 360 and chart.rows[0][0] == "01:00:10"
    labels = ["01:10", "01:20", "01:30", "01:40", "01:50", "02:00"]  # the first sample is at 01:00:10
    assert [tick.label for tick in chart.x_ticks] == labels


def test_instances_by_status_stack_up_at_the_bottom():
    chart = statuses_chart(hour(), NOW, UTC)
    assert [(area.key, area.latest) for area in chart.areas] == [("UP", 96), ("DOWN", 2)]
    assert all(area.path.endswith(" Z") for area in chart.areas)
    assert chart.columns == ["Time", "UP", "STARTING", "OUT_OF_SERVICE", "DOWN", "UNKNOWN"]
    assert chart.rows[-1] == ["02:00:00", "96", "0", "0", "2", "0"]


def test_writes_per_minute():
    chart = writes_chart(hour(), NOW, UTC)
    lines = {line.key: line for line in chart.lines}
    assert set(lines) == {"registrations", "cancels", "evictions"}
    assert lines["evictions"].points == 359
    # 4 evictions between two samples 10 s apart: 24 a minute.
    assert max(float(row[3]) for row in chart.rows) == 24.0


def test_no_peer_or_region_charts_without_them():
    assert peers_charts(hour(), NOW, UTC) == []
    assert regions_chart(hour(), NOW, UTC) is None
    assert [chart.key for chart in node_charts(hour(), NOW, UTC)] == ["renews", "statuses", "writes"]


def test_a_chart_a_peer_measure_and_one_for_regions():
    samples = hour(
        peers=(PeerPoint("http://b:8761/eureka/", 7, 2_500), PeerPoint("http://c:8761/eureka/", 0, 0)),
        regions=(RegionPoint("us-west", 30_000), RegionPoint("eu", None)),
    )
    queue, lag = peers_charts(samples, NOW, UTC)
    assert [line.key for line in queue.lines] == ["http://b:8761/eureka/", "http://c:8761/eureka/"]
    assert [line.latest for line in queue.lines] == [7, 0] and [line.latest for line in lag.lines] == [2.5, 0]
    assert queue.lines[0].style != queue.lines[1].style
    regions = regions_chart(samples, NOW, UTC)
    assert [line.key for line in regions.lines] == ["us-west"]  # "eu" was never fetched: no line
    assert regions.rows[-1][1:] == ["never", "30"]


def test_an_empty_history_draws_axes_only():
    chart = renews_chart([], NOW, UTC)
    assert chart.empty and chart.lines == [] and chart.x_ticks and chart.y_ticks


def test_an_instances_timeline_from_its_changes_and_gaps():
    start = NOW - 60 * MIN
    changes = [
        Change(1, start - 5 * MIN, "ORDERS", "i", "REGISTERED", None, "UP"),  # before the window
        Change(2, start + 10 * MIN, "ORDERS", "i", "STATUS_CHANGED", "UP", "DOWN"),
        Change(3, start + 20 * MIN, "ORDERS", "i", "CANCELLED", "DOWN", None),
        Change(4, start + 25 * MIN, "ORDERS", "i", "REGISTERED", None, "STARTING"),
        Change(5, start + 26 * MIN, "ORDERS", "i", "STATUS_CHANGED", "STARTING", "UP"),
    ]
    gaps = [(start - 10 * MIN, start - 9 * MIN), (start + 30 * MIN, start + 33 * MIN)]
    chart = instance_chart(changes, gaps, "UP", NOW - 10 * SEC, 45 * SEC, NOW, UTC)
    assert [(s.status, s.from_ms - start, s.to_ms - start) for s in chart.segments] == [
        ("UP", 0, 10 * MIN),
        ("DOWN", 10 * MIN, 20 * MIN),  # then not registered for 5 minutes: no segment
        ("STARTING", 25 * MIN, 26 * MIN),
        ("UP", 26 * MIN, 60 * MIN),
    ]
    assert [s.pattern for s in chart.segments] == ["", "dots", "hatch", ""]
    assert [s.status for s in chart.segment_statuses] == ["UP", "DOWN", "STARTING"]
    # The gap before the window is left out; the last renewal is recent: no open gap.
    assert [(b.from_ms - start, b.to_ms - start) for b in chart.bands] == [(30 * MIN, 33 * MIN)]
    assert chart.bands[0].title.startswith("No renewal for 180 s")
    assert len(chart.rows) == 4


def test_an_instance_with_no_change_in_the_hour_and_an_open_gap():
    chart = instance_chart([], [], "OUT_OF_SERVICE", NOW - 2 * MIN, 45 * SEC, NOW, UTC)
    assert [(s.status, s.from_ms, s.to_ms) for s in chart.segments] == [
        ("OUT_OF_SERVICE", NOW - 60 * MIN, NOW)
    ]
    assert [(b.from_ms, b.to_ms) for b in chart.bands] == [(NOW - 2 * MIN, NOW)]
