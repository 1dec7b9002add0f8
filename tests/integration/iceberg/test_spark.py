"""Spark writes the table too: the backfill continues the export's table and the export Spark's; a stream
into Iceberg runs exactly once across a restart. Tables read back with PyIceberg, compared with Kafka.

The suite's shared local Spark session (tests/conftest.py); no Iceberg jar: ``spark_writer`` module doc.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.integration.iceberg.conftest import Lake, kafka_rows, table_rows
from tests.support.stack_env import create_tiered_topic
from tiered_kafka.iceberg.catalog import DEFAULT_CATALOG
from tiered_kafka.iceberg.export import export_iceberg
from tiered_kafka.iceberg.spark_writer import EpochSink, start_iceberg_stream
from tiered_kafka.iceberg.table_contract import WRITER, committed_offsets, last_stream_epoch, table_summaries
from tiered_kafka.spark.backfill import main as backfill_main


def _backfill(lake: Lake, topic: str, table: str) -> list[str]:
    args = ["--gateway-url", lake.stack.gateway_url, "--cluster", lake.stack.cluster, "--topic", topic, "--format", "iceberg", "--table", table,
            "--isolation-level", "read_committed"]
    for key, value in lake.catalog_properties.items():
        args += ["--catalog-property", f"{key}={value}"]
    return args


def test_backfill_and_export_continue_each_others_table(lake: Lake, spark: Any, capsys: pytest.CaptureFixture[str]) -> None:
    stack, topic, table = lake.stack, "both-orders", "kafka.both_orders"
    create_tiered_topic(stack, topic, 2, segment_bytes=16_000)
    for step in range(3):
        stack.produce(topic, 300, 2, start=300 * step)
        stack.wait_uploaded(topic, 2)
        if step == 1:
            assert backfill_main(_backfill(lake, topic, table)) == 0, capsys.readouterr()
        else:
            assert export_iceberg(stack.gateway_url, stack.cluster, topic, table=table, catalog_properties=lake.catalog_properties).rows > 0
    loaded = lake.table(table)
    writers = [s.summary[WRITER] for s in loaded.snapshots()]
    assert writers == ["tiered-kafka export", "tiered-kafka-backfill", "tiered-kafka export"]
    ends = {p: o for (_t, p), o in committed_offsets(table_summaries(loaded)).items()}
    expected = kafka_rows(stack.bootstrap, topic, ends)
    assert table_rows(loaded, topic) == expected
    assert backfill_main(_backfill(lake, topic, table)) == 1  # nothing new
    assert "already holds every remote offset" in capsys.readouterr().err


def test_a_stream_into_iceberg_is_exactly_once_across_a_restart(lake: Lake, spark: Any, tmp_path: Path) -> None:
    stack, topic, table = lake.stack, "stream-orders", "kafka.stream_orders"
    create_tiered_topic(stack, topic, 2, segment_bytes=16_000)
    options = {"subscribe": topic, "tiered.gateway.url": stack.gateway_url, "tiered.cluster": stack.cluster, "startingOffsets": "earliest",
               "maxOffsetsPerTrigger": "400"}
    ends: dict[str, dict[str, int]] = {}
    for step in range(2):  # the second query restarts from the first one's checkpoint
        stack.produce(topic, 300, 2, start=300 * step)
        stack.wait_uploaded(topic, 2)
        query = start_iceberg_stream(spark, options, table=table, catalog=DEFAULT_CATALOG, checkpoint=str(tmp_path / "checkpoint"),
                                     catalog_properties=lake.catalog_properties, availableNow=True)
        try:
            query.awaitTermination(180)
            assert query.exception() is None, query.exception()
            ends = json.loads(query.lastProgress["sources"][0]["endOffset"])
        finally:
            query.stop()
    expected = kafka_rows(stack.bootstrap, topic, {int(p): o for p, o in ends[topic].items()})
    assert len(expected) > 300
    loaded = lake.table(table)
    assert table_rows(loaded, topic) == expected
    assert {s.summary[WRITER] for s in loaded.snapshots()} == {"tiered-kafka stream"}

    # a restart replays the epoch whose end the checkpoint had not recorded: the table has it already, so it is skipped
    sink = EpochSink(DEFAULT_CATALOG, lake.catalog_properties, table, str((tmp_path / "checkpoint").resolve()))
    last = last_stream_epoch(table_summaries(loaded), sink.checkpoint)
    assert last is not None and last >= 1
    replayed = spark.read.format("tiered-kafka").options(**{k: v for k, v in options.items() if k != "maxOffsetsPerTrigger"}).option("includeHeaders", "true").load()
    sink(replayed, last)
    assert sink.skipped == [last] and len(lake.table(table).snapshots()) == len(loaded.snapshots())
