"""A topic's history as an Apache Iceberg table: incremental, exactly once, from remote storage (issue 28).

- ``table_contract``: the table's columns (Spark's Kafka source's), its ``day(timestamp)``
  partitioning, and the offsets-in-snapshot rule every writer follows (so each continues the other's table);
- ``catalog``: which catalog (PyIceberg's properties; SQL on SQLite by default);
- ``data_files``: data files written by PyIceberg's writer and the one commit path of every writer;
- ``export``: ``export_iceberg``, the bulk API into PyIceberg; ``cli``: ``tiered-kafka export --format iceberg``;
- ``spark_writer``: the Spark backfill's Iceberg output and the streaming sink (``readStream.format("tiered-kafka")``
  into the table); ``spark_cli``: ``tiered-kafka-backfill --format iceberg``;
- ``faults``: the crash hook the exactly-once tests use.

Needs ``tiered-kafka[iceberg]`` (PyIceberg with its SQL, PyArrow and pyiceberg-core extras); Spark
needs no Iceberg jar (``spark_writer`` module doc).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tiered_kafka.iceberg.export import ExportResult, export_iceberg

__all__ = ["ExportResult", "export_iceberg"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from tiered_kafka.iceberg import export

        return getattr(export, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
