"""Translation of Spark's pushed filters (``tiered_kafka.spark.pushdown``) and the narrowing of a
partition's offsets. PySpark's own ``Filter`` classes are used; the gateway's offsets-for-timestamp
is a recorded function (pure logic; the integration test reads through the real stack)."""

from __future__ import annotations

import datetime as dt

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pyspark.sql.datasource import (
    EqualNullSafe,
    EqualTo,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    IsNotNull,
    LessThan,
    LessThanOrEqual,
    Not,
    StringStartsWith,
)

from tiered_kafka.spark.pushdown import Pushdown, epoch_micros, narrow, narrow_pieces, subtract, translate

UTC = dt.UTC


def at_ms(ms: int, extra_micros: int = 0) -> dt.datetime:
    return dt.datetime(1970, 1, 1, tzinfo=UTC) + dt.timedelta(milliseconds=ms, microseconds=extra_micros)


def test_partition_and_offset_filters_are_consumed_and_exact() -> None:
    filters = [EqualTo(("partition",), 2), GreaterThanOrEqual(("offset",), 10), LessThan(("offset",), 20), IsNotNull(("offset",))]
    pushed, remaining = translate(filters)
    assert pushed == Pushdown(partitions=frozenset({2}), offset_start=10, offset_end=20)
    assert remaining == [filters[3]] and remaining[0] is filters[3]


def test_partition_in_and_ranges_intersect() -> None:
    pushed, remaining = translate([In(("partition",), (0, 1, 3)), GreaterThan(("partition",), 0), LessThanOrEqual(("partition",), 3)])
    assert remaining == []
    assert [p for p in range(6) if pushed.keeps("t", p)] == [1, 3]


def test_topic_filters() -> None:
    pushed, remaining = translate([In(("topic",), ("a", "b")), EqualTo(("topic",), "b")])
    assert remaining == [] and pushed.topics == frozenset({"b"})
    assert pushed.keeps("b", 0) and not pushed.keeps("a", 0)


def test_offset_in_uses_its_bounds_and_stays_with_spark() -> None:
    f = In(("offset",), (5, 9, 7))
    pushed, remaining = translate([f])
    assert (pushed.offset_start, pushed.offset_end) == (5, 10)
    assert remaining == [f]


def test_offset_comparisons() -> None:
    assert translate([GreaterThan(("offset",), 4)])[0].offset_start == 5
    assert translate([LessThanOrEqual(("offset",), 4)])[0].offset_end == 5
    assert translate([EqualTo(("offset",), 4)])[0].offsets(0, 100) == (4, 5)
    assert translate([LessThan(("offset",), 0)])[0].offsets(0, 100) == (0, 0)


@pytest.mark.parametrize(
    "f",
    [
        Not(EqualTo(("partition",), 1)),
        EqualTo(("partition",), True),
        EqualTo(("partition",), "1"),
        EqualTo(("offset",), None),
        EqualNullSafe(("offset",), 3),
        EqualTo(("value",), b"x"),
        StringStartsWith(("topic",), "a"),
        EqualTo(("headers", "key"), "k"),
        GreaterThan(("timestamp",), 5),
    ],
)
def test_filters_not_understood_are_ignored_and_returned(f: object) -> None:
    pushed, remaining = translate([f])
    assert pushed.is_noop
    assert remaining == [f]


def test_timestamp_filters_bound_in_ms_and_stay_with_spark() -> None:
    filters = [GreaterThanOrEqual(("timestamp",), at_ms(1000)), LessThan(("timestamp",), at_ms(2000))]
    pushed, remaining = translate(filters)
    assert (pushed.timestamp_min, pushed.timestamp_max) == (1000, 1999)
    assert remaining == filters


def test_timestamp_equal_to_a_fraction_of_a_millisecond_matches_nothing() -> None:
    pushed, _ = translate([EqualTo(("timestamp",), at_ms(1000, 1))])
    assert pushed.timestamps_empty


def test_naive_datetime_is_utc() -> None:
    assert epoch_micros(dt.datetime(1970, 1, 1, 0, 0, 1)) == 1_000_000
    assert epoch_micros(dt.datetime(1970, 1, 1, 1, 0, 1, tzinfo=dt.timezone(dt.timedelta(hours=1)))) == 1_000_000


