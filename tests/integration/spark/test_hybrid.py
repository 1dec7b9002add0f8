"""``tiered.mode`` REMOTE_PREFERRED / KAFKA_PREFERRED on the Spark source (batch reads and streams),
against the package's stack: remote storage through the gateway, Kafka's tail from a real Kafka broker."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from confluent_kafka import Consumer, TopicPartition

from tests.integration.spark.conftest import read_options
from tests.support.agent_env import wait_for
from tests.support.kafka_clients import value_for, wait_transactions_decided
from tests.support.stack_env import TieredStack, create_tiered_topic, topic_with_a_lost_segment

pytestmark = pytest.mark.integration

RETAINED = "hybrid-retained"
PARTITIONS = 2
COUNT = 1_200  # 600 per partition, ~1 KiB each: retention (250 kB) keeps the newest ~240 in Kafka


def watermarks(stack: TieredStack, topic: str, partitions: int) -> dict[int, tuple[int, int]]:
    consumer = Consumer({"bootstrap.servers": stack.bootstrap, "group.id": "hybrid-test-watermarks"})
    try:
        return {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10, cached=False) for p in range(partitions)}
    finally:
        consumer.close()


def hybrid_options(stack: TieredStack, mode: str, **options: Any) -> dict[str, str]:
    return read_options(stack, **{"tiered.mode": mode, "kafka.bootstrap.servers": stack.bootstrap, **options})


def assert_records(rows: list[tuple[int, int, bytes | None, bytes | None]], ends: dict[int, int], partitions: int, starts: dict[int, int] | None = None) -> None:
    """(partition, offset, key, value) rows: every offset of [start, end) once per partition, each
    the record produced there (round-robin: offset o of partition p is record o * partitions + p)."""
    by_partition: dict[int, list[tuple[int, bytes | None, bytes | None]]] = {}
    for p, o, k, v in rows:
        by_partition.setdefault(p, []).append((o, k, v))
    assert sorted(by_partition) == sorted(p for p, e in ends.items() if e > (starts or {}).get(p, 0))
    for p, end in ends.items():
        got = sorted(by_partition.get(p, []))
        first = (starts or {}).get(p, 0)
        assert [o for o, _k, _v in got] == list(range(first, end)), f"partition {p}"
        for o, k, v in got:
            i = o * partitions + p
            assert (k, v) == (f"k{i}".encode(), value_for(i)), f"partition {p} offset {o}"


@pytest.fixture(scope="module")
def retained(stack: TieredStack) -> Iterator[dict[int, tuple[int, int]]]:
    """Topic ``hybrid-retained``: the oldest offsets only remote (Kafka's retention deleted them
    after upload), the middle in both tiers, the active segment only in Kafka."""
    create_tiered_topic(stack, RETAINED, PARTITIONS, retention_bytes=250_000, segment_bytes=60_000)
    stack.produce(RETAINED, COUNT, PARTITIONS, **{"batch.num.messages": 5})
    stack.wait_uploaded(RETAINED, PARTITIONS)
    stack.wait_retention(RETAINED, PARTITIONS)
    # a pass that ran while uploads went on deleted only some segments: wait until the log starts
    # hold still over three retention checks (1 s apart: log.retention.check.interval.ms of the local brokers)
    seen: list[dict[int, tuple[int, int]]] = []

    def settled() -> bool:
        seen.append(watermarks(stack, RETAINED, PARTITIONS))
        time.sleep(1.5)
        return len(seen) >= 3 and seen[-1] == seen[-2] == seen[-3]

    wait_for(settled, timeout_s=60, what="Kafka's retention of hybrid-retained settled")
    yield seen[-1]


@pytest.mark.parametrize("mode", ["REMOTE_PREFERRED", "KAFKA_PREFERRED"])
def test_batch_read_in_a_hybrid_mode_is_exact(spark: Any, stack: TieredStack, retained: dict[int, tuple[int, int]], mode: str) -> None:
    from tiered_kafka.spark.options import parse_options
    from tiered_kafka.spark.planning import plan_source

    options = hybrid_options(stack, mode, subscribe=RETAINED, includeHeaders="true")
    # the plan: remote pieces and Kafka slices meet exactly at the handoff the mode names
    plan = plan_source(parse_options(options))
    for p, (log_start, high) in retained.items():
        remote_end = stack.registry.partition_info(RETAINED, p).latest_offset + 1  # type: ignore[union-attr]
        assert 0 < log_start <= remote_end < high, (log_start, remote_end, high)
        remote = sorted((s.start, s.end) for t in plan.tasks for s in t.slices if s.partition == p)
        kafka = sorted((s.start, s.end) for t in plan.tasks for s in t.kafka_slices if s.partition == p)
        handoff = remote_end if mode == "REMOTE_PREFERRED" else log_start
        assert {(a, b) for a, b in remote} == {(0, handoff)} and kafka == [(handoff, high)]
    df = spark.read.format("tiered-kafka").options(**options).load()
    rows = [(r.partition, r.offset, r.key, r.value) for r in df.select("partition", "offset", "key", "value").collect()]
    assert_records(rows, {p: high for p, (_low, high) in retained.items()}, PARTITIONS)
    assert df.schema.fieldNames()[-1] == "headers"
    assert df.where("offset >= 590").select("headers").collect()[0].headers == []


def test_hybrid_mode_without_bootstrap_servers_is_a_clear_error(spark: Any, stack: TieredStack) -> None:
    with pytest.raises(Exception, match=r"option 'kafka.bootstrap.servers' is required with tiered.mode=REMOTE_PREFERRED"):
        spark.read.format("tiered-kafka").options(**read_options(stack, subscribe=RETAINED, **{"tiered.mode": "REMOTE_PREFERRED"})).load()
    with pytest.raises(Exception, match=r"option 'kafka.bootstrap.servers' is required with tiered.mode=KAFKA_PREFERRED"):
        spark.readStream.format("tiered-kafka").options(**read_options(stack, subscribe=RETAINED, **{"tiered.mode": "KAFKA_PREFERRED"})).load().writeStream.format(
            "noop"
        ).start().awaitTermination(60)


def test_remote_preferred_stream_reads_history_then_live_kafka_records(spark: Any, stack: TieredStack, tmp_path: Path) -> None:
    """A processing-time stream: history from remote storage, then Kafka's tail, then records
    produced while it runs; a topic that starts matching the pattern (nothing remote yet) joins
    from Kafka. Every offset exactly once in the Parquet sink, none missing at the handoff."""
    first, second = "hybrid-live-a", "hybrid-live-b"
    create_tiered_topic(stack, first, PARTITIONS, segment_bytes=40_000)
    stack.produce(first, 600, PARTITIONS)
    stack.wait_uploaded(first, PARTITIONS)
    remote_ends = {p: stack.registry.partition_info(first, p).latest_offset + 1 for p in range(PARTITIONS)}  # type: ignore[union-attr]
    highs = {p: high for p, (_low, high) in watermarks(stack, first, PARTITIONS).items()}
    assert all(0 < remote_ends[p] < highs[p] for p in highs), (remote_ends, highs)  # history remote, a tail only in Kafka
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
    query = (
        spark.readStream.format("tiered-kafka")
        .options(**hybrid_options(stack, "REMOTE_PREFERRED", subscribePattern="hybrid-live-.*", startingOffsets="earliest", maxOffsetsPerTrigger=250))
        .load()
        .writeStream.format("parquet")
        .option("path", str(out))
        .option("checkpointLocation", str(checkpoint))
        .trigger(processingTime="500 milliseconds")
        .start()
    )
    try:

        def caught_up(ends: dict[str, dict[int, int]]) -> bool:
            if query.exception() is not None:
                raise query.exception()
            progress = query.lastProgress
            expected = {t: {str(p): e for p, e in es.items()} for t, es in ends.items()}
            return progress is not None and json.loads(progress["sources"][0]["endOffset"] or "{}") == expected

        wait_for(lambda: caught_up({first: highs}), timeout_s=90, what="history and Kafka's tail read")
        stack.produce(first, 300, PARTITIONS, start=600)  # live records, produced while the query runs
        create_tiered_topic(stack, second, 1, segment_bytes=10_000_000)  # one active segment: nothing uploaded
        stack.produce(second, 100, 1)
        ends = {first: {p: high for p, (_low, high) in watermarks(stack, first, PARTITIONS).items()}, second: {0: watermarks(stack, second, 1)[0][1]}}
        assert all(ends[first][p] > highs[p] for p in highs)
        wait_for(lambda: caught_up(ends), timeout_s=90, what="the live records read")
    finally:
        query.stop()
    table = pq.read_table(out, columns=["topic", "partition", "offset", "key", "value"])
    columns = [table.column(c).to_pylist() for c in ("topic", "partition", "offset", "key", "value")]
    rows = [(p, o, k, v) for t, p, o, k, v in zip(*columns, strict=True) if t == first]
    assert_records(rows, ends[first], PARTITIONS)
    rows = [(p, o, k, v) for t, p, o, k, v in zip(*columns, strict=True) if t == second]
    assert_records(rows, ends[second], 1)
    assert stack.registry.segments(second, 0) == []  # so the second topic was read from Kafka alone


def test_kafka_headers_in_a_hybrid_read(spark: Any, stack: TieredStack) -> None:
    """Records' headers read from Kafka (KAFKA_PREFERRED, nothing remote): non-empty, null values kept."""
    from confluent_kafka import Producer

    topic = "hybrid-headers"
    create_tiered_topic(stack, topic, 1, segment_bytes=10_000_000)
    producer = Producer({"bootstrap.servers": stack.bootstrap})
    producer.produce(topic, key=b"k0", value=b"v0", partition=0, headers=[("h", b"x"), ("n", None)])
    producer.produce(topic, key=b"k1", value=b"v1", partition=0)
    assert producer.flush(30) == 0
    df = spark.read.format("tiered-kafka").options(**hybrid_options(stack, "KAFKA_PREFERRED", subscribe=topic, includeHeaders="true")).load()
    got = sorted((r.offset, [(h.key, h.value) for h in r.headers]) for r in df.select("offset", "headers").collect())
    assert got == [(0, [("h", b"x"), ("n", None)]), (1, [])]


