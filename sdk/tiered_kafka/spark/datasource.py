"""The ``tiered-kafka`` PySpark data source (Python Data Source API, ``pyspark.sql.datasource``).

::

    from tiered_kafka.spark import TieredKafkaDataSource
    spark.dataSource.register(TieredKafkaDataSource)
    df = (spark.read.format("tiered-kafka")
          .option("tiered.gateway.url", "http://gateway:8080").option("tiered.cluster", "prod")
          .option("subscribe", "orders").option("startingOffsets", "earliest").load())

It reads **remote storage** through the gateway's read plans (and, with ``tiered.mode``
REMOTE_PREFERRED / KAFKA_PREFERRED, Kafka for what remote storage does not hold: ``hybrid``), with the options and the
output columns of Spark's Kafka source (``options`` and ``arrow`` module docs), so a batch job
switches from ``format("kafka")`` by changing the format and adding the ``tiered.*`` options.

Where the work happens:
- ``load()``: ``schema()`` parses and validates the options (errors name the option); it makes no
  network call.
- first action on the DataFrame: ``reader().partitions()`` runs on the driver (in a Python worker
  Spark starts there): it checks topics against the gateway, resolves offsets and asks the
  gateway's plans through the SDK, then balances the planned ranges into Spark partitions by
  bytes (``planning`` module doc). Spark keeps those partitions for the DataFrame: later actions
  on the same DataFrame read the same offsets (and re-plan URLs that expired meanwhile).
- executors: ``read()`` fetches each task's presigned ranges, re-planning an expired URL once
  (the task carries the gateway URL, cluster and token), decodes and CRC-checks the batches, and
  yields ``pyarrow.RecordBatch`` es (``reading`` module doc).

Filters on ``topic``, ``partition``, ``offset`` and ``timestamp`` are pushed down (``pushdown``
module doc) when the session sets ``spark.sql.python.filterPushdown.enabled=true`` (PySpark's
default is false; ``session.local_session`` sets it): the plan then skips the partitions and the
offsets they exclude, so a query of one hour fetches that hour's batches onwards, not the topic.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.types import StructType

from tiered_kafka.modes import reads_kafka
from tiered_kafka.spark.arrow import spark_schema
from tiered_kafka.spark.options import OptionError, ReadOptions, parse_options
from tiered_kafka.spark.planning import ReadTask, plan_source
from tiered_kafka.spark.pushdown import Pushdown, described, translate

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql.datasource import Filter  # PySpark 4.1+ (pyspark 4.0 has no pushdown: the plain reader only)

FORMAT = "tiered-kafka"
log = logging.getLogger(__name__)


class TieredKafkaInputPartition(InputPartition):
    """One Spark partition: a :class:`~tiered_kafka.spark.planning.ReadTask` (picklable)."""

    def __init__(self, task: ReadTask) -> None:
        super().__init__(task.index)
        self.task = task

    def __repr__(self) -> str:
        slices = ", ".join(f"{s.topic}-{s.partition}[{s.ranges[0][1].first_offset}..{s.ranges[-1][1].last_offset}]" for s in self.task.slices)
        kafka = ", ".join(f"{k.topic}-{k.partition}[{k.start}..{k.end - 1}] from Kafka" for k in self.task.kafka_slices)
        return f"TieredKafkaInputPartition({self.task.index}: {kafka})" if kafka and not slices else f"TieredKafkaInputPartition({self.task.index}: {self.task.size} bytes, {slices})"


class TieredKafkaDataSource(DataSource):
    """``spark.read.format("tiered-kafka")``: Kafka records from remote storage, Spark's Kafka schema."""

    @classmethod
    def name(cls) -> str:
        return FORMAT

    def schema(self) -> StructType:
        """Spark's Kafka schema; options valid neither for a batch read nor for a stream fail here
        (``load()``). PySpark asks the schema the same way for both, so a batch-only rule (e.g.
        ``startingOffsets=latest``) fails when the batch read is planned (its first action)."""
        try:
            options = parse_options(self.options)
        except OptionError:
            try:
                options = parse_options(self.options, streaming=True)
            except OptionError:
                pass
            else:
                return spark_schema(options.include_headers, options.include_control_records)
            raise
        return spark_schema(options.include_headers, options.include_control_records)

    def reader(self, schema: StructType) -> DataSourceReader:
        """A reader with ``pushFilters`` only in PySpark's filter-pushdown worker (see
        :class:`TieredKafkaPushdownReader`); elsewhere one without it, so a session without
        ``spark.sql.python.filterPushdown.enabled`` reads everything instead of failing."""
        options = parse_options(self.options)
        pushdown = in_pushdown_worker() and not reads_kafka(options.mode)  # hybrid modes: Spark applies every filter
        return TieredKafkaPushdownReader(options) if pushdown else TieredKafkaReader(options)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        """``spark.readStream.format("tiered-kafka")`` (``streaming`` module doc)."""
        from tiered_kafka.spark.stream_planning import parse_stream_options
        from tiered_kafka.spark.streaming import TieredKafkaStreamReader

        return TieredKafkaStreamReader(parse_stream_options(self.options))


