"""A gateway token whose patterns do not cover the topic (issue 13): in every mode TieredConsumer
delivers TOPIC_AUTHORIZATION_FAILED as confluent-kafka delivers a partition error (a Message whose
error() carries Kafka's code), once, and no record from beyond the data it could not read. Never
silence, never a wait without an error, never a silent continuation from Kafka."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import KafkaError, TopicPartition

from tests.integration.sdk.conftest import PARTITIONS
from tests.integration.sdk.test_consumer_modes import expected_offsets, read_all
from tests.support.stack_env import TieredStack, gateway_server
from tiered_kafka.consumer import TieredConsumer

pytestmark = pytest.mark.integration
READER = "reader-token-0123456789"  # may read orders*
OUTSIDER = "outsider-token-0123456789"  # may read other-* only


@pytest.fixture(scope="module")
def guarded(retained: tuple[TieredStack, dict[int, int]], s3_server: Any) -> Iterator[tuple[TieredStack, dict[int, int]]]:
    """The shared ``orders`` topic (early offsets remote only) behind a second gateway, with tokens."""
    stack, log_starts = retained
    auth = {"enabled": True, "tokens": {READER: ["orders.*"], OUTSIDER: ["other-.*"]}}
    with gateway_server(stack.agent, s3_server, stack.bootstrap, auth=auth) as url:
        yield dataclasses.replace(stack, gateway_url=url), log_starts


def poll_for(consumer: TieredConsumer, errors_expected: int = PARTITIONS, timeout_s: float = 60, linger_s: float = 1.5) -> tuple[list, list]:
    """(records, errors) polled until ``errors_expected`` errors arrived (a group's join on a real
    broker takes a while), then for ``linger_s`` more: nothing else may follow."""
    records: list = []
    errors: list = []
    deadline = time.monotonic() + timeout_s
    until = deadline
    while time.monotonic() < min(deadline, until):
        for message in consumer.consume(500, 0.25):
            (records if message.error() is None else errors).append(message)
        if len(errors) >= errors_expected and until == deadline:
            until = time.monotonic() + linger_s
    return records, errors


@pytest.mark.parametrize("mode", ["REMOTE_ONLY", "REMOTE_PREFERRED", "KAFKA_PREFERRED"])
def test_a_token_without_the_topic_is_an_error_in_every_tiered_mode(guarded: tuple[TieredStack, dict[int, int]], mode: str) -> None:
    stack, log_starts = guarded
    # with a group and auto.offset.reset=earliest: the start needs remote storage's earliest offset
    consumer = TieredConsumer(stack.consumer_config(mode, **{"tiered.gateway.token": OUTSIDER}))
    consumer.subscribe(["orders"])
    try:
        records, errors = poll_for(consumer)
    finally:
        consumer.close()
    assert records == [], f"{mode}: records delivered past data the token may not read"
    assert sorted((m.partition(), m.error().code()) for m in errors) == [(p, KafkaError.TOPIC_AUTHORIZATION_FAILED) for p in range(PARTITIONS)], "once per partition"
    assert all("orders" in m.error().str() for m in errors)

    # from an explicit offset below Kafka's log start: remote storage is needed first, and Kafka's
    # records after it are not delivered either (KAFKA_PREFERRED asks the gateway on Kafka's OFFSET_OUT_OF_RANGE)
    consumer = TieredConsumer(stack.consumer_config(mode, **{"tiered.gateway.token": OUTSIDER, "enable.auto.commit": False}))
    consumer.assign([TopicPartition("orders", p, 0) for p in range(PARTITIONS)])
    try:
        records, errors = poll_for(consumer)
        assert records == [] and sorted(m.partition() for m in errors) == list(range(PARTITIONS))
        assert {m.error().code() for m in errors} == {KafkaError.TOPIC_AUTHORIZATION_FAILED}
        assert [p.offset for p in consumer.position([TopicPartition("orders", p) for p in range(PARTITIONS)])] == [0] * PARTITIONS
    finally:
        consumer.close()
    assert all(start > 0 for start in log_starts.values())


def test_kafka_only_never_asks_the_gateway_and_the_right_token_reads_everything(guarded: tuple[TieredStack, dict[int, int]]) -> None:
    stack, log_starts = guarded
    consumer = TieredConsumer(stack.consumer_config("KAFKA_ONLY", **{"tiered.gateway.token": OUTSIDER}))
    consumer.subscribe(["orders"])
    try:
        got = read_all(consumer, {p: len(expected_offsets(p)) - log_starts[p] for p in range(PARTITIONS)})
        for p in range(PARTITIONS):
            assert [m.offset() for m in got[p]] == list(range(log_starts[p], len(expected_offsets(p))))
    finally:
        consumer.close()
    consumer = TieredConsumer(stack.consumer_config("KAFKA_PREFERRED", **{"tiered.gateway.token": READER}))
    consumer.subscribe(["orders"])
    try:
        got = read_all(consumer, {p: len(expected_offsets(p)) for p in range(PARTITIONS)})
        assert all([m.offset() for m in got[p]] == expected_offsets(p) for p in range(PARTITIONS))
    finally:
        consumer.close()
