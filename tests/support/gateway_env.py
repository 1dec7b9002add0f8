"""A gateway over the test services, and a partition uploaded by the agent for it to serve."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from fastapi.testclient import TestClient

from tests.support.local_url import LOCAL_URL
from tests.support.agent_env import agent_settings, only_topics, registry_for, rotated_bases, unique_topic, wait_for
from tests.support.fixtures import FIXTURES, MANIFEST
from tests.support.kafka_clients import create_topic, produce_numbered
from tiered_kafka.format.checkpoints import format_offset_wm
from tiered_kafka.format.segment_names import FileKind
from tiered_kafka.keyspace import Keyspace
from tiered_kafka_agent.agent import Agent
from tiered_kafka_agent.config import AgentSettings
from tiered_kafka_dev.services import KafkaServer
from tiered_kafka_gateway.app import create_app
from tiered_kafka_gateway.config import load_settings


def gateway_client(agent: AgentSettings, s3_server: Any, bootstrap: str | None = None, **overrides: Any) -> TestClient:
    return TestClient(create_app(gateway_settings(agent, s3_server, bootstrap, **overrides)), base_url=LOCAL_URL)


def gateway_settings(agent: AgentSettings, s3_server: Any, bootstrap: str | None = None, **overrides: Any) -> Any:
    """Gateway settings serving the agent's cluster (its Redis, bucket, prefix and entropy)."""
    cluster = {
        "redis_url": agent.redis.url,
        "s3": {
            "bucket": agent.s3.bucket,
            "prefix": agent.s3.prefix,
            "entropy_bits": agent.s3.entropy_bits,
            "endpoint_url": s3_server.endpoint_url,
            "access_key_id": s3_server.access_key,
            "secret_access_key": s3_server.secret_key,
            "region": s3_server.region,
        },
        "bootstrap_servers": bootstrap,
    }
    return load_settings(clusters={agent.cluster: cluster}, **overrides)


def uploaded_partition(
    kafka: KafkaServer | Callable[..., KafkaServer], tmp_path: Path, redis_server: Any, s3_server: Any, bucket: str, topic: str, count: int = 2000
) -> tuple[KafkaServer, AgentSettings]:
    """A one-partition topic of ``count`` records (``kafka_clients.produce_numbered``) in segments of
    100 kB (``segment.bytes``), whose rotated segments (every one but the active) the agent has uploaded
    and registered.

    ``kafka`` is a started broker (prefer the session's shared ``kafka_server``: the agent follows only
    ``topic``, which must be the test's own, ``unique_topic``), or the ``start_kafka`` factory (a fresh
    broker on ``tmp_path / "logs"``, for a test that restarts, kills or reconfigures it)."""
    broker = kafka if isinstance(kafka, KafkaServer) else kafka(tmp_path / "logs")
    create_topic(broker.bootstrap_servers, topic, 1, **{"segment.bytes": "100000", "index.interval.bytes": "4096"})
    produce_numbered(broker.bootstrap_servers, topic, 0, count)
    settings = agent_settings(broker.log_dir, redis_server, s3_server, bucket, topics=only_topics(topic))
    registry = registry_for(settings)
    with Agent(settings):
        wait_for(lambda: [s.base_offset for s in registry.segments(topic, 0)] == rotated_bases(broker.log_dir / f"{topic}-0"), what="uploaded")
    return broker, settings


def pinterest_bucket(s3_server: Any, bucket: str, keyspace: Keyspace, topic: str, segments: int = 4, fixture: str = "test_topic_a-0") -> int:
    """The first ``segments`` broker-written segments of a fixture partition, uploaded as
    Pinterest's uploader lays them out (keys of ``keyspace`` for ``topic``-0, no registry, and
    ``offset.wm`` written after each segment's files); the last offset uploaded."""
    client = s3_server.client()
    logs = sorted(MANIFEST[fixture])[:segments]
    for name in logs:
        base = int(name[:20])
        for kind in (FileKind.LOG, FileKind.INDEX, FileKind.TIMEINDEX):
            body = (FIXTURES / fixture / f"{name[:20]}.{kind.value}").read_bytes()
            client.put_object(Bucket=bucket, Key=keyspace.segment_key(topic, 0, base, kind), Body=body)
        client.put_object(Bucket=bucket, Key=keyspace.offset_wm_key(topic, 0), Body=format_offset_wm(base))
    return MANIFEST[fixture][logs[-1]]["last_offset"]
