"""Filter pushdown of the ``tiered-kafka`` batch source on Spark local[2] against the real stack:
rows equal the unfiltered read filtered in Python, and the bytes planned (each planned range is one
GET of exactly its bytes, ``reading`` module doc) lie in the segments holding matching records:
segments are skipped by their exact [min, max] record timestamps, mid-partition too.

The topic ``pushdown`` has 2 partitions of WINDOWS time windows, an hour apart, of PER_WINDOW
records each (timestamps set explicitly), in 16 kB segments, so each window spans a few segments.
Partition 1 also holds, in window LATE_WINDOW, one record stamped in window 1 (CreateTime out of
order): a window-1 query must still return it."""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from confluent_kafka import Producer
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from tests.integration.spark.conftest import read_options
from tests.support.kafka_clients import wait_transactions_decided
from tests.support.stack_env import TieredStack, create_tiered_topic
from tiered_kafka.format.record_batch import iter_batches
from tiered_kafka.spark.datasource import TieredKafkaPushdownReader
from tiered_kafka.spark.options import parse_options

pytestmark = pytest.mark.integration

TOPIC = "pushdown"
PARTITIONS = 2
WINDOWS = 6
PER_WINDOW = 150
HOUR_MS = 3_600_000
BASE_MS = (int(time.time() * 1000) // HOUR_MS - WINDOWS - 2) * HOUR_MS  # recent: older records would meet the broker's retention.ms
LATE_WINDOW = 4
LATE_TIMESTAMP = BASE_MS + 1 * HOUR_MS + 77


def window_bounds(window: int) -> tuple[dt.datetime, dt.datetime]:
    """[start, end) of a window as UTC datetimes."""
    start = dt.datetime.fromtimestamp((BASE_MS + window * HOUR_MS) / 1000, tz=dt.UTC)
    return start, start + dt.timedelta(hours=1)


@dataclass(frozen=True)
class Segment:
    partition: int
    base_offset: int
    last_offset: int
    size: int
    timestamps: tuple[int, ...]


@pytest.fixture(scope="module")
def segments(stack: TieredStack) -> list[Segment]:
    """The topic, produced and uploaded; its registered segments with their records' timestamps (from the broker's files)."""
    create_tiered_topic(stack, TOPIC, PARTITIONS, segment_bytes=16_000)
    producer = Producer({"bootstrap.servers": stack.bootstrap, "linger.ms": 5, "batch.size": 8_000})
    for window in range(WINDOWS + 1):  # the last window rolls the others into remote storage
        for i in range(PER_WINDOW):
            for p in range(PARTITIONS):
                producer.produce(TOPIC, value=f"{p}-{window}-{i}".encode() * 30, key=f"k{i}".encode(), partition=p, timestamp=BASE_MS + window * HOUR_MS + i * 1000)
            if window == LATE_WINDOW and i == PER_WINDOW // 2:
                producer.produce(TOPIC, value=b"late", key=b"late", partition=1, timestamp=LATE_TIMESTAMP)
        producer.flush(60)
    assert producer.flush(60) == 0
    stack.wait_uploaded(TOPIC, PARTITIONS)
    out = []
    for p in range(PARTITIONS):
        for entry in stack.registry.segments(TOPIC, p):
            data = (stack.log_dir / f"{TOPIC}-{p}" / f"{entry.base_offset:020d}.log").read_bytes()
            stamps = tuple(r.timestamp for b in iter_batches(data) for r in b)
            out.append(Segment(p, entry.base_offset, entry.last_offset, entry.size, stamps))
    assert len(out) >= 4 * PARTITIONS, "the test needs several segments per partition"
    return out


def load(spark: Any, stack: TieredStack, **options: Any) -> DataFrame:
    return spark.read.format("tiered-kafka").options(**read_options(stack, subscribe=TOPIC, **options)).load()


def rows(df: DataFrame) -> list[tuple[Any, ...]]:
    return sorted((r["partition"], r["offset"], r["key"], r["value"], r["ts"]) for r in df.withColumn("ts", F.unix_millis("timestamp")).collect())


@pytest.fixture(scope="module")
def everything(spark: Any, stack: TieredStack, segments: list[Segment]) -> list[tuple[Any, ...]]:
    return rows(load(spark, stack))


def planned(stack: TieredStack, df_filters: list[Any], **options: Any) -> tuple[int, dict[int, int]]:
    """(Spark partitions, bytes planned by Kafka partition) of the reader given ``df_filters``: the
    same planning the Spark query's pushdown worker runs."""
    reader = TieredKafkaPushdownReader(parse_options(read_options(stack, subscribe=TOPIC, **options)))
    list(reader.pushFilters(df_filters))
    tasks = [p.task for p in reader.partitions()]  # type: ignore[attr-defined]
    by_partition: dict[int, int] = {}
    for task in tasks:
        for piece in task.slices:
            by_partition[piece.partition] = by_partition.get(piece.partition, 0) + piece.size
    return len(tasks), by_partition


def matching_bytes(segments: list[Segment], partition: int, low: int, high: int) -> int:
    return sum(s.size for s in segments if s.partition == partition and any(t is not None and low <= t <= high for t in s.timestamps))


def test_timestamp_filter_reads_from_the_first_match_and_keeps_out_of_order_records(
    spark: Any, stack: TieredStack, segments: list[Segment], everything: list[tuple[Any, ...]]
) -> None:
    from pyspark.sql.datasource import GreaterThanOrEqual, LessThan

    start, end = window_bounds(1)
    df = load(spark, stack).where((F.col("timestamp") >= F.lit(start)) & (F.col("timestamp") < F.lit(end)))
    low, high = BASE_MS + HOUR_MS, BASE_MS + 2 * HOUR_MS - 1
    expected = [r for r in everything if low <= r[4] <= high]
    assert any(r[2] == b"late" for r in expected)
    assert rows(df) == expected

    tasks, fetched = planned(stack, [GreaterThanOrEqual(("timestamp",), start), LessThan(("timestamp",), end)])
    assert df.rdd.getNumPartitions() == tasks
    for p in range(PARTITIONS):
        total = sum(s.size for s in segments if s.partition == p)
        from_first_match = sum(s.size for s in segments if s.partition == p and max(s.timestamps) >= low)
        assert 0 < fetched[p] <= from_first_match < total  # window 0's segments are never fetched
        # the segments of windows 2 and 3 are skipped too (exact per-segment [min, max]); on
        # partition 1 the segment of window 4 holding the late record is read, so it is found
        assert fetched[p] <= matching_bytes(segments, p, low, high) < from_first_match


def test_a_middle_window_reads_only_its_segments_by_default(spark: Any, stack: TieredStack, segments: list[Segment], everything: list[tuple[Any, ...]]) -> None:
    """Without ``tiered.timestampsOrdered``: the segments after the window are skipped by their
    exact [min, max] record timestamps (registry), mid-partition; bytes fetched stay within the
    segments holding a record of the window (plus, on partition 1, the one whose late record
    makes its [min, max] span the window)."""
    from pyspark.sql.datasource import GreaterThanOrEqual, LessThan

    entries = [e for p in range(PARTITIONS) for e in stack.registry.segments(TOPIC, p)]
    assert all(e.min_timestamp_exact for e in entries)
    assert any(e.min_timestamp == LATE_TIMESTAMP for e in entries)  # the late record's segment (its batch's base is later)
    start, end = window_bounds(2)
    low, high = BASE_MS + 2 * HOUR_MS, BASE_MS + 3 * HOUR_MS - 1
    df = load(spark, stack).where((F.col("timestamp") >= F.lit(start)) & (F.col("timestamp") < F.lit(end)))
    assert rows(df) == [r for r in everything if low <= r[4] <= high]

    tasks, fetched = planned(stack, [GreaterThanOrEqual(("timestamp",), start), LessThan(("timestamp",), end)])
    assert df.rdd.getNumPartitions() == tasks
    late = sum(s.size for s in segments if LATE_TIMESTAMP in s.timestamps and not any(low <= t <= high for t in s.timestamps))
    assert late > 0
    for p in range(PARTITIONS):
        matching = matching_bytes(segments, p, low, high)
        after = sum(s.size for s in segments if s.partition == p and max(s.timestamps) >= low)
        assert matching // 3 <= fetched[p] <= matching + (late if p == 1 else 0) < after


def test_ordered_timestamps_read_only_the_matching_segments(spark: Any, stack: TieredStack, segments: list[Segment], everything: list[tuple[Any, ...]]) -> None:
    from pyspark.sql.datasource import EqualTo, GreaterThanOrEqual, LessThan

    start, end = window_bounds(2)
    df = load(spark, stack, **{"tiered.timestampsOrdered": "true"}).where((F.col("timestamp") >= F.lit(start)) & (F.col("timestamp") < F.lit(end)) & (F.col("partition") == 0))
    low, high = BASE_MS + 2 * HOUR_MS, BASE_MS + 3 * HOUR_MS - 1
    assert rows(df) == [r for r in everything if r[0] == 0 and low <= r[4] <= high]

    _tasks, fetched = planned(stack, [GreaterThanOrEqual(("timestamp",), start), LessThan(("timestamp",), end), EqualTo(("partition",), 0)], **{"tiered.timestampsOrdered": "true"})
    assert set(fetched) == {0}
    matching = matching_bytes(segments, 0, low, high)
    assert 0 < fetched[0] <= matching
    assert fetched[0] >= matching // 3  # the window's own batches (its edge segments are shared with windows 1 and 3)

    # the statement is the caller's: on partition 1, where it is false, Spark's run cut the end at
    # the first record past window 1, so the out-of-order record (in window 4) is not read
    start, end = window_bounds(1)
    wrong = load(spark, stack, **{"tiered.timestampsOrdered": "true"}).where((F.col("timestamp") >= F.lit(start)) & (F.col("timestamp") < F.lit(end)))
    window_1 = [r for r in everything if BASE_MS + HOUR_MS <= r[4] < BASE_MS + 2 * HOUR_MS]
    assert rows(wrong) == [r for r in window_1 if r[2] != b"late"] != window_1


def test_partition_and_offset_filters(spark: Any, stack: TieredStack, segments: list[Segment], everything: list[tuple[Any, ...]]) -> None:
    from pyspark.sql.datasource import GreaterThanOrEqual, In, LessThan

    df = load(spark, stack).where(F.col("partition").isin(1) & (F.col("offset") >= 200) & (F.col("offset") < 420))
    assert rows(df) == [r for r in everything if r[0] == 1 and 200 <= r[1] < 420]

    tasks, fetched = planned(stack, [In(("partition",), (1,)), GreaterThanOrEqual(("offset",), 200), LessThan(("offset",), 420)])
    assert df.rdd.getNumPartitions() == tasks
    assert set(fetched) == {1}
    holding = sum(s.size for s in segments if s.partition == 1 and s.base_offset < 420 and s.last_offset >= 200)
    assert 0 < fetched[1] <= holding


def test_without_the_pushdown_setting_the_read_is_whole_and_correct(spark: Any, stack: TieredStack, everything: list[tuple[Any, ...]]) -> None:
    """``spark.sql.python.filterPushdown.enabled=false``: PySpark would refuse a reader with
    ``pushFilters``; the source hands out the plain reader and Spark filters every row."""
    key = "spark.sql.python.filterPushdown.enabled"
    spark.conf.set(key, "false")
    try:
        df = load(spark, stack).where(F.col("partition") == 0)
        assert rows(df) == [r for r in everything if r[0] == 0]
        assert df.rdd.getNumPartitions() == load(spark, stack).rdd.getNumPartitions()
    finally:
        spark.conf.set(key, "true")


TXN_TOPIC = "pushdown_txn"


@pytest.fixture(scope="module")
def txn_segments(stack: TieredStack) -> list[tuple[Segment, tuple[int, ...]]]:
    """``pushdown_txn``-0: window-1 records, two transactions of window-1 records (one committed,
    one aborted) whose markers are written after segments of window-3 records (so they lie in
    segments a window-1 query prunes), more window-3 records, late window-1 records, then window 5
    to roll the rest into remote storage. Markers are stamped now, after every window."""
    import uuid

    create_tiered_topic(stack, TXN_TOPIC, 1, segment_bytes=16_000)
    plain = Producer({"bootstrap.servers": stack.bootstrap, "linger.ms": 5, "batch.size": 8_000})

    def produce(producer: Producer, name: str, window: int, count: int) -> None:
        for i in range(count):
            producer.produce(TXN_TOPIC, value=f"{name}-{i}".encode() * 60, key=f"{name}-{i}".encode(), partition=0, timestamp=BASE_MS + window * HOUR_MS + i)
        assert producer.flush(60) == 0

    committing, aborting = (
        Producer({"bootstrap.servers": stack.bootstrap, "transactional.id": f"pd-{name}-{uuid.uuid4().hex[:6]}", "linger.ms": 5})
        for name in ("commit", "abort")
    )  # fmt: skip
    produce(plain, "plain", 1, 20)
    for producer, name in ((committing, "commit"), (aborting, "abort")):
        producer.init_transactions(30)
        producer.begin_transaction()
        produce(producer, name, 1, 20)
    produce(plain, "middle", 3, 60)
    committing.commit_transaction(30)
    aborting.abort_transaction(30)
    wait_transactions_decided(stack.bootstrap, TXN_TOPIC)  # the markers are written after the calls return
    marked = max(int(f.stem) for f in (stack.log_dir / f"{TXN_TOPIC}-0").glob("*.log"))  # the active segment holds them
    deadline = time.monotonic() + 60
    while max(int(f.stem) for f in (stack.log_dir / f"{TXN_TOPIC}-0").glob("*.log")) == marked:  # window 3 until it rolls
        assert time.monotonic() < deadline, "the segment holding the markers never rolled"
        produce(plain, "after", 3, 20)
    produce(plain, "late", 1, 10)
    produce(plain, "roll", 5, 60)
    stack.wait_uploaded(TXN_TOPIC)
    out = []
    for entry in stack.registry.segments(TXN_TOPIC, 0):
        data = (stack.log_dir / f"{TXN_TOPIC}-0" / f"{entry.base_offset:020d}.log").read_bytes()
        batches = list(iter_batches(data))
        stamps = tuple(r.timestamp for b in batches if not b.is_control for r in b)
        out.append((Segment(0, entry.base_offset, entry.last_offset, entry.size, stamps), tuple(b.base_offset for b in batches if b.is_control)))
    return out


def test_read_committed_across_pruned_segments_equals_the_unpruned_read(spark: Any, stack: TieredStack, txn_segments: list[tuple[Segment, tuple[int, ...]]]) -> None:
    """A window-1 query under read_committed, the remote stable end known: the partition is read in
    pieces (segments of window 3 between them pruned, the markers in them); the committed
    transaction's records are rows, the aborted one's are not, as in the unpruned read."""
    from pyspark.sql.datasource import GreaterThanOrEqual, LessThan

    committed = {"kafka.isolation.level": "read_committed"}
    start, end = window_bounds(1)
    low, high = BASE_MS + HOUR_MS, BASE_MS + 2 * HOUR_MS - 1
    unpruned = rows(spark.read.format("tiered-kafka").options(**read_options(stack, subscribe=TXN_TOPIC, **committed)).load())
    expected = [r for r in unpruned if low <= r[4] <= high]
    keys = {r[2].decode().split("-")[0] for r in expected}
    assert keys == {"plain", "commit", "late"} and sum(r[2].startswith(b"commit") for r in expected) == 20

    df = spark.read.format("tiered-kafka").options(**read_options(stack, subscribe=TXN_TOPIC, **committed)).load()
    df = df.where((F.col("timestamp") >= F.lit(start)) & (F.col("timestamp") < F.lit(end)))
    assert rows(df) == expected

    reader = TieredKafkaPushdownReader(parse_options(read_options(stack, subscribe=TXN_TOPIC, **committed)))
    list(reader.pushFilters([GreaterThanOrEqual(("timestamp",), start), LessThan(("timestamp",), end)]))
    slices = [piece for p in reader.partitions() for piece in p.task.slices]  # type: ignore[attr-defined]
    assert all(piece.stable_end is not None for piece in slices)  # known: pieces are read apart, not as the hull
    assert len({piece.start for piece in slices}) >= 2
    markers = [(segment, offset) for segment, offsets in txn_segments for offset in offsets]
    assert len(markers) == 2 and all(not any(low <= t <= high for t in segment.timestamps) for segment, _ in markers)
    for segment, offset in markers:  # both markers lie in pruned segments, after a piece holding their transaction's records
        assert not any(piece.start <= segment.last_offset and segment.base_offset < piece.end for piece in slices), (segment, offset)
    commit_offsets = [r[1] for r in expected if r[2].startswith(b"commit")]
    assert any(piece.start <= min(commit_offsets) and max(commit_offsets) < piece.end <= markers[0][1] for piece in slices)


@pytest.fixture(autouse=True)
def _pushdown_on(spark: Any) -> Iterator[None]:
    assert spark.conf.get("spark.sql.python.filterPushdown.enabled") == "true"  # session.local_session sets it
    yield
