"""confluent-kafka (librdkafka) reads the topic through the listener: every offset from 0, byte for byte."""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, TopicPartition

from tests.integration.kafka_listener.conftest import PARTITIONS, PRODUCED, TOPIC, ListenerStack, Rec

pytestmark = pytest.mark.integration


def as_rec(message: Any) -> Rec:
    ts_type, ts = message.timestamp()
    return Rec(message.key(), message.value(), tuple((k, v if v is not None else b"") for k, v in (message.headers() or [])), ts)


def read_all(consumer: Consumer, expected: dict[int, int], timeout_s: float = 90) -> dict[int, list[Any]]:
    """Every message until each partition reached its expected count (errors fail the test)."""
    got: dict[int, list[Any]] = {p: [] for p in expected}
    deadline = time.monotonic() + timeout_s
    while any(len(got[p]) < n for p, n in expected.items()):
        assert time.monotonic() < deadline, {p: len(v) for p, v in got.items()}
        for message in consumer.consume(1000, 0.5):
            if message.error() is not None:
                assert message.error().code() == KafkaError._PARTITION_EOF, message.error()
                continue
            got[message.partition()].append(message)
    return got


def check(got: dict[int, list[Any]]) -> None:
    for p, messages in got.items():
        assert [m.offset() for m in messages] == list(range(len(PRODUCED[p])))
        assert [as_rec(m) for m in messages] == PRODUCED[p]


def test_assign_reads_every_offset_from_zero(tiered: ListenerStack) -> None:
    assert all(tiered.log_start[p] > 0 for p in range(PARTITIONS))  # Kafka no longer has offset 0
    consumer = Consumer({"bootstrap.servers": tiered.listener, "group.id": "unused", "enable.auto.commit": False})
    try:
        consumer.assign([TopicPartition(TOPIC, p, 0) for p in range(PARTITIONS)])
        check(read_all(consumer, {p: len(PRODUCED[p]) for p in range(PARTITIONS)}))
        low, high = consumer.get_watermark_offsets(TopicPartition(TOPIC, 0), timeout=10)
        assert (low, high) == (0, len(PRODUCED[0]))
    finally:
        consumer.close()


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_group_reads_every_offset_and_commits_in_kafka(tiered: ListenerStack, protocol: str) -> None:
    group = f"listener-{protocol}-{uuid.uuid4().hex[:6]}"
    config = {"bootstrap.servers": tiered.listener, "group.id": group, "group.protocol": protocol, "auto.offset.reset": "earliest",
              "enable.auto.commit": False}
    if protocol == "classic":
        config["session.timeout.ms"] = 6000
    consumer = Consumer(config)
    try:
        consumer.subscribe([TOPIC])
        got = read_all(consumer, {p: len(PRODUCED[p]) for p in range(PARTITIONS)}, timeout_s=120)
        check(got)
        consumer.commit(asynchronous=False)
    finally:
        consumer.close()
    # the group and its offsets are Kafka's: a consumer of the broker itself sees them
    direct = Consumer({"bootstrap.servers": tiered.bootstrap, "group.id": group})
    try:
        committed = direct.committed([TopicPartition(TOPIC, p) for p in range(PARTITIONS)], timeout=10)
        assert {tp.partition: tp.offset for tp in committed} == {p: len(PRODUCED[p]) for p in range(PARTITIONS)}
    finally:
        direct.close()
