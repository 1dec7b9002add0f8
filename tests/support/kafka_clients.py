"""confluent-kafka helpers shared by the tests that run against the development broker."""

from __future__ import annotations

import time
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic


def create_topic(bootstrap: str, name: str, partitions: int = 1, **configs: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(name, partitions, 1, config=configs)]).values():
        future.result(timeout=30)


def produce(bootstrap: str, topic: str, messages: list[tuple[int, bytes, bytes]], **config: object) -> None:
    """messages: (partition, key, value). Fails the test on any delivery error."""
    errors: list[KafkaError] = []
    # batches stay below the small segment.bytes tests use: the broker refuses larger appends (RECORD_LIST_TOO_LARGE)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.size": 15_000, **config})
    for i, (partition, key, value) in enumerate(messages):
        while True:
            try:
                producer.produce(topic, value=value, key=key, partition=partition, on_delivery=lambda err, _m: err and errors.append(err))
                break
            except BufferError:
                producer.poll(0.05)
        if i % 1000 == 0:
            producer.poll(0)
    assert producer.flush(60) == 0
    assert not errors, errors[:3]


def produce_numbered(bootstrap: str, topic: str, start: int, count: int, partitions: int = 1, **config: object) -> None:
    """Records ``start..start+count-1``: key ``k{i}``, value ``value_for(i)``, round-robin over ``partitions``,
    in small batches (``linger.ms`` 2, at most 7 records a batch: many batches to a segment); ``config`` adds
    to or overrides the producer's configuration."""
    messages = [(i % partitions, f"k{i}".encode(), value_for(i)) for i in range(start, start + count)]
    produce(bootstrap, topic, messages, **{"linger.ms": 2, "batch.num.messages": 7, **config})


def consume_all(consumer: Consumer, expected: int, timeout_s: float = 120) -> list:
    messages = []
    deadline = time.monotonic() + timeout_s
    while len(messages) < expected and time.monotonic() < deadline:
        for message in consumer.consume(10_000, 0.5):
            if message.error():
                raise KafkaException(message.error())
            messages.append(message)
    return messages


def drain(consumer: Any, idle_s: float = 4.0, timeout_s: float = 120.0) -> list[Any]:
    """Messages until nothing new arrives for ``idle_s`` (for reads whose end is not known in
    advance, e.g. read_committed up to a last stable offset); fails on any error message."""
    messages: list[Any] = []
    deadline = time.monotonic() + timeout_s
    idle_since = time.monotonic()
    while time.monotonic() < deadline and time.monotonic() - idle_since < idle_s:
        batch = consumer.consume(1000, 0.5)
        for message in batch:
            assert message.error() is None, message.error()
            messages.append(message)
        if batch:
            idle_since = time.monotonic()
    return messages


def value_for(i: int) -> bytes:
    """1 KiB, compressible like real payloads (a counter, some text, some noise)."""
    head = f"{i:010d}|".encode()
    noise = (i * 2654435761 % 2**32).to_bytes(4, "big") * 16
    return (head + noise + b"the quick brown fox jumps over the lazy dog " * 24)[:1024]
