"""The ``tiered-kafka`` data source on Spark local[2] against the real stack (broker, agent,
SeaweedFS, Redis, gateway): exact offsets, values, timestamps, balancing, expiry, gaps, errors."""

from __future__ import annotations

import re
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from tests.integration.spark.conftest import EVENTS, EVENTS_COUNT, EVENTS_PARTITIONS, GAPPY, GAPPY_COUNT, read_options, records_on_disk
from tests.support.kafka_clients import value_for
from tests.support.stack_env import TieredStack, gateway_server
from tests.support.transactions import COMMITTED_OFFSETS, UNCOMMITTED_OFFSETS, uploaded_transactional_log
from tiered_kafka.errors import PresignedUrlError
from tiered_kafka.format.record_batch import iter_batches
from tiered_kafka.client.gateway import GatewayClient

pytestmark = pytest.mark.integration


def load(spark: Any, stack: TieredStack, **options: Any) -> DataFrame:
    return spark.read.format("tiered-kafka").options(**read_options(stack, **options)).load()


def collect(df: DataFrame) -> dict[int, list[Any]]:
    """Kafka partition → rows sorted by offset (timestamp as epoch ms in ``ts``)."""
    out: dict[int, list[Any]] = {}
    for row in df.withColumn("ts", F.unix_millis("timestamp")).collect():
        out.setdefault(row["partition"], []).append(row)
    return {p: sorted(rows, key=lambda r: r["offset"]) for p, rows in out.items()}


def assert_events(rows: list[Any], partition: int, start: int, end: int, expected: dict[int, Any]) -> None:
    """Exactly offsets start..end-1 of ``events``-partition, each the record produced there, as on disk."""
    assert [r["offset"] for r in rows] == list(range(start, end))
    for row in rows:
        i = row["offset"] * EVENTS_PARTITIONS + partition  # round-robin production, one producer
        key, value, timestamp, timestamp_type, _headers = expected[row["offset"]]
        assert (row["topic"], row["partition"]) == (EVENTS, partition)
        assert row["key"] == key == f"k{i}".encode()
        assert row["value"] == value == value_for(i)
        assert (row["ts"], row["timestampType"]) == (timestamp, timestamp_type) == (timestamp, 0)


@pytest.fixture(scope="module")
def expected(stack: TieredStack) -> dict[int, dict[int, Any]]:
    return {p: records_on_disk(stack, EVENTS, p) for p in range(EVENTS_PARTITIONS)}


def test_schema_is_sparks_kafka_schema(spark: Any, stack: TieredStack) -> None:
    df = load(spark, stack, subscribe=EVENTS)
    assert df.schema.simpleString() == "struct<key:binary,value:binary,topic:string,partition:int,offset:bigint,timestamp:timestamp,timestampType:int>"
    with_headers = load(spark, stack, subscribe=EVENTS, includeHeaders="true")
    assert with_headers.schema.simpleString().endswith(",timestampType:int,headers:array<struct<key:string,value:binary>>>")


def test_whole_topic_reads_every_remote_offset_once(spark: Any, stack: TieredStack, expected: dict[int, dict[int, Any]]) -> None:
    # Spark's Kafka options that do not apply here (kafka.*) are accepted, so a job switches formats unchanged
    rows = collect(load(spark, stack, subscribe=EVENTS, **{"kafka.bootstrap.servers": stack.bootstrap}))
    assert sorted(rows) == list(range(EVENTS_PARTITIONS))
    for p in range(EVENTS_PARTITIONS):
        info = stack.registry.partition_info(EVENTS, p)
        assert info is not None and info.earliest_offset == 0 and info.latest_offset < EVENTS_COUNT // EVENTS_PARTITIONS - 1
        assert_events(rows[p], p, 0, info.latest_offset + 1, expected[p])


