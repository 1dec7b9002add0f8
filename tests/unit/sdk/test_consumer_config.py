"""TieredConsumer's configuration: our keys, confluent-kafka's, and Pinterest's names."""

from __future__ import annotations

import pytest

from tiered_kafka.consumer.config import DEFAULT_PREFETCH_MAX_BYTES, parse_config
from tiered_kafka.errors import ConfigError
from tiered_kafka.modes import Mode

BASE = {"bootstrap.servers": "127.0.0.1:9092", "group.id": "g", "tiered.gateway.url": "http://gw:8080", "tiered.cluster": "prod"}


def test_defaults_and_what_librdkafka_gets() -> None:
    config = parse_config(dict(BASE))
    assert config.mode is Mode.REMOTE_PREFERRED
    assert (config.auto_offset_reset, config.auto_offset_store, config.read_committed) == ("latest", True, True)
    assert config.prefetch_max_bytes == DEFAULT_PREFETCH_MAX_BYTES == 128 * 2**20 and config.prefetch_parallelism == 4
    # librdkafka reports OFFSET_OUT_OF_RANGE to us and lets us store offsets; our keys never reach it
    assert config.kafka == {"bootstrap.servers": "127.0.0.1:9092", "group.id": "g", "auto.offset.reset": "error", "enable.auto.offset.store": False, "enable.auto.commit": False}
    assert (config.auto_commit, config.auto_commit_interval_s, config.cooperative) == (True, 5.0, False)


def test_pinterest_names_mean_the_same() -> None:
    config = parse_config({"bootstrap.servers": "k:9092", "tiered.storage.mode": "TIERED_STORAGE_ONLY", "kafka.cluster.id": "c1", "tiered.gateway.url": "http://gw", "offset.reset.policy": "EARLIEST"})
    assert (config.mode, config.cluster, config.auto_offset_reset) == (Mode.REMOTE_ONLY, "c1", "earliest")
    assert parse_config({**BASE, "tiered.storage.mode": "TIERED_STORAGE_PREFERRED"}).mode is Mode.REMOTE_PREFERRED
    assert parse_config({**BASE, "offset.reset.policy": "NONE"}).auto_offset_reset == "error"
    assert parse_config({**BASE, "auto.offset.reset": "smallest"}).auto_offset_reset == "earliest"


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"tiered.mode": "HOT_ONLY"}, "tiered.mode: 'HOT_ONLY' is not one of"),
        ({"tiered.storage.mode": "S3"}, "tiered.storage.mode"),
        ({"offset.reset.policy": "sometimes"}, "offset.reset.policy"),
        ({"auto.offset.reset": "middle"}, "auto.offset.reset"),
        ({"tiered.prefetch.max.bytes": "lots"}, "tiered.prefetch.max.bytes: expected an integer"),
        ({"tiered.prefetch.max.bytes": 10}, "below the minimum"),
        ({"tiered.remote.gap.policy": "ignore"}, "tiered.remote.gap.policy"),
        ({"tiered.prefetch.bytes": 1}, "unknown configuration key(s): tiered.prefetch.bytes"),
        ({"storage.service.endpoint.s3.bucket": "b"}, "does not read S3 directly"),
        ({"tiered.gateway.url": "gw:8080"}, "must start with http"),
        ({"isolation.level": "serializable"}, "isolation.level"),
        ({"enable.auto.offset.store": "maybe"}, "enable.auto.offset.store"),
        ({"enable.auto.commit": "yes"}, "enable.auto.commit: expected true or false"),
        ({"auto.commit.interval.ms": "soon"}, "auto.commit.interval.ms: expected an integer"),
        ({"enable.partition.eof": "1"}, "enable.partition.eof"),
        ({"tiered.prefetch.max.bytes": 2**20}, "leaves no room for data"),
    ],
)
def test_bad_values_are_named(extra: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        parse_config({**BASE, **extra})


def test_each_mode_needs_its_sources() -> None:
    with pytest.raises(ConfigError, match="set tiered.gateway.url and tiered.cluster"):
        parse_config({"bootstrap.servers": "k:9092", "tiered.mode": "REMOTE_ONLY"})
    with pytest.raises(ConfigError, match="set bootstrap.servers"):
        parse_config({"tiered.mode": "KAFKA_PREFERRED", "tiered.gateway.url": "http://gw", "tiered.cluster": "c"})
    assert not parse_config({"tiered.mode": "REMOTE_ONLY", "tiered.gateway.url": "http://gw", "tiered.cluster": "c"}).has_kafka
    assert parse_config({"bootstrap.servers": "k:9092", "tiered.mode": "KAFKA_ONLY"}).gateway_url is None


def test_cooperative_protocols_are_recognised() -> None:
    assert parse_config({**BASE, "partition.assignment.strategy": "cooperative-sticky"}).cooperative
    assert parse_config({**BASE, "group.protocol": "consumer"}).cooperative
    assert not parse_config({**BASE, "partition.assignment.strategy": "range,roundrobin"}).cooperative
