"""The stack on a Redis Cluster: Kafka (the session's shared broker, a topic of the test's own), the
agent and the gateway as processes of their own, SeaweedFS, and a :class:`RedisClusterServer` (three masters, one replica
each). Only configuration differs from the single-Redis stack: the agent's ``redis.url`` and the
gateway's ``clusters.{name}.redis_url`` are the cluster's ``redis+cluster://`` seed list.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.support.agent_env import AgentProcess, agent_settings, only_topics, rotated_bases, wait_for
from tests.support.gateway_env import gateway_settings, unique_topic
from tests.support.gateway_process import GatewayProcess
from tests.support.kafka_clients import create_topic, produce_numbered
from tiered_kafka.registry import Registry, SegmentEntry, connect
from tiered_kafka_agent.config import AgentSettings
from tiered_kafka_dev.services import KafkaServer


@dataclass
class ClusterStack:
    topic: str  # the test's own topic, the only one the agent follows
    bootstrap: str
    log_dir: Path
    settings: AgentSettings
    agent: AgentProcess
    gateway: GatewayProcess
    registry: Registry

    @property
    def cluster(self) -> str:
        return self.settings.cluster

    def produce(self, topic: str, start: int, count: int, partitions: int) -> None:
        """Records ``start..start+count-1`` (``kafka_clients.produce_numbered``)."""
        produce_numbered(self.bootstrap, topic, start, count, partitions)

    def wait_uploaded(self, topic: str, partitions: int, timeout_s: float = 180) -> None:
        """Until every rotated segment on disk now is registered (read through the cluster client)."""
        for p in range(partitions):
            directory = self.log_dir / f"{topic}-{p}"

            def uploaded() -> bool:
                if self.agent.process.poll() is not None:
                    raise AssertionError(f"the agent exited with {self.agent.process.returncode}:\n{self.agent.output()[-4000:]}")
                with contextlib.suppress(ConnectionError):  # RegistryUnavailableError while a master fails over
                    return set(rotated_bases(directory)) <= {s.base_offset for s in self.registry.segments(topic, p)}
                return False

            try:
                wait_for(uploaded, timeout_s=timeout_s, what=f"{topic}-{p} uploaded")
            except AssertionError as err:
                raise AssertionError(f"{err}; the agent's log ends:\n{self.agent.output()[-6000:]}") from None


@contextlib.contextmanager
def cluster_stack(kafka: KafkaServer, tmp_path: Path, redis_cluster: Any, s3_server: Any, bucket: str, stem: str, partitions: int) -> Iterator[ClusterStack]:
    """Agent process + gateway process on ``redis_cluster`` beside ``kafka`` (a started broker: the
    session's shared one); a topic of the test's own (``stem`` and a suffix) with ~20 KB segments,
    the only topic the agent follows."""
    topic = unique_topic(stem)
    log_dir, bootstrap = kafka.log_dir, kafka.bootstrap_servers
    create_topic(bootstrap, topic, partitions, **{"segment.bytes": "20000", "index.interval.bytes": "4096"})
    upload = {"rescan_interval_s": 0.5, "backoff_base_s": 0.05, "backoff_max_s": 0.5, "max_attempts": 40}
    settings = agent_settings(log_dir, redis_cluster, s3_server, bucket, upload=upload, topics=only_topics(topic))
    assert settings.redis.url.startswith("redis+cluster://")
    with contextlib.ExitStack() as cleanup:
        client = cleanup.enter_context(connect(settings.redis.url))
        agent = AgentProcess(settings, tmp_path / "agent.properties")
        cleanup.callback(agent.stop)
        # every lookup asks the registry (no segment cache): a failover is seen at once
        gateway = GatewayProcess(gateway_settings(settings, s3_server, bootstrap, cache={"segment_ttl_s": 0}))
        cleanup.callback(gateway.stop)
        gateway.wait_ready(120)
        yield ClusterStack(topic, bootstrap, log_dir, settings, agent, gateway, Registry(client, settings.cluster))


def segment_entry(topic: str, base: int, last: int) -> SegmentEntry:
    """A made-up registry entry of partition 0 for offsets ``base..last`` (100 bytes a record), for tests of
    the registry's writes alone (no object behind it)."""
    return SegmentEntry(
        topic=topic, partition=0, base_offset=base, last_offset=last, object_key=f"p/c/{topic}-0/{base:020d}.log", size=100 * (last - base + 1),
        record_count=last - base + 1, min_timestamp=1, max_timestamp=2, checksum=f"crc32c:{base:08x}", leader_epoch=0,
        upload_time_ms=1_700_000_000_000, files=("log", "index", "timeindex"),
    )  # fmt: skip


def s3_segment_bases(s3_server: Any, bucket: str, topic: str, partition: int) -> list[int]:
    """Base offsets of the .log objects of a partition in the bucket (every key, listed by S3)."""
    client = s3_server.client()
    bases = []
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket):
        for item in page.get("Contents", []):
            key = item["Key"]
            if key.endswith(".log") and f"/{topic}-{partition}/" in key:
                bases.append(int(key.rsplit("/", 1)[1][:20]))
    return sorted(bases)


class ReplyDroppingProxy:
    """A TCP proxy to one Redis node (on ``listen_port``, or a free one) that, when armed, forwards the
    next request and drops its reply: the server has executed the command, the client sees its
    connection closed. Unarmed, a plain forwarder."""

    def __init__(self, host: str, port: int, *, listen_port: int = 0) -> None:
        self.target = (host, port)
        self.armed = threading.Event()
        self.dropped = 0
        self._server = socket.create_server(("127.0.0.1", listen_port))
        self.port = self._server.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True, name="reply-dropping-proxy").start()

    def close(self) -> None:
        self._server.close()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            upstream = socket.create_connection(self.target)
            threading.Thread(target=self._pump, args=(client, upstream, False), daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, client, True), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, replies: bool) -> None:
        try:
            while data := src.recv(65536):
                if replies and self.armed.is_set():
                    self.armed.clear()
                    self.dropped += 1
                    break
                dst.sendall(data)
        except OSError:
            pass
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()