OPS = {
    "GreaterThan": (GreaterThan, lambda a, b: a > b),
    "GreaterThanOrEqual": (GreaterThanOrEqual, lambda a, b: a >= b),
    "LessThan": (LessThan, lambda a, b: a < b),
    "LessThanOrEqual": (LessThanOrEqual, lambda a, b: a <= b),
    "EqualTo": (EqualTo, lambda a, b: a == b),
}


@given(st.sampled_from(sorted(OPS)), st.integers(-(10**12), 10**12), st.integers(-5, 5))
def test_timestamp_bounds_keep_exactly_the_ms_records_spark_keeps(op: str, bound_micros: int, delta_ms: int) -> None:
    """Rule 3: a record of t ms passes Spark's filter on t × 1000 µs iff t lies within the bounds."""
    cls, holds = OPS[op]
    bound = at_ms(0, bound_micros)
    pushed, _ = translate([cls(("timestamp",), bound)])
    t = bound_micros // 1000 + delta_ms
    within = (pushed.timestamp_min is None or t >= pushed.timestamp_min) and (pushed.timestamp_max is None or t <= pushed.timestamp_max)
    assert within == holds(t * 1000, bound_micros)


class Timestamps:
    """offsets-for-timestamp over a list of record timestamps (index = offset): Kafka's rule."""

    def __init__(self, timestamps: list[int]) -> None:
        self.timestamps = timestamps
        self.asked: list[int] = []

    def offset_for_timestamp(self, topic: str, partition: int, timestamp_ms: int) -> int | None:
        self.asked.append(timestamp_ms)
        return next((o for o, t in enumerate(self.timestamps) if t >= timestamp_ms), None)


@given(st.lists(st.integers(0, 50), min_size=1, max_size=40), st.integers(0, 50), st.integers(0, 50))
def test_narrowing_never_drops_a_matching_record(timestamps: list[int], low: int, high: int) -> None:
    """Rule 4 with non-monotonic timestamps: every offset whose timestamp is within [low, high] stays in [start, end)."""
    pushed = Pushdown(timestamp_min=low, timestamp_max=high)
    start, end = narrow(pushed, Timestamps(timestamps), "t", 0, 0, len(timestamps))  # type: ignore[arg-type]
    matching = [o for o, t in enumerate(timestamps) if low <= t <= high]
    assert all(start <= o < end for o in matching)
    if matching:
        assert start == min(o for o, t in enumerate(timestamps) if t >= low)


def test_narrowing_without_later_records_reads_nothing_and_skips_unkept_partitions() -> None:
    gateway = Timestamps([1, 2, 3])
    start, end = narrow(Pushdown(timestamp_min=10), gateway, "t", 0, 0, 3)  # type: ignore[arg-type]
    assert start == end
    assert narrow(Pushdown(partitions=frozenset({1}), timestamp_min=1), gateway, "t", 0, 0, 3) == (0, 0)  # type: ignore[arg-type]
    assert gateway.asked == [10]
    assert narrow(Pushdown(offset_start=2), gateway, "t", 0, 0, 3) == (2, 3)  # type: ignore[arg-type]
    assert gateway.asked == [10]  # no timestamp bound: no request


def test_ordered_timestamps_also_cut_the_end() -> None:
    """``tiered.timestampsOrdered``: the end is the first offset newer than the upper bound; without it, the end stays."""
    gateway = Timestamps([10, 10, 20, 20, 30, 30])
    pushed = Pushdown(timestamp_min=20, timestamp_max=20)
    assert narrow(pushed, gateway, "t", 0, 0, 6) == (2, 6)  # type: ignore[arg-type]
    assert narrow(pushed, gateway, "t", 0, 0, 6, ordered=True) == (2, 4)  # type: ignore[arg-type]
    assert gateway.asked == [20, 20, 21]
    assert narrow(Pushdown(timestamp_max=99), gateway, "t", 0, 1, 6, ordered=True) == (1, 6)  # type: ignore[arg-type]


