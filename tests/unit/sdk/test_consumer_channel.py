"""TieredConsumer's one error channel (``tiered_kafka.consumer.channel``): which failures are a
partition's error Message (with which Kafka code) and which are raised, as confluent-kafka's rule."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException, Message

from tiered_kafka.consumer.channel import ErrorChannel, partition_error
from tiered_kafka.errors import (
    ConfigError,
    CorruptRecordError,
    GatewayRequestError,
    OffsetNotRemoteError,
    RemoteGapError,
    RemoteReadError,
    TopicAuthorizationError,
)

GAP = RemoteGapError("t-0: offsets 5..9 are in no tier this consumer reads (lost)", topic="t", partition=0, start_offset=5, end_offset=9, reason="lost")


@pytest.mark.parametrize(
    ("error", "code", "retriable"),
    [
        (TopicAuthorizationError("may not read t", topic="t"), KafkaError.TOPIC_AUTHORIZATION_FAILED, False),
        (GatewayRequestError("forbidden", status=403, code="topic_authorization_failed"), KafkaError.TOPIC_AUTHORIZATION_FAILED, False),
        (GAP, KafkaError.OFFSET_OUT_OF_RANGE, False),
        (OffsetNotRemoteError("gone", offset=3, earliest=10, latest=20), KafkaError.OFFSET_OUT_OF_RANGE, False),
        (GatewayRequestError("no such partition", status=404, code="unknown_topic_or_partition"), KafkaError.UNKNOWN_TOPIC_OR_PART, True),
        (CorruptRecordError("CRC mismatch", position=0, base_offset=7), KafkaError.INVALID_MSG, True),
        (RemoteReadError("GET failed after 4 attempts: 503"), KafkaError._TRANSPORT, True),
        (GatewayRequestError("unavailable", status=503, code="registry_unavailable"), KafkaError._TRANSPORT, True),
        (KafkaException(KafkaError(KafkaError._TIMED_OUT, "watermarks")), KafkaError._TIMED_OUT, False),
    ],
)
def test_a_partitions_failure_is_a_message_with_kafkas_code(error: Exception, code: int, retriable: bool) -> None:
    channel = ErrorChannel()
    assert not channel
    assert channel.partition_failed("t", 0, 5, error)
    out: list[Message] = []
    channel.take(out, 10)
    assert len(out) == 1 and not channel
    message = out[0]
    assert (message.topic(), message.partition(), message.offset()) == ("t", 0, 5)
    kafka_error = message.error()
    assert kafka_error.code() == code and kafka_error.retriable() is retriable and not kafka_error.fatal()
    reason = error.args[0].str() if isinstance(error, KafkaException) else str(error)
    assert kafka_error.str().startswith("t-0: ") and reason in kafka_error.str()


@pytest.mark.parametrize(
    "error",
    [ConfigError("remote storage needs tiered.gateway.url"), ValueError("bad"), RuntimeError("a bug"), KafkaException(KafkaError(KafkaError._FATAL, "fatal", fatal=True))],
)
def test_what_is_not_a_partitions_failure_is_raised(error: Exception) -> None:
    channel = ErrorChannel()
    assert partition_error(error) is None
    assert not channel.partition_failed("t", 0, None, error)
    assert not channel


def test_messages_come_in_order_within_the_limit_and_one_deferred_error_is_raised_once() -> None:
    channel = ErrorChannel()
    channel.partition_failed("t", 0, None, GAP)
    channel.partition_failed("t", 1, 8, RemoteReadError("down"))
    out: list[Message] = []
    channel.take(out, 1)
    assert [(m.partition(), m.offset()) for m in out] == [(0, None)]  # OFFSET_INVALID, as confluent-kafka reads it back
    channel.take(out, 5)
    assert [(m.partition(), m.offset()) for m in out] == [(0, None), (1, 8)]
    first, second = KafkaException(KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART, "Commit failed")), RuntimeError("later")
    channel.defer(first)
    channel.defer(second)  # the first one is kept
    assert channel
    with pytest.raises(KafkaException, match="Commit failed"):
        channel.raise_deferred()
    channel.raise_deferred()  # raised once
    assert not channel
