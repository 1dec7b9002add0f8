"""A bucket written by Pinterest's real ts-segment-uploader (``conftest.seed``), read by this project: the gateway
(listing path: no registry entry exists), TieredConsumer (REMOTE_ONLY), the bulk API and the Spark data source each
return every offset the bucket holds, in order, byte for byte what confluent-kafka reads from the broker.
``rebuild-registry`` over the bucket claims nothing it cannot vouch for, and the listing keeps serving."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import TopicPartition

from tests.integration.pinterest.conftest import CLUSTER, ENTROPY_BITS, PREFIX, TOPIC, Kept, SeedTopic
from tests.support.agent_env import agent_settings, registry_for, rotated_bases
from tests.support.stack_env import gateway_server
from tiered_kafka.bulk import read_table
from tiered_kafka.consumer import TieredConsumer
from tiered_kafka.format.segment_names import FileKind
from tiered_kafka.keyspace import entropy
from tiered_kafka_agent.agent import Agent
from tiered_kafka_agent.config import AgentSettings
from tiered_kafka_agent.rebuild import rebuild_registry

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def reader_settings(seed: SeedTopic, redis_server: Any, s3_server: Any) -> AgentSettings:
    """Settings naming the seed bucket's keyspace (cluster, prefix, entropy), for the gateway and rebuild-registry."""
    return agent_settings(seed.broker.log_dir, redis_server, s3_server, seed.bucket, cluster=CLUSTER, s3={"prefix": PREFIX, "entropy_bits": ENTROPY_BITS})


@pytest.fixture(scope="module")
def gateway_url(seed: SeedTopic, reader_settings: AgentSettings, s3_server: Any) -> Iterator[str]:
    with gateway_server(reader_settings, s3_server, seed.broker.bootstrap_servers) as url:
        yield url


def test_the_bucket_is_the_brokers_files_under_our_keyspace_and_nothing_is_registered(seed: SeedTopic, seed_dir: Any, reader_settings: AgentSettings, s3_server: Any) -> None:
    s3 = s3_server.client()
    keys = sorted(o["Key"] for o in s3.list_objects_v2(Bucket=seed.bucket)["Contents"])
    bases = rotated_bases(seed_dir)
    expected = sorted([seed.keyspace.segment_key(TOPIC, 0, b, k) for b in bases for k in (FileKind.LOG, FileKind.INDEX, FileKind.TIMEINDEX)] + [seed.keyspace.offset_wm_key(TOPIC, 0)])
    assert keys == expected
    assert keys[0].split("/")[:3] == [PREFIX, entropy(CLUSTER, TOPIC, 0, ENTROPY_BITS), CLUSTER]
    for key in keys[:-1]:
        parsed = seed.keyspace.parse(key)
        assert (parsed.topic, parsed.partition) == (TOPIC, 0) and parsed.segment is not None
        # the rolled segment's files as the broker has them now (Kafka trimmed the indexes at the roll, before the upload)
        assert s3.get_object(Bucket=seed.bucket, Key=key)["Body"].read() == (seed_dir / key.rsplit("/", 1)[1]).read_bytes(), key
    assert registry_for(reader_settings).segments(TOPIC, 0) == []


def test_the_gateway_lists_the_partition_with_every_uploaded_offset(seed: SeedTopic, gateway_url: str) -> None:
    import httpx

    topics = httpx.get(f"{gateway_url}/v1/clusters/{CLUSTER}/topics", timeout=30).json()
    assert topics["topics"] == [{"name": TOPIC, "partitions": [0]}] and topics["complete"] is True
    detail = httpx.get(f"{gateway_url}/v1/clusters/{CLUSTER}/topics/{TOPIC}/partitions/0", timeout=30).json()
    remote = detail["remote"]
    assert (remote["earliest_offset"], remote["latest_offset"], remote["segment_count"]) == (0, seed.end - 1, len(rotated_bases(seed.broker.log_dir / f"{TOPIC}-0")))


def _kept(offset: int, timestamp: int, key: bytes | None, value: bytes | None, headers: Any) -> Kept:
    return Kept(offset, timestamp, key, value, tuple((name, data) for name, data in headers or ()))


def test_tiered_consumer_remote_only_reads_every_offset_byte_for_byte(seed: SeedTopic, gateway_url: str) -> None:
    consumer = TieredConsumer({
        "bootstrap.servers": seed.broker.bootstrap_servers, "group.id": f"g-{uuid.uuid4().hex[:8]}", "enable.auto.commit": False,
        "tiered.mode": "REMOTE_ONLY", "tiered.gateway.url": gateway_url, "tiered.cluster": CLUSTER,
    })  # fmt: skip
    got: list[Kept] = []
    try:
        consumer.assign([TopicPartition(TOPIC, 0, 0)])
        for _ in range(240):
            if len(got) >= len(seed.records):
                break
            for m in consumer.consume(500, 0.5):
                assert m.error() is None, m.error()
                got.append(_kept(m.offset(), m.timestamp()[1], m.key(), m.value(), m.headers()))
    finally:
        consumer.close()
    assert [k.offset for k in got] == list(range(seed.end))
    assert got == seed.records


def test_the_bulk_api_reads_every_offset_byte_for_byte(seed: SeedTopic, gateway_url: str) -> None:
    table = read_table(gateway_url, CLUSTER, TOPIC, 0, include_headers=True)
    rows = table.to_pylist()
    got = [_kept(r["offset"], int(r["timestamp"].timestamp() * 1000), r["key"], r["value"], [(h["key"], h["value"]) for h in r["headers"] or ()]) for r in rows]
    assert [k.offset for k in got] == list(range(seed.end))
    assert got == seed.records


def test_the_spark_source_reads_every_offset_byte_for_byte(seed: SeedTopic, gateway_url: str, spark: Any) -> None:
    options = {"tiered.gateway.url": gateway_url, "tiered.cluster": CLUSTER, "subscribe": TOPIC, "includeHeaders": "true"}
    rows = spark.read.format("tiered-kafka").options(**options).load().collect()  # in the source's order: no orderBy
    got = [_kept(r["offset"], int(r["timestamp"].timestamp() * 1000), r["key"], r["value"], [(h["key"], h["value"]) for h in r["headers"] or ()]) for r in rows]
    assert {r["partition"] for r in rows} == {0} and {r["topic"] for r in rows} == {TOPIC}
    assert [k.offset for k in got] == list(range(seed.end))
    assert [(k.offset, k.timestamp, k.key, None if k.value is None else bytes(k.value), k.headers) for k in got] == [
        (k.offset, k.timestamp, k.key, k.value, k.headers) for k in seed.records
    ]


def test_rebuild_registry_claims_no_pinterest_segment_and_the_listing_keeps_serving(seed: SeedTopic, reader_settings: AgentSettings, gateway_url: str) -> None:
    agent = Agent(reader_settings)  # what `tiered-kafka-agent rebuild-registry` runs (never started)
    registry = agent.registry
    report = rebuild_registry(agent.store, registry)
    assert (report.segments, report.skipped, report.foreign) == (0, 0, len(rotated_bases(seed.broker.log_dir / f"{TOPIC}-0")))
    assert registry.segments(TOPIC, 0) == []
    table = read_table(gateway_url, CLUSTER, TOPIC, 0)
    assert table.column("offset").to_pylist() == list(range(seed.end))
