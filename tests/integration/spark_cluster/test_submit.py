"""``spark-submit`` of the backfill to the standalone cluster with the SDK shipped as ``--py-files``
(a zip of ``tiered_kafka``, ``cluster_session.package_zip``): the way docs/spark-cluster.md describes
for nodes without the package. The zip comes first on the Python workers' ``sys.path``, so the
executors import the package from it, where the compiled decoder cannot load: with
``spark.executorEnv.TIERED_KAFKA_PURE_PYTHON=1`` they use the reference decoder and the backfill is
exact; without it the tasks fail with the package's ImportError naming the fix (no silent fall-back).

No SparkSession of this process is open here: each run is its own application, given both cores."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pyarrow.dataset as ds
import pytest

from tests.integration.spark.conftest import EVENTS, EVENTS_PARTITIONS, records_on_disk
from tests.support.stack_env import TieredStack
from tests.support.subprocesses import run_in_session
from tiered_kafka.format.record_batch import PURE_PYTHON_ENV
from tiered_kafka.spark.cluster_session import package_zip
from tiered_kafka_dev.services import SparkStandaloneCluster
from tiered_kafka_dev.services._spark import spark_home

pytestmark = pytest.mark.integration

DRIVER_SCRIPT = "import sys\nfrom tiered_kafka.spark.backfill import main\nsys.exit(main())\n"


def submit(cluster: SparkStandaloneCluster, stack: TieredStack, work: Path, output: Path, *, pure_python_executors: bool) -> subprocess.CompletedProcess[str]:
    """Run ``spark-submit --py-files sdk.zip backfill.py ...`` against ``cluster``; return the result."""
    work.mkdir()
    sdk_zip = package_zip(work / "tiered_kafka_sdk.zip")
    script = work / "backfill_job.py"
    script.write_text(DRIVER_SCRIPT)
    conf = {
        "spark.executor.memory": "512m",
        "spark.executor.cores": "1",
        "spark.cores.max": "2",
        "spark.scheduler.minRegisteredResourcesRatio": "1.0",
        "spark.task.maxFailures": "1",  # a failing import fails at once
        "spark.driver.host": "127.0.0.1",
        "spark.driver.bindAddress": "127.0.0.1",
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.pyspark.python": sys.executable,
    }
    if pure_python_executors:
        conf[f"spark.executorEnv.{PURE_PYTHON_ENV}"] = "1"
    # The driver runs here, where the zip also comes first on sys.path: it needs the reference decoder too.
    env = {**os.environ, "SPARK_HOME": str(spark_home()), "SPARK_CONF_DIR": str(work), "SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable, PURE_PYTHON_ENV: "1"}
    command = [str(spark_home() / "bin" / "spark-submit"), "--master", cluster.master_url, "--py-files", str(sdk_zip)]
    for key, value in conf.items():
        command += ["--conf", f"{key}={value}"]
    command += [str(script), "--gateway-url", stack.gateway_url, "--cluster", stack.cluster, "--topic", EVENTS, "--output", str(output)]
    command += ["--redis-url", stack.agent.redis.url]
    return run_in_session(command, timeout_s=600, env=env, cwd=work)  # a timeout ends spark-submit's JVM and workers too


def test_submit_with_the_sdk_as_py_files_and_the_reference_decoder(spark_cluster: SparkStandaloneCluster, stack: TieredStack, tmp_path: Path) -> None:
    output = tmp_path / "out"
    done = submit(spark_cluster, stack, tmp_path / "job", output, pure_python_executors=True)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-5000:]
    assert "row counts match the registry" in done.stdout
    assert f"[spark] session on {spark_cluster.master_url}" in done.stdout.splitlines()  # spark-submit's --master, none given to the job
    table = ds.dataset(output, format="parquet", partitioning="hive").to_table(columns=["partition", "offset", "value"])
    written: dict[int, dict[int, bytes]] = {}
    for row in table.to_pylist():
        offsets = written.setdefault(int(row["partition"]), {})
        assert row["offset"] not in offsets, f"offset {row['offset']} written twice"
        offsets[row["offset"]] = row["value"]
    assert sorted(written) == list(range(EVENTS_PARTITIONS))
    for p in range(EVENTS_PARTITIONS):
        expected = records_on_disk(stack, EVENTS, p)
        assert written[p] == {offset: record[1] for offset, record in expected.items()}
    # the application ran on the cluster (the master lists it as completed), not in local mode
    assert [app["name"] for app in spark_cluster.master.state()["completedapps"]].count("tiered-kafka-backfill") >= 1


def test_submit_without_the_reference_decoder_fails_naming_the_fix(spark_cluster: SparkStandaloneCluster, stack: TieredStack, tmp_path: Path) -> None:
    done = submit(spark_cluster, stack, tmp_path / "job", tmp_path / "out", pure_python_executors=False)
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-5000:]
    # spark-submit's PythonRunner merges the driver script's stderr into its stdout
    (error,) = [line for line in done.stdout.splitlines() if line.startswith("error: ")]
    assert error.startswith("error: backfill failed: ")
    assert "tiered_kafka.format._native (the compiled record decoder) is not built" in error
    assert f"set {PURE_PYTHON_ENV}=1 for the pure-Python reference" in error
    assert "./tiered_kafka_sdk.zip/tiered_kafka/format/__init__.py" in error  # the executors imported the zip
    assert not (tmp_path / "out").exists() or not list((tmp_path / "out").rglob("*.parquet"))
