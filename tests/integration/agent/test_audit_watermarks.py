"""The audit's view of Kafka (``KafkaOffsets``) under an open transaction: the log end offset, not the
last stable offset that librdkafka's default isolation level (read_committed) would answer.

Real components: Apache Kafka (the session's shared KRaft broker) and confluent-kafka's transactional Producer."""

from __future__ import annotations

import uuid

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from tests.support.kafka_clients import create_topic
from tiered_kafka_agent.audit import KafkaOffsets

pytestmark = pytest.mark.integration


def test_the_audit_sees_the_log_end_past_an_open_transaction(kafka_server) -> None:
    bootstrap, topic = kafka_server.bootstrap_servers, f"open-txn-{uuid.uuid4().hex[:8]}"
    create_topic(bootstrap, topic, 1)
    plain = Producer({"bootstrap.servers": bootstrap})
    plain.produce(topic, b"committed-0", partition=0)
    assert plain.flush(30) == 0
    del plain
    txn = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"audit-{topic}", "linger.ms": 1})
    try:
        txn.init_transactions(30)
        txn.begin_transaction()
        for i in range(3):
            txn.produce(topic, f"open-{i}".encode(), partition=0)
        assert txn.flush(30) == 0  # offsets 1..3 written, their transaction left open

        kafka = KafkaOffsets(bootstrap)
        try:
            assert kafka.log_range(topic, 0) == ((0, 4), None)
        finally:
            kafka.close()
        # what the audit would have seen with librdkafka's default: the LSO, stopped at the open transaction
        default = Consumer({"bootstrap.servers": bootstrap, "group.id": f"audit-{topic}"})
        try:
            assert default.get_watermark_offsets(TopicPartition(topic, 0), timeout=10, cached=False) == (0, 1)
        finally:
            default.close()
        txn.abort_transaction(30)
    finally:
        del txn
