"""A SparkSession on a Spark standalone master, and the SDK packed for ``--py-files``.

``session.local_session`` runs everything in one JVM (``local[N]``). ``cluster_session`` connects to
``spark://HOST:PORT`` instead, so each task runs in an executor JVM started by a worker, with its own
Python workers (``pyspark.daemon``), as on a real cluster::

    spark = cluster_session("spark://127.0.0.1:7077", executors=2)
    spark.read.format("tiered-kafka").option(...).load()

It keeps ``local_session``'s settings (loopback driver, the data source registered, filter pushdown)
and adds:

- ``spark.executor.memory`` (512m: Spark's floor is 450m, ``UnifiedMemoryManager``) and
  ``spark.executor.cores``; ``spark.cores.max`` = executors x cores, with
  ``spark.scheduler.minRegisteredResourcesRatio=1``, so the session returns once every executor
  has registered (or after ``spark.scheduler.maxRegisteredResourcesWaitingTime``, 120 s) and the
  first job is spread over all of them;
- ``PYSPARK_PYTHON``: executors run the Python of this process (``spark.pyspark.python``). That
  suits a cluster on this machine, or nodes with the same interpreter path;
- ``py_files``: zips added with ``SparkContext.addPyFile`` (Spark's ``--py-files``; put on the
  Python workers' ``sys.path`` ahead of site-packages).

How the package reaches the executors (docs/spark-cluster.md has the real-cluster commands):

- **installed on every node** (``pip install tiered-kafka[spark]``; here the editable install): the
  executors import it from site-packages, compiled decoder included. The recommended way.
- **shipped as a zip** (:func:`package_zip`, then ``py_files``): Python imports a zip with
  ``zipimport``, which cannot load extension modules, so ``tiered_kafka.format._native`` does not load
  from it. The package does not fall back silently (``record_batch`` raises an ImportError naming
  the fix), so ``pure_python_executors=True`` sets ``TIERED_KAFKA_PURE_PYTHON=1`` for the executors'
  Python (``spark.executorEnv.*``, which PySpark also passes to the Python workers it starts on the
  driver, e.g. to plan a data source read): they then use the reference decoder (slower, same
  records). The dependencies (pyarrow, httpx, aiokafka, cramjam, crc32c...) must be on the nodes
  anyway: a zip carries only this package. A wheel given to ``--py-files`` is not even put on
  ``sys.path`` (PySpark adds ``.zip``, ``.egg`` and ``.jar`` only).
"""

from __future__ import annotations

import os
import sys
import zipfile
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tiered_kafka.errors import ConfigError
from tiered_kafka.format.record_batch import PURE_PYTHON_ENV

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["cluster_session", "package_zip"]

EXECUTOR_MEMORY = "512m"
_PACKAGE_DIR = Path(__file__).resolve().parents[1]  # .../tiered_kafka
_SOURCE_SUFFIXES = (".py", ".typed")


def package_zip(destination: str | os.PathLike[str]) -> Path:
    """Write the ``tiered_kafka`` package's Python sources into the zip ``destination``; return its path.

    Only ``.py`` files (and ``py.typed``): the compiled extension could not be imported from a zip
    anyway (module doc). Entries are ``tiered_kafka/...``, so the zip itself goes on ``sys.path``.
    """
    path = Path(destination)
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for source in sorted(_PACKAGE_DIR.rglob("*")):
            if source.is_file() and source.suffix in _SOURCE_SUFFIXES and "__pycache__" not in source.parts:
                archive.write(source, Path("tiered_kafka") / source.relative_to(_PACKAGE_DIR))
    return path


def cluster_session(
    master: str,
    app_name: str = "tiered-kafka",
    *,
    executors: int = 2,
    executor_cores: int = 1,
    executor_memory: str = EXECUTOR_MEMORY,
    py_files: Iterable[str | os.PathLike[str]] = (),
    pure_python_executors: bool = False,
    log_level: str = "ERROR",
    **conf: Any,
) -> SparkSession:
    """A SparkSession on the standalone ``master`` (``spark://HOST:PORT``), data source registered.

    Waits until ``executors`` executors of ``executor_cores`` cores have registered (module doc).
    ``conf`` adds or overrides Spark settings (keys with dots: pass a dict with ``**``). Raises
    :class:`~tiered_kafka.errors.ConfigError` for a master that is not ``spark://``, bad sizes, a
    missing ``py_files`` entry, or when this process already has a SparkContext on another master
    (one SparkContext per process: ``getOrCreate`` would hand that one back).
    """
    if not master.startswith("spark://"):
        raise ConfigError(f"cluster_session: master {master!r} is not a standalone master URL (spark://HOST:PORT)")
    if executors < 1 or executor_cores < 1:
        raise ConfigError(f"cluster_session: executors ({executors}) and executor_cores ({executor_cores}) must be positive")
    files = [Path(f).resolve() for f in py_files]
    for file in files:
        if not file.is_file():
            raise ConfigError(f"cluster_session: py_files entry {str(file)!r} does not exist")

    from pyspark import SparkContext

    active = SparkContext._active_spark_context
    if active is not None and active.master != master:
        raise ConfigError(f"cluster_session: this process already runs a SparkContext on {active.master!r}; stop it before connecting to {master!r}")

    from tiered_kafka.spark.session import local_session

    settings: dict[str, Any] = {
        "spark.executor.memory": executor_memory,
        "spark.executor.cores": executor_cores,
        "spark.cores.max": executors * executor_cores,
        "spark.scheduler.minRegisteredResourcesRatio": "1.0",
        "spark.scheduler.maxRegisteredResourcesWaitingTime": "120s",
        "spark.pyspark.python": sys.executable,
    }
    if pure_python_executors:
        settings[f"spark.executorEnv.{PURE_PYTHON_ENV}"] = "1"
    settings.update(conf)
    spark = local_session(master, app_name, log_level=log_level, **settings)
    if files:
        for file in files:
            spark.sparkContext.addPyFile(str(file))
        # A Python data source keeps the includes of the moment it was registered (its
        # PythonFunction's pythonIncludes), and local_session registered it before the zips were
        # added: register it again, or its reads would run without them.
        from tiered_kafka.spark.datasource import TieredKafkaDataSource

        spark.dataSource.register(TieredKafkaDataSource)
    return spark
