"""Consumer groups on the development broker, with real confluent-kafka consumers."""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient

from tests.support.kafka_clients import create_topic, produce, value_for
from tiered_kafka_dev.broker.server import BrokerThread

pytestmark = pytest.mark.integration


def group_consumer(bootstrap: str, group: str, **config: object) -> Consumer:
    return Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "session.timeout.ms": 6000,
            "heartbeat.interval.ms": 200,
            **config,
        }
    )


def poll_until(consumers: list[Consumer], condition, on_message=lambda consumer, message: None, timeout_s: float = 60) -> None:
    """Poll every consumer, handing each message to on_message, until condition() holds."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        for consumer in consumers:
            message = consumer.poll(0.05)
            if message is not None:
                if message.error():
                    raise KafkaException(message.error())
                on_message(consumer, message)


def test_two_consumers_split_six_partitions_and_rebalance_when_one_leaves(dev_broker: BrokerThread) -> None:
    bootstrap = dev_broker.broker.bootstrap_servers
    create_topic(bootstrap, "shared", 6)
    total = 6000
    produce(bootstrap, "shared", [(i % 6, str(i).encode(), value_for(i)) for i in range(total)])

    a, b = group_consumer(bootstrap, "pair"), group_consumer(bootstrap, "pair")
    a.subscribe(["shared"])
    b.subscribe(["shared"])
    processed: list[tuple[int, int]] = []

    def process(consumer: Consumer, message) -> None:
        processed.append((message.partition(), message.offset()))
        consumer.commit(message=message, asynchronous=False)  # commit after each processed message

    def split_evenly() -> bool:
        return len(a.assignment()) == 3 and len(b.assignment()) == 3

    poll_until([a, b], split_evenly, process)
    assert {tp.partition for tp in a.assignment()} | {tp.partition for tp in b.assignment()} == set(range(6))

    # both consume for a while, then b leaves the group (LeaveGroup) and a takes over all six
    poll_until([a, b], lambda: len(processed) >= total // 3, process)
    b.close()
    poll_until([a], lambda: len(a.assignment()) == 6 and len(processed) >= total, process)
    a.close()

    counts = Counter(processed)
    assert not [k for k, n in counts.items() if n > 1], "a message was processed twice across the rebalance"
    assert set(counts) == {(p, o) for p in range(6) for o in range(total // 6)}


def test_committed_offsets_survive_a_broker_restart(start_dev_broker, tmp_path: Path) -> None:
    log_dir = tmp_path / "logs"
    first = start_dev_broker(log_dir)
    create_topic(first.broker.bootstrap_servers, "kept", 2)
    produce(first.broker.bootstrap_servers, "kept", [(i % 2, None, value_for(i)) for i in range(100)])
    consumer = group_consumer(first.broker.bootstrap_servers, "keeper")
    consumer.subscribe(["kept"])
    poll_until([consumer], lambda: len(consumer.assignment()) == 2)
    consumer.commit(offsets=[TopicPartition("kept", 0, 17), TopicPartition("kept", 1, 42)], asynchronous=False)
    consumer.close()
    first.stop()

    second = start_dev_broker(log_dir)
    consumer = group_consumer(second.broker.bootstrap_servers, "keeper")
    committed = consumer.committed([TopicPartition("kept", 0), TopicPartition("kept", 1)], timeout=10)
    assert [(tp.partition, tp.offset) for tp in committed] == [(0, 17), (1, 42)]
    consumer.subscribe(["kept"])
    first_seen: dict[int, int] = {}
    poll_until([consumer], lambda: len(first_seen) == 2, lambda _, m: first_seen.setdefault(m.partition(), m.offset()))
    consumer.close()
    assert first_seen == {0: 17, 1: 42}


def test_admin_lists_and_describes_groups(dev_broker: BrokerThread) -> None:
    bootstrap = dev_broker.broker.bootstrap_servers
    create_topic(bootstrap, "watched", 3)
    consumer = group_consumer(bootstrap, "observed")
    consumer.subscribe(["watched"])
    poll_until([consumer], lambda: len(consumer.assignment()) == 3)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    listed = admin.list_consumer_groups().result(timeout=10)
    assert "observed" in {g.group_id for g in listed.valid}
    description = admin.describe_consumer_groups(["observed"])["observed"].result(timeout=10)
    assert description.state.name == "STABLE"
    assert len(description.members) == 1
    assert {tp.partition for tp in description.members[0].assignment.topic_partitions} == {0, 1, 2}
    consumer.close()
