"""One local[2] SparkSession and one tiered stack (broker, agent, gateway) for every Spark test.

Both are package-scoped: Spark's JVM takes ~10 s to start and the stack's data ~10 s to produce
and upload, so the tests share them and only read (a test that changes the registry uses its own
topic). The topic ``events`` holds records 0..EVENTS_COUNT-1 round-robin over EVENTS_PARTITIONS
partitions (key ``k{i}``, value ``value_for(i)``), so offset o of partition p holds record
i = o * EVENTS_PARTITIONS + p.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.stack_env import TieredStack, create_tiered_topic, own_tiered_stack

EVENTS = "events"
EVENTS_PARTITIONS = 4
EVENTS_COUNT = 4000
GAPPY = "gappy"
GAPPY_COUNT = 3000


@pytest.fixture(scope="package")
def stack(tmp_path_factory: pytest.TempPathFactory, redis_server: Any, s3_server: Any) -> Iterator[TieredStack]:
    with own_tiered_stack(tmp_path_factory.mktemp("spark-stack"), redis_server, s3_server, "spark") as tiered:
        create_tiered_topic(tiered, EVENTS, EVENTS_PARTITIONS)
        create_tiered_topic(tiered, GAPPY, 1, segment_bytes=16_000)
        tiered.produce(EVENTS, EVENTS_COUNT, EVENTS_PARTITIONS)
        tiered.produce(GAPPY, GAPPY_COUNT, 1, **{"compression.type": "lz4"})
        tiered.wait_uploaded(EVENTS, EVENTS_PARTITIONS)
        tiered.wait_uploaded(GAPPY, 1)
        yield tiered
        from tiered_kafka.spark.hybrid_planning import release_kafka_views

        release_kafka_views()  # the planners' AdminClients, before their broker stops (hybrid_planning doc)


def read_options(stack: TieredStack, **options: Any) -> dict[str, str]:
    """The data source's options for ``stack`` plus ``options`` (values turned into strings)."""
    return {"tiered.gateway.url": stack.gateway_url, "tiered.cluster": stack.cluster, **{k: str(v) for k, v in options.items()}}


def start_parquet_stream(spark: Any, options: dict[str, Any], out: Path, checkpoint: Path, **trigger: Any) -> Any:
    """A stream with exactly ``options`` into Parquet at ``out``, on ``trigger`` (``DataStreamWriter.trigger``'s
    keywords; none: a 500 ms processing-time trigger); the started query."""
    return (
        spark.readStream.format("tiered-kafka")
        .options(**options)
        .load()
        .writeStream.format("parquet")
        .option("path", str(out))
        .option("checkpointLocation", str(checkpoint))
        .trigger(**(trigger or {"processingTime": "500 milliseconds"}))
        .start()
    )


def stream_reached(query: Any, ends: dict[str, dict[str, int]]) -> bool:
    """Whether the query's last micro-batch ended exactly at ``ends`` (Kafka's offset JSON: topic -> partition
    text -> offset); raises the query's exception when it failed."""
    if query.exception() is not None:
        raise query.exception()
    progress = query.lastProgress
    return progress is not None and json.loads(progress["sources"][0]["endOffset"] or "{}") == ends


Expected = dict[int, tuple[bytes | None, bytes | None, int, int, list[tuple[str, bytes | None]]]]


def records_on_disk(stack: TieredStack, topic: str, partition: int) -> Expected:
    """offset → (key, value, timestamp ms, timestamp type, headers) of the partition's registered
    segments, decoded from the broker's own files by the format core (not through the gateway)."""
    from tiered_kafka.format.record_batch import iter_batches

    out: Expected = {}
    for segment in stack.registry.segments(topic, partition):
        data = (stack.log_dir / f"{topic}-{partition}" / f"{segment.base_offset:020d}.log").read_bytes()
        for batch in iter_batches(data):
            if batch.magic >= 2 and batch.is_control:
                continue
            for record in batch:
                out[record.offset] = (record.key, record.value, record.timestamp, record.timestamp_type, list(record.headers))
    return out