def test_the_reader_has_push_filters_only_in_pysparks_pushdown_worker(monkeypatch: pytest.MonkeyPatch) -> None:
    """PySpark refuses a reader defining ``pushFilters`` when the pushdown setting is off, so the source hands it out only there."""
    import sys
    import types

    from pyspark.sql.datasource import DataSourceReader

    from tiered_kafka.spark.datasource import PUSHDOWN_WORKER, TieredKafkaDataSource, TieredKafkaPushdownReader

    source = TieredKafkaDataSource({"tiered.gateway.url": "http://gw:8080", "tiered.cluster": "c", "subscribe": "t"})
    monkeypatch.delitem(sys.modules, PUSHDOWN_WORKER, raising=False)
    plain = source.reader(source.schema())
    assert getattr(plain.pushFilters, "__func__", None) is DataSourceReader.pushFilters  # PySpark's own test of "not implemented"
    monkeypatch.setitem(sys.modules, PUSHDOWN_WORKER, types.ModuleType(PUSHDOWN_WORKER))
    pushing = source.reader(source.schema())
    assert isinstance(pushing, TieredKafkaPushdownReader)
    f = GreaterThan(("timestamp",), at_ms(5))
    assert pushing.pushFilters([EqualTo(("partition",), 1), f]) == [f]
    assert pushing.pushed == Pushdown(partitions=frozenset({1}), timestamp_min=6)


class Segments(Timestamps):
    """Timestamps in segments of ``size`` offsets, and the gateway's time-ranges rule over them
    (``routes.time_ranges``): a segment is pruned when its [min, max] misses the range, unless its
    minimum is not exact (``inexact``: those segments' min is taken as their first record's).
    Segments below ``deleted_below`` are gone (retention since the read's offsets were resolved):
    neither offsets-for-timestamp nor time-ranges sees them."""

    def __init__(self, timestamps: list[int], size: int, inexact: frozenset[int] = frozenset(), deleted_below: int = 0) -> None:
        super().__init__(timestamps)
        self.size = size
        self.inexact = inexact
        self.deleted_below = deleted_below

    def offset_for_timestamp(self, topic: str, partition: int, timestamp_ms: int) -> int | None:
        self.asked.append(timestamp_ms)
        return next((o for o, t in enumerate(self.timestamps) if t >= timestamp_ms and o >= self.deleted_below), None)

    def time_ranges(self, topic: str, partition: int, low: int, high: int) -> tuple[list[tuple[int, int, int]], list[tuple[int, int, int]], int | None]:
        assert low <= high
        pruned: list[tuple[int, int, int]] = []
        inexact = []
        bases = [b for b in range(0, len(self.timestamps), self.size) if b >= self.deleted_below]
        for base in bases:
            stamps = self.timestamps[base : base + self.size]
            last = base + len(stamps) - 1
            exact = base not in self.inexact
            if max(stamps) < low or (exact and min(stamps) > high):
                if pruned and pruned[-1][1] + 1 == base:
                    pruned[-1] = (pruned[-1][0], last, 0)
                else:
                    pruned.append((base, last, 0))
            elif not exact:
                inexact.append((base, last, 0))
        return pruned, inexact, bases[0] if bases else None


@given(st.lists(st.integers(0, 50), min_size=1, max_size=40), st.integers(1, 6), st.integers(0, 50), st.integers(0, 50), st.booleans(), st.integers(0, 40))
def test_pieces_never_drop_a_matching_record(timestamps: list[int], size: int, low: int, high: int, whole: bool, start: int) -> None:
    """Rules 4-5: every offset whose timestamp is in [low, high] is in one piece; pieces are ordered and disjoint."""
    gateway = Segments(timestamps, size, inexact=frozenset(range(0, len(timestamps), 2 * size)))
    pieces = narrow_pieces(Pushdown(timestamp_min=low, timestamp_max=high), gateway, "t", 0, start, len(timestamps), whole=whole)  # type: ignore[arg-type]
    assert all(a < b for a, b in pieces) and all(b <= c for (_a, b), (c, _d) in zip(pieces, pieces[1:]))
    assert not whole or len(pieces) <= 1
    matching = [o for o, t in enumerate(timestamps) if low <= t <= high and o >= start]
    assert all(any(a <= o < b for a, b in pieces) for o in matching)


