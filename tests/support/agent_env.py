"""Building agent settings and waiting on its results, for the agent's integration tests."""

from __future__ import annotations

import contextlib
import json
import shutil
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import redis
from confluent_kafka import ElectionType
from confluent_kafka import TopicPartition as KafkaTopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kazoo.client import KazooClient

from tiered_kafka.registry import Registry
from tiered_kafka_agent.config import AgentSettings, load_settings
from tiered_kafka_dev.kafka_log.high_watermarks import checkpoint_high_watermarks, log_end_offset  # noqa: F401 (re-exported for the tests)
from tiered_kafka_dev.services import KAFKA_ZK_VERSION, KafkaCluster, topic_configs


def agent_settings(log_dir: Path, redis_server: Any, s3_server: Any, bucket: str, **overrides: Any) -> AgentSettings:
    """Settings for an agent on ``log_dir`` against the test services; a fresh cluster name each time."""
    base: dict[str, Any] = {
        "cluster": f"cluster-{uuid.uuid4().hex[:8]}",
        "broker_id": 0,
        "log_dirs": [log_dir],
        "s3": {
            "bucket": bucket,
            "endpoint_url": s3_server.endpoint_url,
            "access_key_id": s3_server.access_key,
            "secret_access_key": s3_server.secret_key,
            "region": s3_server.region,
            "entropy_bits": 3,
            "prefix": "tiered",
        },
        "redis": {"url": redis_server.url},
        "leadership": {"mode": "static"},
        "upload": {"rescan_interval_s": 1.0, "backoff_base_s": 0.05, "backoff_max_s": 1.0},
        "metrics": {"port": 0},
    }
    return load_settings(None, **_merge(base, overrides))


def unique_topic(stem: str) -> str:
    """A topic name of the test's own (``stem`` plus a random suffix): on the session's shared broker
    (the ``kafka_server`` fixture) every test's topics live in one log.dir."""
    return f"{stem}-{uuid.uuid4().hex[:8]}"


def only_topics(*topics: str) -> dict[str, list[str]]:
    """The agent's ``topics`` setting accepting exactly ``topics`` (names of letters, digits and
    ``-``: no regex escaping needed, and none that a .properties file would mangle)."""
    return {"include": [f"^{topic}$" for topic in topics]}


def broker_agent_settings(broker: Any, topics: Sequence[str], redis_server: Any, s3_server: Any, bucket: str, **overrides: Any) -> AgentSettings:
    """Settings for an agent on the log.dir of ``broker`` (a ``KafkaServer``) that uploads only
    ``topics``: an agent on the shared broker's log.dir must leave other tests' topics alone."""
    return agent_settings(broker.log_dir, redis_server, s3_server, bucket, topics=only_topics(*topics), **overrides)


def copy_partition(source: Path, log_dir: Path) -> Path:
    """A copy of a broker's partition directory (every file Kafka wrote there) in ``log_dir``: for
    tests that damage or delete a segment, never under a running broker (Kafka takes a log.dir
    offline when a segment file it renames or deletes is gone). Its high watermark is checkpointed
    at its log end offset (``checkpoint_high_watermarks``: the producers waited for their acks, and
    the broker's own checkpoint may lag). Returns the copy."""
    target = log_dir / source.name
    log_dir.mkdir(parents=True, exist_ok=True)
    shutil.copytree(source, target)
    checkpoint_high_watermarks(log_dir, [target])
    return target


