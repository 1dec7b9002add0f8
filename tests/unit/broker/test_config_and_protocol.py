"""The development broker's configuration parsing and its kio framing helpers."""

from __future__ import annotations

import datetime
import struct
from pathlib import Path

import pytest
from kio.schema.errors import ErrorCode
from kio.schema.metadata.v12.response import MetadataResponse

from tiered_kafka.errors import ConfigError
from tiered_kafka_dev.broker.config import BrokerConfig, read_properties
from tiered_kafka_dev.broker.protocol import ProtocolError, build, encode_response, parse_request, peek_header


def test_properties_use_kafka_names(tmp_path: Path) -> None:
    path = tmp_path / "server.properties"
    path.write_text(
        "# a comment\nnode.id=4\nlisteners=PLAINTEXT://127.0.0.1:19092\nlog.dirs=/tmp/x\n"
        "log.segment.bytes=1048576\nlog.retention.ms=60000\nauto.create.topics.enable=false\n"
    )
    config = BrokerConfig.from_properties(read_properties(path))
    assert (config.node_id, config.port, config.log_dir, config.auto_create_topics) == (4, 19092, Path("/tmp/x"), False)
    assert (config.log_defaults.segment_bytes, config.log_defaults.retention_ms) == (1048576, 60000)


@pytest.mark.parametrize(
    ("properties", "message"),
    [
        ({}, "log.dirs is required"),
        ({"log.dirs": "/a,/b"}, "single log directory"),
        ({"log.dirs": "/a", "listeners": "SSL://h:1"}, "PLAINTEXT://host:port"),
        ({"log.dirs": "/a", "num.partitions": "zero"}, "num.partitions must be an integer"),
        ({"log.dirs": "/a", "num.partitions": "0"}, "num.partitions must be >= 1"),
        ({"log.dirs": "/a", "auto.create.topics.enable": "maybe"}, "true or false"),
        ({"log.dirs": "/a", "log.flush.interval.ms": "1"}, "unsupported broker config"),
        ({"log.dirs": "/a", "log.retention.bytes": "-7"}, "retention.bytes must be >= -1"),
    ],
)
def test_bad_properties_are_refused(properties: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        BrokerConfig.from_properties(properties)


def test_read_properties_rejects_junk(tmp_path: Path) -> None:
    path = tmp_path / "bad.properties"
    path.write_text("log.dirs=/x\nthis line has no equals sign\n")
    with pytest.raises(ConfigError, match="bad.properties:2"):
        read_properties(path)


def test_build_fills_version_specific_fields_and_converts_values() -> None:
    response = build(
        MetadataResponse,
        {
            "throttle_time": 5,
            "brokers": [{"node_id": 1, "host": "h", "port": 9, "rack": None}],
            "cluster_id": "c",
            "controller_id": 1,
            "topics": [{"error_code": 3, "name": "t", "topic_id": None, "is_internal": False, "partitions": []}],
            "not_a_field_at_v12": "ignored",
        },
    )
    assert response.throttle_time == datetime.timedelta(milliseconds=5)
    assert response.topics[0].error_code == ErrorCode.unknown_topic_or_partition
    assert response.brokers[0].host == "h"


def test_encode_response_frames_with_size_and_correlation_id() -> None:
    frame = encode_response(18, 3, 42, {"error_code": 0, "api_keys": [], "throttle_time": 0})
    size, correlation_id = struct.unpack_from(">ii", frame)
    assert size == len(frame) - 4 and correlation_id == 42


def test_malformed_requests_raise_protocol_errors() -> None:  # trailing bytes are tolerated, as Kafka does
    with pytest.raises(ProtocolError, match="shorter than a request header"):
        peek_header(b"\x00\x12")
    with pytest.raises(ProtocolError, match="malformed"):
        parse_request(struct.pack(">hhi", 18, 3, 1) + b"\xff\xff\xff", 18, 3)
