"""The executor's Kafka data-loss branch (``spark/kafka_reading.py``) against a real Kafka broker:
the driver plans Kafka slices, then Kafka's log start moves past them (DeleteRecords, as retention
would) before the executor reads. ``failOnDataLoss=true``: an error naming the lost offsets;
``false``: a warning naming them and every offset Kafka still holds read, none twice.

The driver's planning (``planning.plan_source``) and the executor's reading (``reading.read_task``,
what each Spark task runs) are called directly so that the deletion falls between them for sure;
both talk to the real gateway and broker."""

from __future__ import annotations

import logging
from typing import Any

import pyarrow as pa
import pytest
from confluent_kafka import TopicPartition as KafkaTopicPartition
from confluent_kafka.admin import AdminClient

from tests.integration.spark.conftest import read_options
from tests.integration.spark.test_hybrid import watermarks
from tests.support.kafka_clients import value_for
from tests.support.stack_env import TieredStack, create_tiered_topic

pytestmark = pytest.mark.integration

TOPIC = "kafka-data-loss"
PARTITIONS = 2
COUNT = 400  # 200 per partition
TRIM = 120  # partition 0's new log start, inside its planned slice; partition 1 loses all it had


def plan(stack: TieredStack, fail_on_data_loss: bool) -> list[Any]:
    from tiered_kafka.spark.options import parse_options
    from tiered_kafka.spark.planning import plan_source

    options = read_options(
        stack, subscribe=TOPIC, failOnDataLoss=str(fail_on_data_loss).lower(), **{"tiered.mode": "KAFKA_PREFERRED", "kafka.bootstrap.servers": stack.bootstrap}
    )
    return plan_source(parse_options(options)).tasks


def read(tasks: list[Any]) -> dict[int, list[tuple[int, bytes]]]:
    from tiered_kafka.spark.reading import read_task

    rows: dict[int, list[tuple[int, bytes]]] = {}
    for task in tasks:
        for batch in read_task(task):
            table = pa.Table.from_batches([batch])
            for p, o, v in zip(*(table.column(c).to_pylist() for c in ("partition", "offset", "value")), strict=True):
                rows.setdefault(p, []).append((o, v))
    return rows


def test_kafka_offsets_gone_between_planning_and_reading(stack: TieredStack, caplog: pytest.LogCaptureFixture) -> None:
    create_tiered_topic(stack, TOPIC, PARTITIONS, segment_bytes=10_000_000)  # nothing uploaded: remote storage cannot serve the lost offsets either
    stack.produce(TOPIC, COUNT, PARTITIONS)
    highs = {p: high for p, (_low, high) in watermarks(stack, TOPIC, PARTITIONS).items()}
    assert highs == {0: COUNT // PARTITIONS, 1: COUNT // PARTITIONS}

    strict, lenient = plan(stack, True), plan(stack, False)
    for tasks in (strict, lenient):  # KAFKA_PREFERRED: Kafka holds everything, so Kafka reads it all
        assert sorted((s.partition, s.start, s.end) for t in tasks for s in t.kafka_slices) == [(p, 0, highs[p]) for p in range(PARTITIONS)]
        assert not any(t.slices for t in tasks)

    admin = AdminClient({"bootstrap.servers": stack.bootstrap})
    futures = admin.delete_records([KafkaTopicPartition(TOPIC, 0, TRIM), KafkaTopicPartition(TOPIC, 1, highs[1])])
    assert sorted(f.result(timeout=30).low_watermark for f in futures.values()) == sorted([TRIM, highs[1]])

    from tiered_kafka.spark.kafka_reading import KafkaDataLossError

    with pytest.raises(KafkaDataLossError, match=rf"{TOPIC}-0: Cannot fetch records in \[0, {TRIM}\): they are no longer in Kafka \(retention\) \(set failOnDataLoss=false"):
        read([t for t in strict if t.kafka_slices[0].partition == 0])
    with pytest.raises(KafkaDataLossError, match=rf"{TOPIC}-1: Cannot fetch records in \[0, {highs[1]}\)"):
        read([t for t in strict if t.kafka_slices[0].partition == 1])

    with caplog.at_level(logging.WARNING, logger="tiered_kafka.spark.kafka_reading"):
        rows = read(lenient)
    warnings = [r.getMessage() for r in caplog.records if r.name == "tiered_kafka.spark.kafka_reading"]
    assert f"tiered-kafka: {TOPIC}-0: Skip missing records in [0, {TRIM}) (no longer in Kafka; failOnDataLoss=false)" in warnings
    assert f"tiered-kafka: {TOPIC}-1: Skip missing records in [0, {highs[1]}) (no longer in Kafka; failOnDataLoss=false)" in warnings
    assert sorted(rows) == [0]  # partition 1: nothing left to read, and said so
    assert sorted(rows[0]) == [(o, value_for(o * PARTITIONS)) for o in range(TRIM, highs[0])]