class TieredKafkaReader(DataSourceReader):
    """Plans on the driver (:meth:`partitions`), reads on the executors (:meth:`read`)."""

    def __init__(self, options: ReadOptions) -> None:
        self.options = options
        self.pushed: Pushdown | None = None  # set by TieredKafkaPushdownReader.pushFilters

    def partitions(self) -> Sequence[InputPartition]:
        plan = plan_source(self.options, pushed=self.pushed)
        return [TieredKafkaInputPartition(task) for task in plan.tasks]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, TieredKafkaInputPartition):  # nothing to read: Spark's placeholder partition
            return iter(())
        from tiered_kafka.spark.reading import read_task  # executors only (the driver's workers skip its imports)

        return read_task(partition.task)


class TieredKafkaPushdownReader(TieredKafkaReader):
    """:class:`TieredKafkaReader` with ``pushFilters`` (``pushdown`` module doc): filters on
    ``topic``, ``partition``, ``offset`` and ``timestamp`` narrow the plan.

    PySpark calls ``pushFilters`` only when ``spark.sql.python.filterPushdown.enabled`` is true
    (false by default in PySpark 4.1-4.3; ``session.local_session`` sets it), in the worker module
    ``PUSHDOWN_WORKER``; and when that setting is false it *refuses* a reader that defines
    ``pushFilters`` (``DATA_SOURCE_PUSHDOWN_DISABLED``). So ``reader()`` hands this class out only
    in that worker: with the setting off the read is the same, unfiltered at planning, and Spark
    applies every filter."""

    def pushFilters(self, filters: list[Filter]) -> list[Filter]:
        """Keeps what ``pushdown.translate`` makes of ``filters`` for :meth:`partitions`; returns
        the ones Spark must still apply (``pushdown`` module doc, rule 2)."""
        pushed, remaining = translate(filters)
        self.pushed = pushed
        if not pushed.is_noop:
            log.info("tiered-kafka: filters pushed down: %s", "; ".join(described(pushed)))
        return remaining


PUSHDOWN_WORKER = "pyspark.sql.worker.data_source_pushdown_filters"
"""The PySpark worker module that calls ``DataSourceReader.pushFilters`` (PySpark 4.1+)."""


def in_pushdown_worker() -> bool:
    """Whether this process runs PySpark's filter-pushdown worker: its module was imported (the
    daemon imports it after forking) or runs as ``__main__`` (``python -m``, without the daemon)."""
    if PUSHDOWN_WORKER in sys.modules:
        return True
    main = sys.modules.get("__main__")
    return getattr(getattr(main, "__spec__", None), "name", None) == PUSHDOWN_WORKER
