"""KAFKA_ONLY assigned below Kafka's log start reads what Kafka holds, as a plain consumer does
(issue 33's reproduction on one real KRaft node).

A topic of 3 partitions, 3,000 records each, DeleteRecords up to offset 1500 on every partition;
assigned at offset 0 with ``auto.offset.reset=earliest``, a plain confluent-kafka consumer delivers
offsets 1500..2999 of each partition. TieredConsumer in KAFKA_ONLY (no gateway) delivered
``{0: 1500, 1: 0, 2: 0}``: librdkafka's second OFFSET_OUT_OF_RANGE event for offset 0, queued
before the consumer's seek to the log start reached it, was handled at the new position and reset
the partition again, to the high watermark.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tiered_kafka.consumer import TieredConsumer

PARTITIONS = 3
RECORDS = 3000
DELETED_BELOW = 1500


def _topic_with_deleted_start(bootstrap: str) -> str:
    topic = f"log-start-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, PARTITIONS, 1)])[topic].result(30)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for partition in range(PARTITIONS):
        for i in range(RECORDS):
            producer.produce(topic, value=f"{partition}-{i}".encode(), partition=partition)
            if i % 1000 == 0:
                producer.poll(0)
    assert producer.flush(30) == 0
    futures = admin.delete_records([TopicPartition(topic, p, DELETED_BELOW) for p in range(PARTITIONS)])
    for future in futures.values():
        assert future.result(30).low_watermark == DELETED_BELOW  # the partition's new log start
    return topic


def _read_all(consumer: Any, topic: str, done: Callable[[dict[int, list[int]]], bool]) -> tuple[dict[int, list[int]], list[Any]]:
    """Offsets delivered per partition, and the error messages, until ``done`` or a deadline."""
    delivered: dict[int, list[int]] = {p: [] for p in range(PARTITIONS)}
    errors = []
    consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    deadline = time.monotonic() + 60
    while not done(delivered) and time.monotonic() < deadline:
        for message in consumer.consume(500, 0.5):
            if message.error() is not None:
                errors.append(message)
            else:
                delivered[message.partition()].append(message.offset())
    return delivered, errors


def _caught_up(delivered: dict[int, list[int]]) -> bool:
    return all(offsets and offsets[-1] == RECORDS - 1 for offsets in delivered.values())


def test_kafka_only_from_below_the_log_start_delivers_what_kafka_holds(kafka_server: Any) -> None:
    bootstrap = kafka_server.bootstrap_servers
    topic = _topic_with_deleted_start(bootstrap)
    expected = {p: list(range(DELETED_BELOW, RECORDS)) for p in range(PARTITIONS)}

    plain = Consumer({"bootstrap.servers": bootstrap, "group.id": f"plain-{topic}", "auto.offset.reset": "earliest", "enable.auto.commit": False})
    try:
        plain_delivered, plain_errors = _read_all(plain, topic, _caught_up)
    finally:
        plain.close()
    assert plain_delivered == expected and plain_errors == []

    for attempt in range(3):  # the race was librdkafka's timing: try it more than once
        tiered = TieredConsumer({
            "bootstrap.servers": bootstrap, "group.id": f"tiered-{topic}-{attempt}", "auto.offset.reset": "earliest",
            "enable.auto.commit": False, "tiered.mode": "KAFKA_ONLY",
        })
        try:
            delivered, errors = _read_all(tiered, topic, _caught_up)
            positions = [p.offset for p in tiered.position([TopicPartition(topic, p) for p in range(PARTITIONS)])]
        finally:
            tiered.close()
        assert {p: len(o) for p, o in delivered.items()} == {p: RECORDS - DELETED_BELOW for p in range(PARTITIONS)}, attempt
        assert delivered == expected, attempt
        assert positions == [RECORDS] * PARTITIONS
        assert errors == []  # no tier holds 0..1499 (no gateway is configured): Kafka's own silent reset