def test_read_committed_aborted_transaction_across_the_handoff(spark: Any, stack: TieredStack) -> None:
    """REMOTE_PREFERRED under read_committed: a transaction starts in segments remote storage holds
    and is aborted by a marker only Kafka has. Remote storage hands over at its last stable offset
    (the transaction's first offset), Kafka's read_committed drops the aborted records: every
    committed offset once, no aborted one."""
    import uuid

    from confluent_kafka import Producer

    from tiered_kafka.spark.options import parse_options
    from tiered_kafka.spark.planning import plan_source

    topic = "hybrid-txn"
    aborted, mid, marker = range(40, 76), range(76, 81), 81  # 0..39 plain; 82 plain after the marker
    create_tiered_topic(stack, topic, 1, segment_bytes=16_000)
    stack.produce(topic, 40, 1)
    aborting = Producer({"bootstrap.servers": stack.bootstrap, "transactional.id": f"hybrid-abort-{uuid.uuid4().hex[:6]}", "linger.ms": 0})
    try:
        aborting.init_transactions(30)
        aborting.begin_transaction()
        for i in aborted:  # one batch per record, so the transaction spans segments that roll while it is open
            aborting.produce(topic, key=f"aborted-{i}".encode(), value=b"a" * 1000, partition=0)
            assert aborting.flush(30) == 0
        stack.produce(topic, len(mid), 1, start=mid[0])  # plain records while the transaction is open
        aborting.abort_transaction(30)
    finally:
        del aborting
    wait_transactions_decided(stack.bootstrap, topic)  # the ABORT marker is written after abort_transaction() returns
    stack.produce(topic, 1, 1, start=marker + 1)
    stack.wait_uploaded(topic, 1)
    remote_end = stack.registry.partition_info(topic, 0).latest_offset + 1  # type: ignore[union-attr]
    assert aborted[0] < remote_end <= marker, remote_end  # the transaction's start is remote, its marker only in Kafka
    high = watermarks(stack, topic, 1)[0][1]
    assert high == marker + 2

    options = hybrid_options(stack, "REMOTE_PREFERRED", subscribe=topic, **{"kafka.isolation.level": "read_committed"})
    plan = plan_source(parse_options(options))
    assert sorted((s.start, s.end) for t in plan.tasks for s in t.kafka_slices) == [(aborted[0], high)]  # the handoff at remote storage's LSO
    rows = [(r.partition, r.offset, r.key, r.value) for r in spark.read.format("tiered-kafka").options(**options).load().collect()]
    assert sorted(o for _p, o, _k, _v in rows) == [*range(40), *mid, marker + 1]
    assert all((k, v) == (f"k{o}".encode(), value_for(o)) for _p, o, k, v in rows)


