"""The development broker registers itself and its partitions in a real ZooKeeper."""

from __future__ import annotations

import json

import pytest
from kazoo.client import KazooClient

from tests.support.kafka_clients import create_topic
from tiered_kafka_dev.broker.zookeeper import partition_state_path

pytestmark = pytest.mark.integration


@pytest.fixture
def zk(zookeeper_server):
    client = KazooClient(hosts=zookeeper_server.hosts)
    client.start(timeout=15)
    yield client
    client.stop()
    client.close()


def _json(zk: KazooClient, path: str) -> dict:
    return json.loads(zk.get(path)[0])


def test_broker_topics_and_partition_states_are_registered(start_dev_broker, zookeeper_server, zk, tmp_path) -> None:
    broker = start_dev_broker(tmp_path / "logs", zookeeper_connect=zookeeper_server.hosts, node_id=3)
    create_topic(broker.broker.bootstrap_servers, "zk-topic", 2, **{"retention.ms": "60000"})

    assert _json(zk, "/cluster/id") == {"version": "1", "id": broker.broker.cluster_id}
    registration = _json(zk, "/brokers/ids/3")
    assert registration["endpoints"] == [f"PLAINTEXT://127.0.0.1:{broker.broker.port}"]
    assert (registration["host"], registration["port"]) == ("127.0.0.1", broker.broker.port)
    assert zk.exists("/brokers/ids/3").ephemeralOwner != 0

    topic = _json(zk, "/brokers/topics/zk-topic")
    assert topic["partitions"] == {"0": [3], "1": [3]} and topic["version"] == 3
    for p in range(2):
        state = _json(zk, partition_state_path("zk-topic", p))
        assert (state["leader"], state["leader_epoch"], state["isr"]) == (3, 0, [3])
    assert _json(zk, "/config/topics/zk-topic")["config"] == {"retention.ms": "60000"}

    # leadership moves away and back, each time with a new leader epoch
    registration_client = broker.broker.zookeeper
    assert registration_client.set_partition_leader("zk-topic", 1, 7) == 1
    assert _json(zk, partition_state_path("zk-topic", 1))["leader"] == 7
    assert registration_client.set_partition_leader("zk-topic", 1, 3) == 2

    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": broker.broker.bootstrap_servers})
    for future in admin.delete_topics(["zk-topic"]).values():
        future.result(timeout=30)
    assert zk.exists("/brokers/topics/zk-topic") is None

    broker.stop()
    assert zk.exists("/brokers/ids/3") is None  # the ephemeral registration ends with the session


def test_a_log_dir_of_another_cluster_is_refused(start_dev_broker, zookeeper_server, zk, tmp_path) -> None:
    zk.ensure_path("/cluster")
    if not zk.exists("/cluster/id"):
        zk.create("/cluster/id", json.dumps({"version": "1", "id": "someOtherCluster"}).encode())
    foreign = _json(zk, "/cluster/id")["id"]
    with pytest.raises(Exception, match="cluster id"):
        start_dev_broker(tmp_path / "other-logs", zookeeper_connect=zookeeper_server.hosts, cluster_id=foreign + "x")
