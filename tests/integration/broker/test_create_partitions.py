"""CreatePartitions (API key 37) on the development broker, through confluent-kafka's AdminClient.

Kafka's rules (``ControllerApis.createPartitions``, ``ReplicationControlManager.createPartitions``):
a count not larger is INVALID_PARTITIONS, an unknown topic UNKNOWN_TOPIC_OR_PARTITION,
``validate_only`` changes nothing, and Metadata then lists the new partitions, which take
produce and fetch at once.
"""

from __future__ import annotations

import json
import uuid

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, NewPartitions
from kazoo.client import KazooClient
from kio.schema.errors import ErrorCode

from tests.support.kafka_clients import consume_all, create_topic, produce
from tests.support.kafka_wire import WireClient
from tiered_kafka_dev.broker.server import APIS
from tiered_kafka_dev.broker.storage import kafka_uuid
from tiered_kafka_dev.broker.zookeeper import partition_state_path

pytestmark = pytest.mark.integration


def _grow(admin: AdminClient, topic: str, count: int, **kwargs: object) -> None:
    for future in admin.create_partitions([NewPartitions(topic, count)], **kwargs).values():
        future.result(timeout=30)


def _error_code(admin: AdminClient, topic: str, count: int, **kwargs: object) -> KafkaError:
    with pytest.raises(KafkaException) as info:
        _grow(admin, topic, count, **kwargs)
    return info.value.args[0]


def _partitions(admin: AdminClient, topic: str) -> list[int]:
    return sorted(admin.list_topics(topic, timeout=30).topics[topic].partitions)


def test_create_partitions_grows_a_topic_and_refuses_bad_counts(dev_broker) -> None:
    bootstrap = dev_broker.broker.bootstrap_servers
    create_topic(bootstrap, "grow", 2)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    assert APIS[37][:2] == (0, 3)

    _grow(admin, "grow", 5, validate_only=True)
    assert _partitions(admin, "grow") == [0, 1]  # validate_only: nothing changed

    _grow(admin, "grow", 5)
    assert _partitions(admin, "grow") == [0, 1, 2, 3, 4]
    assert dev_broker.broker.logs.topics["grow"].partitions == 5

    same = _error_code(admin, "grow", 5)
    assert same.code() == KafkaError.INVALID_PARTITIONS and "already has 5" in same.str()
    fewer = _error_code(admin, "grow", 3)
    assert fewer.code() == KafkaError.INVALID_PARTITIONS and "would not be an increase" in fewer.str()
    unknown = _error_code(admin, "no-such-topic", 3)
    assert unknown.code() == KafkaError.UNKNOWN_TOPIC_OR_PART

    # the new partitions take records and serve them from offset 0
    produce(bootstrap, "grow", [(p, b"k", f"v{p}".encode()) for p in range(5)])
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "g", "enable.auto.commit": False})
    try:
        consumer.assign([TopicPartition("grow", p, 0) for p in range(5)])
        got = {(m.partition(), m.offset(), m.value()) for m in consume_all(consumer, 5, 60)}
    finally:
        consumer.close()
    assert got == {(p, 0, f"v{p}".encode()) for p in range(5)}


def test_explicit_assignments_must_name_the_only_broker(dev_broker) -> None:
    bootstrap = dev_broker.broker.bootstrap_servers
    create_topic(bootstrap, "assigned", 1)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    node = dev_broker.broker.node_id

    futures = admin.create_partitions([NewPartitions("assigned", 3, [[node + 1], [node]])])
    with pytest.raises(KafkaException) as info:
        futures["assigned"].result(timeout=30)
    assert info.value.args[0].code() == KafkaError.INVALID_REPLICA_ASSIGNMENT
    assert _partitions(admin, "assigned") == [0]

    for future in admin.create_partitions([NewPartitions("assigned", 3, [[node], [node]])]).values():
        future.result(timeout=30)
    assert _partitions(admin, "assigned") == [0, 1, 2]


