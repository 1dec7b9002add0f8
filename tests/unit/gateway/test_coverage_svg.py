"""The coverage page's pure logic: axis geometry, bars, the handoff replay, escaping and paging."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest

from tiered_kafka.modes import Mode
from tiered_kafka.registry import Gap, PartitionInfo
from tiered_kafka_gateway.errors import GatewayError
from tiered_kafka_gateway.ui import handoffs, pages, svg
from tiered_kafka_gateway.ui.data import Page, PartitionView, TopicRow, page_of
from tiered_kafka_gateway.ui.handoffs import Layout

NS = "{http://www.w3.org/2000/svg}"


def seg(first: int, last: int, ts: int = -1) -> svg.SegmentSpan:
    return svg.SegmentSpan(first, last, ts, ts + (last - first), f"segment {first}..{last}")


def bar(segments: list[svg.SegmentSpan], gaps: list[Gap], kafka: tuple[int, int] | None = None, coverage: int | None = None) -> svg.BarData:
    layout = Layout((segments[0].first_offset, segments[-1].last_offset), gaps, kafka)
    return svg.BarData(0, "p0", segments, gaps, kafka, coverage, [m for mode in Mode for m in handoffs.marks(mode, layout)])


def rects(markup: str, cls: str) -> list[ET.Element]:
    return [r for r in ET.fromstring(markup).iter(f"{NS}rect") if cls in (r.get("class") or "").split()]


def test_axis_maps_offsets_linearly_with_an_exclusive_end_and_a_minimum_width() -> None:
    axis = svg.Axis(100, 300, x0=50, width=400)
    assert (axis.x(100), axis.x(200), axis.x(300)) == (50, 250, 450)
    assert axis.x(0) == 50 and axis.x(10**9) == 450  # clipped to the axis
    assert axis.span(150, 200) == (150, 100)
    assert axis.span(150, 150) == (150, svg.MIN_WIDTH)
    assert axis.span(300, 300) == (450 - svg.MIN_WIDTH, svg.MIN_WIDTH)  # kept inside
    assert svg.Axis.spanning([7, 7]) == svg.Axis(7, 8)


def test_chart_places_segments_gaps_and_kafka_where_their_offsets_map() -> None:
    chart = svg.chart([bar([seg(0, 99), seg(200, 299)], [Gap(100, 199, "lost <b>", 0)], kafka=(150, 400), coverage=0)])
    root = ET.fromstring(chart)
    lo, hi, x0, width = (float(root.get(a) or "nan") for a in ("data-lo", "data-hi", "data-x0", "data-width"))
    assert (lo, hi) == (0, 400)
    (gap,) = rects(chart, "gap")
    assert float(gap.get("x") or 0) == pytest.approx(x0 + 100 * width / 400)
    assert float(gap.get("width") or 0) == pytest.approx(100 * width / 400)
    assert gap.findtext(f"{NS}title") == "gap 100..199: lost <b>"  # escaped in the markup, text in the DOM
    assert [(r.get("data-start"), r.get("data-end")) for r in rects(chart, "seg")] == [("0", "99"), ("200", "299")]
    (kafka,) = rects(chart, "kafka")
    assert float(kafka.get("x") or 0) == pytest.approx(x0 + 150 * width / 400)


def test_many_segments_are_drawn_as_runs_of_contiguous_segments() -> None:
    many = [seg(i * 10, i * 10 + 9) for i in range(svg.MAX_SEGMENT_RECTS + 2)]
    cut = many[:100] + many[101:]  # a hole: two runs
    chart = svg.chart([bar(cut, [Gap(1000, 1009, "lost", 0)])])
    assert rects(chart, "seg") == []
    assert [(r.get("data-start"), r.get("data-end")) for r in rects(chart, "run")] == [("0", "999"), ("1010", str(svg.MAX_SEGMENT_RECTS * 10 + 19))]


def test_time_axis_draws_segments_by_timestamps_and_a_gap_between_its_neighbours() -> None:
    chart = svg.chart([bar([seg(0, 9, ts=1000), seg(20, 29, ts=5000)], [Gap(10, 19, "lost", 0)], kafka=(0, 30))], time_axis=True)
    root = ET.fromstring(chart)
    assert (root.get("data-axis"), root.get("data-lo"), root.get("data-hi")) == ("time", "1000", "5010")
    (gap,) = rects(chart, "gap")
    axis = svg.Axis(1000, 5010)
    assert float(gap.get("x") or 0) == pytest.approx(axis.x(1009))
    assert rects(chart, "kafka") == [] and rects(chart, "handoff") == []


@pytest.mark.parametrize(
    ("mode", "expected"),
    [
        # remote 0..999, gap 200..299, Kafka holds 500..1499: Kafka cannot fill the gap
        (Mode.REMOTE_ONLY, [("start", 0), ("skip", 200), ("wait", 1000)]),
        (Mode.KAFKA_ONLY, [("start", 500)]),
        (Mode.REMOTE_PREFERRED, [("start", 0), ("kafka", 200), ("remote", 200), ("skip", 200), ("kafka", 1000)]),
        (Mode.KAFKA_PREFERRED, [("start", 0), ("remote", 0), ("skip", 200), ("kafka", 500)]),
    ],
)
def test_handoff_marks_replay_the_sdk_handoff(mode: Mode, expected: list[tuple[str, int]]) -> None:
    layout = Layout((0, 999), [Gap(200, 299, "lost", 0)], (500, 1500))
    assert [(m.kind, m.offset) for m in handoffs.marks(mode, layout)] == expected


def test_a_gap_kafka_still_holds_is_read_from_kafka_by_the_modes_that_read_it() -> None:
    layout = Layout((0, 999), [Gap(200, 299, "lost", 0)], (100, 1500))
    assert [(m.kind, m.offset) for m in handoffs.marks(Mode.REMOTE_PREFERRED, layout)] == [("start", 0), ("kafka", 200)]
    assert [(m.kind, m.offset) for m in handoffs.marks(Mode.REMOTE_ONLY, layout)][1] == ("skip", 200)
    assert handoffs.marks(Mode.KAFKA_ONLY, Layout((0, 9), [], None)) == []  # reads nothing: no Kafka


def view(topic: str, partition: int, gaps: list[Gap]) -> PartitionView:
    return PartitionView(topic, partition, PartitionInfo(0, 99, 1, 1000, 0), None, gaps, [], kafka=None)


def test_pages_escape_registry_text_and_say_when_nothing_is_visible() -> None:
    html = pages.partition_page("c", view("t", 0, [Gap(10, 19, "<script>x</script>", 0)]), [], Page(0, 1, 0), 100)
    assert "<script>" not in html and "&lt;script&gt;x&lt;/script&gt;" in html
    empty = pages.overview_page("c", [], Page(0, 1, 0), True, False)
    assert 'class="empty"' in empty
    row = TopicRow("t", 300, [view("t", p, []) for p in range(200)])
    partial = pages.overview_page("c", [row], Page(0, 2, 300), True, False)
    assert "200 of 300 (p0..p199)" in partial and 'rel="next" href="?page=1"' in partial


def test_a_page_outside_the_list_is_a_clear_error() -> None:
    assert page_of(0, 100, 0) == Page(0, 1, 0)
    assert page_of(250, 100, 2) == Page(2, 3, 250)
    with pytest.raises(GatewayError, match="page 3 does not exist: there are 3"):
        page_of(250, 100, 3)
