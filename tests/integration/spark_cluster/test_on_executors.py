"""The ``tiered-kafka`` data source and the Parquet backfill on a Spark standalone cluster: tasks run in
the workers' executor JVMs and their Python workers (not in the driver), with exact results."""

from __future__ import annotations

import datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.dataset as ds
import pytest

from tests.integration.spark.conftest import EVENTS, EVENTS_PARTITIONS, read_options, records_on_disk
from tests.integration.spark_cluster.conftest import WORKERS, registered_executors, task_executors
from tests.support.kafka_clients import value_for
from tests.support.stack_env import TieredStack
from tiered_kafka.spark.backfill import backfill
from tiered_kafka_dev.services import SparkStandaloneCluster

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def expected(stack: TieredStack) -> dict[int, dict[int, Any]]:
    return {p: records_on_disk(stack, EVENTS, p) for p in range(EVENTS_PARTITIONS)}


def assert_spread_over_executors(spark: Any, group: str) -> None:
    """Every task of the group's jobs ran in a registered executor, and each executor ran some."""
    executors = registered_executors(spark)
    assert len(executors) == WORKERS, executors
    counts = task_executors(spark, group)
    assert counts and set(counts) == executors, counts  # no task on the driver, none on an unknown executor


def test_cluster_has_two_workers_and_the_session_two_executors(spark: Any, spark_cluster: SparkStandaloneCluster) -> None:
    state = spark_cluster.master.state()
    assert state["aliveworkers"] == WORKERS
    assert {w["webuiaddress"] for w in state["workers"]} == {w.web_url for w in spark_cluster.workers}
    (app,) = state["activeapps"]
    assert app["name"] == "tiered-kafka-cluster-tests" and app["state"] == "RUNNING"
    assert spark.sparkContext.master == spark_cluster.master_url


def test_read_runs_in_executor_python_workers_with_exact_results(
    spark: Any, stack: TieredStack, spark_cluster: SparkStandaloneCluster, expected: dict[int, dict[int, Any]]
) -> None:
    group = "read-on-executors"
    spark.sparkContext.setJobGroup(group, "the data source on the standalone cluster")
    df = spark.read.format("tiered-kafka").options(**read_options(stack, subscribe=EVENTS, minPartitions=8)).load()
    assert df.rdd.getNumPartitions() == 8
    rows = df.select("topic", "partition", "offset", "key", "value").collect()

    seen: dict[int, dict[int, Any]] = {p: {} for p in range(EVENTS_PARTITIONS)}
    for row in rows:
        assert row["topic"] == EVENTS
        assert row["offset"] not in seen[row["partition"]], f"{EVENTS}-{row['partition']} offset {row['offset']} read twice"
        seen[row["partition"]][row["offset"]] = row
    for p in range(EVENTS_PARTITIONS):
        latest = stack.registry.partition_info(EVENTS, p).latest_offset  # type: ignore[union-attr]
        assert sorted(seen[p]) == sorted(expected[p]) == list(range(latest + 1))  # every remote offset once
        for offset, row in seen[p].items():
            i = offset * EVENTS_PARTITIONS + p  # round-robin production
            key, value, *_ = expected[p][offset]
            assert (row["key"], row["value"]) == (key, value) == (f"k{i}".encode(), value_for(i))
    assert_spread_over_executors(spark, group)

    # Which processes read the rows: each Arrow batch of the scan reports the ancestry of the Python
    # worker that produced it. Self-contained (cloudpickle ships it by value, the executors have no tests/).
    def ancestry(batches: Any) -> Any:
        import os

        import pyarrow

        chain, pid = [], os.getpid()
        while pid > 1 and len(chain) < 8:
            chain.append(pid)
            with open(f"/proc/{pid}/stat") as stat:
                pid = int(stat.read().rpartition(")")[2].split()[1])  # the parent's id
        rows = sum(batch.num_rows for batch in batches)
        from tiered_kafka.format import record_batch  # the installed package, compiled decoder included

        yield pyarrow.RecordBatch.from_pydict({"chain": [chain], "rows": [rows], "decoder": [record_batch.DECODER_IMPLEMENTATION]})

    schema = "chain array<long>, rows long, decoder string"
    reports = df.mapInArrow(ancestry, schema).collect()
    assert sum(r["rows"] for r in reports) == len(rows)
    driver_jvm = spark.sparkContext._gateway.proc.pid
    worker_jvms = set(spark_cluster.worker_pids)
    used_workers = set()
    for report in reports:
        chain = list(report["chain"])
        assert driver_jvm not in chain, chain  # not a Python worker of the driver's JVM (local mode's case)
        (worker,) = worker_jvms & set(chain)  # under exactly one worker ...
        executor_jvm = chain[chain.index(worker) - 1]  # ... whose child is the executor JVM
        with open(f"/proc/{executor_jvm}/cmdline", "rb") as cmdline:
            assert b"org.apache.spark.executor.CoarseGrainedExecutorBackend" in cmdline.read()
        used_workers.add(worker)
        assert report["decoder"] == "c"  # the executors import the installed package: the C extension loads
    assert used_workers == worker_jvms


def test_backfill_on_the_cluster_writes_every_record(spark: Any, stack: TieredStack, tmp_path: Path, expected: dict[int, dict[int, Any]]) -> None:
    group = "backfill-on-executors"
    spark.sparkContext.setJobGroup(group, "the backfill on the standalone cluster")
    output = tmp_path / "out"
    lines: list[str] = []
    result = backfill(spark, gateway_url=stack.gateway_url, cluster=stack.cluster, topics=[EVENTS], output=str(output), registry=stack.registry, say=lines.append)
    assert result.ok, lines
    assert lines[-1].endswith("row counts match the registry")
    assert_spread_over_executors(spark, group)

    table = ds.dataset(output, format="parquet", partitioning="hive").to_table()
    assert isinstance(table, pa.Table)
    written: dict[int, dict[int, dict[str, Any]]] = {}
    for row in table.to_pylist():
        assert row["topic"] == EVENTS
        rows = written.setdefault(int(row["partition"]), {})
        assert row["offset"] not in rows, f"offset {row['offset']} written twice"
        rows[row["offset"]] = row
    assert sorted(written) == list(range(EVENTS_PARTITIONS))
    for p in range(EVENTS_PARTITIONS):
        assert sorted(written[p]) == sorted(expected[p]) == list(range(len(expected[p])))
        check = next(c for c in result.checks if c.partition == p)
        assert check.rows == check.expected == len(expected[p])
        for offset, (key, value, timestamp, timestamp_type, _headers) in expected[p].items():
            row = written[p][offset]
            assert (row["key"], row["value"], row["timestampType"]) == (key, value, timestamp_type)
            assert int(row["timestamp"].timestamp() * 1000) == timestamp
            assert str(row["date"]) == datetime.datetime.fromtimestamp(timestamp / 1000, datetime.UTC).date().isoformat()
