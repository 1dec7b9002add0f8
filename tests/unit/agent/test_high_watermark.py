"""The upload bound: a rotated segment goes up only once its end is at or below the high watermark
Kafka checkpointed in the log.dir's ``replication-offset-checkpoint`` (or retention renamed it
``.deleted``); nothing known means nothing goes up."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from tests.support.agent_env import checkpoint_high_watermarks, log_end_offset
from tests.support.transactions import write_transactional_log
from tiered_kafka.errors import CorruptCheckpointError
from tiered_kafka.format.checkpoints import REPLICATION_OFFSET_CHECKPOINT, format_offset_checkpoint, read_offset_checkpoint, write_atomically
from tiered_kafka.format.segment_names import FileKind, Suffix, segment_file_name
from tiered_kafka_agent.high_watermark import HighWatermarks, committed_count
from tiered_kafka_agent.local_segments import list_segments


@pytest.fixture
def log_dir(tmp_path: Path) -> Path:
    """A log dir holding txn-0: rotated segments 0 (offsets 0..13) and 14 (14..21), active 22."""
    write_transactional_log(tmp_path / "txn-0").close()
    return tmp_path


def _checkpoint(log_dir: Path, offsets: dict[tuple[str, int], int]) -> None:
    write_atomically(log_dir / REPLICATION_OFFSET_CHECKPOINT, format_offset_checkpoint(offsets).encode())


def _committed(log_dir: Path, watermarks: HighWatermarks) -> int:
    segments, active = list_segments(log_dir / "txn-0")
    assert [s.base_offset for s in segments] == [0, 14] and active == 22
    return committed_count(segments, active, watermarks.get(log_dir, "txn", 0))


@pytest.mark.parametrize(("high_watermark", "committed"), [(0, 0), (13, 0), (14, 1), (21, 1), (22, 2), (500, 2)])
def test_a_segment_is_committed_once_its_end_is_at_or_below_the_high_watermark(log_dir: Path, high_watermark: int, committed: int) -> None:
    _checkpoint(log_dir, {("txn", 0): high_watermark, ("other", 0): 1000})
    assert _committed(log_dir, HighWatermarks()) == committed


def test_nothing_is_committed_without_a_checkpoint_or_without_the_partition_in_it(log_dir: Path) -> None:
    watermarks = HighWatermarks()
    assert _committed(log_dir, watermarks) == 0  # no replication-offset-checkpoint yet
    _checkpoint(log_dir, {("txn", 1): 500, ("txn-0", 0): 500})  # other partitions only
    assert _committed(log_dir, watermarks) == 0
    _checkpoint(log_dir, {("txn", 0): 22})
    assert _committed(log_dir, watermarks) == 2


def test_a_segment_retention_renamed_deleted_is_committed_whatever_the_checkpoint_says(log_dir: Path) -> None:
    directory = log_dir / "txn-0"
    for kind in (FileKind.LOG, FileKind.INDEX, FileKind.TIMEINDEX):
        (directory / segment_file_name(0, kind)).rename(directory / segment_file_name(0, kind, Suffix.DELETED))
    assert _committed(log_dir, HighWatermarks()) == 1  # segment 0 (.deleted) only; 14 waits
    _checkpoint(log_dir, {("txn", 0): 14})
    assert _committed(log_dir, HighWatermarks()) == 1
    _checkpoint(log_dir, {("txn", 0): 22})
    assert _committed(log_dir, HighWatermarks()) == 2


def test_refresh_names_the_partitions_whose_high_watermark_moved(log_dir: Path) -> None:
    watermarks = HighWatermarks()
    assert watermarks.refresh(log_dir) == set()
    _checkpoint(log_dir, {("txn", 0): 14, ("txn", 1): 5})
    assert watermarks.refresh(log_dir) == {("txn", 0), ("txn", 1)}
    _checkpoint(log_dir, {("txn", 0): 14, ("txn", 1): 5})  # rewritten unchanged (Kafka does, every interval)
    assert watermarks.refresh(log_dir) == set()
    _checkpoint(log_dir, {("txn", 0): 22, ("other", 3): 1})  # txn-1 gone, other-3 new
    assert watermarks.refresh(log_dir) == {("txn", 0), ("txn", 1), ("other", 3)}
    assert (watermarks.get(log_dir, "txn", 0), watermarks.get(log_dir, "txn", 1)) == (22, None)


def test_a_corrupt_checkpoint_means_nothing_known(log_dir: Path, caplog: pytest.LogCaptureFixture) -> None:
    watermarks = HighWatermarks()
    _checkpoint(log_dir, {("txn", 0): 22})
    assert _committed(log_dir, watermarks) == 2
    (log_dir / REPLICATION_OFFSET_CHECKPOINT).write_text("0\n2\ntxn 0 22\n")  # the count says 2, one entry
    with caplog.at_level(logging.WARNING, logger="tiered_kafka_agent.high_watermark"):
        assert _committed(log_dir, watermarks) == 0
    assert "count line says 2 entries" in caplog.text and "its segments wait" in caplog.text


def test_kafka_s_checkpoint_text_is_read(tmp_path: Path) -> None:
    path = tmp_path / REPLICATION_OFFSET_CHECKPOINT
    assert read_offset_checkpoint(path) is None
    path.write_text("0\n3\n__consumer_offsets 2 0\nmoving 0 450\nmoving 1 17\n")  # as Kafka writes it
    assert read_offset_checkpoint(path) == {("__consumer_offsets", 2): 0, ("moving", 0): 450, ("moving", 1): 17}
    path.write_text("1\n0\n")
    with pytest.raises(CorruptCheckpointError, match="unsupported version"):
        read_offset_checkpoint(path)


def test_the_test_helper_checkpoints_a_hand_written_log_at_its_end(log_dir: Path) -> None:
    assert log_end_offset(log_dir / "txn-0") == 23  # the active segment 22 holds one COMMIT marker
    _checkpoint(log_dir, {("kept", 0): 9})
    checkpoint_high_watermarks(log_dir)
    assert read_offset_checkpoint(log_dir / REPLICATION_OFFSET_CHECKPOINT) == {("txn", 0): 23, ("kept", 0): 9}


def test_refresh_names_a_change_an_uploader_read_first(log_dir: Path) -> None:
    watermarks = HighWatermarks()
    _checkpoint(log_dir, {("txn", 0): 14, ("txn", 1): 5})
    assert watermarks.refresh(log_dir) == {("txn", 0), ("txn", 1)}
    _checkpoint(log_dir, {("txn", 0): 22, ("txn", 1): 9})
    assert watermarks.get(log_dir, "txn", 0) == 22  # txn-0's uploader passed first (a roll woke it)
    assert watermarks.refresh(log_dir) == {("txn", 0), ("txn", 1)}  # txn-1's uploader is still woken
