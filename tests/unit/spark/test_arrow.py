"""Records → Arrow batches with Spark's Kafka source schema (no JVM: pyspark's type mapping only)."""

from __future__ import annotations

import datetime

import pyarrow as pa
from pyspark.sql.pandas.types import to_arrow_schema

from tests.support.batches import Rec, build_control, build_v2
from tiered_kafka.format.record_batch import ControlRecordType
from tiered_kafka.gateway_client import PlannedRange
from tiered_kafka.remote_read import decode_range
from tiered_kafka.spark.arrow import BatchBuilder, arrow_schema, spark_ddl, spark_schema

T0 = 1_700_000_000_000


def test_arrow_schema_is_what_spark_expects_for_the_kafka_schema() -> None:
    for headers in (False, True):
        for control in (False, True):
            assert to_arrow_schema(spark_schema(headers, control), timezone="UTC").equals(arrow_schema(headers, control))
    assert spark_schema(False).simpleString() == "struct<key:binary,value:binary,topic:string,partition:int,offset:bigint,timestamp:timestamp,timestampType:int>"
    assert spark_schema(True).fieldNames()[-1] == "headers"
    assert spark_ddl(True, True).endswith("headers array<struct<key:string,value:binary>>, skipped string")


def segment() -> tuple[bytes, PlannedRange]:
    """Offsets 0-3 data (with headers, a null key), 4 a COMMIT marker, 5-7 data."""
    parts = [
        build_v2([Rec(b"k0", b"v0", T0, [("h", b"x"), ("n", None)]), Rec(None, b"v1", T0 + 1), Rec(b"k2", None, T0 + 2), Rec(b"k3", b"v3", T0 + 3)], producer_id=7, transactional=True),
        build_control(ControlRecordType.COMMIT, base_offset=4, producer_id=7),
        build_v2([Rec(b"k5", b"v5", T0 + 5), Rec(b"k6", b"v6", T0 + 6), Rec(b"k7", b"v7", T0 + 7)], base_offset=5),
    ]
    data = b"".join(parts)
    return data, PlannedRange(0, len(data), 0, 7, "u", f"bytes=0-{len(data) - 1}")


def test_records_filtered_to_the_asked_offsets_control_records_skipped() -> None:
    data, planned = segment()
    builder = BatchBuilder("orders", 3, include_headers=True)
    builder.add(decode_range(data, planned, object_key="k"), 2, 7)  # starts mid-batch, ends mid-batch
    assert builder.rows == 4
    batch = builder.flush()
    assert batch.schema.equals(arrow_schema(True))
    assert batch.column("offset").to_pylist() == [2, 3, 5, 6]
    assert batch.column("key").to_pylist() == [b"k2", b"k3", b"k5", b"k6"]
    assert batch.column("value").to_pylist() == [None, b"v3", b"v5", b"v6"]
    assert set(batch.column("topic").to_pylist()) == {"orders"} and set(batch.column("partition").to_pylist()) == {3}
    assert batch.column("timestampType").to_pylist() == [0, 0, 0, 0]
    assert batch.column("timestamp").to_pylist()[0] == datetime.datetime.fromtimestamp((T0 + 2) / 1000, datetime.UTC)
    assert batch.column("headers").to_pylist() == [[], [], [], []]
    assert builder.rows == 0  # flushed

    builder.add(decode_range(data, planned, object_key="k"), 0, 2)
    first = builder.flush()
    assert first.column("headers").to_pylist()[0] == [{"key": "h", "value": b"x"}, {"key": "n", "value": None}]
    assert first.column("key").to_pylist() == [b"k0", None]


def test_control_records_as_rows_when_asked() -> None:
    data, planned = segment()
    builder = BatchBuilder("orders", 0, include_headers=False, include_control_records=True)
    builder.add(decode_range(data, planned, object_key="k"), 3, 8)
    batch = builder.flush()
    assert "headers" not in batch.schema.names
    assert batch.column("offset").to_pylist() == [3, 4, 5, 6, 7]
    assert batch.column("skipped").to_pylist() == [None, "control", None, None, None]
    assert batch.column("key").to_pylist()[1] is None and batch.column("timestamp").to_pylist()[1] is None
    builder.add_skipped(decode_range(data, planned, object_key="k")[0], 0, 2, "aborted")
    skipped = builder.flush()
    assert skipped.column("offset").to_pylist() == [0, 1] and skipped.column("skipped").to_pylist() == ["aborted", "aborted"]
    assert skipped.column("value").to_pylist() == [None, None]


def test_an_empty_flush_has_the_schema() -> None:
    batch = BatchBuilder("t", 0, include_headers=True).flush()
    assert batch.num_rows == 0 and batch.schema.equals(arrow_schema(True))
    assert pa.Table.from_batches([batch]).num_rows == 0
