"""One place that starts a local SparkSession fit for this machine and this project.

Used by the tests, the benchmark, the backfill command and the ``make run`` demo. It sets what
PySpark needs here: the Python of this process for the driver and the workers
(``PYSPARK_PYTHON``, ``PYSPARK_DRIVER_PYTHON``), loopback only (``SPARK_LOCAL_IP``,
``spark.driver.host``, ``spark.driver.bindAddress``), no web UI, few shuffle partitions, filter
pushdown for Python data sources (``spark.sql.python.filterPushdown.enabled``), and registers the
``tiered-kafka`` data source.
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

LOCAL_IP = "127.0.0.1"


def spark_environment() -> None:
    """Set the environment PySpark reads when it launches the JVM and its Python workers."""
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    os.environ["SPARK_LOCAL_IP"] = LOCAL_IP


def local_session(master: str = "local[2]", app_name: str = "tiered-kafka", *, log_level: str = "ERROR", **conf: Any) -> SparkSession:
    """A SparkSession on ``master`` (``local[N]``: everything bound to loopback), with the data source registered.

    ``conf`` adds or overrides Spark settings (``spark.sql.shuffle.partitions`` is 4 unless given).
    If a session is active already, its configuration is left as it is (Spark's ``getOrCreate``).
    """
    spark_environment()
    from pyspark.sql import SparkSession

    from tiered_kafka.spark.datasource import TieredKafkaDataSource

    settings: dict[str, Any] = {
        "spark.driver.host": LOCAL_IP,
        "spark.driver.bindAddress": LOCAL_IP,
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.shuffle.partitions": "4",
        "spark.python.worker.reuse": "true",
        "spark.sql.python.filterPushdown.enabled": "true",  # the data source's filter pushdown (datasource module doc)
    }
    settings.update({key: str(value) for key, value in conf.items()})
    builder = SparkSession.builder.master(master).appName(app_name)
    for key, value in settings.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel(log_level)
    spark.dataSource.register(TieredKafkaDataSource)
    return spark
