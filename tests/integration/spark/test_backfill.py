"""The backfill pipeline (remote history → Parquet by topic/partition/date, counts checked against
the registry) and the ``make run`` Spark demo, on the shared local[2] session and stack."""

from __future__ import annotations

import datetime
from pathlib import Path
from typing import Any

import pyarrow.dataset as ds
import pytest

from tests.integration.spark.conftest import EVENTS, EVENTS_PARTITIONS, records_on_disk
from tests.support.agent_env import registry_for
from tests.support.stack_env import TieredStack, gateway_server
from tests.support.transactions import COMMITTED_OFFSETS, UNCOMMITTED_OFFSETS, uploaded_transactional_log
from tiered_kafka.spark.backfill import PartitionCheck, backfill, expected_from_registry, main
from tiered_kafka_dev.spark_demo import spark_demo

pytestmark = pytest.mark.integration


def read_parquet(path: Path) -> dict[tuple[str, int], dict[int, dict[str, Any]]]:
    """(topic, partition) → offset → row, read back with pyarrow (Hive partitioning from the paths)."""
    table = ds.dataset(path, format="parquet", partitioning="hive").to_table()
    out: dict[tuple[str, int], dict[int, dict[str, Any]]] = {}
    for row in table.to_pylist():
        rows = out.setdefault((str(row["topic"]), int(row["partition"])), {})
        assert row["offset"] not in rows, f"offset {row['offset']} written twice"
        rows[row["offset"]] = row
    return out


def test_backfill_writes_every_record_and_the_counts_match(spark: Any, stack: TieredStack, tmp_path: Path) -> None:
    lines: list[str] = []
    output = tmp_path / "out"
    result = backfill(spark, gateway_url=stack.gateway_url, cluster=stack.cluster, topics=[EVENTS], output=str(output), registry=stack.registry, say=lines.append)
    assert result.ok, lines
    assert [line.split("]")[0] + "]" for line in lines if line.startswith("[")][0] == "[planning]"
    assert any(line.startswith("[writing]   stage") and "tasks done" in line for line in lines)
    assert any(line.startswith("[counting]") for line in lines) and lines[-1].endswith("row counts match the registry")

    written = read_parquet(output)
    assert sorted(written) == [(EVENTS, p) for p in range(EVENTS_PARTITIONS)]
    for p in range(EVENTS_PARTITIONS):
        expected = records_on_disk(stack, EVENTS, p)
        rows = written[(EVENTS, p)]
        assert sorted(rows) == sorted(expected) == list(range(len(expected)))
        check = next(c for c in result.checks if c.partition == p)
        assert check.rows == check.expected == len(expected) and check.control_records == 0
        for offset, (key, value, timestamp, timestamp_type, _headers) in expected.items():
            row = rows[offset]
            assert (row["key"], row["value"], row["timestampType"]) == (key, value, timestamp_type)
            stamp = row["timestamp"]  # timezone-aware UTC from Parquet
            assert int(stamp.timestamp() * 1000) == timestamp
            assert str(row["date"]) == datetime.datetime.fromtimestamp(timestamp / 1000, datetime.UTC).date().isoformat()  # UTC date
    dirs = {p.relative_to(output).parts[:2] for p in output.glob("topic=*/partition=*/date=*")}
    assert dirs == {(f"topic={EVENTS}", f"partition={p}") for p in range(EVENTS_PARTITIONS)}

    with pytest.raises(Exception, match="already exists"):  # no silent overwrite
        backfill(spark, gateway_url=stack.gateway_url, cluster=stack.cluster, topics=[EVENTS], output=str(output), registry=stack.registry, say=lambda _l: None)


