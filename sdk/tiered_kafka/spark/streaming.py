"""``spark.readStream.format("tiered-kafka")``: Structured Streaming micro-batches from remote storage.

::

    query = (spark.readStream.format("tiered-kafka")
             .option("tiered.gateway.url", "http://gateway:8080").option("tiered.cluster", "prod")
             .option("subscribe", "orders").option("startingOffsets", "earliest")
             .option("maxOffsetsPerTrigger", 100000).load()
             .writeStream.format("parquet").option("checkpointLocation", "/ckpt").option("path", "/out")
             .trigger(availableNow=True).start())

The options and their meaning are Spark's Kafka source's for streaming queries
(``KafkaSourceProvider``, ``KafkaMicroBatchStream``); the schema is the batch source's
(``arrow``). What differs is where data comes from: in REMOTE_ONLY (the default) remote storage only,
so the stream's "latest" is remote storage's end and the stream moves as the agent uploads
segments; in REMOTE_PREFERRED / KAFKA_PREFERRED "latest" is Kafka's end and Kafka serves what
remote storage does not hold (``hybrid``: history from remote storage, then live records) (``stream_planning`` module doc: offsets, limits, data loss).

PySpark 4.3's API (``pyspark.sql.datasource.DataSourceStreamReader``) and what is used of it:

- ``initialOffset`` / ``latestOffset(start, limit)`` / ``partitions(start, end)`` / ``read`` /
  ``commit``: the micro-batch contract; offsets are the Kafka source's JSON
  ``{"topic": {"0": 42}}`` (next offset to read per partition), written by Spark to the
  checkpoint's ``offsets/`` directory.
- Admission control: ``getDefaultReadLimit`` gives ``ReadMaxRows(maxOffsetsPerTrigger)``, or
  ``ReadMinRows(minOffsetsPerTrigger)`` when only that is set, else ``ReadAllAvailable``.
  PySpark 4.3 has no ``CompositeReadLimit`` nor a delay in ``ReadMinRows``, so (decision) when
  the engine passes any limit other than ``ReadAllAvailable``, the source applies its own
  options: ``minOffsetsPerTrigger`` with ``maxTriggerDelay`` (Kafka's ``delayBatch``: no new
  micro-batch until that many offsets are available or the delay has passed since the last
  one), then ``maxOffsetsPerTrigger`` (or the engine's ``ReadMaxRows``) split over partitions
  (Kafka's ``rateLimit``). ``ReadAllAvailable`` (e.g. ``Trigger.Once``) ignores the options, as
  the API requires.
- ``Trigger.AvailableNow`` (``SupportsTriggerAvailableNow.prepareForTriggerAvailableNow``): the
  ends of every partition are fixed when the query starts (Kafka's ``allDataForTriggerAvailableNow``);
  the query reads up to them in micro-batches of at most ``maxOffsetsPerTrigger`` and stops.
  ``minOffsetsPerTrigger`` is not applied then (decision: such a query must end).
- ``reportLatestOffset``: the last ends seen, for the query's progress.

The engine runs ``initialOffset``, ``latestOffset``, ``partitions`` and ``commit`` in one Python
worker on the driver that keeps this reader (its gateway client, the AvailableNow target, the
time of the last micro-batch); ``read`` runs on executors with a pickled copy, and reads each
task through the batch source's columnar path (``reading.read_task``).
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows, ReadMinRows, SupportsTriggerAvailableNow

from tiered_kafka.client.gateway import GatewayClient
from tiered_kafka.spark.datasource import TieredKafkaInputPartition
from tiered_kafka.spark.planning import client_for
from tiered_kafka.spark.stream_planning import (
    PartitionOffsets,
    StreamOptions,
    StreamPlanner,
    new_offsets,
    offsets_from_json,
    offsets_to_json,
    rate_limit,
)

if TYPE_CHECKING:
    import pyarrow as pa


class TieredKafkaStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batches of remote storage with the Kafka source's offsets and limits (module doc)."""

    def __init__(self, options: StreamOptions) -> None:
        self.options = options
        self._client: GatewayClient | None = None
        self._planner: StreamPlanner | None = None
        self._available_now: tuple[PartitionOffsets, PartitionOffsets] | None = None  # (ends, earliest offsets)
        self._latest: PartitionOffsets | None = None
        self._last_trigger_ms = _now_ms()

    def __getstate__(self) -> dict[str, Any]:  # executors get the options, not the driver's connections
        state = dict(self.__dict__)
        state["_client"] = state["_planner"] = None
        return state

    @property
    def planner(self) -> StreamPlanner:
        if self._planner is None:
            self._client = client_for(self.options.read)
            self._planner = StreamPlanner(self.options, self._client)
        return self._planner

    # -- offsets ------------------------------------------------------------------------------------
    def initialOffset(self) -> dict:
        return offsets_to_json(self.planner.initial_offsets())

    def prepareForTriggerAvailableNow(self) -> None:
        self._available_now = self.planner.latest_offsets({}, reuse=True)  # initialOffset's listing, if it came first

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.options.max_offsets_per_trigger is not None:
            return ReadMaxRows(self.options.max_offsets_per_trigger)
        if self.options.min_offsets_per_trigger is not None:
            return ReadMinRows(self.options.min_offsets_per_trigger)
        return ReadAllAvailable()

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        begin = offsets_from_json(start)
        if self._available_now is not None:  # AvailableNow: the ends fixed at its start, never past them
            target, first = self._available_now
            latest = {**begin, **{tp: max(end, begin.get(tp, 0)) for tp, end in target.items()}}
            earliest = {tp: offset for tp, offset in first.items() if tp not in begin}
        else:
            latest, earliest = self.planner.latest_offsets(begin)
        self._latest = latest
        if isinstance(limit, ReadAllAvailable):
            return offsets_to_json(latest)
        minimum = self.options.min_offsets_per_trigger
        if minimum is not None and self._available_now is None:
            now = _now_ms()
            if new_offsets(begin, latest, earliest) < minimum and now - self._last_trigger_ms < self.options.max_trigger_delay_ms:
                return offsets_to_json(begin)  # Kafka's delayBatch: wait for more
            self._last_trigger_ms = now
        maximum = limit.max_rows if isinstance(limit, ReadMaxRows) else self.options.max_offsets_per_trigger
        end = latest if maximum is None else rate_limit(maximum, begin, latest, earliest)
        return offsets_to_json(end)

    def reportLatestOffset(self) -> dict | None:
        return None if self._latest is None else offsets_to_json(self._latest)

    # -- micro-batches --------------------------------------------------------------------------------
    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        tasks = self.planner.plan_micro_batch(offsets_from_json(start), offsets_from_json(end))
        return [TieredKafkaInputPartition(task) for task in tasks]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, TieredKafkaInputPartition):
            return iter(())
        from tiered_kafka.spark.reading import read_task  # executors only: the query's driver-side runner skips its imports

        return read_task(partition.task)

    def commit(self, end: dict) -> None:
        """Nothing to do: remote storage keeps no consumer state (the Kafka source's commit is a no-op too)."""

    def stop(self) -> None:
        if self._client is not None:
            self._client.close()
        self._client = self._planner = None


def _now_ms() -> int:
    return int(time.time() * 1000)
