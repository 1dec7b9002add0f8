"""Axes and partition bars of the coverage page, as inline SVG (pure: views in, markup out).

One axis per picture, shared by every bar in it, so bars compare at a glance. The offset axis maps
offset ``o`` to ``x0 + (o - lo) * width / (hi - lo)``, ``hi`` exclusive; a run of offsets
``start..end`` (Kafka's inclusive ranges) covers ``[x(start), x(end + 1))``, at least
:data:`MIN_WIDTH` pixels so a one-offset gap stays visible. The time axis maps epoch milliseconds
the same way; a segment covers its ``[min_timestamp, max_timestamp]``.

A bar (``<g class="bar" data-partition=P>``) holds, each element with a ``<title>`` shown on hover:

    rect.track     the axis (background)
    rect.seg       a remote segment (green); rect.run when a bar has more than MAX_SEGMENT_RECTS
                   segments: one rect per run of contiguous segments
    rect.gap       a recorded gap (red), its reason in the title; data-start / data-end its offsets
    rect.kafka     Kafka's log start offset .. high watermark (blue, offset axis only)
    line.coverage  the coverage start (offset axis only)
    rect.handoff   a mark of ``handoffs.marks`` in its mode's lane, data-kind its kind (offset axis only)

The ``<svg>`` carries ``data-lo``, ``data-hi``, ``data-x0``, ``data-width`` and ``data-axis``: the
mapping above, for a reader (or a test) to place an offset itself.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass
from html import escape

from tiered_kafka.modes import Mode
from tiered_kafka.registry import Gap
from tiered_kafka_gateway.ui.handoffs import Mark

MIN_WIDTH = 2.0
MAX_SEGMENT_RECTS = 300
LABEL_WIDTH = 70.0
PLOT_WIDTH = 900.0
BAR_HEIGHT = 18.0
LANE_HEIGHT = 4.0
MODE_COLORS = {Mode.REMOTE_ONLY: "#2a7", Mode.REMOTE_PREFERRED: "#07c", Mode.KAFKA_PREFERRED: "#a5c", Mode.KAFKA_ONLY: "#555"}


@dataclass(frozen=True, slots=True)
class Axis:
    """``lo`` .. ``hi`` (exclusive) onto ``x0`` .. ``x0 + width`` pixels (module docstring)."""

    lo: int
    hi: int
    x0: float = LABEL_WIDTH
    width: float = PLOT_WIDTH

    @classmethod
    def spanning(cls, values: Sequence[int]) -> Axis:
        """The axis from the smallest value to the largest (one unit wider when they are equal)."""
        if not values:
            return cls(0, 1)
        lo, hi = min(values), max(values)
        return cls(lo, hi if hi > lo else lo + 1)

    def x(self, value: int) -> float:
        clipped = min(max(value, self.lo), self.hi)
        return self.x0 + (clipped - self.lo) * self.width / (self.hi - self.lo)

    def span(self, start: int, end_exclusive: int) -> tuple[float, float]:
        """(x, width) of ``[start, end_exclusive)``, at least MIN_WIDTH wide (kept inside the axis)."""
        x, right = self.x(start), self.x(end_exclusive)
        width = max(right - x, MIN_WIDTH)
        return min(x, self.x0 + self.width - width), width


@dataclass(frozen=True, slots=True)
class SegmentSpan:
    """A remote segment as a bar draws it: its registered offsets and timestamps, and a hover text."""

    first_offset: int
    last_offset: int
    min_timestamp: int
    max_timestamp: int
    text: str


@dataclass(frozen=True, slots=True)
class BarData:
    """One partition's picture (offsets inclusive, as Kafka's; None: unknown or absent)."""

    partition: int
    href: str
    segments: Sequence[SegmentSpan]
    gaps: Sequence[Gap]
    kafka: tuple[int, int] | None  # (log start offset, high watermark)
    coverage_start: int | None
    marks: Sequence[Mark]
    note: str = ""  # e.g. Kafka's error for this partition


def offset_bounds(bar: BarData) -> list[int]:
    """The offsets a bar needs on its axis (ends exclusive)."""
    out = [v for s in bar.segments for v in (s.first_offset, s.last_offset + 1)]
    out += [v for g in bar.gaps for v in (g.start_offset, g.end_offset + 1)]
    if bar.kafka is not None:
        out += list(bar.kafka)
    if bar.coverage_start is not None:
        out.append(bar.coverage_start)
    return out


def time_bounds(bar: BarData) -> list[int]:
    return [v for s in bar.segments if _timed(s) for v in (s.min_timestamp, s.max_timestamp + 1)]


def chart(bars: Sequence[BarData], *, time_axis: bool = False) -> str:
    """One ``<svg>`` with a shared axis and a bar per partition (module docstring)."""
    axis = Axis.spanning([v for b in bars for v in (time_bounds(b) if time_axis else offset_bounds(b))])
    lanes = 0 if time_axis else len(Mode)
    row = BAR_HEIGHT + lanes * LANE_HEIGHT + 8
    top = 22.0
    height = top + row * len(bars) + 4
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="coverage" width="{axis.x0 + axis.width + 10:.0f}" height="{height:.0f}" '
        f'data-axis="{"time" if time_axis else "offset"}" data-lo="{axis.lo}" data-hi="{axis.hi}" data-x0="{axis.x0}" data-width="{axis.width}">',
        _ticks(axis, time_axis, height),
    ]
    for i, bar in enumerate(bars):
        parts.append(_bar(bar, axis, top + i * row, time_axis))
    parts.append("</svg>")
    return "".join(parts)


def _bar(bar: BarData, axis: Axis, y: float, time_axis: bool) -> str:
    out = [
        f'<g class="bar" data-partition="{bar.partition}">',
        f'<a href="{escape(bar.href)}"><text x="4" y="{y + 13:.1f}" class="label">p{bar.partition}</text></a>',
        f'<rect class="track" x="{axis.x0}" y="{y:.1f}" width="{axis.width}" height="{BAR_HEIGHT}"><title>{escape(bar.note or f"partition {bar.partition}")}</title></rect>',
    ]
    if not time_axis and bar.kafka is not None:
        low, high = bar.kafka
        x, w = axis.span(low, max(high, low + 1))
        out.append(_rect("kafka", x, y + BAR_HEIGHT - 5, w, 5, f"Kafka: log start {low}, high watermark {high}", start=low, end=high - 1))
    gaps = [
        _rect("gap", x, y, w, BAR_HEIGHT - 5, f"gap {gap.start_offset}..{gap.end_offset}: {gap.reason}", start=gap.start_offset, end=gap.end_offset)
        for gap, (x, w) in _gap_spans(bar, axis, time_axis)
    ]
    # offsets: a gap and a segment never share one; time: a gap goes under the segments written around it
    out += (gaps + _segments(bar, axis, y, time_axis)) if time_axis else (_segments(bar, axis, y, time_axis) + gaps)
    if not time_axis:
        if bar.coverage_start is not None:
            cx = axis.x(bar.coverage_start)
            out.append(
                f'<line class="coverage" data-offset="{bar.coverage_start}" x1="{cx:.2f}" x2="{cx:.2f}" y1="{y - 2:.1f}" y2="{y + BAR_HEIGHT + 2:.1f}">'
                f"<title>coverage start {bar.coverage_start}</title></line>"
            )
        for lane, mode in enumerate(Mode):
            ly = y + BAR_HEIGHT + 1 + lane * LANE_HEIGHT
            for mark in (m for m in bar.marks if m.mode is mode):
                x, w = axis.span(mark.offset, (mark.end if mark.end is not None else mark.offset) + 1)
                out.append(
                    f'<rect class="handoff" data-kind="{mark.kind}" data-mode="{mode.value}" data-offset="{mark.offset}" x="{x:.2f}" y="{ly:.1f}" '
                    f'width="{max(w, 3):.2f}" height="{LANE_HEIGHT - 1}" fill="{MODE_COLORS[mode]}"><title>{mode.value}: {escape(mark.text)}</title></rect>'
                )
    out.append("</g>")
    return "".join(out)


def _segments(bar: BarData, axis: Axis, y: float, time_axis: bool) -> list[str]:
    height = BAR_HEIGHT - 5
    if time_axis:
        timed = [s for s in bar.segments if _timed(s)]
        return [_rect("seg", *_at(axis.span(s.min_timestamp, s.max_timestamp + 1), y), height, s.text) for s in timed]
    if len(bar.segments) <= MAX_SEGMENT_RECTS:
        return [_rect("seg", *_at(axis.span(s.first_offset, s.last_offset + 1), y), height, s.text, start=s.first_offset, end=s.last_offset) for s in bar.segments]
    runs: list[list[SegmentSpan]] = []
    for s in bar.segments:
        if runs and runs[-1][-1].last_offset + 1 == s.first_offset:
            runs[-1].append(s)
        else:
            runs.append([s])
    return [
        _rect("run", *_at(axis.span(r[0].first_offset, r[-1].last_offset + 1), y), height, f"{len(r)} segments, offsets {r[0].first_offset}..{r[-1].last_offset}", start=r[0].first_offset, end=r[-1].last_offset)
        for r in runs
    ]


def _at(span: tuple[float, float], y: float) -> tuple[float, float, float]:
    """(x, y, width) for ``_rect``."""
    return span[0], y, span[1]


def _gap_spans(bar: BarData, axis: Axis, time_axis: bool) -> list[tuple[Gap, tuple[float, float]]]:
    """Each gap's (x, width): its offsets; on the time axis, from the timestamps of the segments
    around it (the last before, the first after) when both are known, else it is not drawn."""
    if not time_axis:
        return [(g, axis.span(g.start_offset, g.end_offset + 1)) for g in bar.gaps]
    out = []
    for g in bar.gaps:
        before = [s for s in bar.segments if s.last_offset < g.start_offset and _timed(s)]
        after = [s for s in bar.segments if s.first_offset > g.end_offset and _timed(s)]
        if before and after:
            out.append((g, axis.span(before[-1].max_timestamp, max(after[0].min_timestamp, before[-1].max_timestamp + 1))))
    return out


def _rect(cls: str, x: float, y: float, w: float, h: float, title: str, *, start: int | None = None, end: int | None = None) -> str:
    data = "" if start is None else f' data-start="{start}" data-end="{end}"'
    return f'<rect class="{cls}"{data} x="{x:.2f}" y="{y:.1f}" width="{w:.2f}" height="{h}"><title>{escape(title)}</title></rect>'


def _timed(s: SegmentSpan) -> bool:
    return 0 <= s.min_timestamp <= s.max_timestamp


def _ticks(axis: Axis, time_axis: bool, height: float, count: int = 5) -> str:
    out = []
    values = sorted({axis.lo + (axis.hi - axis.lo) * i // count for i in range(count + 1)})
    count = len(values) - 1
    for i, value in enumerate(values):
        x = axis.x(value)
        label = format_ms(value) if time_axis else str(value)
        anchor = "start" if i == 0 else "end" if i == count else "middle"
        out.append(f'<line class="tick" x1="{x:.2f}" x2="{x:.2f}" y1="14" y2="{height:.0f}"/><text class="tick" x="{x:.2f}" y="11" text-anchor="{anchor}">{escape(label)}</text>')
    return "".join(out)


def format_ms(ms: int | None) -> str:
    """Epoch milliseconds as UTC (``-`` when unknown)."""
    if ms is None or ms < 0:
        return "-"
    return dt.datetime.fromtimestamp(ms / 1000, dt.UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + "Z"
