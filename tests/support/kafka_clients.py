"""confluent-kafka helpers shared by the tests that run against real Kafka brokers."""

from __future__ import annotations

import json
import threading
import time
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tiered_kafka_dev.services import KAFKA_VERSION, topic_configs


def create_topic(bootstrap: str, name: str, partitions: int = 1, replication: int = 1, version: str = KAFKA_VERSION, **configs: str) -> None:
    """Create a topic with topic configs under Kafka's names; a ``segment.bytes`` below Kafka 4.x's
    1 MiB minimum becomes Kafka's test-only ``internal.segment.bytes`` (``topic_configs``), so tests keep
    their small segments. Returns once every partition has a leader that answers for it (``_wait_leaders``)."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(name, partitions, replication, config=topic_configs(configs, version))])
    for future in futures.values():
        future.result(timeout=30)
    del futures, admin
    _wait_leaders(bootstrap, name, partitions)


def _wait_leaders(bootstrap: str, topic: str, partitions: int, timeout_s: float = 30) -> None:
    """Until every partition has a leader in the metadata and that leader answers ListOffsets for it: a
    KRaft broker lists itself as the leader a moment before it leads the partition, and answers
    NOT_LEADER_OR_FOLLOWER meanwhile (a watermark query right after the creation failed so)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "create-topic-probe", "log_level": 0})
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            described = consumer.list_topics(topic, timeout=5).topics.get(topic)
            if described is not None and described.error is None and len(described.partitions) == partitions and all(p.leader >= 0 for p in described.partitions.values()):
                try:
                    for partition in range(partitions):
                        consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=5, cached=False)
                    return
                except KafkaException:
                    pass
            if time.monotonic() > deadline:
                raise AssertionError(f"topic {topic}: no leader answering for every partition within {timeout_s} s")
            time.sleep(0.05)
    finally:
        consumer.close()


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


class FetchRequests:
    """The Fetch requests clients sent to the brokers, as librdkafka's own statistics count them
    (``statistics.interval.ms`` and ``stats_cb``: each broker's ``req.Fetch``): how a test sees that a
    client read no data from Kafka, since a broker offers no per-client fetch log.

    ``FetchRequests().config()`` goes into a client's configuration (a TieredConsumer passes it to
    its inner consumer); several clients may share one counter (keyed by librdkafka's client name).
    Statistics are delivered by the client's poll/consume, every ``interval_ms``.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_client: dict[str, int] = {}
        self.reports = 0

    def config(self, interval_ms: int = 100) -> dict[str, Any]:
        return {"statistics.interval.ms": interval_ms, "stats_cb": self._on_stats}

    def _on_stats(self, raw: str) -> None:
        stats = json.loads(raw)
        fetches = sum(int(broker.get("req", {}).get("Fetch", 0)) for broker in stats.get("brokers", {}).values())
        with self._lock:
            self._by_client[stats["name"]] = max(fetches, self._by_client.get(stats["name"], 0))
            self.reports += 1

    @property
    def total(self) -> int:
        """Fetch requests sent so far by every client reporting here."""
        with self._lock:
            return sum(self._by_client.values())


def wait_transactions_decided(bootstrap: str, topic: str, partitions: int = 1, timeout_s: float = 60) -> None:
    """Until every partition's last stable offset equals its high watermark: no transaction is
    open there and the markers of those that ended are written.

    Kafka writes COMMIT/ABORT markers after ``commit_transaction()``/``abort_transaction()`` returned
    (the transaction coordinator answers EndTxn once the decision is in ``__transaction_state``, then
    sends WriteTxnMarkers to the partition leaders), so a record produced right after the call can
    land before the marker. A test that needs the marker's offset waits here first."""
    consumers = {level: Consumer({"bootstrap.servers": bootstrap, "group.id": "lso-wait", "isolation.level": level}) for level in ("read_committed", "read_uncommitted")}
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            ends = {
                level: [consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10, cached=False)[1] for p in range(partitions)]
                for level, consumer in consumers.items()
            }  # fmt: skip
            if ends["read_committed"] == ends["read_uncommitted"]:
                return
            if time.monotonic() > deadline:
                raise AssertionError(f"{topic}: transactions still undecided after {timeout_s} s (LSO {ends['read_committed']}, high watermark {ends['read_uncommitted']})")
            time.sleep(0.05)
    finally:
        for consumer in consumers.values():
            consumer.close()
