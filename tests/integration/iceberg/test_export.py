"""``tiered-kafka export --format iceberg`` and ``export_iceberg``: incremental appends, read back and compared with Kafka."""

from __future__ import annotations

import json

import pytest

from tests.integration.iceberg.conftest import Lake, kafka_rows, table_rows
from tests.support.stack_env import create_tiered_topic, topic_with_a_lost_segment
from tiered_kafka.cli import main
from tiered_kafka.iceberg.export import export_iceberg
from tiered_kafka.iceberg.table_contract import GAPS, NEXT_OFFSETS, committed_offsets, table_summaries


def test_incremental_runs_append_each_offset_once(lake: Lake, capsys: pytest.CaptureFixture[str]) -> None:
    stack, topic, table = lake.stack, "inc-orders", "kafka.inc_orders"
    create_tiered_topic(stack, topic, 2, segment_bytes=16_000)
    stack.produce(topic, 400, 2)
    stack.wait_uploaded(topic, 2)
    first = export_iceberg(stack.gateway_url, stack.cluster, topic, table=table, catalog_properties=lake.catalog_properties)
    assert first.rows > 0 and first.snapshot_id is not None and not first.gaps
    ends = {p: o for (_t, p), o in first.next_offsets.items()}
    assert table_rows(lake.table(table), topic) == kafka_rows(stack.bootstrap, topic, ends)

    stack.produce(topic, 400, 2, start=400)
    stack.wait_uploaded(topic, 2)
    assert main(lake.cli_args(topic, table)) == 0
    assert "appended" in capsys.readouterr().err
    loaded = lake.table(table)
    committed = committed_offsets(table_summaries(loaded))
    assert all(committed[(topic, p)] > ends[p] for p in ends)
    assert table_rows(loaded, topic) == kafka_rows(stack.bootstrap, topic, {p: o for (_t, p), o in committed.items()})
    assert len(loaded.snapshots()) == 2
    assert json.loads(loaded.current_snapshot().summary[NEXT_OFFSETS]) == {topic: {str(p): o for (_t, p), o in committed.items()}}

    assert main(lake.cli_args(topic, table)) == 1  # nothing new: never silently empty
    assert "already holds every remote offset" in capsys.readouterr().err
    assert main(lake.cli_args(topic, table, "0", "--from", "0")) == 2  # the table continues elsewhere
    assert "continues at offset" in capsys.readouterr().err
    assert len(lake.table(table).snapshots()) == 2


def test_a_recorded_gap_fails_unless_skipped(lake: Lake, capsys: pytest.CaptureFixture[str]) -> None:
    stack, topic, table = lake.stack, "gap-orders", "kafka.gap_orders"
    lost = topic_with_a_lost_segment(stack, topic, 600)
    assert main(lake.cli_args(topic, table)) == 1
    err = capsys.readouterr().err
    assert f"lacks offsets {lost.base_offset}..{lost.last_offset}" in err and "nothing committed" in err
    assert lake.table(table).current_snapshot() is None

    assert main(lake.cli_args(topic, table, "--skip-gaps")) == 0
    assert f"skipped offsets {lost.base_offset}..{lost.last_offset}" in capsys.readouterr().err
    loaded = lake.table(table)
    summary = loaded.current_snapshot().summary
    assert json.loads(summary[GAPS]) == [{"topic": topic, "partition": 0, "start": lost.base_offset, "end": lost.last_offset, "reason": "test: segment lost"}]
    end = committed_offsets(table_summaries(loaded))[(topic, 0)]
    expected = [r for r in kafka_rows(stack.bootstrap, topic, {0: end}) if not lost.base_offset <= r[1] <= lost.last_offset]
    assert table_rows(loaded, topic) == expected
