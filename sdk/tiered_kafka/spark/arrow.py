"""Kafka records → Arrow record batches with exactly the columns of Spark's Kafka source.

Columns (Spark's ``KafkaRecordToRowConverter``; every field nullable, as there):

    key binary, value binary, topic string, partition int, offset long,
    timestamp timestamp, timestampType int, [headers array<struct<key:string,value:binary>>]

``headers`` only with ``includeHeaders=true`` (as Spark). ``timestamp`` is the record's timestamp
(ms) as microseconds in UTC, which is how Spark's Arrow conversion (``to_arrow_schema(...,
timezone="UTC")``) types a ``TimestampType`` column; ``timestampType`` is 0 (CreateTime) or
1 (LogAppendTime), -1 for records without one (magic 0). Control records are skipped, unless the
internal ``tiered.includeControlRecords`` asks for what a read leaves out: then a string column
``skipped`` is added (null for data rows) and each left-out record is a row with null key, value
and timestamp: ``control`` for a control record, ``aborted`` and ``undecided`` for records
read_committed leaves out (see ``reading`` and ``backfill``).

Rows of a batch come from one slice (one Kafka partition), so ``topic`` and ``partition`` are
constant per batch.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc

from tiered_kafka.remote_read import DecodedBatch

if TYPE_CHECKING:
    from pyspark.sql.types import StructType

HEADERS_TYPE = pa.list_(pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())]))
TIMESTAMP_TYPE = pa.timestamp("us", tz="UTC")
NO_TIMESTAMP_TYPE = -1

_BASE_FIELDS = (
    pa.field("key", pa.binary()),
    pa.field("value", pa.binary()),
    pa.field("topic", pa.string()),
    pa.field("partition", pa.int32()),
    pa.field("offset", pa.int64()),
    pa.field("timestamp", TIMESTAMP_TYPE),
    pa.field("timestampType", pa.int32()),
)

SPARK_DDL = "key binary, value binary, topic string, partition int, offset long, timestamp timestamp, timestampType int"


def spark_ddl(include_headers: bool, include_control_records: bool = False) -> str:
    """The output schema as a Spark DDL string."""
    ddl = SPARK_DDL
    if include_headers:
        ddl += ", headers array<struct<key:string,value:binary>>"
    if include_control_records:
        ddl += ", skipped string"
    return ddl


def spark_schema(include_headers: bool, include_control_records: bool = False) -> StructType:
    """The output schema as a ``StructType`` (imports pyspark; needs no SparkContext)."""
    from pyspark.sql.types import (
        ArrayType,
        BinaryType,
        IntegerType,
        LongType,
        StringType,
        StructField,
        StructType,
        TimestampType,
    )

    fields = [
        StructField("key", BinaryType()),
        StructField("value", BinaryType()),
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("timestamp", TimestampType()),
        StructField("timestampType", IntegerType()),
    ]
    if include_headers:
        fields.append(StructField("headers", ArrayType(StructType([StructField("key", StringType()), StructField("value", BinaryType())]))))
    if include_control_records:
        fields.append(StructField("skipped", StringType()))
    return StructType(fields)


def arrow_schema(include_headers: bool, include_control_records: bool = False) -> pa.Schema:
    """The Arrow schema Spark expects from ``read()`` for :func:`spark_schema` (checked by the tests)."""
    fields = list(_BASE_FIELDS)
    if include_headers:
        fields.append(pa.field("headers", HEADERS_TYPE))
    if include_control_records:
        fields.append(pa.field("skipped", pa.string()))
    return pa.schema(fields)


class BatchBuilder:
    """Accumulates the records of one Kafka partition and emits them as a ``pyarrow.RecordBatch``."""

    def __init__(self, topic: str, partition: int, *, include_headers: bool, include_control_records: bool = False) -> None:
        self.topic = topic
        self.partition = partition
        self.include_headers = include_headers
        self.include_control_records = include_control_records
        self.schema = arrow_schema(include_headers, include_control_records)
        self.payload_bytes = 0
        self._reset()

    def _reset(self) -> None:
        self._keys: list[bytes | None] = []
        self._values: list[bytes | None] = []
        self._offsets: list[int] = []
        self._timestamps: list[int | None] = []
        self._timestamp_types: list[int] = []
        self._headers: list[list[tuple[str, bytes | None]]] = []
        self._skipped: list[str | None] = []
        self.payload_bytes = 0

    @property
    def rows(self) -> int:
        return len(self._offsets)

    def add(self, batches: Iterable[DecodedBatch], start: int, end: int) -> None:
        """Append the records with offsets in [start, end); control records only if asked for."""
        keys, values, offsets, timestamps, types = self._keys, self._values, self._offsets, self._timestamps, self._timestamp_types
        headers, skipped, with_headers, with_control = self._headers, self._skipped, self.include_headers, self.include_control_records
        added = 0
        for batch in batches:
            if batch.last_offset < start or batch.base_offset >= end:
                continue
            if batch.control is not None:
                if with_control:
                    self.add_skipped(batch, start, end, "control")
                continue
            inside = start <= batch.base_offset and batch.last_offset < end
            for record in batch.records:
                offset = record.offset
                if not inside and (offset < start or offset >= end):
                    continue
                key, value = record.key, record.value
                keys.append(key)
                values.append(value)
                offsets.append(offset)
                timestamps.append(record.timestamp)
                timestamp_type = record.timestamp_type
                types.append(NO_TIMESTAMP_TYPE if timestamp_type is None else timestamp_type)
                if with_headers:
                    headers.append(record.headers)
                if with_control:
                    skipped.append(None)
                added += (len(key) if key else 0) + (len(value) if value else 0)
        self.payload_bytes += added

    def add_skipped(self, batch: DecodedBatch, start: int, end: int, reason: str) -> None:
        """One row per record of ``batch`` in [start, end) that the read leaves out (``tiered.includeControlRecords``):
        key, value and timestamp null, ``skipped`` = ``reason``. A control batch counts its offsets
        (its records are not decoded); another batch its records (a compacted batch has holes)."""
        if not self.include_control_records:
            return
        if batch.control is not None or not batch.records:
            offsets: Iterable[int] = range(max(start, batch.base_offset), min(end, batch.last_offset + 1))
        else:
            offsets = [r.offset for r in batch.records if start <= r.offset < end]
        for offset in offsets:
            self._keys.append(None)
            self._values.append(None)
            self._offsets.append(offset)
            self._timestamps.append(None)
            self._timestamp_types.append(NO_TIMESTAMP_TYPE)
            if self.include_headers:
                self._headers.append([])
            self._skipped.append(reason)

    def flush(self) -> pa.RecordBatch:
        """The accumulated rows as one record batch (then empty again)."""
        n = len(self._offsets)
        millis = pa.array(self._timestamps, pa.int64())
        columns = [
            pa.array(self._keys, pa.binary()),
            pa.array(self._values, pa.binary()),
            pa.repeat(pa.scalar(self.topic, pa.string()), n),
            pa.repeat(pa.scalar(self.partition, pa.int32()), n),
            pa.array(self._offsets, pa.int64()),
            pc.multiply(millis, pa.scalar(1000, pa.int64())).cast(TIMESTAMP_TYPE),
            pa.array(self._timestamp_types, pa.int32()),
        ]
        if self.include_headers:
            columns.append(pa.array(self._headers, HEADERS_TYPE))
        if self.include_control_records:
            columns.append(pa.array(self._skipped, pa.string()))
        batch = pa.RecordBatch.from_arrays(columns, schema=self.schema)
        self._reset()
        return batch
