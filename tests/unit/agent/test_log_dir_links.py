"""Issue 36: the agent opens what lies in log.dir without following links, and bounds what it reads.
A checkpoint file that is a link to a private file is refused without printing a line of it; one
that is a link to /dev/zero, a FIFO or an oversized file is refused without reading on; a partition
directory that becomes a link after it was listed fails its own open (no check-then-open race).
Real files, links and FIFOs in tmp_path; no mock."""

from __future__ import annotations

import logging
import os
import threading
from pathlib import Path

import pytest

from tests.support.transactions import write_transactional_log
from tiered_kafka.errors import CorruptCheckpointError
from tiered_kafka.format.checkpoints import LOG_START_OFFSET_CHECKPOINT, REPLICATION_OFFSET_CHECKPOINT, format_offset_checkpoint
from tiered_kafka_agent.coverage import checkpointed_log_start
from tiered_kafka_agent.errors import LocalSegmentError
from tiered_kafka_agent.high_watermark import HighWatermarks
from tiered_kafka_agent.local_segments import LocalSegment, list_segments, open_segment
from tiered_kafka_agent.log_dir_files import read_log_dir_file

SECRET = "TOP-SECRET-FIRST-LINE of a private file"


@pytest.fixture
def private(tmp_path: Path) -> Path:
    path = tmp_path / "elsewhere" / "private.txt"
    path.parent.mkdir()
    path.write_text(SECRET + "\n2\nother 0 5\n")
    path.chmod(0o600)
    return path


def _within(seconds: float, call):  # type: ignore[no-untyped-def]
    """``call()``'s result, failing (not hanging) when it takes longer than ``seconds``."""
    out: list = []
    worker = threading.Thread(target=lambda: out.append(_outcome(call)), daemon=True)
    worker.start()
    worker.join(seconds)
    assert out, f"still reading after {seconds} s"
    kind, value = out[0]
    if kind == "raised":
        raise value
    return value


def _outcome(call):  # type: ignore[no-untyped-def]
    try:
        return "returned", call()
    except BaseException as err:  # noqa: BLE001 (handed back to the test's thread)
        return "raised", err


@pytest.mark.parametrize("name", [REPLICATION_OFFSET_CHECKPOINT, LOG_START_OFFSET_CHECKPOINT])
def test_a_checkpoint_that_is_a_link_to_a_private_file_is_refused_without_printing_it(name, tmp_path, private, caplog) -> None:
    log_dir = tmp_path / "logs"
    write_transactional_log(log_dir / "txn-0").close()
    (log_dir / name).symlink_to(private)
    caplog.set_level(logging.DEBUG)
    if name == REPLICATION_OFFSET_CHECKPOINT:
        assert HighWatermarks().get(log_dir, "other", 0) is None
    else:
        assert checkpointed_log_start(log_dir / "txn-0") is None
    assert "symbolic link" in caplog.text and SECRET not in caplog.text, caplog.text
    with pytest.raises(CorruptCheckpointError, match="symbolic link") as refused:
        read_log_dir_file(log_dir, name)
    assert SECRET not in str(refused.value)


def test_a_checkpoint_that_is_not_a_checkpoint_is_named_without_its_contents(tmp_path, caplog) -> None:
    """A regular file that is not a checkpoint (the broker's own log.dir holds no such file, but a
    hard link could): the warning names the file, never its first line."""
    log_dir = tmp_path / "logs"
    log_dir.mkdir()
    (log_dir / REPLICATION_OFFSET_CHECKPOINT).write_text(SECRET + "\n0\n")
    caplog.set_level(logging.DEBUG)
    assert HighWatermarks().get(log_dir, "t", 0) is None
    assert "unsupported version" in caplog.text and SECRET not in caplog.text, caplog.text


def test_a_link_to_dev_zero_a_fifo_or_an_oversized_checkpoint_is_refused_without_reading_on(tmp_path) -> None:
    log_dir = tmp_path / "logs"
    log_dir.mkdir()
    (log_dir / REPLICATION_OFFSET_CHECKPOINT).symlink_to("/dev/zero")
    with pytest.raises(CorruptCheckpointError, match="symbolic link"):
        _within(5, lambda: read_log_dir_file(log_dir, REPLICATION_OFFSET_CHECKPOINT))
    assert _within(5, lambda: HighWatermarks().get(log_dir, "t", 0)) is None
    (log_dir / REPLICATION_OFFSET_CHECKPOINT).unlink()
    os.mkfifo(log_dir / REPLICATION_OFFSET_CHECKPOINT)  # no writer: an open without O_NONBLOCK would block
    with pytest.raises(CorruptCheckpointError, match="not a regular file"):
        _within(5, lambda: read_log_dir_file(log_dir, REPLICATION_OFFSET_CHECKPOINT))
    (log_dir / REPLICATION_OFFSET_CHECKPOINT).unlink()
    (log_dir / REPLICATION_OFFSET_CHECKPOINT).write_text(format_offset_checkpoint({("t", p): 10 for p in range(300)}))
    with pytest.raises(CorruptCheckpointError, match="more than the 1000"):
        read_log_dir_file(log_dir, REPLICATION_OFFSET_CHECKPOINT, limit=1000)
    assert read_log_dir_file(log_dir, REPLICATION_OFFSET_CHECKPOINT)  # a real one within the bound is read
    assert read_log_dir_file(log_dir, "absent") is None


def test_a_partition_directory_that_becomes_a_link_after_listing_is_refused_by_its_open(tmp_path) -> None:
    log_dir = tmp_path / "logs"
    write_transactional_log(log_dir / "txn-0").close()
    write_transactional_log(tmp_path / "foreign" / "txn-0").close()  # another user's data, same layout
    segments, _active = list_segments(log_dir / "txn-0")  # the listing saw a real directory
    assert segments
    (log_dir / "txn-0").rename(log_dir / "txn-0.moved")
    (log_dir / "txn-0").symlink_to(tmp_path / "foreign" / "txn-0")  # the race: swapped for a link after the check
    with pytest.raises(LocalSegmentError, match="symbolic link"):
        with open_segment(LocalSegment(segments[0].base_offset, log_dir / "txn-0")):
            pass
    with pytest.raises(LocalSegmentError, match="symbolic link"):
        list_segments(log_dir / "txn-0")
