"""The Apache Kafka launchers (``tiered_kafka_dev.services._kafka``) against the real jars: ready means a
client can produce, a restart keeps the log.dir and the port, a SIGKILL is followed by log recovery,
a ZooKeeper-mode 3.9 broker registers in ZooKeeper, settings pass through under Kafka's names, and a
missing install or a broker that cannot start fails with a message naming the problem."""

from __future__ import annotations

import re
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource
from kazoo.client import KazooClient

from tests.support.kafka_clients import create_topic, produce
from tiered_kafka_dev.services import KAFKA_VERSION, KAFKA_ZK_VERSION, KafkaServer, MissingBinaryError, ServiceStartError, topic_configs
from tiered_kafka_dev.services._kafka import LOCAL_DEFAULTS, java_cache_dir

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]


def _high_watermark(bootstrap: str, topic: str) -> tuple[int, int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "launcher-tests"})
    try:
        return consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10, cached=False)
    finally:
        consumer.close()


def test_the_pinned_versions_are_what_install_resolves() -> None:
    """dev/java/kafka-<v>.pom.xml pins each line; the launcher's constants name the same versions."""
    for version in (KAFKA_VERSION, KAFKA_ZK_VERSION):
        pom = (REPO / "dev" / "java" / f"kafka-{version}.pom.xml").read_text()
        assert re.search(rf"<artifactId>kafka_2\.13</artifactId><version>{re.escape(version)}</version>", pom), version
        assert (java_cache_dir() / f"kafka-{version}" / f"kafka_2.13-{version}.jar").is_file()


def test_small_segments_go_to_kafkas_internal_setting_on_4x_only() -> None:
    assert topic_configs({"segment.bytes": "16000", "retention.ms": "5"}) == {"internal.segment.bytes": "16000", "retention.ms": "5"}
    assert topic_configs({"segment.bytes": str(2**20)}) == {"segment.bytes": str(2**20)}
    assert topic_configs({"segment.bytes": "16000"}, KAFKA_ZK_VERSION) == {"segment.bytes": "16000"}


def test_a_missing_install_names_the_install_script(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TIERED_KAFKA_JAVA_CACHE", str(tmp_path / "empty"))
    with pytest.raises(MissingBinaryError, match=r"install\.sh") as caught:
        KafkaServer(log_dir=tmp_path / "logs").start()
    assert f"kafka-{KAFKA_VERSION}" in str(caught.value)


def test_a_broker_that_cannot_start_reports_its_log(tmp_path: Path) -> None:
    """An unknown value for a known setting: Kafka refuses to start; the error carries its log tail."""
    with pytest.raises(ServiceStartError) as caught:
        KafkaServer(log_dir=tmp_path / "logs", config={"log.retention.check.interval.ms": "not-a-number"}, startup_timeout_s=60).start()
    assert "log.retention.check.interval.ms" in caught.value.log_tail


def test_restart_and_crash_keep_the_log_and_the_port(start_kafka) -> None:
    """A controlled restart and a SIGKILL (log recovery on the next start) keep every acknowledged
    record, on the same port, and the broker's settings pass through under Kafka's names."""
    server = start_kafka(config={"log.retention.check.interval.ms": 700})
    port, topic = server.port, f"restart-{uuid.uuid4().hex[:6]}"
    create_topic(server.bootstrap_servers, topic, 1, **{"segment.bytes": "20000"})
    produce(server.bootstrap_servers, topic, [(0, b"k", b"v" * 500) for _ in range(200)])
    assert _high_watermark(server.bootstrap_servers, topic) == (0, 200)
    assert "log.retention.check.interval.ms=700" in (server.workdir / "server.properties").read_text()

    server.restart()
    assert server.port == port
    produce(server.bootstrap_servers, topic, [(0, b"k", b"w" * 500) for _ in range(100)])
    server.kill()
    assert not server.running
    server.restart()
    assert (server.port, _high_watermark(server.bootstrap_servers, topic)) == (port, (0, 300))
    assert len(list((server.log_dir / f"{topic}-0").glob("*.log"))) > 1


def test_a_zookeeper_mode_broker_on_the_39_line(start_kafka, zookeeper_server, tmp_path: Path) -> None:
    chroot = f"/launcher-{uuid.uuid4().hex[:8]}"
    server = start_kafka(tmp_path / "zk-logs", zookeeper_connect=zookeeper_server.hosts + chroot, node_id=7)
    assert (server.version, server.kraft) == (KAFKA_ZK_VERSION, False)
    topic = f"zk-{uuid.uuid4().hex[:6]}"
    create_topic(server.bootstrap_servers, topic, 2, version=KAFKA_ZK_VERSION, **{"segment.bytes": "16000"})
    zk = KazooClient(hosts=zookeeper_server.hosts + chroot)
    zk.start(timeout=15)
    try:
        assert zk.get_children("/brokers/ids") == ["7"]
        assert sorted(zk.get_children(f"/brokers/topics/{topic}/partitions")) == ["0", "1"]
    finally:
        zk.stop()
        zk.close()
    admin = AdminClient({"bootstrap.servers": server.bootstrap_servers})
    described = admin.describe_configs([ConfigResource("topic", topic)])
    configs = next(iter(described.values())).result(timeout=15)
    assert configs["segment.bytes"].value == "16000"


def test_the_shared_broker_runs_kafka_4_in_kraft_with_the_local_defaults(kafka_server) -> None:
    assert (kafka_server.version, kafka_server.kraft) == (KAFKA_VERSION, True)
    assert (kafka_server.log_dir / "meta.properties").read_text().count("node.id=1") == 1
    properties = (kafka_server.workdir / "server.properties").read_text()
    for name, value in LOCAL_DEFAULTS.items():
        assert f"{name}={value}\n" in properties


def test_a_three_node_cluster_survives_losing_a_node(kafka_cluster) -> None:
    """Replicated topic, leader SIGKILLed: the other nodes elect a new leader and keep every record."""
    bootstrap, topic = kafka_cluster.bootstrap_servers, f"cluster-{uuid.uuid4().hex[:6]}"
    create_topic(bootstrap, topic, 1, replication=3, **{"min.insync.replicas": "2"})
    produce(bootstrap, topic, [(0, b"k", b"v") for _ in range(50)], acks="all")
    admin = AdminClient({"bootstrap.servers": bootstrap})
    leader = admin.list_topics(topic, timeout=10).topics[topic].partitions[0].leader
    kafka_cluster.broker(leader).kill()
    produce(bootstrap, topic, [(0, b"k", b"w") for _ in range(50)], acks="all")
    assert _high_watermark(bootstrap, topic) == (0, 100)
    kafka_cluster.broker(leader).restart()
    assert leader in admin.list_topics(timeout=10).brokers
