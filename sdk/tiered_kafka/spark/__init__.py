"""The PySpark side of tiered-kafka: the ``tiered-kafka`` data source and the Parquet backfill.

- ``datasource``: ``TieredKafkaDataSource`` (register it with ``spark.dataSource.register``, then
  ``spark.read.format("tiered-kafka")``); reads remote storage through the gateway's read plans
  with the options and schema of Spark's Kafka source.
- ``options``: option parsing and validation; ``planning``: offsets, plans, balancing by bytes;
  ``arrow``: records → Arrow batches; ``reading``: what executors run.
- ``streaming``: ``spark.readStream.format("tiered-kafka")`` (micro-batches, Kafka source's
  offsets and limits); ``stream_planning``: its offsets, limits and micro-batch plans.
- ``session.local_session``: a local SparkSession set up for this project (tests, bench, demo).
- ``backfill``: ``python -m tiered_kafka.spark.backfill``, a topic's remote history to Parquet,
  row counts checked against the registry.

pyspark is imported only by ``datasource``, ``streaming``, ``session`` and ``backfill`` (and lazily
here), so ``options``, ``planning``, ``stream_planning``, ``arrow`` and ``reading`` load without it
(they need pyarrow).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tiered_kafka.spark.datasource import TieredKafkaDataSource
    from tiered_kafka.spark.session import local_session

__all__ = ["TieredKafkaDataSource", "local_session"]


def __getattr__(name: str) -> Any:
    if name == "TieredKafkaDataSource":
        from tiered_kafka.spark.datasource import TieredKafkaDataSource

        return TieredKafkaDataSource
    if name == "local_session":
        from tiered_kafka.spark.session import local_session

        return local_session
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