def test_pieces_skip_segments_in_the_middle_and_keep_inexact_ones() -> None:
    stamps = [10, 11, 20, 21, 90, 91, 30, 31, 40, 5]  # segments of 2; the last one holds an old record
    pushed = Pushdown(timestamp_min=20, timestamp_max=31)
    assert narrow_pieces(pushed, Segments(stamps, 2), "t", 0, 0, 10) == [(2, 4), (6, 10)]  # the last segment's old record keeps it  # type: ignore[arg-type]
    assert narrow_pieces(pushed, Segments(stamps, 2, inexact=frozenset({4})), "t", 0, 0, 10) == [(2, 10)]  # type: ignore[arg-type]
    assert narrow_pieces(pushed, Segments(stamps, 2), "t", 0, 0, 10, whole=True) == [(2, 10)]  # type: ignore[arg-type]
    assert narrow_pieces(Pushdown(timestamp_min=95), Segments(stamps, 2), "t", 0, 0, 10) == []  # type: ignore[arg-type]
    assert narrow_pieces(Pushdown(offset_start=3), Segments(stamps, 2), "t", 0, 0, 10) == [(3, 10)]  # type: ignore[arg-type]


def test_offsets_the_answer_says_nothing_of_are_read() -> None:
    """Only what time-ranges proves match-free is skipped: offsets deleted since the read was
    resolved (below the first segment left) are read, so the read meets out-of-range as an
    unpruned one does, whether they were to be passed by a pruned span or by the start cut."""
    stamps = [10, 11, 20, 21, 90, 91, 30, 31, 40, 5]
    gone = Segments(stamps, 2, deleted_below=4)
    assert narrow_pieces(Pushdown(timestamp_max=31), gone, "t", 0, 0, 10) == [(0, 4), (6, 10)]  # type: ignore[arg-type]
    assert narrow_pieces(Pushdown(timestamp_min=30, timestamp_max=31), gone, "t", 0, 0, 10) == [(0, 4), (6, 10)]  # type: ignore[arg-type]
    assert narrow_pieces(Pushdown(timestamp_min=95), gone, "t", 0, 0, 10) == [(0, 4)]  # the rest is pruned (older)  # type: ignore[arg-type]
    here = Segments(stamps, 2)
    assert narrow_pieces(Pushdown(timestamp_min=30, timestamp_max=31), here, "t", 0, 0, 10) == [(6, 10)]  # type: ignore[arg-type]
    assert narrow_pieces(Pushdown(timestamp_min=95), here, "t", 0, 0, 10) == []  # type: ignore[arg-type]


def test_a_bound_before_1970_asks_no_offset_for_a_negative_time() -> None:
    """Kafka's ListOffsets sees no record stamped below 0, so a lower bound before 1970 cuts no
    start (the gateway refuses a negative time there); time-ranges gets the signed bound."""
    stamps = [-5, 20, 30, 40]
    gateway = Segments(stamps, 1)
    assert narrow_pieces(Pushdown(timestamp_min=-10, timestamp_max=-3), gateway, "t", 0, 0, 4, ordered=True) == [(0, 1)]  # type: ignore[arg-type]
    assert gateway.asked == []
    assert narrow_pieces(Pushdown(timestamp_max=25), gateway, "t", 0, 0, 4) == [(0, 2)]  # type: ignore[arg-type]


@given(st.integers(0, 30), st.integers(0, 30), st.lists(st.tuples(st.integers(0, 30), st.integers(0, 5)), max_size=6))
def test_subtract_removes_exactly_the_spans(start: int, end: int, raw: list[tuple[int, int]]) -> None:
    spans, cursor = [], 0
    for gap, length in raw:  # ordered, disjoint spans
        spans.append((cursor + gap, cursor + gap + length, 0))
        cursor += gap + length + 1
    pieces = subtract(start, end, spans)
    kept = {o for a, b in pieces for o in range(a, b)}
    assert kept == {o for o in range(start, end) if not any(f <= o <= last for f, last, _ in spans)}
    assert all(a < b for a, b in pieces) and all(b < c for (_a, b), (c, _d) in zip(pieces, pieces[1:]))
