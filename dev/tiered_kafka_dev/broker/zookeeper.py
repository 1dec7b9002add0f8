"""Registration in ZooKeeper, as a ZooKeeper-mode Kafka broker and controller leave it.

znodes (Kafka's ``kafka.zk.ZkData``), all JSON::

    /cluster/id                                   {"version":"1","id":"<cluster id>"}
    /controller                                   ephemeral {"version":2,"brokerid":N,"timestamp":"<ms>"}
    /controller_epoch                             1
    /brokers/ids/{id}                             ephemeral {"version":5,"host":...,"port":...,"endpoints":[...],...}
    /brokers/topics/{topic}                       {"version":3,"partitions":{"0":[id],...},"topic_id":"...",
                                                   "adding_replicas":{},"removing_replicas":{}}
    /brokers/topics/{topic}/partitions/{p}/state  {"controller_epoch":1,"leader":N,"version":1,
                                                   "leader_epoch":E,"isr":[N]}
    /config/topics/{topic}                        {"version":1,"config":{...}}

The agent's leadership watch sees the same znodes it would see on a real cluster.
``set_partition_leader`` moves a partition's leadership in ZooKeeper (bumping the leader epoch),
which is how tests exercise the agent's reaction to leadership changes.
"""

from __future__ import annotations

import json
import logging
import time
from typing import TYPE_CHECKING, Any

from kazoo.client import KazooClient
from kazoo.exceptions import NodeExistsError, NoNodeError

from tiered_kafka.errors import ConfigError
from tiered_kafka_dev.broker.storage import Topic, kafka_uuid

if TYPE_CHECKING:
    from tiered_kafka_dev.broker.server import Broker

log = logging.getLogger(__name__)
CONTROLLER_EPOCH = 1


def _json(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode()


def topic_path(topic: str) -> str:
    return f"/brokers/topics/{topic}"


def partition_state_path(topic: str, partition: int) -> str:
    return f"/brokers/topics/{topic}/partitions/{partition}/state"


class ZooKeeperRegistration:
    """The broker's znodes; ephemeral ones vanish with the session when the broker stops."""

    def __init__(self, broker: Broker, hosts: str) -> None:
        self.broker = broker
        self.client = KazooClient(hosts=hosts, timeout=10)

    def register(self) -> None:
        self.client.start(timeout=15)
        for path in ("/brokers/ids", "/brokers/topics", "/config/topics", "/cluster"):
            self.client.ensure_path(path)
        self._register_cluster_id()
        self._create_or_set("/controller_epoch", str(CONTROLLER_EPOCH).encode(), overwrite=False)
        node = self.broker.node_id
        now = str(int(time.time() * 1000))
        self.client.create(
            f"/brokers/ids/{node}",
            _json(
                {
                    "features": {},
                    "listener_security_protocol_map": {"PLAINTEXT": "PLAINTEXT"},
                    "endpoints": [f"PLAINTEXT://{self.broker.host}:{self.broker.port}"],
                    "jmx_port": -1,
                    "port": self.broker.port,
                    "host": self.broker.host,
                    "version": 5,
                    "timestamp": now,
                }
            ),
            ephemeral=True,
        )
        try:
            self.client.create("/controller", _json({"version": 2, "brokerid": node, "timestamp": now}), ephemeral=True)
        except NodeExistsError:
            pass  # another broker is the controller
        for topic in self.broker.logs.topics.values():
            self.register_topic(topic)
        log.info("broker %d registered in ZooKeeper %s", node, self.client.hosts)

    def _register_cluster_id(self) -> None:
        try:
            data, _ = self.client.get("/cluster/id")
        except NoNodeError:
            self.client.create("/cluster/id", _json({"version": "1", "id": self.broker.cluster_id}))
            return
        stored = json.loads(data)["id"]
        if stored != self.broker.cluster_id:
            raise ConfigError(
                f"ZooKeeper holds cluster id {stored!r} but the log.dir belongs to {self.broker.cluster_id!r} "
                "(Kafka's InconsistentClusterIdException)"
            )

    def _create_or_set(self, path: str, data: bytes, *, overwrite: bool = True) -> None:
        try:
            self.client.create(path, data, makepath=True)
        except NodeExistsError:
            if overwrite:
                self.client.set(path, data)

    def register_topic(self, topic: Topic) -> None:
        node = self.broker.node_id
        assignment = {str(p): [node] for p in range(topic.partitions)}
        self._create_or_set(
            topic_path(topic.name),
            _json(
                {
                    "partitions": assignment,
                    "topic_id": kafka_uuid(topic.topic_id),
                    "adding_replicas": {},
                    "removing_replicas": {},
                    "version": 3,
                }
            ),
        )
        for p in range(topic.partitions):
            self.set_partition_leader(topic.name, p, node, leader_epoch=self._leader_epoch(topic.name, p))
        self._create_or_set(f"/config/topics/{topic.name}", _json({"version": 1, "config": topic.configs}))

    def _leader_epoch(self, topic: str, partition: int) -> int:
        try:
            data, _ = self.client.get(partition_state_path(topic, partition))
        except NoNodeError:
            return 0
        return int(json.loads(data)["leader_epoch"])

    def set_partition_leader(self, topic: str, partition: int, leader: int, *, leader_epoch: int | None = None) -> int:
        """Write the partition's state znode with ``leader``; the epoch defaults to the old one + 1."""
        if leader_epoch is None:
            leader_epoch = self._leader_epoch(topic, partition) + 1
        state = {"controller_epoch": CONTROLLER_EPOCH, "leader": leader, "version": 1, "leader_epoch": leader_epoch, "isr": [leader]}
        self._create_or_set(partition_state_path(topic, partition), _json(state))
        return leader_epoch

    def unregister_topic(self, topic: str) -> None:
        for path in (topic_path(topic), f"/config/topics/{topic}"):
            try:
                self.client.delete(path, recursive=True)
            except NoNodeError:
                pass

    def close(self) -> None:
        self.client.stop()
        self.client.close()