def test_offsets_starting_and_ending_mid_segment(spark: Any, stack: TieredStack, expected: dict[int, dict[int, Any]]) -> None:
    bounds = {}
    for p in range(EVENTS_PARTITIONS):
        segments = stack.registry.segments(EVENTS, p)
        assert len(segments) >= 6
        start = segments[1].base_offset + 3 + p  # inside a batch, inside a segment
        end = segments[4 + p % 2].base_offset + 5 + 2 * p  # exclusive, inside another
        bounds[p] = (start, end)
    starting = "{" + ",".join(f'"{p}":{s}' for p, (s, _e) in bounds.items()) + "}"
    ending = "{" + ",".join(f'"{p}":{e}' for p, (_s, e) in bounds.items()) + "}"
    df = load(spark, stack, subscribe=EVENTS, startingOffsets=f'{{"{EVENTS}":{starting}}}', endingOffsets=f'{{"{EVENTS}":{ending}}}')
    rows = collect(df)
    for p, (start, end) in bounds.items():
        assert_events(rows[p], p, start, end, expected[p])

    # assign, -2 (earliest) and -1 (latest), and a second action on the same DataFrame reads the same offsets
    latest = stack.registry.partition_info(EVENTS, 1).latest_offset  # type: ignore[union-attr]
    df = load(
        spark,
        stack,
        assign=f'{{"{EVENTS}":[1,3]}}',
        startingOffsets=f'{{"{EVENTS}":{{"1":-2,"3":{bounds[3][0]}}}}}',
        endingOffsets=f'{{"{EVENTS}":{{"1":-1,"3":{bounds[3][1]}}}}}',
    )
    for _ in range(2):
        rows = collect(df)
        assert sorted(rows) == [1, 3]
        assert_events(rows[1], 1, 0, latest + 1, expected[1])
        assert_events(rows[3], 3, *bounds[3], expected[3])

    empty = load(spark, stack, assign=f'{{"{EVENTS}":[2]}}', startingOffsets=f'{{"{EVENTS}":{{"2":40}}}}', endingOffsets=f'{{"{EVENTS}":{{"2":40}}}}')
    assert empty.count() == 0


def batch_starts(stack: TieredStack, topic: str, partition: int) -> set[int]:
    starts = set()
    for path in sorted((stack.log_dir / f"{topic}-{partition}").glob("*.log")):
        starts.update(batch.base_offset for batch in iter_batches(path.read_bytes()))
    return starts


def test_min_partitions_balanced_by_bytes_without_splitting_batches(spark: Any, stack: TieredStack) -> None:
    df = load(spark, stack, subscribe=EVENTS, minPartitions=13)
    assert df.rdd.getNumPartitions() == 13
    pieces = (
        df.groupBy(F.spark_partition_id().alias("task"), "partition")
        .agg(F.min("offset").alias("low"), F.max("offset").alias("high"), F.count(F.lit(1)).alias("n"), F.sum(F.length("value")).alias("bytes"))
        .collect()
    )
    assert {p.task for p in pieces} == set(range(13))
    starts = {p: batch_starts(stack, EVENTS, p) for p in range(EVENTS_PARTITIONS)}
    covered: dict[int, list[tuple[int, int]]] = {}
    for piece in pieces:
        assert piece.n == piece.high - piece.low + 1  # contiguous offsets per task and Kafka partition
        assert piece.low in starts[piece.partition]  # every cut is a batch start: no batch split
        covered.setdefault(piece.partition, []).append((piece.low, piece.high))
    for p, runs in covered.items():
        runs.sort()
        assert runs[0][0] == 0 and all(a[1] + 1 == b[0] for a, b in zip(runs, runs[1:], strict=False))  # no gap, no overlap
        assert runs[-1][1] == stack.registry.partition_info(EVENTS, p).latest_offset  # type: ignore[union-attr]
    per_task: dict[int, int] = {}
    for piece in pieces:
        per_task[piece.task] = per_task.get(piece.task, 0) + piece.bytes
    assert max(per_task.values()) <= 1.5 * min(per_task.values()), per_task  # balanced by bytes

    # default: one Spark partition per Kafka partition read; maxBytesPerPartition splits further
    assert load(spark, stack, subscribe=EVENTS).rdd.getNumPartitions() == EVENTS_PARTITIONS
    assert load(spark, stack, subscribe=EVENTS, maxBytesPerPartition="256k").rdd.getNumPartitions() >= 14


