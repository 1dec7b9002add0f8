"""The ``tiered-kafka`` PySpark data source (Python Data Source API, ``pyspark.sql.datasource``).

::

    from tiered_kafka.spark import TieredKafkaDataSource
    spark.dataSource.register(TieredKafkaDataSource)
    df = (spark.read.format("tiered-kafka")
          .option("tiered.gateway.url", "http://gateway:8080").option("tiered.cluster", "prod")
          .option("subscribe", "orders").option("startingOffsets", "earliest").load())

It reads **remote storage only**, through the gateway's read plans, with the options and the
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
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.types import StructType

from tiered_kafka.spark.arrow import spark_schema
from tiered_kafka.spark.options import OptionError, ReadOptions, parse_options
from tiered_kafka.spark.planning import ReadTask, plan_source
from tiered_kafka.spark.reading import read_task

if TYPE_CHECKING:
    import pyarrow as pa

FORMAT = "tiered-kafka"


class TieredKafkaInputPartition(InputPartition):
    """One Spark partition: a :class:`~tiered_kafka.spark.planning.ReadTask` (picklable)."""

    def __init__(self, task: ReadTask) -> None:
        super().__init__(task.index)
        self.task = task

    def __repr__(self) -> str:
        slices = ", ".join(f"{s.topic}-{s.partition}[{s.ranges[0][1].first_offset}..{s.ranges[-1][1].last_offset}]" for s in self.task.slices)
        return f"TieredKafkaInputPartition({self.task.index}: {self.task.size} bytes, {slices})"


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
        return TieredKafkaReader(parse_options(self.options))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        """``spark.readStream.format("tiered-kafka")`` (``streaming`` module doc)."""
        from tiered_kafka.spark.stream_planning import parse_stream_options
        from tiered_kafka.spark.streaming import TieredKafkaStreamReader

        return TieredKafkaStreamReader(parse_stream_options(self.options))


class TieredKafkaReader(DataSourceReader):
    """Plans on the driver (:meth:`partitions`), reads on the executors (:meth:`read`)."""

    def __init__(self, options: ReadOptions) -> None:
        self.options = options

    def partitions(self) -> Sequence[InputPartition]:
        plan = plan_source(self.options)
        return [TieredKafkaInputPartition(task) for task in plan.tasks]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, TieredKafkaInputPartition):  # nothing to read: Spark's placeholder partition
            return iter(())
        return read_task(partition.task)
