"""The offsets-in-snapshot rule, the catalog's properties and their Spark counterpart (pure logic)."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest

from tiered_kafka.bulk import bulk_schema
from tiered_kafka.errors import ConfigError, OffsetNotRemoteError, RemoteReadError
from tiered_kafka.iceberg.data_files import conform
from tiered_kafka.iceberg.catalog import catalog_properties, parse_properties
from tiered_kafka.iceberg.table_contract import (
    COVERAGE_START,
    GAPS,
    NEXT_OFFSETS,
    STREAM,
    Gap,
    Resume,
    arrow_schema,
    committed_offsets,
    iceberg_schema,
    last_stream_epoch,
    parse_identifier,
    resume_from,
    summary_properties,
)


def test_the_newest_commit_of_each_partition_wins_and_other_writers_are_passed() -> None:
    newest_first = [
        {NEXT_OFFSETS: json.dumps({"t": {"1": 90}})},  # a run of partition 1 only
        {"operation": "replace"},  # compaction: no offsets
        {NEXT_OFFSETS: json.dumps({"t": {"0": 50, "1": 40}, "u": {"0": 7}})},
        {NEXT_OFFSETS: json.dumps({"t": {"0": 10, "1": 10}})},
    ]
    assert committed_offsets(newest_first) == {("t", 1): 90, ("t", 0): 50, ("u", 0): 7}
    assert committed_offsets([]) == {}


def test_a_malformed_summary_is_an_error_naming_the_key() -> None:
    with pytest.raises(ConfigError, match=NEXT_OFFSETS):
        committed_offsets([{NEXT_OFFSETS: json.dumps({"t": {"zero": 5}})}])
    with pytest.raises(ConfigError, match=NEXT_OFFSETS):
        committed_offsets([{NEXT_OFFSETS: "not json"}])


def test_summary_properties_round_trip_as_kafka_offset_json() -> None:
    props = summary_properties("w", {("t", 10): 5, ("t", 2): 3}, [Gap("t", 2, 0, 1, "lost")], {("t", 2): 2})
    assert props[NEXT_OFFSETS] == '{"t":{"2":3,"10":5}}'  # partitions sorted numerically, as Spark's source writes them
    assert committed_offsets([props]) == {("t", 2): 3, ("t", 10): 5}
    assert json.loads(props[GAPS]) == [{"topic": "t", "partition": 2, "start": 0, "end": 1, "reason": "lost"}]
    assert json.loads(props[COVERAGE_START]) == {"t": {"2": 2}}
    assert GAPS not in summary_properties("w", {("t", 0): 1})


def test_bulk_batches_become_the_tables_columns() -> None:
    headers = [[{"key": "h", "value": b"v"}], []]
    batch = pa.RecordBatch.from_arrays(
        [pa.array(["t", "t"]), pa.array([0, 0], pa.int32()), pa.array([5, 6], pa.int64()), pa.array([1_700_000_000_123, None], pa.timestamp("ms", tz="UTC")),
         pa.array([0, -1], pa.int32()), pa.array([b"k", None]), pa.array([b"v", b"w"]), pa.array(headers, bulk_schema(True).field("headers").type)],
        schema=bulk_schema(True))
    out = conform(batch, arrow_schema())
    assert out.schema.names == ["topic", "partition", "offset", "timestamp", "timestampType", "key", "value", "headers"]
    assert out.column("timestamp").type == pa.timestamp("us", tz="UTC")
    assert out.column("timestamp").cast(pa.int64()).to_pylist() == [1_700_000_000_123_000, None]
    assert out.column("headers").to_pylist() == headers
    assert [f.name for f in iceberg_schema().fields] == out.schema.names
    spark_layout = out.rename_columns(["topic", "partition", "offset", "timestamp", "timestampType", "key", "value", "headers"])
    assert conform(spark_layout.cast(spark_layout.schema), arrow_schema()).equals(out)  # Spark's names pass as they are


def test_identifiers_and_properties_are_checked() -> None:
    assert parse_identifier("a.b.c") == ("a.b", "c")
    for bad in ("orders", "a.", ".b"):
        with pytest.raises(ConfigError, match="namespace.table"):
            parse_identifier(bad)
    assert parse_properties(["warehouse=s3://b/w", "x= y=z"]) == {"warehouse": "s3://b/w", "x": " y=z"}
    with pytest.raises(ConfigError, match="key=value"):
        parse_properties(["novalue"])


def test_the_default_catalog_is_sql_on_sqlite_and_given_properties_win(tmp_path: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PYICEBERG_HOME", str(tmp_path))  # no ~/.pyiceberg.yaml of the machine
    props = catalog_properties("tk", {"warehouse": "s3://b/w"})
    assert props["type"] == "sql" and props["uri"] == f"sqlite:///{tmp_path}/tiered-kafka-iceberg.db" and props["warehouse"] == "s3://b/w"
    assert catalog_properties("tk", {"uri": "http://rest:8181"}) == {"uri": "http://rest:8181"}
    with pytest.raises(ConfigError, match="catalog name"):
        catalog_properties("no-dash")


def test_resume_from_follows_the_table_then_the_asked_start_then_remote_storage() -> None:
    assert resume_from("t", "o", 0, 120, None, 100, 200, True) == Resume(120)
    assert resume_from("t", "o", 0, None, None, 100, 200, True) == Resume(100, None, 100)  # a new partition: its coverage start
    assert resume_from("t", "o", 0, None, 150, 100, 200, True) == Resume(150, None, 150)
    assert resume_from("t", "o", 0, None, None, 0, 200, True) == Resume(0)
    with pytest.raises(ConfigError, match="continues at offset 120, not 130"):
        resume_from("t", "o", 0, 120, 130, 100, 200, True)
    with pytest.raises(RemoteReadError, match="past remote storage's end 200"):
        resume_from("t", "o", 0, 250, None, 100, 200, True)


def test_offsets_retention_removed_are_data_loss_as_spark_says() -> None:
    with pytest.raises(OffsetNotRemoteError, match=r"offsets 50\.\.99 are no longer in remote storage.*failOnDataLoss=false"):
        resume_from("t", "o", 3, 50, None, 100, 200, True)
    assert resume_from("t", "o", 3, 50, None, 100, 200, False) == Resume(100, Gap("o", 3, 50, 99, "below remote storage's earliest offset"))


def test_the_last_epoch_of_a_stream_is_its_newest_commit_for_that_checkpoint() -> None:
    newest_first = [{STREAM: json.dumps({"checkpoint": "/b", "epoch": 9})}, {NEXT_OFFSETS: "{}"}, {STREAM: json.dumps({"checkpoint": "/a", "epoch": 4})},
                    {STREAM: json.dumps({"checkpoint": "/a", "epoch": 3})}]
    assert last_stream_epoch(newest_first, "/a") == 4
    assert last_stream_epoch(newest_first, "/c") is None