def test_timestamp_options(spark: Any, stack: TieredStack, expected: dict[int, dict[int, Any]]) -> None:
    def first_at_or_after(p: int, timestamp: int) -> int:
        return min(o for o, record in expected[p].items() if record[2] >= timestamp)

    t1 = expected[1][300][2]
    t2 = expected[2][700][2]
    ends = {p: first_at_or_after(p, t2) for p in range(EVENTS_PARTITIONS)}
    rows = collect(load(spark, stack, subscribe=EVENTS, startingTimestamp=t1, endingTimestamp=t2))
    for p in range(EVENTS_PARTITIONS):
        assert_events(rows[p], p, first_at_or_after(p, t1), ends[p], expected[p])
        assert all(r["ts"] >= t1 for r in rows[p][:1]) and all(r["ts"] < t2 for r in rows[p][-1:])

    # per partition, and precedence: startingTimestamp > startingOffsetsByTimestamp > startingOffsets
    by_partition = {p: expected[p][100 + 50 * p][2] for p in range(EVENTS_PARTITIONS)}
    json_ts = "{" + ",".join(f'"{p}":{t}' for p, t in by_partition.items()) + "}"
    rows = collect(
        load(spark, stack, subscribe=EVENTS, startingOffsetsByTimestamp=f'{{"{EVENTS}":{json_ts}}}', startingOffsets="earliest", endingOffsetsByTimestamp=f'{{"{EVENTS}":{{"0":{t2},"1":{t2},"2":{t2},"3":{t2}}}}}')
    )
    for p in range(EVENTS_PARTITIONS):
        assert_events(rows[p], p, first_at_or_after(p, by_partition[p]), ends[p], expected[p])

    after_everything = max(r[2] for records in expected.values() for r in records.values()) + 60_000
    with pytest.raises(Exception, match=r"no record of events-\d in remote storage has a timestamp >= "):
        load(spark, stack, subscribe=EVENTS, startingTimestamp=after_everything).count()
    assert load(spark, stack, subscribe=EVENTS, startingTimestamp=after_everything, startingOffsetsByTimestampStrategy="latest").count() == 0
    # an ending timestamp after every record means latest
    assert load(spark, stack, assign=f'{{"{EVENTS}":[0]}}', endingTimestamp=after_everything).count() == len(expected[0])


def presigned_urls(gateway_url: str) -> int:
    text = urllib.request.urlopen(f"{gateway_url}/metrics", timeout=10).read().decode()
    return sum(int(float(m)) for m in re.findall(r"^tiered_kafka_gateway_presigned_urls_total\{[^}]*\} ([0-9.e+]+)$", text, re.M))


def test_expired_presigned_urls_are_replanned(spark: Any, stack: TieredStack, s3_server: Any, expected: dict[int, dict[int, Any]]) -> None:
    # TTL 3 s: SigV4 dates have whole seconds, so a URL lives between 2 and 3 s, ample for a re-planned
    # fetch (milliseconds), while waiting 4.5 s expires every URL planned before
    with gateway_server(stack.agent, s3_server, presign_ttl_s=3) as url:
        # SeaweedFS really refuses a presigned URL once it has expired
        with GatewayClient(url, stack.cluster) as client:
            plan = client.plan(EVENTS, 0, 0, 64 * 1024)
            assert client.fetch(plan.ranges[0])
            time.sleep(4.5)
            with pytest.raises(PresignedUrlError, match="expired"):
                client.fetch(plan.ranges[0])

        df = spark.read.format("tiered-kafka").options(**{**read_options(stack, subscribe=EVENTS, minPartitions=8), "tiered.gateway.url": url}).load()
        first = collect(df)  # plans the DataFrame's partitions (URLs valid 3 s)
        time.sleep(4.5)  # every URL planned for the DataFrame has expired now
        before = presigned_urls(url)
        second = collect(df)  # same partitions, same URLs: each refused, re-planned by the executor, read
        assert presigned_urls(url) > before  # the executors went back to the gateway for fresh URLs
        for rows in (first, second):
            for p in range(EVENTS_PARTITIONS):
                assert_events(rows[p], p, 0, len(expected[p]), expected[p])


