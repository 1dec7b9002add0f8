"""``spark.readStream.format("tiered-kafka")`` on Spark local[2] against the real stack: AvailableNow
into Parquet with a checkpoint, resumed after more uploads (every offset exactly once),
``maxOffsetsPerTrigger`` micro-batches, ``failOnDataLoss`` on a recorded gap.

Each test streams its own topic of the package's stack (the other Spark tests share ``events``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from tests.integration.spark.conftest import read_options, start_parquet_stream, stream_reached
from tests.support.agent_env import wait_for
from tests.support.kafka_clients import value_for
from tests.support.stack_env import TieredStack, create_tiered_topic, topic_with_a_lost_segment, gateway_server
from tests.support.transactions import COMMITTED_OFFSETS, UNCOMMITTED_OFFSETS, uploaded_transactional_log

pytestmark = pytest.mark.integration

STREAM = "stream-events"
STREAM_PARTITIONS = 3
ROUND = 1_500  # records per production round, 500 per partition


def run_available_now(spark: Any, stack: TieredStack, out: Path, checkpoint: Path, **options: Any) -> Any:
    """One ``Trigger.AvailableNow`` run of the stream (the stack's read options plus ``options``)
    into Parquet at ``out``; the finished query."""
    return available_now_into_parquet(spark, read_options(stack, **options), out, checkpoint)


def available_now_into_parquet(spark: Any, options: dict[str, Any], out: Path, checkpoint: Path) -> Any:
    """One ``Trigger.AvailableNow`` run of a stream with exactly ``options`` into Parquet at ``out``."""
    query = start_parquet_stream(spark, options, out, checkpoint, availableNow=True)
    query.awaitTermination(120)
    assert not query.isActive, "the AvailableNow query did not finish"
    if query.exception() is not None:
        raise query.exception()
    return query


def parquet_rows(out: Path) -> dict[int, list[tuple[int, bytes, bytes]]]:
    """Kafka partition → (offset, key, value) of every row written, in offset order (duplicates kept)."""
    table = pq.read_table(out, columns=["partition", "offset", "key", "value"]) if any(out.glob("*.parquet")) else None
    rows: dict[int, list[tuple[int, bytes, bytes]]] = {}
    if table is not None:
        for p, o, k, v in zip(*(table.column(c).to_pylist() for c in ("partition", "offset", "key", "value")), strict=True):
            rows.setdefault(p, []).append((o, k, v))
    return {p: sorted(r) for p, r in rows.items()}


def remote_ends(stack: TieredStack, topic: str, partitions: int) -> dict[int, int]:
    ends = {}
    for p in range(partitions):
        info = stack.registry.partition_info(topic, p)
        assert info is not None
        ends[p] = info.latest_offset + 1
    return ends


@pytest.fixture(scope="module")
def stream_topic(stack: TieredStack) -> str:
    create_tiered_topic(stack, STREAM, STREAM_PARTITIONS, segment_bytes=20_000)
    stack.produce(STREAM, ROUND, STREAM_PARTITIONS)
    stack.wait_uploaded(STREAM, STREAM_PARTITIONS)
    return STREAM


def assert_exactly_once(rows: dict[int, list[tuple[int, bytes, bytes]]], ends: dict[int, int]) -> None:
    """Every offset 0..end-1 of every partition once, each the record produced there."""
    assert sorted(rows) == sorted(ends)
    for p, end in ends.items():
        assert [o for o, _k, _v in rows[p]] == list(range(end))
        for o, k, v in rows[p]:
            i = o * STREAM_PARTITIONS + p  # round-robin production
            assert (k, v) == (f"k{i}".encode(), value_for(i))


def test_available_now_resumes_from_its_checkpoint_exactly_once(spark: Any, stack: TieredStack, stream_topic: str, tmp_path: Path) -> None:
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
    first_ends = remote_ends(stack, stream_topic, STREAM_PARTITIONS)
    assert all(end > 100 for end in first_ends.values())
    run_available_now(spark, stack, out, checkpoint, subscribe=stream_topic, startingOffsets="earliest", includeHeaders="true")
    assert_exactly_once(parquet_rows(out), first_ends)

    # more records, uploaded while nothing runs; the same query again reads only them
    stack.produce(stream_topic, ROUND, STREAM_PARTITIONS, start=ROUND)
    stack.wait_uploaded(stream_topic, STREAM_PARTITIONS)
    second_ends = remote_ends(stack, stream_topic, STREAM_PARTITIONS)
    assert all(second_ends[p] > first_ends[p] for p in second_ends)
    query = run_available_now(spark, stack, out, checkpoint, subscribe=stream_topic, startingOffsets="earliest", includeHeaders="true")
    assert_exactly_once(parquet_rows(out), second_ends)
    # the checkpoint holds the Kafka source's offsets JSON: next offset per partition
    expected = {stream_topic: {str(p): second_ends[p] for p in range(STREAM_PARTITIONS)}}
    last_batch = max((checkpoint / "offsets").glob("[0-9]*"), key=lambda f: int(f.name))
    assert json.loads(last_batch.read_text().splitlines()[-1]) == expected
    source = query.lastProgress["sources"][0]
    assert json.loads(source["endOffset"]) == json.loads(source["latestOffset"]) == expected


def test_max_offsets_per_trigger_gives_several_micro_batches(spark: Any, stack: TieredStack, stream_topic: str, tmp_path: Path) -> None:
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
    ends = remote_ends(stack, stream_topic, STREAM_PARTITIONS)
    starts = {0: 5, 1: 0, 2: ends[2] - 40}  # a specific JSON start, one partition nearly read
    starting = '{"%s":{"0":5,"1":-2,"2":%d}}' % (stream_topic, starts[2])
    query = run_available_now(spark, stack, out, checkpoint, subscribe=stream_topic, startingOffsets=starting, maxOffsetsPerTrigger=300)
    total = sum(ends[p] - starts[p] for p in ends)
    inputs = [progress["numInputRows"] for progress in query.recentProgress if progress["numInputRows"]]
    assert len(inputs) >= total // 300 and len(inputs) == len(list((checkpoint / "offsets").glob("[0-9]*")))
    assert all(n <= 300 + STREAM_PARTITIONS for n in inputs) and sum(inputs) == total
    rows = parquet_rows(out)
    for p in ends:
        assert [o for o, _k, _v in rows[p]] == list(range(starts[p], ends[p]))


def test_fail_on_data_loss_on_a_recorded_gap(spark: Any, stack: TieredStack, tmp_path: Path) -> None:
    topic = "stream-gappy"
    lost = topic_with_a_lost_segment(stack, topic, 600)
    end = remote_ends(stack, topic, 1)[0]

    message = rf"{topic}-0: remote storage lacks offsets {lost.base_offset}..{lost.last_offset} \(test: segment lost\); set failOnDataLoss=false"
    with pytest.raises(Exception, match=message):
        run_available_now(spark, stack, tmp_path / "fail", tmp_path / "fail-checkpoint", subscribe=topic, startingOffsets="earliest")
    assert not list((tmp_path / "fail").glob("*.parquet"))

    run_available_now(spark, stack, tmp_path / "skip", tmp_path / "skip-checkpoint", subscribe=topic, startingOffsets="earliest", failOnDataLoss="false")
    rows = parquet_rows(tmp_path / "skip")[0]
    assert [o for o, _k, _v in rows] == [o for o in range(end) if not lost.base_offset <= o <= lost.last_offset]
    assert all(v == value_for(o) for o, _k, v in rows)


def test_stream_option_errors(spark: Any, stack: TieredStack, stream_topic: str) -> None:
    reader = spark.readStream.format("tiered-kafka")
    with pytest.raises(Exception, match=r"option 'endingOffsets' is not valid in streaming queries"):
        reader.options(**read_options(stack, subscribe=stream_topic, endingOffsets="latest")).load().writeStream.format("noop").start().awaitTermination(60)
    with pytest.raises(Exception, match=r"option 'tiered.mode': 'KAFKA_ONLY' is not supported by the tiered-kafka Spark source: use Spark's format"):
        reader.options(**read_options(stack, subscribe=stream_topic, **{"tiered.mode": "KAFKA_ONLY"})).load()


def test_running_query_picks_up_new_uploads_and_new_partitions(spark: Any, stack: TieredStack, tmp_path: Path) -> None:
    """A query on a processing-time trigger: segments uploaded while it runs are read, and a topic
    that starts matching ``subscribePattern`` joins from its earliest offset (Kafka's source)."""
    first, second = "stream-live-a", "stream-live-b"
    create_tiered_topic(stack, first, 1, segment_bytes=16_000)
    stack.produce(first, 400, 1)
    stack.wait_uploaded(first, 1)
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
    query = start_parquet_stream(spark, read_options(stack, subscribePattern="stream-live-.*", startingOffsets="earliest"), out, checkpoint)
    try:

        def caught_up(ends: dict[str, int]) -> bool:
            return stream_reached(query, {t: {"0": e} for t, e in ends.items()})

        ends = {first: remote_ends(stack, first, 1)[0]}
        wait_for(lambda: caught_up(ends), timeout_s=60, what="the first upload read")
        stack.produce(first, 400, 1, start=400)
        create_tiered_topic(stack, second, 1, segment_bytes=16_000)
        stack.produce(second, 400, 1)
        stack.wait_uploaded(first, 1)
        stack.wait_uploaded(second, 1)
        ends = {first: remote_ends(stack, first, 1)[0], second: remote_ends(stack, second, 1)[0]}
        wait_for(lambda: caught_up(ends), timeout_s=60, what="the new uploads read")
    finally:
        query.stop()
    table = pq.read_table(out, columns=["topic", "offset", "value"])
    by_topic: dict[str, list[tuple[int, bytes]]] = {}
    for t, o, v in zip(*(table.column(c).to_pylist() for c in ("topic", "offset", "value")), strict=True):
        by_topic.setdefault(t, []).append((o, v))
    for topic, end in ends.items():
        assert sorted(by_topic[topic]) == [(o, value_for(o)) for o in range(end)]


def test_read_committed_stream_stops_at_the_remote_lso(spark: Any, tmp_path: Path, redis_server: Any, s3_server: Any, s3_bucket: str) -> None:
    """The hand-written transactional log (``tests.support.transactions``), in micro-batches of 4
    offsets whose ends fall inside transactions: read_committed delivers exactly what a batch read
    does and its offsets stop at the remote last stable offset (19, p11 still open)."""
    settings = uploaded_transactional_log(tmp_path, redis_server, s3_server, s3_bucket)
    with gateway_server(settings, s3_server) as url:
        base = {"tiered.gateway.url": url, "tiered.cluster": settings.cluster, "subscribe": "txn", "startingOffsets": "earliest", "maxOffsetsPerTrigger": "4"}
        for level, offsets, end in (("read_committed", COMMITTED_OFFSETS, 19), ("read_uncommitted", UNCOMMITTED_OFFSETS, 22)):
            out, checkpoint = tmp_path / level, tmp_path / f"{level}-checkpoint"
            query = available_now_into_parquet(spark, {**base, "kafka.isolation.level": level}, out, checkpoint)
            assert sorted(pq.read_table(out, columns=["offset"]).column("offset").to_pylist()) == offsets, level
            assert json.loads(query.lastProgress["sources"][0]["endOffset"]) == {"txn": {"0": end}}, level
            assert len(list((checkpoint / "offsets").glob("[0-9]*"))) == -(-end // 4), level