def test_command_fails_when_the_registry_disagrees(spark: Any, stack: TieredStack, redis_server: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["--gateway-url", stack.gateway_url, "--cluster", stack.cluster, "--topic", EVENTS, "--output", str(tmp_path / "out"), "--redis-url", redis_server.url]
    assert main(argv) == 0  # the package's session is active: used, and left running
    assert "row counts match the registry" in capsys.readouterr().out

    segment = stack.registry.segments(EVENTS, 2)[3]
    key = stack.registry.keys(EVENTS, 2).segment(segment.base_offset)
    stack.registry.client.hincrby(key, "record_count", 5)  # the registry now claims 5 more records
    try:
        assert main([*argv, "--overwrite"]) == 1
    finally:
        stack.registry.client.hincrby(key, "record_count", -5)
    captured = capsys.readouterr()
    assert "events-2: MISMATCH" not in captured.err
    records = sum(s.record_count for s in stack.registry.segments(EVENTS, 2))
    assert f"error: events-2: wrote {records} rows, the registry counts {records + 5} records" in captured.err
    assert "events-0" not in captured.err and "events-1" not in captured.err

    with pytest.raises(SystemExit) as exit_info:
        main(["--cluster", "c"])  # missing arguments: argparse's usage error
    assert exit_info.value.code == 2


def test_backfill_count_rule_with_control_records(spark: Any, tmp_path: Path, redis_server: Any, s3_server: Any, s3_bucket: str) -> None:
    """Markers at 9, 10, 14, 18 count in the registry's record_count but are not rows."""
    settings = uploaded_transactional_log(tmp_path, redis_server, s3_server, s3_bucket)
    registry = registry_for(settings)
    output = tmp_path / "out"
    with gateway_server(settings, s3_server) as url:
        result = backfill(spark, gateway_url=url, cluster=settings.cluster, topics=["txn"], output=str(output), registry=registry, say=lambda _l: None)
    (check,) = result.checks
    assert (check.registry_records, check.control_records, check.rows, check.expected) == (22, 4, 18, 18)
    assert result.ok
    assert sorted(read_parquet(output)[("txn", 0)]) == UNCOMMITTED_OFFSETS


def test_expected_from_registry_counts_whole_segments_only(stack: TieredStack) -> None:
    segments = stack.registry.segments(EVENTS, 0)
    everything = sum(s.record_count for s in segments)
    assert expected_from_registry(segments, 0, segments[-1].last_offset + 1) == (everything, len(segments), ())
    records, count, partial = expected_from_registry(segments, segments[1].base_offset + 1, segments[-1].last_offset + 1)
    assert (records, count, partial) == (everything - segments[0].record_count - segments[1].record_count, len(segments) - 2, (segments[1].base_offset,))


def test_spark_demo(spark: Any, stack: TieredStack, redis_server: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spark_demo(stack.gateway_url, stack.cluster, EVENTS, redis_server.url, tmp_path)
    out = capsys.readouterr().out
    for p in range(EVENTS_PARTITIONS):
        latest = stack.registry.partition_info(EVENTS, p).latest_offset  # type: ignore[union-attr]
        assert f"{EVENTS}-{p}: {latest + 1} rows, offsets 0..{latest}," in out
    assert "check: row counts match the registry" in out
    assert spark.sparkContext._jsc is not None  # the session it found active is left running


def test_backfill_read_committed_counts_aborted_control_and_undecided_records(spark: Any, tmp_path: Path, redis_server: Any, s3_server: Any, s3_bucket: str) -> None:
    """22 records in the registry = 8 rows + 4 markers + 7 aborted (p8 5-7, p9 11-12, p10 15-16) + 3 undecided (p11 19-20 open, 21 behind it)."""
    settings = uploaded_transactional_log(tmp_path, redis_server, s3_server, s3_bucket)
    registry = registry_for(settings)
    output = tmp_path / "out"
    lines: list[str] = []
    with gateway_server(settings, s3_server) as url:
        result = backfill(
            spark, gateway_url=url, cluster=settings.cluster, topics=["txn"], output=str(output), registry=registry, read_committed=True, say=lines.append
        )
    (check,) = result.checks
    assert (check.registry_records, check.control_records, check.aborted_records, check.undecided_records, check.rows) == (22, 4, 7, 3, 8)
    assert check.expected == 8 and result.ok, lines
    assert "- 4 control - 7 aborted - 3 undecided = 8: ok" in "\n".join(lines)
    assert check.resume_offset == 19  # p11 (19-20) is open: the read stops there, and says where to resume
    assert "txn-0: resume offset 19: a transaction there is still open" in "\n".join(lines)
    assert sorted(read_parquet(output)[("txn", 0)]) == COMMITTED_OFFSETS
    # the check can fail: one aborted record more than the read dropped is a mismatch, named
    wrong = PartitionCheck(**{**check.__dict__, "aborted_records": 6})
    assert not wrong.ok and "minus 4 control, 6 aborted and 3 undecided records = 9" in wrong.problems[0]


def test_the_backfill_takes_spark_submits_master() -> None:
    """Under spark-submit (``PYSPARK_GATEWAY_PORT`` set) the backfill's session takes spark-submit's
    ``--master``: no second ``--master`` to keep in step. A real spark-submit to the standalone
    cluster shows it end to end (tests/integration/spark_cluster/test_submit.py)."""
    from tiered_kafka.spark.backfill import FALLBACK_MASTER, resolve_master

    assert resolve_master("spark://m:7077", {"PYSPARK_GATEWAY_PORT": "1"}) == "spark://m:7077"  # asked for: kept
    assert resolve_master(None, {"PYSPARK_GATEWAY_PORT": "40123"}) is None  # submitted: spark-submit's master
    assert resolve_master(None, {}) == FALLBACK_MASTER == "local[2]"  # a plain command
