"""Kafka records → Arrow record batches with exactly the columns of Spark's Kafka source.

Columns (Spark's ``KafkaRecordToRowConverter``; every field nullable, as there):

    key binary, value binary, topic string, partition int, offset long,
    timestamp timestamp, timestampType int, [headers array<struct<key:string,value:binary>>]

``headers`` only with ``includeHeaders=true`` (as Spark). ``timestamp`` is the record's timestamp
(ms) as microseconds in UTC, which is how Spark's Arrow conversion (``to_arrow_schema(...,
timezone="UTC")``) types a ``TimestampType`` column; ``timestampType`` is 0 (CreateTime) or
1 (LogAppendTime), -1 for records without one (magic 0). Control records are skipped, unless the
internal ``tiered.includeControlRecords`` asks for what a read leaves out: then a string column
``skipped`` is added (null for data rows) and each left-out record is a row with null key, value,
timestamp and headers: ``control`` for a control record, ``aborted`` and ``undecided`` for records
read_committed leaves out (see ``reading``, ``backfill`` and ``tiered_kafka.client.columnar_read``).

The rows come from the columnar decoder (``tiered_kafka.format.columnar``) through
``columnar_read.ColumnarSelector``; :func:`spark_batch` only renames, reorders and retypes its
columns (#14: no Python object per record on the read path).

Rows of a batch come from one slice (one Kafka partition), so ``topic`` and ``partition`` are
constant per batch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pyarrow as pa

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


def spark_batch(records: pa.RecordBatch, topic: str, partition: int, *, include_headers: bool, include_control_records: bool = False) -> pa.RecordBatch:
    """The rows ``columnar_read.ColumnarSelector`` selected (the decoder's ``RECORD_SCHEMA``
    columns, plus ``skipped`` when reporting) as a batch of :func:`arrow_schema`: columns reordered
    and renamed, ``topic``/``partition`` constant, ``timestamp`` ms to µs UTC; no per-row Python."""
    n = records.num_rows
    columns = [
        records.column("key"),
        records.column("value"),
        pa.repeat(pa.scalar(topic, pa.string()), n),
        pa.repeat(pa.scalar(partition, pa.int32()), n),
        records.column("offset"),
        records.column("timestamp").cast(pa.timestamp("ms", tz="UTC")).cast(TIMESTAMP_TYPE),
        records.column("timestamp_type"),
    ]
    if include_headers:
        columns.append(records.column("headers").cast(HEADERS_TYPE))
    if include_control_records:
        columns.append(records.column("skipped"))
    return pa.RecordBatch.from_arrays(columns, schema=arrow_schema(include_headers, include_control_records))
