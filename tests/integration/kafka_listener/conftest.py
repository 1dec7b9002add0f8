"""One stack for the listener's tests: a broker, the agent, a gateway whose Kafka listener serves the cluster.

Topic ``history``: PARTITIONS partitions of records written in three runs, uncompressed, lz4 and
zstd (``PRODUCED``: keys, values, headers, CreateTime timestamps; every 11th key and every 13th
value null), in 100 kB segments. Kafka's own answer, read before retention, is ``PRODUCED`` record
for record (checked here, so a test comparing with ``PRODUCED`` compares with what Kafka served). The
agent uploaded the rotated segments, then the broker's size-based retention (``retention.bytes`` set
to what the newer segments hold) deleted every segment below each partition's middle offset: each
partition's older half exists only in S3, the rest up to the active segment in both tiers, the active
segment only in Kafka. The tests read it through the listener with real clients and compare every
record from offset 0 with what was produced.
"""

from __future__ import annotations

import contextlib
import random
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

from tests.support.stack_env import TieredStack, create_tiered_topic, own_tiered_stack
from tiered_kafka_dev.services._process import free_ports
from tiered_kafka_dev.stack import GatewayServer
from tiered_kafka_gateway.kafka_listener.settings import KafkaListenerSettings
from tests.support.gateway_env import gateway_settings

TOPIC = "history"
PARTITIONS = 2
PER_RUN = 600  # records per partition per compression run
CODECS = ("none", "lz4", "zstd")
BASE_TS = (int(time.time()) - 3600) * 1000  # recent: time-based retention (7 days) must keep them


@dataclass(frozen=True)
class Rec:
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes], ...]
    timestamp: int


def record(partition: int, i: int) -> Rec:
    rnd = random.Random(partition * 1_000_003 + i)
    key = None if i % 11 == 5 else f"key-{partition}-{i}".encode()
    value = None if i % 13 == 7 else (f"{i:08d}:".encode() + bytes(rnd.choice(b"abcdefghijklmnop") for _ in range(rnd.randint(50, 400))))
    headers = () if i % 3 else (("h", f"v{i}".encode()), ("empty", b""))
    return Rec(key, value, headers, BASE_TS + i * 10)


PRODUCED: dict[int, list[Rec]] = {p: [record(p, i) for i in range(PER_RUN * len(CODECS))] for p in range(PARTITIONS)}


@dataclass
class ListenerStack:
    stack: TieredStack
    listener: str  # host:port of the Kafka listener
    gateway_url: str
    log_start: dict[int, int]  # Kafka's log start per partition (retention deleted what is below)

    @property
    def bootstrap(self) -> str:
        return self.stack.bootstrap


def produce_history(bootstrap: str) -> None:
    errors: list[Any] = []
    for run, codec in enumerate(CODECS):
        producer = Producer({"bootstrap.servers": bootstrap, "compression.type": codec, "linger.ms": 5, "batch.size": 15_000,
                             "enable.idempotence": True})
        for p in range(PARTITIONS):
            for i in range(run * PER_RUN, (run + 1) * PER_RUN):
                r = PRODUCED[p][i]
                producer.produce(TOPIC, value=r.value, key=r.key, partition=p, headers=list(r.headers) or None, timestamp=r.timestamp,
                                 on_delivery=lambda err, _m: err and errors.append(err))
                producer.poll(0)
        assert producer.flush(60) == 0
    assert not errors, errors[:3]


def kafka_served(bootstrap: str) -> dict[int, list[Rec]]:
    """Every record of the topic as Kafka itself serves it (confluent-kafka), offsets checked contiguous from 0."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "before-retention", "enable.auto.commit": False, "enable.partition.eof": True})
    got: dict[int, list[Rec]] = {p: [] for p in range(PARTITIONS)}
    try:
        consumer.assign([TopicPartition(TOPIC, p, 0) for p in range(PARTITIONS)])
        ended: set[int] = set()
        deadline = time.monotonic() + 60
        while len(ended) < PARTITIONS:
            assert time.monotonic() < deadline, {p: len(v) for p, v in got.items()}
            for m in consumer.consume(1000, 0.5):
                if m.error() is not None:
                    assert m.error().code() == KafkaError._PARTITION_EOF, m.error()
                    ended.add(m.partition())
                    continue
                assert m.offset() == len(got[m.partition()]), (m.partition(), m.offset())
                headers = tuple((k, v if v is not None else b"") for k, v in (m.headers() or []))
                got[m.partition()].append(Rec(m.key(), m.value(), headers, m.timestamp()[1]))
    finally:
        consumer.close()
    return got


def newer_half_bytes(stack: TieredStack, partition: int) -> int:
    """Bytes of the partition's segments whose base offset is at or past its middle offset: as
    ``retention.bytes``, Kafka keeps those and deletes every older segment."""
    middle = len(PRODUCED[partition]) // 2
    segments = (stack.log_dir / f"{TOPIC}-{partition}").glob("*.log")
    return sum(f.stat().st_size for f in segments if int(f.stem) >= middle)


def set_topic_config(bootstrap: str, topic: str, name: str, value: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    entry = ConfigEntry(name, value, incremental_operation=AlterConfigOpType.SET)
    for future in admin.incremental_alter_configs([ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[entry])]).values():
        future.result(timeout=30)


def listener_settings(stack: TieredStack, s3_server: Any, **listener: Any) -> Any:
    settings = gateway_settings(stack.agent, s3_server, stack.bootstrap, cache={"segment_ttl_s": 0})
    cluster = settings.clusters[stack.cluster]
    cluster.kafka_listener = KafkaListenerSettings(**{"port": free_ports(1)[0], **listener})
    return settings


@pytest.fixture(scope="package")
def tiered(tmp_path_factory: pytest.TempPathFactory, redis_server: Any, s3_server: Any) -> Iterator[ListenerStack]:
    with own_tiered_stack(tmp_path_factory.mktemp("listener-stack"), redis_server, s3_server, "listener") as stack:
        create_tiered_topic(stack, TOPIC, PARTITIONS)
        produce_history(stack.bootstrap)
        assert kafka_served(stack.bootstrap) == PRODUCED  # what Kafka serves before retention
        stack.wait_uploaded(TOPIC, PARTITIONS)
        set_topic_config(stack.bootstrap, TOPIC, "retention.bytes", str(min(newer_half_bytes(stack, p) for p in range(PARTITIONS))))
        log_start = stack.wait_retention(TOPIC, PARTITIONS)
        assert all(len(PRODUCED[p]) // 2 <= log_start[p] < len(PRODUCED[p]) for p in range(PARTITIONS)), log_start  # the older half: S3 only
        settings = listener_settings(stack, s3_server)
        server = GatewayServer(settings, free_ports(1)[0])
        try:
            port = settings.clusters[stack.cluster].kafka_listener.port
            yield ListenerStack(stack, f"127.0.0.1:{port}", server.url, log_start)
        finally:
            server.stop()


@contextlib.contextmanager
def another_listener(tiered: ListenerStack, s3_server: Any, overrides: dict[str, Any] | None = None, **listener: Any) -> Iterator[str]:
    """One more gateway over the same cluster whose listener has ``listener`` settings (``overrides``: gateway
    settings, e.g. ``auth``); yields the listener's host:port."""
    settings = listener_settings(tiered.stack, s3_server, **listener)
    if overrides:
        settings = type(settings).model_validate({**settings.model_dump(), **overrides})
    server = GatewayServer(settings, free_ports(1)[0])
    try:
        yield f"127.0.0.1:{settings.clusters[tiered.stack.cluster].kafka_listener.port}"
    finally:
        server.stop()
