"""A segment's ``open_txn_first_offset`` from the broker's producer snapshot, cross-checked with its batches."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from tests.support.transactions import write_transactional_log
from tiered_kafka.format import producer_snapshot
from tiered_kafka_agent.local_segments import list_segments, open_segment, read_stats


@pytest.fixture
def directory(tmp_path: Path) -> Path:
    plog = write_transactional_log(tmp_path / "txn-0")
    plog.close()
    return tmp_path / "txn-0"


def test_the_earliest_open_transaction_after_each_segment(directory: Path) -> None:
    segments, _ = list_segments(directory)
    found = []
    for segment, next_base in zip(segments, (14, 22)):
        with open_segment(segment, next_base) as opened:
            found.append(read_stats(opened).open_txn_first_offset)
    assert found == [11, 19]  # p9 open since 11 at 14 (aborted at 14); p11 open since 19 at 22
    with open_segment(segments[0]) as opened:  # no snapshot: unknown
        assert read_stats(opened).open_txn_first_offset == -2


def test_a_snapshot_contradicting_the_batches_is_reported_not_trusted(directory: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = directory / "00000000000000000022.snapshot"
    entries = producer_snapshot.parse(path.read_bytes())
    # the snapshot claims p11's transaction is closed, while segment 14's batches leave it open
    path.write_bytes(producer_snapshot.serialize([e if e.producer_id != 11 else type(e)(e.producer_id, e.epoch, e.last_sequence, e.last_offset, e.offset_delta, e.timestamp, e.coordinator_epoch, -1) for e in entries]))
    segments, _ = list_segments(directory)
    with caplog.at_level(logging.WARNING, logger="tiered_kafka_agent.local_segments"), open_segment(segments[1], 22) as opened:
        assert read_stats(opened).open_txn_first_offset == -2
    assert "contradicts" in caplog.text and "producer 11" in caplog.text