def delete_records(bootstrap: str, topic: str, before: int, partition: int = 0) -> None:
    """Kafka's DeleteRecords: the partition's log start offset moves to ``before``; the broker's
    retention task then renames every segment wholly below it ``.deleted`` and deletes it
    ``file.delete.delay.ms`` later."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    try:
        result = next(iter(admin.delete_records([KafkaTopicPartition(topic, partition, before)]).values())).result(timeout=30)
    finally:
        del admin
    assert result.low_watermark == before


def _merge(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in extra.items():
        merged[key] = _merge(merged[key], value) if isinstance(value, dict) and isinstance(merged.get(key), dict) else value
    return merged


def registry_for(settings: AgentSettings) -> Registry:
    return Registry(redis.Redis.from_url(settings.redis.url), settings.cluster)


def wait_for(condition: Callable[[], Any], timeout_s: float = 60, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        result = condition()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def rotated_bases(directory: Path) -> list[int]:
    bases = sorted(int(p.name[:20]) for p in directory.glob("*.log"))
    return bases[:-1]


def settings_properties(settings: AgentSettings) -> str:
    """The settings as a .properties file (dotted names), for an agent run as a subprocess."""
    lines: list[str] = []

    def walk(prefix: str, value: Any) -> None:
        if isinstance(value, dict):
            for key, inner in value.items():
                walk(f"{prefix}.{key}" if prefix else key, inner)
        elif isinstance(value, list):
            lines.append(f"{prefix}={','.join(str(v) for v in value)}")
        elif value is not None:
            lines.append(f"{prefix}={value}")

    data = settings.model_dump(mode="json")
    if settings.s3.secret_access_key is not None:
        data["s3"]["secret_access_key"] = settings.s3.secret_access_key.get_secret_value()
    walk("", data)
    return "\n".join(lines) + "\n"


class AgentProcess:
    """``tiered-kafka-agent run`` as a child process (so it can be SIGKILLed like a real crash)."""

    def __init__(self, settings: AgentSettings, config_path: Path, *, crash_at: str | None = None) -> None:
        import os
        import subprocess
        import sys

        config_path.write_text(settings_properties(settings))
        env = {k: v for k, v in os.environ.items() if not k.startswith("TIERED_KAFKA_AGENT_")}
        if crash_at:
            env["TIERED_KAFKA_AGENT_TEST_CRASH_AT"] = crash_at
        self.log_path = config_path.with_suffix(".log")
        self._log = open(self.log_path, "ab")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tiered_kafka_agent", "run", "--config", str(config_path), "-v"],
            env=env,
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )

    def wait(self, timeout_s: float) -> int:
        return self.process.wait(timeout_s)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(60)
            except Exception:
                self.process.kill()
                self.process.wait(10)
        self._log.close()

    def output(self) -> str:
        return self.log_path.read_text(errors="replace")


class ZooKeeperKafka:
    """Two ZooKeeper-mode Kafka brokers (the 3.9 line) in one chroot of the session's ZooKeeper, for
    the agent's ZooKeeper leadership: partitions are created with an explicit replica assignment
    (:meth:`create_topic`) and moved the way Kafka moves them (:meth:`move`): a reassignment handed
    to Kafka's controller through ``/admin/reassign_partitions`` (ZooKeeper mode's own interface;
    librdkafka has no AlterPartitionReassignments), then a preferred-leader election (Admin API).

    Automatic leader rebalancing is off, so a partition stays where a test put it.
    """

    CONFIG = {"auto.leader.rebalance.enable": "false"}

    def __init__(self, zookeeper_hosts: str, root: Path, size: int = 2) -> None:
        self.zookeeper_connect = f"{zookeeper_hosts}/kafka-{uuid.uuid4().hex[:8]}"  # Kafka creates its chroot
        self.cluster = KafkaCluster(size, root=root, config=self.CONFIG, zookeeper_connect=self.zookeeper_connect)
        self.brokers = {b.node_id: b for b in self.cluster.brokers}

    @property
    def bootstrap_servers(self) -> str:
        return self.cluster.bootstrap_servers

    def start(self) -> ZooKeeperKafka:
        self.cluster.start()
        return self

    def stop(self) -> None:
        self.cluster.stop()

    def create_topic(self, name: str, assignment: Sequence[Sequence[int]], **configs: str) -> None:
        """A topic whose partition ``i`` has the replicas ``assignment[i]`` (the first one its
        preferred leader); returns once every partition has its preferred leader."""
        admin = AdminClient({"bootstrap.servers": self.bootstrap_servers})
        topic = NewTopic(name, num_partitions=len(assignment), replica_assignment=[list(r) for r in assignment], config=topic_configs(configs, KAFKA_ZK_VERSION))
        try:
            for future in admin.create_topics([topic]).values():
                future.result(timeout=30)
        finally:
            del admin
        for partition, replicas in enumerate(assignment):
            wait_for(lambda p=partition, r=replicas: self.state(name, p).get("leader") == r[0], timeout_s=60, what=f"{name}-{partition} led by {replicas[0]}")

    def state(self, topic: str, partition: int) -> dict[str, Any]:
        """The partition's state znode as Kafka's controller wrote it (leader, leader_epoch, isr)."""
        with self._zookeeper() as zk:
            data, _ = zk.get(f"/brokers/topics/{topic}/partitions/{partition}/state")
        return json.loads(data)

    def move(self, topic: str, partition: int, replicas: Sequence[int], *, elect: bool = True) -> dict[str, Any]:
        """Reassign the partition to ``replicas`` (Kafka's controller bumps its leader epoch even
        when only their order changes), then, with ``elect``, a preferred-leader election makes
        ``replicas[0]`` its leader. Returns the partition's state afterwards."""
        before = self.state(topic, partition)["leader_epoch"]
        reassignment = {"version": 1, "partitions": [{"topic": topic, "partition": partition, "replicas": list(replicas)}]}
        with self._zookeeper() as zk:
            zk.create("/admin/reassign_partitions", json.dumps(reassignment).encode())
            wait_for(lambda: zk.exists("/admin/reassign_partitions") is None, timeout_s=60, what=f"the reassignment of {topic}-{partition}")
        wait_for(lambda: self.state(topic, partition)["leader_epoch"] > before, timeout_s=60, what=f"{topic}-{partition}'s reassignment applied")
        if elect and self.state(topic, partition)["leader"] != replicas[0]:
            wait_for(lambda: set(self.state(topic, partition)["isr"]) >= set(replicas), timeout_s=60, what=f"{topic}-{partition}'s replicas in sync")
            admin = AdminClient({"bootstrap.servers": self.bootstrap_servers})
            try:
                for error in admin.elect_leaders(ElectionType.PREFERRED, [KafkaTopicPartition(topic, partition)]).result(timeout=30).values():
                    assert error is None, error
            finally:
                del admin
            wait_for(lambda: self.state(topic, partition)["leader"] == replicas[0], timeout_s=60, what=f"{topic}-{partition} led by {replicas[0]}")
        return self.state(topic, partition)

    @contextlib.contextmanager
    def _zookeeper(self) -> Iterator[KazooClient]:
        """A ZooKeeper session inside the cluster's chroot, closed on exit."""
        client = KazooClient(hosts=self.zookeeper_connect)
        client.start(timeout=15)
        try:
            yield client
        finally:
            client.stop()
            client.close()