def test_gap_fails_unless_fail_on_data_loss_is_false(spark: Any, stack: TieredStack) -> None:
    whole = collect(load(spark, stack, subscribe=GAPPY))[0]  # lz4-compressed batches
    assert [r["offset"] for r in whole] == list(range(len(whole)))
    assert all(r["value"] == value_for(r["offset"]) and r["key"] == f"k{r['offset']}".encode() for r in whole)
    assert len(whole) < GAPPY_COUNT

    segments = stack.registry.segments(GAPPY, 0)
    lost = segments[2]
    assert stack.registry.delete_segment(GAPPY, 0, lost.base_offset) is not None
    stack.registry.record_gap(GAPPY, 0, lost.base_offset, lost.last_offset, "test: segment lost")

    message = rf"gappy-0: remote storage lacks offsets {lost.base_offset}..{lost.last_offset} \(test: segment lost\); set failOnDataLoss=false"
    with pytest.raises(Exception, match=message):
        load(spark, stack, subscribe=GAPPY).collect()
    rows = collect(load(spark, stack, subscribe=GAPPY, failOnDataLoss="false"))[0]
    assert [r["offset"] for r in rows] == [o for o in range(len(whole)) if not lost.base_offset <= o <= lost.last_offset]
    # a read that ends before the gap is not affected
    assert load(spark, stack, subscribe=GAPPY, endingOffsets=f'{{"{GAPPY}":{{"0":{lost.base_offset}}}}}').count() == lost.base_offset


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"subscribe": EVENTS, "assign": '{"events":[0]}'}, r"options 'subscribe' and 'assign' were both given: only one of"),
        ({}, r"one of the options 'subscribe', 'subscribePattern', 'assign' must be specified"),
        ({"subscribe": EVENTS, "startingOffsets": '{"events":{"0":12'}, r"option 'startingOffsets' is not valid JSON"),
        ({"subscribe": EVENTS, "endingOffsets": "earliest"}, r"option 'endingOffsets': ending offset can't be earliest for batch queries"),
        ({"subscribe": EVENTS, "endingOffsets": '{"events":{"0":-2}}'}, r"endingOffsets for events-0 can't be earliest \(-2\)"),
        ({"subscribe": EVENTS, "minPartitions": "0"}, r"option 'minPartitions': invalid value '0', must be a positive integer"),
        ({"subscribe": EVENTS, "failOnDataLoss": "maybe"}, r"option 'failOnDataLoss' must be 'true' or 'false'"),
        ({"subscribe": EVENTS, "startingTimestamp": "yesterday"}, r"option 'startingTimestamp' should be a long"),
        ({"subscribe": EVENTS, "tiered.gateway.url": ""}, r"option 'tiered.gateway.url' is required"),
    ],
)
def test_bad_options_fail_at_load(spark: Any, stack: TieredStack, options: dict[str, str], message: str) -> None:
    with pytest.raises(Exception, match=message):
        spark.read.format("tiered-kafka").options(**{**read_options(stack), **options}).load()


