"""Pinterest's real ts-segment-uploader 1.0.1 beside a ZooKeeper-mode Kafka 3.9.2 broker, uploading one topic to
SeaweedFS with 3 bits of prefix entropy (``tiered_kafka_dev.services._pinterest``): shared by the module's tests.

The topic ``seed`` holds records written by confluent-kafka with keys, headers, null keys and values, and
lz4- and zstd-compressed batches among plain ones, in segments of 16 kB (Kafka 3.9 takes small ``segment.bytes``).
The uploader uploads each rotated segment; every segment but the active one is in S3 once ``offset.wm`` names
the last rotated one. :class:`SeedTopic` holds what confluent-kafka reads back from the broker for those
offsets: the reference every reader of the bucket is compared with.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from tests.support.agent_env import rotated_bases, wait_for
from tests.support.kafka_clients import create_topic, value_for
from tiered_kafka.format.checkpoints import parse_offset_wm
from tiered_kafka.keyspace import Keyspace
from tiered_kafka_dev.services import KAFKA_ZK_VERSION, KafkaServer
from tiered_kafka_dev.services._pinterest import PinterestUploader, TsRecord

TOPIC = "seed"
CLUSTER = "pinterestCluster"
PREFIX = "seed-prefix"
ENTROPY_BITS = 3
RECORDS = 600


Kept = TsRecord  # a record as confluent-kafka returned it from the broker: the fields ts-consumer's are compared on


@dataclass
class SeedTopic:
    broker: KafkaServer
    uploader: PinterestUploader
    bucket: str
    keyspace: Keyspace
    end: int  # the active segment's base offset: offsets [0, end) are in S3
    records: list[Kept]  # offsets [0, end) read from the broker by confluent-kafka


def _messages() -> Iterator[dict[str, Any]]:
    for i in range(RECORDS):
        message: dict[str, Any] = {"key": f"k{i}".encode(), "value": value_for(i)}
        if i % 7 == 3:
            message["headers"] = [("trace", f"t{i}".encode()), ("empty", b""), ("none", None)]
        if i % 50 == 11:
            message["key"] = None
        if i % 50 == 12:
            message["value"] = None
        yield message


def produce_seed(bootstrap: str, after_group: Callable[[], None] = lambda: None, group: int = 10, topic: str = TOPIC) -> None:
    """RECORDS records into partition 0 of ``topic`` in three runs, plain, lz4 and zstd (a producer each), flushed
    ``group`` records at a time; ``after_group`` runs after each flush."""
    messages = list(_messages())
    third = len(messages) // 3
    for compression, part in (("none", messages[:third]), ("lz4", messages[third : 2 * third]), ("zstd", messages[2 * third :])):
        errors: list[Any] = []
        producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "batch.size": 8_000, "compression.type": compression})
        for i, message in enumerate(part):
            producer.produce(topic, partition=0, on_delivery=lambda err, _m: err and errors.append(err), **message)
            if i % group == group - 1 or i == len(part) - 1:
                assert producer.flush(60) == 0 and not errors, errors[:3]
                after_group()
        del producer


def read_back(bootstrap: str, topic: str, partition: int, start: int, end: int) -> list[Kept]:
    """Offsets [start, end) of the partition, from the broker, by confluent-kafka."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"ref-{uuid.uuid4().hex[:8]}", "enable.auto.commit": False, "enable.partition.eof": True})
    out: list[Kept] = []
    try:
        consumer.assign([TopicPartition(topic, partition, start)])
        while not out or out[-1].offset < end - 1:
            messages = consumer.consume(1000, 5)
            assert messages, f"confluent-kafka returned nothing after offset {out[-1].offset if out else start - 1}"
            for m in messages:
                if m.error() is not None:
                    if m.error().code() == -191:  # _PARTITION_EOF
                        continue
                    raise AssertionError(m.error())
                if m.offset() < end:
                    out.append(Kept(m.offset(), m.timestamp()[1], m.key(), m.value(), tuple(m.headers() or ())))
    finally:
        consumer.close()
    return out


@pytest.fixture(scope="package")
def seed(tmp_path_factory: pytest.TempPathFactory, zookeeper_server: Any, s3_server: Any) -> Iterator[SeedTopic]:
    root = tmp_path_factory.mktemp("pinterest")
    broker = KafkaServer(log_dir=root / "kafka-logs", zookeeper_connect=f"{zookeeper_server.hosts}/pinterest-{uuid.uuid4().hex[:8]}", version=KAFKA_ZK_VERSION)
    bucket = s3_server.create_bucket(f"pinterest-{uuid.uuid4().hex[:12]}")
    broker.start()
    try:
        create_topic(broker.bootstrap_servers, TOPIC, 1, version=KAFKA_ZK_VERSION, **{"segment.bytes": "40000", "index.interval.bytes": "2048"})
        uploader = PinterestUploader(
            log_dir=broker.log_dir, zookeeper_connect=broker.zookeeper_connect, broker_id=broker.node_id,
            endpoint_url=s3_server.endpoint_url, access_key=s3_server.access_key, secret_key=s3_server.secret_key,
            bucket=bucket, cluster=CLUSTER, prefix=PREFIX, entropy_bits=ENTROPY_BITS, topics=TOPIC,
        )  # fmt: skip
        s3 = s3_server.client()
        wm_key = uploader.keyspace.offset_wm_key(TOPIC, 0)

        def watermark() -> int:
            try:
                return parse_offset_wm(s3.get_object(Bucket=bucket, Key=wm_key)["Body"].read())
            except s3.exceptions.NoSuchKey:
                return -1

        def uploaded_so_far() -> None:
            """Until offset.wm names the last rotated segment. One roll at a time: Pinterest's uploader PUTs
            offset.wm once per segment, concurrently, so when several segments finish together the last PUT
            to land, not the highest, stays (docs/design-notes.md, issue 25)."""
            bases = rotated_bases(broker.log_dir / f"{TOPIC}-0")
            if bases:
                wait_for(lambda: watermark() == bases[-1], timeout_s=60, what=f"Pinterest's uploader to upload {TOPIC}-0 up to segment {bases[-1]}")

        with uploader:
            uploader.wait_watching(TOPIC, 0)
            produce_seed(broker.bootstrap_servers, uploaded_so_far)
            bases = rotated_bases(broker.log_dir / f"{TOPIC}-0")
            assert len(bases) >= 5, bases
            end = max(int(p.name[:20]) for p in (broker.log_dir / f"{TOPIC}-0").glob("*.log"))
            prefix = uploader.keyspace.partition_prefix(TOPIC, 0)
            # offset.wm goes up once a segment's .log is in; its .index and .timeindex may land just after
            wait_for(lambda: s3.list_objects_v2(Bucket=bucket, Prefix=prefix)["KeyCount"] == 3 * len(bases) + 1, timeout_s=60, what="every segment's three files")
            yield SeedTopic(broker, uploader, bucket, uploader.keyspace, end, read_back(broker.bootstrap_servers, TOPIC, 0, 0, end))
    finally:
        broker.stop()


@pytest.fixture(scope="package")
def seed_dir(seed: SeedTopic) -> Path:
    return seed.broker.log_dir / f"{TOPIC}-0"
