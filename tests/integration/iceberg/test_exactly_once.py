"""Exactly once across SIGKILLs at each point of a commit, and read_committed across an open transaction."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

from tests.integration.iceberg.conftest import Lake, kafka_rows, table_rows
from tests.support.kafka_clients import wait_transactions_decided
from tests.support.stack_env import create_tiered_topic
from tests.support.transactions import RealTransactionalLog
from tiered_kafka.cli import main
from tiered_kafka.iceberg.export import export_iceberg
from tiered_kafka.iceberg.faults import FAULT_ENV, POINTS
from tiered_kafka.iceberg.table_contract import committed_offsets, table_summaries


def _killed_export(lake: Lake, topic: str, table: str, point: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, FAULT_ENV: point}
    return subprocess.run([sys.executable, "-m", "tiered_kafka.cli", *lake.cli_args(topic, table)], env=env, capture_output=True, text=True, timeout=120)


def test_a_run_killed_before_during_or_after_its_commit_leaves_every_offset_once(lake: Lake) -> None:
    stack, topic, table = lake.stack, "kill-orders", "kafka.kill_orders"
    create_tiered_topic(stack, topic, 2, segment_bytes=16_000)
    stack.produce(topic, 300, 2)
    stack.wait_uploaded(topic, 2)
    snapshots = 0
    for point in POINTS:  # the same records each time until a commit lands
        run = _killed_export(lake, topic, table, point)
        assert run.returncode == -signal.SIGKILL, (point, run.returncode, run.stderr[-2000:])
        if point == "after-commit":
            snapshots += 1
        current = lake.table(table)
        assert len(current.snapshots()) == snapshots, point  # committed only once the catalog points to it
    stack.produce(topic, 300, 2, start=300)
    stack.wait_uploaded(topic, 2)
    assert main(lake.cli_args(topic, table)) == 0  # continues after the commit of the run killed after it
    loaded = lake.table(table)
    assert len(loaded.snapshots()) == snapshots + 1
    ends = {p: o for (_t, p), o in committed_offsets(table_summaries(loaded)).items()}
    rows = table_rows(loaded, topic)
    assert len({(r[0], r[1]) for r in rows}) == len(rows)
    assert rows == kafka_rows(stack.bootstrap, topic, ends)
    assert sum(ends.values()) > 300  # the killed runs' records are there, and the last run's


def test_read_committed_holds_an_open_transaction_back_and_never_lands_aborted_records(lake: Lake) -> None:
    stack, topic, table = lake.stack, "txn-orders", "kafka.txn_orders"
    create_tiered_topic(stack, topic, 1, segment_bytes=16_000)
    log = RealTransactionalLog(topic)
    try:
        log.write_until_open(stack.bootstrap)
        stack.wait_uploaded(topic)
        first = export_iceberg(stack.gateway_url, stack.cluster, topic, table=table, catalog_properties=lake.catalog_properties)
        assert first.next_offsets == {(topic, 0): log.last_first_offset}
        assert [h.first_offset for h in first.held_back] == [log.last_first_offset]
        assert table_rows(lake.table(table), topic) == kafka_rows(stack.bootstrap, topic, {0: log.last_first_offset})
        log.commit_last()
    finally:
        log.close()
    wait_transactions_decided(stack.bootstrap, topic)
    stack.produce(topic, 300, 1)  # rolls the segment holding the COMMIT marker
    stack.wait_uploaded(topic)
    second = export_iceberg(stack.gateway_url, stack.cluster, topic, table=table, catalog_properties=lake.catalog_properties)
    assert second.starts == {(topic, 0): log.last_first_offset} and not second.held_back
    loaded = lake.table(table)
    rows = table_rows(loaded, topic)
    assert rows == kafka_rows(stack.bootstrap, topic, {0: second.next_offsets[(topic, 0)]})
    keys = {r[2] for r in rows}
    assert b"d-0" in keys and b"a1-0" in keys and not any(k.startswith((b"b1-", b"c-")) for k in keys)  # committed in, aborted never