def test_stopped_mid_batch_and_restarted_writes_no_duplicate(spark: Any, stack: TieredStack, retained: dict[int, tuple[int, int]], tmp_path: Path) -> None:
    """A query stopped while a micro-batch runs (its files partly written, not committed), then
    restarted from its checkpoint: the sink (read through its ``_spark_metadata``) holds every
    offset exactly once. (``query.stop()`` is a clean stop; the SIGKILL of the query's whole
    process is ``test_streaming_live.test_query_killed_mid_batch_and_restarted_writes_no_duplicate``.)"""
    from pyspark.sql.functions import udf

    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"

    @udf("long")
    def slow(offset):  # type: ignore[no-untyped-def]  # (no hints: PySpark would read them as a pandas UDF's)
        import time

        time.sleep(0.002)
        return offset

    def start(trigger: dict[str, Any]) -> Any:
        frame = spark.readStream.format("tiered-kafka").options(**hybrid_options(stack, "REMOTE_PREFERRED", subscribe=RETAINED, startingOffsets="earliest", maxOffsetsPerTrigger=200)).load()
        return (
            frame.withColumn("offset", slow("offset"))
            .writeStream.format("parquet")
            .option("path", str(out))
            .option("checkpointLocation", str(checkpoint))
            .trigger(**trigger)
            .start()
        )

    query = start({"processingTime": "100 milliseconds"})
    try:
        def running() -> bool:  # a micro-batch planned (its offsets written) and not committed, after a committed one
            planned, committed = (len(list((checkpoint / d).glob("[0-9]*"))) for d in ("offsets", "commits"))
            return planned > committed >= 1 and query.status["isTriggerActive"]

        wait_for(running, timeout_s=90, what="a micro-batch running after a committed one")
    finally:
        query.stop()
    planned = len(list((checkpoint / "offsets").glob("[0-9]*")))
    committed = len(list((checkpoint / "commits").glob("[0-9]*")))
    restarted = start({"availableNow": True})
    restarted.awaitTermination(180)
    assert not restarted.isActive and restarted.exception() is None
    rows = [(r.partition, r.offset, r.key, r.value) for r in spark.read.parquet(str(out)).select("partition", "offset", "key", "value").collect()]
    assert_records(rows, {p: high for p, (_low, high) in retained.items()}, PARTITIONS)
    assert planned > committed  # the stop came while a micro-batch was planned and running


