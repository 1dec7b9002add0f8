"""``tiered-kafka export`` writes Parquet and Arrow IPC files through the bulk API, with ``cat``'s
rules: read_committed by default stopping at the last stable offset, errors naming Kafka's error,
a recorded gap fails unless skipped, and no record read is exit status 1 with no file (a
subprocess over the real gateway, SeaweedFS and Redis, with the hand-built transactional log)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import redis

from tests.support.gateway_env import uploaded_partition
from tests.support.stack_env import gateway_server
from tests.support.transactions import COMMITTED_OFFSETS, UNCOMMITTED_OFFSETS, uploaded_transactional_log
from tiered_kafka.bulk import bulk_schema
from tiered_kafka.registry import Registry

pytestmark = pytest.mark.integration

CLI = Path(sys.executable).parent / "tiered-kafka"


def export(url: str, cluster: str, output: Path, *args: str) -> tuple[int, str]:
    done = subprocess.run([str(CLI), "export", "--gateway", url, "--cluster", cluster, "--output", str(output), *args], capture_output=True, text=True, timeout=120)
    return done.returncode, done.stderr


@pytest.fixture
def txn(tmp_path: Path, redis_server: Any, s3_server: Any, s3_bucket: str) -> Any:
    """Topic ``txn`` partition 0 (tests/support/transactions.py), segments 0 and 14 uploaded."""
    return uploaded_transactional_log(tmp_path, redis_server, s3_server, s3_bucket)


def test_export_to_parquet_and_arrow(txn: Any, s3_server: Any, tmp_path: Path) -> None:
    out = tmp_path / "txn.parquet"
    with gateway_server(txn, s3_server) as url:
        code, stderr = export(url, txn.cluster, out, "txn", "--format", "parquet", "--include-headers")  # the whole topic, read_committed
        assert code == 0, stderr
        assert stderr.count("read_committed stopped at offset 19: 3 records from there on are held back") == 1, stderr  # said once
        assert "wrote 8 records" in stderr
        table = pq.read_table(out)
        assert table.schema == bulk_schema(include_headers=True)
        assert table.column("offset").to_pylist() == COMMITTED_OFFSETS and set(table.column("topic").to_pylist()) == {"txn"}
        assert table.column("headers").to_pylist()[0] == [{"key": "h", "value": b"plain0"}]
        arrow = tmp_path / "txn.arrow"
        code, stderr = export(url, txn.cluster, arrow, "txn", "0", "--format", "arrow", "--isolation-level", "read_uncommitted")
        assert code == 0, stderr
        with pa.memory_map(str(arrow)) as source:
            read = pa.ipc.open_file(source).read_all()
        assert read.column("offset").to_pylist() == UNCOMMITTED_OFFSETS and read.schema == bulk_schema()
        code, stderr = export(url, txn.cluster, arrow, "txn", "0", "--format", "arrow", "--from", "9", "--to", "14")
        assert code == 0, stderr
        with pa.memory_map(str(arrow)) as source:
            assert pa.ipc.open_file(source).read_all().column("offset").to_pylist() == [13]
        assert not list(tmp_path.glob("*.partial"))


def test_export_that_reads_nothing_exits_non_zero_and_leaves_no_file(txn: Any, s3_server: Any, tmp_path: Path) -> None:
    out = tmp_path / "out.parquet"
    with gateway_server(txn, s3_server) as url:
        code, stderr = export(url, txn.cluster, out, "txn", "0", "--format", "parquet", "--from", "19")  # inside the open transaction
        assert code == 1 and "read nothing: a transaction open at offset 19 has no marker yet" in stderr, stderr
        code, stderr = export(url, txn.cluster, out, "txn", "0", "--format", "parquet", "--from", "9", "--to", "13")  # only markers and aborted records
        assert code == 1 and "read nothing" in stderr, stderr
        code, stderr = export(url, txn.cluster, out, "txn", "0", "--format", "parquet", "--from", "22")  # exactly at the end
        assert code == 1 and "OFFSET_OUT_OF_RANGE" in stderr, stderr
        code, stderr = export(url, txn.cluster, out, "txn", "0", "--format", "parquet", "--to", "30")
        assert code == 1 and "OFFSET_OUT_OF_RANGE: end_offset 30 of txn-0 is past remote storage's end" in stderr, stderr
        code, stderr = export(url, txn.cluster, out, "no-such-topic", "--format", "parquet")
        assert code == 1 and "UNKNOWN_TOPIC_OR_PART" in stderr or "unknown_topic_or_partition" in stderr, stderr
        assert not out.exists() and not list(tmp_path.glob("*.partial"))
        code, stderr = export(url, txn.cluster, out, "txn", "0", "--format", "parquet", "--from", "5", "--to", "5")  # an empty range, asked for
        assert code == 0 and pq.read_table(out).num_rows == 0, stderr
        code, stderr = export(url, txn.cluster, out, "txn", "--format", "parquet", "--from", "5")
        assert code == 2 and "--from and --to need a partition" in stderr
        # bad usage is exit status 2 (the reader's ConfigError), not a failed read
        code, stderr = export(url, txn.cluster, out, "txn", "0", "--format", "parquet", "--from", "-1")
        assert code == 2 and "start_offset must be a non-negative offset" in stderr, stderr
        code, stderr = export(url, txn.cluster, out, "txn", "0", "--format", "parquet", "--from", "9", "--to", "3")
        assert code == 2 and "start_offset 9 is after end_offset 3" in stderr, stderr
        assert not list(tmp_path.glob("*.partial"))


def test_export_fails_on_a_recorded_gap_unless_skip_gaps(start_kafka: Any, redis_server: Any, s3_server: Any, s3_bucket: str, tmp_path: Path) -> None:
    _broker, settings = uploaded_partition(start_kafka, tmp_path, redis_server, s3_server, s3_bucket, "plain")
    registry = Registry(redis.Redis.from_url(redis_server.url), settings.cluster)
    segments = registry.segments("plain", 0)
    lost = segments[1]
    assert registry.delete_segment("plain", 0, lost.base_offset) is not None
    registry.record_gap("plain", 0, lost.base_offset, lost.last_offset, "test: segment lost")
    out = tmp_path / "out.arrow"
    with gateway_server(settings, s3_server) as url:
        code, stderr = export(url, settings.cluster, out, "plain", "--format", "arrow")
        assert code == 1 and f"remote storage lacks offsets {lost.base_offset}..{lost.last_offset} (test: segment lost) (--skip-gaps reads past it)" in stderr, stderr
        assert not out.exists()
        code, stderr = export(url, settings.cluster, out, "plain", "--format", "arrow", "--skip-gaps")
        assert code == 0 and f"remote storage lacks offsets {lost.base_offset}..{lost.last_offset} (test: segment lost); skipped" in stderr, stderr
        with pa.memory_map(str(out)) as source:
            offsets = pa.ipc.open_file(source).read_all().column("offset").to_pylist()
        assert offsets == [o for o in range(segments[-1].last_offset + 1) if not lost.base_offset <= o <= lost.last_offset]
