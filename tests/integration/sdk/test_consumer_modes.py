"""TieredConsumer in each mode over the whole stack on loopback: produce N records, let segments
roll and upload, let retention delete the early ones from the broker, consume from offset 0 with a
group and commits, and get exactly offsets 0..N-1 in order with the values produced."""

from __future__ import annotations


import pytest
from confluent_kafka import TopicPartition

from tests.integration.sdk.conftest import COUNT, PARTITIONS
from tests.support.kafka_clients import FetchRequests, value_for
from tests.support.stack_env import TieredStack
from tiered_kafka.consumer import TieredConsumer

pytestmark = pytest.mark.integration


def expected_offsets(partition: int) -> list[int]:
    return list(range(len(range(partition, COUNT, PARTITIONS))))


def read_all(consumer: TieredConsumer, per_partition: dict[int, int], max_polls: int = 240) -> dict[int, list]:
    got: dict[int, list] = {p: [] for p in per_partition}
    for _ in range(max_polls):
        if all(len(got[p]) >= n for p, n in per_partition.items()):
            break
        for message in consumer.consume(500, 0.5):
            assert message.error() is None, message.error()
            got[message.partition()].append(message)
    return got


def check_exact(got: dict[int, list]) -> None:
    for p, messages in got.items():
        assert [m.offset() for m in messages] == expected_offsets(p), f"partition {p}"
        for m in messages[:: max(1, len(messages) // 50)]:
            i = m.offset() * PARTITIONS + p  # round-robin production: record i went to partition i % 2
            assert m.value() == value_for(i) and m.key() == f"k{i}".encode()


@pytest.mark.parametrize("mode", ["REMOTE_ONLY", "REMOTE_PREFERRED", "KAFKA_PREFERRED"])
def test_each_tiered_mode_reads_every_offset_once_in_order(retained: tuple[TieredStack, dict[int, int]], mode: str) -> None:
    stack, log_starts = retained
    assert all(start > 0 for start in log_starts.values())
    fetches = FetchRequests()
    config = stack.consumer_config(mode, **fetches.config())
    consumer = TieredConsumer(config)
    consumer.subscribe(["orders"])
    try:
        want = {p: len(expected_offsets(p)) for p in range(PARTITIONS)}
        if mode == "REMOTE_ONLY":  # REMOTE_ONLY reads what is remote: everything but the active segments
            want = {p: stack.registry.partition_info("orders", p).latest_offset + 1 for p in range(PARTITIONS)}
        got = read_all(consumer, want)
        for p in range(PARTITIONS):
            # REMOTE_ONLY tails remote storage: a segment uploaded meanwhile comes too, still in order
            assert [m.offset() for m in got[p]] == list(range(len(got[p]))) and len(got[p]) >= want[p], f"partition {p}"
        if mode != "REMOTE_ONLY":
            check_exact(got)
        consumer.commit(asynchronous=False)
        committed = consumer.committed([TopicPartition("orders", p) for p in range(PARTITIONS)], timeout=10)
        assert {c.partition: c.offset for c in committed} == {p: len(got[p]) for p in range(PARTITIONS)}
    finally:
        consumer.close()
    if mode == "REMOTE_ONLY":
        assert fetches.reports > 0 and fetches.total == 0, "REMOTE_ONLY sent Fetch requests to the broker"
    else:
        assert fetches.total > 0  # the same counter sees the other modes fetch the hot tail from Kafka


def test_kafka_only_is_plain_kafka_and_starts_at_the_log_start(retained: tuple[TieredStack, dict[int, int]]) -> None:
    stack, log_starts = retained
    consumer = TieredConsumer(stack.consumer_config("KAFKA_ONLY"))
    consumer.subscribe(["orders"])
    try:
        want = {p: len(expected_offsets(p)) - log_starts[p] for p in range(PARTITIONS)}
        got = read_all(consumer, want)
        for p in range(PARTITIONS):
            assert [m.offset() for m in got[p]] == list(range(log_starts[p], len(expected_offsets(p))))
    finally:
        consumer.close()