def test_a_recorded_remote_gap_is_read_from_kafka(spark: Any, stack: TieredStack) -> None:
    """REMOTE_PREFERRED over a segment remote storage lost (a recorded gap) that Kafka still holds:
    the plan hands the gap to Kafka (``modes.at_gap``) and back; every offset exactly once.
    REMOTE_ONLY meets the same gap as data loss."""
    from tiered_kafka.spark.options import parse_options
    from tiered_kafka.spark.planning import plan_source

    topic = "hybrid-gappy"
    lost = topic_with_a_lost_segment(stack, topic, 400)
    high = watermarks(stack, topic, 1)[0][1]

    options = hybrid_options(stack, "REMOTE_PREFERRED", subscribe=topic)
    plan = plan_source(parse_options(options))
    kafka = sorted((s.start, s.end) for t in plan.tasks for s in t.kafka_slices)
    remote_end = stack.registry.partition_info(topic, 0).latest_offset + 1  # type: ignore[union-attr]
    assert kafka == [(lost.base_offset, lost.last_offset + 1), (remote_end, high)]
    rows = [(r.partition, r.offset, r.key, r.value) for r in spark.read.format("tiered-kafka").options(**options).load().collect()]
    assert_records(rows, {0: high}, 1)
    with pytest.raises(Exception, match=rf"{topic}-0: remote storage lacks offsets {lost.base_offset}..{lost.last_offset} \(test: segment lost\)"):
        spark.read.format("tiered-kafka").options(**read_options(stack, subscribe=topic)).load().collect()
