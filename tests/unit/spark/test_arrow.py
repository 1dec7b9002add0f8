"""Records → Arrow batches with Spark's Kafka source schema (no JVM: pyspark's type mapping only)."""

from __future__ import annotations

import datetime

import pyarrow as pa
from pyspark.sql.pandas.types import to_arrow_schema

from tests.support.batches import Rec, build_control, build_v2
from tiered_kafka.format.record_batch import ControlRecordType
from tiered_kafka.client.columnar_read import ColumnarSelector, decode_planned
from tiered_kafka.client.gateway import PlannedRange
from tiered_kafka.spark.arrow import arrow_schema, spark_batch, spark_ddl, spark_schema
from tiered_kafka.transactions import CommittedFilter

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


def spark_rows(start: int, end: int, *, include_headers: bool, include_control_records: bool = False, topic: str = "orders", partition: int = 3) -> pa.RecordBatch:
    """The segment's rows in [start, end) as the executor builds them (read_uncommitted)."""
    data, planned = segment()
    selector = ColumnarSelector(start, end, report_skipped=include_control_records)
    selected = selector.add(decode_planned(data, planned, object_key="k", include_headers=include_headers), 0, 7) + selector.finish()
    batches = [spark_batch(r, topic, partition, include_headers=include_headers, include_control_records=include_control_records) for r in selected]
    schema = arrow_schema(include_headers, include_control_records)
    return pa.Table.from_batches(batches, schema=schema).combine_chunks().to_batches()[0]


def test_records_filtered_to_the_asked_offsets_control_records_skipped() -> None:
    batch = spark_rows(2, 7, include_headers=True)  # starts mid-batch, ends mid-batch
    assert batch.schema.equals(arrow_schema(True))
    assert batch.column("offset").to_pylist() == [2, 3, 5, 6]
    assert batch.column("key").to_pylist() == [b"k2", b"k3", b"k5", b"k6"]
    assert batch.column("value").to_pylist() == [None, b"v3", b"v5", b"v6"]
    assert set(batch.column("topic").to_pylist()) == {"orders"} and set(batch.column("partition").to_pylist()) == {3}
    assert batch.column("timestampType").to_pylist() == [0, 0, 0, 0]
    assert batch.column("timestamp").to_pylist()[0] == datetime.datetime.fromtimestamp((T0 + 2) / 1000, datetime.UTC)
    assert batch.column("headers").to_pylist() == [[], [], [], []]

    first = spark_rows(0, 2, include_headers=True)
    assert first.column("headers").to_pylist()[0] == [{"key": "h", "value": b"x"}, {"key": "n", "value": None}]
    assert first.column("key").to_pylist() == [b"k0", None]


def test_control_records_as_rows_when_asked() -> None:
    batch = spark_rows(3, 8, include_headers=False, include_control_records=True)
    assert "headers" not in batch.schema.names
    assert batch.column("offset").to_pylist() == [3, 4, 5, 6, 7]
    assert batch.column("skipped").to_pylist() == [None, "control", None, None, None]
    assert batch.column("key").to_pylist()[1] is None and batch.column("timestamp").to_pylist()[1] is None
    assert batch.column("timestampType").to_pylist()[1] == -1


def test_aborted_and_undecided_records_as_rows_when_asked() -> None:
    """read_committed: a transaction with no marker in the data read is undecided; one aborted by its marker is aborted."""
    data, planned = segment()
    cut = len(build_v2([Rec(b"k0", b"v0", T0, [("h", b"x"), ("n", None)]), Rec(None, b"v1", T0 + 1), Rec(b"k2", None, T0 + 2), Rec(b"k3", b"v3", T0 + 3)], producer_id=7, transactional=True))
    first = PlannedRange(0, cut, 0, 3, "u", f"bytes=0-{cut - 1}")
    selector = ColumnarSelector(0, 4, committed=CommittedFilter(), report_skipped=True)
    rows = selector.add(decode_planned(data[:cut], first, object_key="k"), 0, 3) + selector.finish()
    batch = spark_batch(rows[0], "t", 0, include_headers=False, include_control_records=True)
    assert batch.column("offset").to_pylist() == [0, 1, 2, 3] and batch.column("skipped").to_pylist() == ["undecided"] * 4
    assert batch.column("value").to_pylist() == [None] * 4 and selector.first_undecided == 0
    aborted = build_v2([Rec(b"a", b"b", T0)], producer_id=9, transactional=True, base_offset=0) + build_control(ControlRecordType.ABORT, base_offset=1, producer_id=9)
    selector = ColumnarSelector(0, 2, committed=CommittedFilter(), report_skipped=True)
    rows = selector.add(decode_planned(aborted, PlannedRange(0, len(aborted), 0, 1, "u", "x"), object_key="k"), 0, 1) + selector.finish()
    batch = spark_batch(rows[0], "t", 0, include_headers=False, include_control_records=True)
    assert batch.column("offset").to_pylist() == [0, 1] and batch.column("skipped").to_pylist() == ["aborted", "control"]


def test_a_range_of_only_a_marker_yields_no_batch() -> None:
    data, planned = segment()
    selector = ColumnarSelector(4, 5)
    assert selector.add(decode_planned(data, planned, object_key="k"), 0, 7) + selector.finish() == []
