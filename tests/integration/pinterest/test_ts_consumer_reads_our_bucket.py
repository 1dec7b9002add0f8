"""Pinterest's ts-consumer 1.0.1, in its remote-storage mode (TIERED_STORAGE_ONLY), reads a bucket our agent
wrote (prefix entropy on; our extra objects beside the segments: ``.batchindex``, ``.snapshot``,
``coverage.json``): every offset, from the start and from the middle of a segment, byte for byte what
confluent-kafka reads from the broker. Driven by ``dev/java/pinterest/TsConsumerHarness.java``."""

from __future__ import annotations

from typing import Any

import pytest

from tests.integration.pinterest.conftest import Kept, SeedTopic, produce_seed, read_back
from tests.support.agent_env import agent_settings, only_topics, registry_for, rotated_bases, wait_for
from tests.support.kafka_clients import create_topic
from tiered_kafka.keyspace import Keyspace
from tiered_kafka_agent.agent import Agent
from tiered_kafka_dev.services import KAFKA_ZK_VERSION
from tiered_kafka_dev.services._pinterest import read_with_ts_consumer

pytestmark = pytest.mark.integration

OURS = "ours"


def test_ts_consumer_reads_every_offset_of_a_bucket_our_agent_wrote(seed: SeedTopic, redis_server: Any, s3_server: Any, s3_bucket: str) -> None:
    broker = seed.broker  # the package's ZooKeeper-mode broker; its Pinterest uploader follows only the seed topic
    create_topic(broker.bootstrap_servers, OURS, 1, version=KAFKA_ZK_VERSION, **{"segment.bytes": "40000", "index.interval.bytes": "2048"})
    produce_seed(broker.bootstrap_servers, topic=OURS, group=50)
    settings = agent_settings(broker.log_dir, redis_server, s3_server, s3_bucket, cluster="ourCluster", topics=only_topics(OURS), s3={"prefix": "tiered", "entropy_bits": 3})
    registry = registry_for(settings)
    directory = broker.log_dir / f"{OURS}-0"
    with Agent(settings):
        wait_for(lambda: [s.base_offset for s in registry.segments(OURS, 0)] == rotated_bases(directory), what=f"{OURS}-0 uploaded by our agent")
    end = registry.partition_info(OURS, 0).latest_offset + 1
    keys = [o["Key"] for o in s3_server.client().list_objects_v2(Bucket=s3_bucket)["Contents"]]
    assert any(k.endswith(".batchindex") for k in keys) and len(rotated_bases(directory)) >= 5
    expected = read_back(broker.bootstrap_servers, OURS, 0, 0, end)
    keyspace = Keyspace("tiered", "ourCluster", 3)

    records = read_with_ts_consumer(broker.bootstrap_servers, s3_server, s3_bucket, keyspace, OURS, 0, 0, end)
    assert [r.offset for r in records] == list(range(end))
    assert [Kept(r.offset, r.timestamp, r.key, r.value, r.headers) for r in records] == expected

    middle = rotated_bases(directory)[2] + 5  # inside a segment: ts-consumer finds its byte position with our .index
    tail = read_with_ts_consumer(broker.bootstrap_servers, s3_server, s3_bucket, keyspace, OURS, 0, middle, end)
    assert [Kept(r.offset, r.timestamp, r.key, r.value, r.headers) for r in tail] == expected[middle:]
