"""read_committed through the listener around committed, aborted and open transactions, against Kafka's own answer.

The topic (``tests.support.transactions.RealTransactionalLog``): transactions of real transactional
producers, committed and aborted (one aborted by a marker segments after its records), and one left
open; the agent uploads the rotated segments. A confluent-kafka consumer of the broker itself is the
reference: through the listener (S3 for what remote storage holds, Kafka beyond), read_committed and
read_uncommitted deliver the same offsets, keys and values, before and after the open one commits.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition

from tests.integration.kafka_listener.conftest import ListenerStack
from tests.support.kafka_clients import drain
from tests.support.stack_env import create_tiered_topic
from tests.support.transactions import RealTransactionalLog

pytestmark = pytest.mark.integration


def read(bootstrap: str, topic: str, isolation: str) -> list[tuple[int, Any, Any]]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"txn-{uuid.uuid4().hex[:6]}", "isolation.level": isolation,
                         "enable.auto.commit": False})
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        return [(m.offset(), m.key(), m.value()) for m in drain(consumer, idle_s=3.0, timeout_s=60)]
    finally:
        consumer.close()


def test_read_committed_matches_kafka(tiered: ListenerStack) -> None:
    topic = f"txns-{uuid.uuid4().hex[:6]}"
    create_tiered_topic(tiered.stack, topic, 1, segment_bytes=16_000)
    log = RealTransactionalLog(topic)
    try:
        log.write_until_open(tiered.bootstrap)
        tiered.stack.wait_uploaded(topic, 1)
        for isolation in ("read_committed", "read_uncommitted"):
            reference = read(tiered.bootstrap, topic, isolation)
            assert reference
            assert read(tiered.listener, topic, isolation) == reference, isolation
        open_reference = read(tiered.bootstrap, topic, "read_committed")
        assert all(offset < log.last_first_offset for offset, _k, _v in open_reference)  # held back by the open transaction
        log.commit_last()
        reference = read(tiered.bootstrap, topic, "read_committed")
        assert len(reference) > len(open_reference)
        assert read(tiered.listener, topic, "read_committed") == reference
    finally:
        log.close()
