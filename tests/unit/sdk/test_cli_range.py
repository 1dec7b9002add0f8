"""The CLI's range checks before any read (pure logic): what cannot be read is refused naming why."""

from __future__ import annotations

import argparse

import pytest
from confluent_kafka import KafkaError, KafkaException

from tiered_kafka.cli import Refused, _check_range, error_text as describe
from tiered_kafka.errors import RemoteGapError
from tiered_kafka.client.gateway import PartitionExtent, RemoteExtent
from tiered_kafka.modes import Mode


def args(start: int | None = None, end: int | None = None) -> argparse.Namespace:
    return argparse.Namespace(topic="t", partition=0, start=start, end=end)


REMOTE = PartitionExtent(RemoteExtent(10, 99, 3, 5000), None, None)
KAFKA_ONLY_DATA = PartitionExtent(None, 0, 50)


def test_a_readable_range_passes() -> None:
    assert _check_range(args(), Mode.REMOTE_ONLY, REMOTE, 10, 100, 10, 100) is False
    assert _check_range(args(20, 30), Mode.REMOTE_ONLY, REMOTE, 10, 100, 20, 30) is False


def test_from_below_the_earliest_offset_is_refused_not_reset() -> None:
    with pytest.raises(Refused, match=r"OFFSET_OUT_OF_RANGE: offsets 0\.\.9 are not readable in REMOTE_ONLY"):
        _check_range(args(0), Mode.REMOTE_ONLY, REMOTE, 10, 100, 0, 100)


def test_remote_only_over_data_only_kafka_holds_is_refused() -> None:
    with pytest.raises(Refused, match=r"remote storage holds none of it \(Kafka holds offsets 0\.\.49\)"):
        _check_range(args(), Mode.REMOTE_ONLY, KAFKA_ONLY_DATA, 0, 0, 0, 0)


def test_past_or_at_the_end_is_refused_and_an_empty_range_is_said() -> None:
    with pytest.raises(Refused, match="the end is 100"):
        _check_range(args(120), Mode.REMOTE_ONLY, REMOTE, 10, 100, 120, 100)
    with pytest.raises(Refused, match="the end is 100"):
        _check_range(args(100), Mode.REMOTE_ONLY, REMOTE, 10, 100, 100, 100)
    assert _check_range(args(20, 20), Mode.REMOTE_ONLY, REMOTE, 10, 100, 20, 20) is True
    empty = PartitionExtent(None, 0, 0)
    assert _check_range(args(), Mode.REMOTE_ONLY, empty, 0, 0, 0, 0) is True  # an empty partition, nothing asked


def test_describe_names_kafkas_error_first() -> None:
    assert describe(KafkaException(KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED, "denied"))).startswith("TOPIC_AUTHORIZATION_FAILED: ")
    gap = RemoteGapError("offsets 5..9 are missing", topic="t", partition=0, start_offset=5, end_offset=9, reason="deleted")
    assert describe(gap).endswith("(--skip-gaps reads past it)")


def test_the_gateway_client_is_closed_when_the_consumer_cannot_be_created(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from tiered_kafka import cli
    from tiered_kafka.client.gateway import GatewayClient

    closed: list[GatewayClient] = []
    real_close = GatewayClient.close

    def close(self: GatewayClient) -> None:
        closed.append(self)
        real_close(self)

    monkeypatch.setattr(GatewayClient, "close", close)
    # KAFKA_PREFERRED reads remote storage (a gateway client is made) and Kafka, which is not given: TieredConsumer refuses
    code = cli.main(["cat", "t", "0", "--gateway", "http://127.0.0.1:9", "--cluster", "c", "--mode", "KAFKA_PREFERRED"])
    assert code == 2 and "set bootstrap.servers" in capsys.readouterr().err
    assert len(closed) == 1