def test_bad_options_found_when_planning(spark: Any, stack: TieredStack) -> None:
    latest = stack.registry.partition_info(EVENTS, 0).latest_offset  # type: ignore[union-attr]
    cases = [
        ({"subscribe": "nope,events"}, r"option 'subscribe': unknown topic\(s\) 'nope'"),
        ({"subscribe": EVENTS, "startingOffsets": "latest"}, r"option 'startingOffsets': starting offset can't be latest for batch queries"),  # valid for streams
        ({"assign": '{"events":[0,9]}'}, r"option 'assign': unknown partition\(s\) \[9\] of topic 'events'"),
        ({"subscribePattern": "ev.nt"}, r"option 'subscribePattern': 'ev.nt' matches no topic"),
        ({"subscribe": EVENTS, "startingOffsets": '{"events":{"0":5}}'}, r"option 'startingOffsets' must name every partition read"),
        ({"assign": '{"events":[0]}', "endingOffsets": f'{{"events":{{"0":{latest + 5}}}}}'}, rf"option 'endingOffsets': offset {latest + 5} of events-0 is past remote storage's end \(its last offset is {latest}\)"),
        ({"assign": '{"events":[0]}', "startingOffsets": '{"events":{"0":30}}', "endingOffsets": '{"events":{"0":20}}'}, r"events-0: the starting offset 30 .* is after the ending offset 20"),
    ]
    for options, message in cases:
        with pytest.raises(Exception, match=message):
            spark.read.format("tiered-kafka").options(**read_options(stack, **options)).load().collect()
    assert load(spark, stack, subscribePattern="ev.nts|gap+y", failOnDataLoss="false").select("topic").distinct().count() == 2


def test_control_records_skipped_and_headers(spark: Any, tmp_path: Path, redis_server: Any, s3_server: Any, s3_bucket: str) -> None:
    """A hand-written log with transactions (markers at 9, 10, 14, 18) and headers: read like read_uncommitted."""
    settings = uploaded_transactional_log(tmp_path, redis_server, s3_server, s3_bucket)
    with gateway_server(settings, s3_server) as url:
        options = {"tiered.gateway.url": url, "tiered.cluster": settings.cluster, "subscribe": "txn", "includeHeaders": "true", "minPartitions": "3"}
        rows = spark.read.format("tiered-kafka").options(**options).load().orderBy("offset").collect()
    assert [r.offset for r in rows] == UNCOMMITTED_OFFSETS
    assert rows[0].key == b"plain-k0" and rows[0].value == b"plain-v0" and [(h.key, h.value) for h in rows[0].headers] == [("h", b"plain0")]
    assert rows[2].key == b"p7-k0" and rows[2].headers == []


def test_read_committed_leaves_out_aborted_and_open_transactions(spark: Any, tmp_path: Path, redis_server: Any, s3_server: Any, s3_bucket: str) -> None:
    """kafka.isolation.level=read_committed: p8, p9 (marker in the next segment), p10 aborted, p11 open at the end of remote data."""
    settings = uploaded_transactional_log(tmp_path, redis_server, s3_server, s3_bucket)
    with gateway_server(settings, s3_server) as url:
        base = {"tiered.gateway.url": url, "tiered.cluster": settings.cluster, "subscribe": "txn", "kafka.isolation.level": "read_committed"}
        for min_partitions in ("1", "3"):  # one task, or one per segment: segment 0's task reads on for p9's marker
            frame = spark.read.format("tiered-kafka").options(**base, minPartitions=min_partitions).load()
            assert frame.rdd.getNumPartitions() == (1 if min_partitions == "1" else 2)
            rows = frame.orderBy("offset").collect()
            assert [r.offset for r in rows] == COMMITTED_OFFSETS, min_partitions
            assert [r.value for r in rows][:6] == [b"plain-v0", b"plain-v1", b"p7-v0", b"p7-v1", b"p7-v2", b"p7b-v0"]
        # an ending offset inside p9's aborted transaction: its fate comes from past the read's end
        ending = '{"txn":{"0":12}}'
        rows = spark.read.format("tiered-kafka").options(**base, endingOffsets=ending).load().orderBy("offset").collect()
        assert [r.offset for r in rows] == [0, 1, 2, 3, 4, 8]
        uncommitted = spark.read.format("tiered-kafka").options(**{**base, "kafka.isolation.level": "read_uncommitted"}).load()
        assert sorted(r.offset for r in uncommitted.collect()) == UNCOMMITTED_OFFSETS
