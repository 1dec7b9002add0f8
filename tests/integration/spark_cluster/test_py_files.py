"""``cluster_session(py_files=[zip], pure_python_executors=True)``: the executors import the SDK from
the shipped zip (``SparkContext.addPyFile``), where only the reference decoder can run, and read the
same records as the installed package. Its own session: the module session of the other tests has
the cluster's two cores."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.spark.conftest import EVENTS, EVENTS_PARTITIONS, read_options, records_on_disk
from tests.integration.spark_cluster.conftest import WORKERS, registered_executors, stop_local_spark
from tests.support.stack_env import TieredStack
from tiered_kafka.errors import ConfigError
from tiered_kafka.spark.cluster_session import cluster_session, package_zip
from tiered_kafka_dev.services import SparkStandaloneCluster

pytestmark = pytest.mark.integration

ZIP_NAME = "tiered_kafka_sdk.zip"


@pytest.fixture(scope="module")
def zip_spark(spark_cluster: SparkStandaloneCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    sdk_zip = package_zip(tmp_path_factory.mktemp("py-files") / ZIP_NAME)
    path_before = list(sys.path)
    stop_local_spark()
    session = cluster_session(spark_cluster.master_url, "tiered-kafka-py-files", executors=WORKERS, py_files=[sdk_zip], pure_python_executors=True)
    yield session
    session.stop()
    sys.path[:] = path_before  # addPyFile also put the zip on this process's sys.path


def test_package_zip_holds_the_python_sources_only(tmp_path: Path) -> None:
    import zipfile

    names = zipfile.ZipFile(package_zip(tmp_path / "sdk.zip")).namelist()
    assert "tiered_kafka/__init__.py" in names and "tiered_kafka/spark/datasource.py" in names and "tiered_kafka/format/record_batch.py" in names
    assert not [n for n in names if not n.endswith((".py", "py.typed"))], names  # no .so, .c, __pycache__


def test_executors_read_from_the_zip_with_the_reference_decoder(zip_spark: Any, stack: TieredStack) -> None:
    assert len(registered_executors(zip_spark)) == WORKERS
    df = zip_spark.read.format("tiered-kafka").options(**read_options(stack, subscribe=EVENTS, minPartitions=4)).load()
    rows = df.select("partition", "offset", "value").collect()
    for p in range(EVENTS_PARTITIONS):
        expected = records_on_disk(stack, EVENTS, p)
        got = {r["offset"]: r["value"] for r in rows if r["partition"] == p}
        assert len(got) == len([r for r in rows if r["partition"] == p])  # no offset twice
        assert got == {offset: record[1] for offset, record in expected.items()}

    def origin(batches: Any) -> Any:
        import pyarrow

        import tiered_kafka
        from tiered_kafka.format import record_batch

        rows = sum(batch.num_rows for batch in batches)
        yield pyarrow.RecordBatch.from_pydict({"file": [tiered_kafka.__file__], "decoder": [record_batch.DECODER_IMPLEMENTATION], "rows": [rows]})

    reports = df.mapInArrow(origin, "file string, decoder string, rows long").collect()
    assert sum(r["rows"] for r in reports) == len(rows)
    for report in reports:
        assert report["file"].endswith(f"{ZIP_NAME}/tiered_kafka/__init__.py"), report
        assert report["decoder"] == "python"


def test_cluster_session_refuses_bad_input_and_a_second_context(zip_spark: Any, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"master 'local\[2\]' is not a standalone master URL"):
        cluster_session("local[2]")
    with pytest.raises(ConfigError, match=r"executors \(0\) and executor_cores \(1\) must be positive"):
        cluster_session("spark://127.0.0.1:7077", executors=0)
    with pytest.raises(ConfigError, match=r"py_files entry '.*missing.zip' does not exist"):
        cluster_session("spark://127.0.0.1:7077", py_files=[tmp_path / "missing.zip"])
    with pytest.raises(ConfigError, match=r"this process already runs a SparkContext on 'spark://127\.0\.0\.1:\d+'; stop it before connecting to 'spark://127\.0\.0\.1:1'"):
        cluster_session("spark://127.0.0.1:1")
