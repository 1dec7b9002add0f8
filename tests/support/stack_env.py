"""The whole stack on loopback for SDK and Spark tests: a real Kafka broker, the agent uploading
its rotated segments to SeaweedFS and registering them in Redis, and the gateway on uvicorn (real
HTTP, so presigned URLs are fetched from SeaweedFS as a client anywhere would)."""

from __future__ import annotations

import contextlib
import gc
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, TopicPartition

from tests.support.agent_env import agent_settings, registry_for, rotated_bases, wait_for
from tests.support.gateway_env import gateway_settings
from tests.support.kafka_clients import create_topic, produce_numbered
from tiered_kafka.registry import Registry
from tiered_kafka_agent.agent import Agent
from tiered_kafka_agent.config import AgentSettings
from tiered_kafka_dev.services import KafkaServer
from tiered_kafka_dev.services._process import free_ports
from tiered_kafka_dev.stack import GatewayServer


@dataclass
class TieredStack:
    broker: Any  # tiered_kafka_dev.services.KafkaServer
    bootstrap: str
    gateway_url: str
    agent: AgentSettings
    log_dir: Path
    registry: Registry

    @property
    def cluster(self) -> str:
        return self.agent.cluster

    def consumer_config(self, mode: str, **extra: Any) -> dict[str, Any]:
        """A TieredConsumer configuration for this stack (group id unique per call)."""
        return {
            "bootstrap.servers": self.bootstrap,
            "group.id": f"g-{uuid.uuid4().hex[:8]}",
            "auto.offset.reset": "earliest",
            "tiered.mode": mode,
            "tiered.gateway.url": self.gateway_url,
            "tiered.cluster": self.cluster,
            **extra,
        }

    def produce(self, topic: str, count: int, partitions: int = 1, start: int = 0, **config: Any) -> None:
        """Records ``start..start+count-1`` (``kafka_clients.produce_numbered``)."""
        produce_numbered(self.bootstrap, topic, start, count, partitions, **config)

    def wait_uploaded(self, topic: str, partitions: int = 1) -> None:
        """Until every rotated segment of the topic (on disk now) is registered."""
        for p in range(partitions):
            directory = self.log_dir / f"{topic}-{p}"
            wait_for(lambda: set(rotated_bases(directory)) <= {s.base_offset for s in self.registry.segments(topic, p)}, what=f"{topic}-{p} uploaded")

    def wait_retention(self, topic: str, partitions: int = 1, settle_s: float = 3.0) -> dict[int, int]:
        """Until the broker's retention has deleted the oldest segments and the log start offsets
        stopped moving; the log start offsets by partition.

        Kafka checks retention every ``log.retention.check.interval.ms`` (1 s here), from its start:
        a pass that ran while the records were still being produced deleted only what exceeded the
        limit then, and the next pass deletes more. So a log start above 0 is not the final one:
        it must stay the same for ``settle_s`` (several passes)."""
        consumer = Consumer({"bootstrap.servers": self.bootstrap, "group.id": "watermarks"})
        try:
            seen: dict[int, tuple[int, float]] = {}

            def settled() -> bool:
                now = time.monotonic()
                for p in range(partitions):
                    low, _high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=5, cached=False)
                    if p not in seen or seen[p][0] != low:
                        seen[p] = (low, now)
                return all(seen[p][0] > 0 and now - seen[p][1] >= settle_s for p in range(partitions))

            wait_for(settled, timeout_s=90, what=f"retention of {topic}")
            return {p: seen[p][0] for p in range(partitions)}
        finally:
            consumer.close()


@contextlib.contextmanager
def tiered_stack(start_kafka: Any, tmp_path: Path, redis_server: Any, s3_server: Any, bucket: str, **gateway: Any) -> Iterator[TieredStack]:
    """Broker + agent (static leadership) + gateway, all stopped on exit (gateway, agent; the broker by
    its fixture). ``start_kafka(log_dir)`` starts a broker (the ``start_kafka`` fixture)."""
    log_dir = tmp_path / "logs"
    broker = start_kafka(log_dir)
    settings = agent_settings(log_dir, redis_server, s3_server, bucket)
    with Agent(settings), gateway_server(settings, s3_server, broker.bootstrap_servers, **gateway) as url:
        yield TieredStack(broker, broker.bootstrap_servers, url, settings, log_dir, registry_for(settings))


@contextlib.contextmanager
def own_tiered_stack(root: Path, redis_server: Any, s3_server: Any, bucket_prefix: str) -> Iterator[TieredStack]:
    """A stack with its own broker (started here, stopped on exit) in ``root`` and its own bucket:
    for module- or package-scoped fixtures, which cannot use the function-scoped broker fixture."""
    bucket = s3_server.create_bucket(f"{bucket_prefix}-{uuid.uuid4().hex[:12]}")
    started: list[KafkaServer] = []

    def start_broker(log_dir: Path | None = None, **options: Any) -> KafkaServer:
        server = KafkaServer(log_dir=log_dir or root / "kafka-logs", **options)
        started.append(server)
        return server.start()

    try:
        with tiered_stack(start_broker, root, redis_server, s3_server, bucket) as stack:
            yield stack
    finally:
        gc.collect()  # a client handle in a reference cycle would otherwise outlive the broker (pytest_plugin._release_clients)
        for server in reversed(started):
            server.stop()


@contextlib.contextmanager
def gateway_server(agent: AgentSettings, s3_server: Any, bootstrap: str | None = None, **overrides: Any) -> Iterator[str]:
    """The gateway on uvicorn (127.0.0.1, a free port) serving the agent's cluster; yields its URL."""
    server = GatewayServer(gateway_settings(agent, s3_server, bootstrap, **{"cache": {"segment_ttl_s": 0}, **overrides}), free_ports(1)[0])
    try:
        yield server.url
    finally:
        server.stop()


def create_tiered_topic(stack: TieredStack, topic: str, partitions: int = 1, retention_bytes: int | None = None, segment_bytes: int = 100_000) -> None:
    """A topic with small segments; ``retention_bytes`` makes the broker delete the oldest
    segments beyond that size (size-based retention keeps a hot tail, unlike a short retention.ms,
    under which Kafka also rolls and deletes the expired active segment)."""
    configs = {"segment.bytes": str(segment_bytes), "index.interval.bytes": "4096"}
    if retention_bytes is not None:
        configs["retention.bytes"] = str(retention_bytes)
    create_topic(stack.bootstrap, topic, partitions, **configs)


def topic_with_a_lost_segment(stack: TieredStack, topic: str, records: int) -> Any:
    """A one-partition topic of ``records`` records in small segments, uploaded, whose second
    segment remote storage then lost: deleted from the registry and recorded as a gap ("test:
    segment lost"), as the agent records offsets it could not upload. Returns the lost segment."""
    create_tiered_topic(stack, topic, 1, segment_bytes=16_000)
    stack.produce(topic, records, 1)
    stack.wait_uploaded(topic, 1)
    segments = stack.registry.segments(topic, 0)
    assert len(segments) >= 4
    lost = segments[1]
    assert stack.registry.delete_segment(topic, 0, lost.base_offset) is not None
    stack.registry.record_gap(topic, 0, lost.base_offset, lost.last_offset, "test: segment lost")
    return lost
