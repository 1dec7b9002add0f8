"""The bulk API's surface without a stack: its columns, its argument errors, ``export``'s arguments."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest

from tiered_kafka.bulk import BulkReader, bulk_schema
from tiered_kafka.errors import ConfigError
from tiered_kafka.client.gateway import GatewayClient

CLI = Path(sys.executable).parent / "tiered-kafka"


def test_columns() -> None:
    assert bulk_schema().names == ["topic", "partition", "offset", "timestamp", "timestamp_type", "key", "value"]
    assert bulk_schema(include_headers=True).names[-1] == "headers"
    assert bulk_schema().field("timestamp").type == pa.timestamp("ms", tz="UTC")


@pytest.mark.parametrize(
    ("options", "message"),
    [
        pytest.param({"isolation_level": "committed"}, "isolation_level must be one of read_uncommitted, read_committed, got 'committed'", id="isolation"),
        pytest.param({"memory_budget": 1000}, "memory_budget must be at least 131072 bytes, got 1000", id="budget"),
        pytest.param({"parallelism": 0}, "parallelism must be at least 1, got 0", id="parallelism"),
    ],
)
def test_bad_options_are_config_errors(options: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        BulkReader("http://127.0.0.1:9", "c", **options)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="needs gateway_url and cluster"):
        BulkReader()


@pytest.mark.parametrize("offset", [-1, "5", True, 1.5])
def test_bad_offsets_are_config_errors_before_any_request(offset: object) -> None:
    with GatewayClient("http://127.0.0.1:9", "c", retries=0) as client, BulkReader(client=client) as reader:
        with pytest.raises(ConfigError, match="start_offset must be a non-negative offset or a {partition: offset} mapping"):
            reader.batches("t", 0, start_offset=offset)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("offsets", "message"),
    [
        pytest.param({0: -1}, "start_offset of partition 0 must be a non-negative offset, got -1", id="negative"),
        pytest.param({1: "5"}, "start_offset of partition 1 must be a non-negative offset, got '5'", id="string"),
        pytest.param({0: True}, "start_offset of partition 0 must be a non-negative offset, got True", id="bool"),
        pytest.param({0: 1.5}, "start_offset of partition 0 must be a non-negative offset, got 1.5", id="float"),
        pytest.param({"0": 5}, r"start_offset: the keys of a {partition: offset} mapping are partition numbers, got '0'", id="key"),
    ],
)
def test_bad_offsets_in_a_mapping_are_config_errors_before_any_request(offsets: object, message: str) -> None:
    with GatewayClient("http://127.0.0.1:9", "c", retries=0) as client, BulkReader(client=client) as reader:
        with pytest.raises(ConfigError, match=message):
            reader.batches("t", start_offset=offsets)  # type: ignore[arg-type]
        with pytest.raises(ConfigError, match=message.replace("start_offset", "end_offset")):
            reader.batches("t", 0, end_offset=offsets)  # type: ignore[arg-type]


def test_export_arguments() -> None:
    done = subprocess.run([str(CLI), "export", "--help"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and "--format {parquet,arrow,iceberg}" in done.stdout
    done = subprocess.run([str(CLI), "export", "t", "--gateway", "http://127.0.0.1:9", "--cluster", "c", "--format", "csv", "--output", "x"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "invalid choice: 'csv'" in done.stderr