def test_restart_keeps_the_new_partitions(start_dev_broker, tmp_path) -> None:
    log_dir = tmp_path / "logs"
    broker = start_dev_broker(log_dir)
    bootstrap = broker.broker.bootstrap_servers
    create_topic(bootstrap, "kept", 1)
    _grow(AdminClient({"bootstrap.servers": bootstrap}), "kept", 3)
    produce(bootstrap, "kept", [(2, b"k", b"v")])
    broker.stop()

    again = start_dev_broker(log_dir)
    assert again.broker.logs.topics["kept"].partitions == 3
    assert again.broker.logs.partition("kept", 2).log_end_offset == 1
    topic_id = kafka_uuid(again.broker.logs.topics["kept"].topic_id)
    assert (log_dir / "kept-2" / "partition.metadata").read_text() == f"version: 0\ntopic_id: {topic_id}\n"

def test_zookeeper_mode_registers_the_new_partitions(start_dev_broker, zookeeper_server, tmp_path) -> None:
    # a chroot of its own: the session's ZooKeeper holds one /cluster/id per root
    zk = KazooClient(hosts=zookeeper_server.hosts)
    zk.start(timeout=15)
    root = f"/create-partitions-{uuid.uuid4().hex[:8]}"
    zk.ensure_path(root)
    zk.stop()
    zk.close()
    hosts = f"{zookeeper_server.hosts}{root}"
    broker = start_dev_broker(tmp_path / "zk-logs", zookeeper_connect=hosts, node_id=4)
    bootstrap = broker.broker.bootstrap_servers
    create_topic(bootstrap, "zk-grow", 1)
    broker.broker.zookeeper.set_partition_leader("zk-grow", 0, 4)  # partition 0 now at leader epoch 1
    _grow(AdminClient({"bootstrap.servers": bootstrap}), "zk-grow", 3)

    zk = KazooClient(hosts=hosts)
    zk.start(timeout=15)
    try:
        topic = json.loads(zk.get("/brokers/topics/zk-grow")[0])
        assert topic["partitions"] == {"0": [4], "1": [4], "2": [4]}
        epochs = [json.loads(zk.get(partition_state_path("zk-grow", p))[0]) for p in range(3)]
    finally:
        zk.stop()
        zk.close()
    assert [(s["leader"], s["leader_epoch"], s["isr"]) for s in epochs] == [(4, 1, [4]), (4, 0, [4]), (4, 0, [4])]


def test_flexible_v3_on_the_wire_and_duplicate_names(dev_broker) -> None:
    """v3 (flexible; librdkafka sends v0-1): a name given twice is INVALID_REQUEST for that name
    (Kafka's ``ControllerApis``), the others are answered on their own."""
    import datetime

    from kio.schema.create_partitions.v3 import request as v3

    bootstrap = dev_broker.broker.bootstrap_servers
    create_topic(bootstrap, "wire-a", 1)
    create_topic(bootstrap, "wire-b", 1)

    def request(*topics: tuple[str, int], validate_only: bool = False):  # type: ignore[no-untyped-def]
        body = v3.CreatePartitionsRequest(
            topics=tuple(v3.CreatePartitionsTopic(name=n, count=c, assignments=None) for n, c in topics),
            timeout=datetime.timedelta(seconds=30),
            validate_only=validate_only,
        )
        with WireClient(bootstrap) as wire:
            return {r.name: (r.error_code, r.error_message) for r in wire.request(body).results}

    answered = request(("wire-a", 4), ("wire-a", 5), ("wire-b", 2), ("wire-b", 1), ("wire-c", 2))
    assert answered == {
        "wire-a": (ErrorCode.invalid_request, "Duplicate topic name."),
        "wire-b": (ErrorCode.invalid_request, "Duplicate topic name."),
        "wire-c": (ErrorCode.unknown_topic_or_partition, "topic 'wire-c' does not exist"),
    }
    assert request(("wire-a", 4), validate_only=True) == {"wire-a": (ErrorCode.none, None)}
    assert dev_broker.broker.logs.topics["wire-a"].partitions == 1
    assert request(("wire-a", 4)) == {"wire-a": (ErrorCode.none, None)}
    assert dev_broker.broker.logs.topics["wire-a"].partitions == 4
