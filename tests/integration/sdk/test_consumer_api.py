"""confluent-kafka's Consumer contract kept by TieredConsumer where wrapping could break it:
cooperative rebalances, re-assigning at another offset, committing in on_revoke at close, and
store_offsets' rules."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaException, TopicPartition

from tests.integration.sdk.conftest import PARTITIONS
from tests.integration.sdk.test_consumer_modes import expected_offsets, read_all
from tests.support.kafka_clients import FetchRequests
from tests.support.stack_env import TieredStack
from tiered_kafka.consumer import TieredConsumer

pytestmark = pytest.mark.integration


def test_a_cooperative_rebalance_of_remote_only_consumers_completes_without_fetching_kafka(retained: tuple[TieredStack, dict[int, int]]) -> None:
    stack, _ = retained
    fetches = FetchRequests()
    config = stack.consumer_config("REMOTE_ONLY", **{"partition.assignment.strategy": "cooperative-sticky", "enable.auto.commit": False, **fetches.config()})
    members = [TieredConsumer(config) for _ in range(3)]
    try:
        for member in members:
            member.subscribe(["orders"])
        for _ in range(300):  # every member polls until the group settled: 2 partitions over 3 members
            for member in members:
                member.consume(50, 0.05)
            if sorted(len(m.assignment()) for m in members) == [0, 1, 1]:
                break
        assert sorted(len(m.assignment()) for m in members) == [0, 1, 1]
    finally:
        for member in members:
            member.close()
    assert fetches.reports > 0 and fetches.total == 0, "a REMOTE_ONLY member sent Fetch requests to the broker"


def test_assigning_again_at_another_offset_moves_kafka_too(retained: tuple[TieredStack, dict[int, int]]) -> None:
    stack, log_starts = retained
    consumer = TieredConsumer(stack.consumer_config("KAFKA_ONLY", **{"enable.auto.commit": False}))
    try:
        start = log_starts[0]
        consumer.assign([TopicPartition("orders", 0, start)])
        first = read_all(consumer, {0: 50})[0]
        assert first[0].offset() == start
        consumer.assign([TopicPartition("orders", 0, start + 10)])  # the same partition, back 40+ offsets
        again = read_all(consumer, {0: 20})[0]
        assert [m.offset() for m in again[:20]] == list(range(start + 10, start + 30))
    finally:
        consumer.close()


def test_on_revoke_commits_at_close_and_store_offsets_rules(retained: tuple[TieredStack, dict[int, int]]) -> None:
    stack, _ = retained
    config = stack.consumer_config("REMOTE_PREFERRED", **{"enable.auto.commit": False, "enable.auto.offset.store": False})
    consumer = TieredConsumer(config)
    consumer.subscribe(["orders"], on_revoke=lambda c, ps: c.commit(asynchronous=False))
    got = read_all(consumer, {0: 100, 1: 100})
    consumer.store_offsets(offsets=[TopicPartition("orders", 0, 77), TopicPartition("orders", 1, 33)])
    with pytest.raises(KafkaException, match="not assigned"):
        consumer.store_offsets(offsets=[TopicPartition("orders", 7, 1)])
    consumer.close()  # leaving the group runs on_revoke, whose commit must still work
    assert len(got[0]) >= 100
    check = TieredConsumer(config)
    try:
        committed = check.committed([TopicPartition("orders", p) for p in range(PARTITIONS)], timeout=10)
        assert {c.partition: c.offset for c in committed} == {0: 77, 1: 33}
    finally:
        check.close()
    auto_store = TieredConsumer(stack.consumer_config("REMOTE_PREFERRED"))
    try:
        with pytest.raises(KafkaException, match="enable.auto.offset.store=false"):
            auto_store.store_offsets(offsets=[TopicPartition("orders", 0, 1)])
    finally:
        auto_store.close()
    assert expected_offsets(0)  # (the topic is the shared one)
