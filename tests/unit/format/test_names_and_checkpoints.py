"""Segment file names, offset.wm and Kafka's checkpoint files."""

from __future__ import annotations

from pathlib import Path

import pytest

from tiered_kafka.errors import CorruptCheckpointError, InvalidSegmentNameError
from tiered_kafka.format.checkpoints import (
    EpochEntry,
    format_leader_epoch_checkpoint,
    format_offset_checkpoint,
    format_offset_wm,
    parse_leader_epoch_checkpoint,
    parse_offset_checkpoint,
    parse_offset_wm,
    write_atomically,
)
from tiered_kafka.format.segment_names import (
    FileKind,
    SegmentFileName,
    Suffix,
    parse_partition_dir_name,
    segment_file_name,
)


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("00000000000000000100.log", SegmentFileName(100, FileKind.LOG)),
        ("00000000000000007729.timeindex", SegmentFileName(7729, FileKind.TIMEINDEX)),
        ("00000000000000000000.index.deleted", SegmentFileName(0, FileKind.INDEX, Suffix.DELETED)),
        ("00000000000000000042.log.cleaned", SegmentFileName(42, FileKind.LOG, Suffix.CLEANED)),
        ("00000000000000000042.log.swap", SegmentFileName(42, FileKind.LOG, Suffix.SWAP)),
        ("00000000000000000362.snapshot", SegmentFileName(362, FileKind.SNAPSHOT)),
        ("00000000000000000001.txnindex", SegmentFileName(1, FileKind.TXNINDEX)),
    ],
)
def test_segment_names_round_trip(name: str, expected: SegmentFileName) -> None:
    assert SegmentFileName.parse(name) == expected
    assert str(expected) == name


@pytest.mark.parametrize(
    "name",
    ["100.log", "0000000000000000010.log", "00000000000000000100.txt", "00000000000000000100.log.tmp", "offset.wm", "leader-epoch-checkpoint"],
)
def test_other_names_are_refused(name: str) -> None:
    with pytest.raises(InvalidSegmentNameError, match="not a segment file name"):
        SegmentFileName.parse(name)
    assert SegmentFileName.try_parse(name) is None


def test_segment_file_name_rejects_negative_offsets() -> None:
    assert segment_file_name(5, FileKind.LOG) == "00000000000000000005.log"
    with pytest.raises(ValueError):
        segment_file_name(-1, FileKind.LOG)


def test_partition_dir_names() -> None:
    assert parse_partition_dir_name("test_topic_a-0") == ("test_topic_a", 0)
    assert parse_partition_dir_name("my-topic-12") == ("my-topic", 12)
    for bad in ("nodash", "topic-", "topic-x", "topic-0.abc-delete"):
        with pytest.raises(InvalidSegmentNameError):
            parse_partition_dir_name(bad)


def test_offset_wm() -> None:
    assert format_offset_wm(362) == b"00000000000000000362"
    assert parse_offset_wm(b"00000000000000000362\n") == 362
    for bad in (b"", b"362", b"0000000000000000036x", b"000000000000000003620"):
        with pytest.raises(CorruptCheckpointError, match="offset.wm"):
            parse_offset_wm(bad)


def test_leader_epoch_checkpoint_round_trip() -> None:
    entries = [EpochEntry(0, 0), EpochEntry(3, 7729), EpochEntry(5, 15000)]
    text = format_leader_epoch_checkpoint(entries)
    assert text == "0\n3\n0 0\n3 7729\n5 15000\n"
    assert parse_leader_epoch_checkpoint(text) == entries


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("1\n0\n", "unsupported version"),
        ("0\n2\n0 0\n", "count line says 2"),
        ("0\n1\n0\n", "should have 2 fields"),
        ("0\n1\nx 0\n", "not an integer"),
        ("0\n2\n3 10\n2 20\n", "must increase"),
        ("0\n", "version and a count"),
    ],
)
def test_corrupt_leader_epoch_checkpoint(text: str, message: str) -> None:
    with pytest.raises(CorruptCheckpointError, match=message):
        parse_leader_epoch_checkpoint(text)


def test_offset_checkpoint_round_trip() -> None:
    offsets = {("orders", 1): 500, ("orders", 0): 42}
    text = format_offset_checkpoint(offsets)
    assert text == "0\n2\norders 0 42\norders 1 500\n"
    assert parse_offset_checkpoint(text, "recovery-point-offset-checkpoint") == offsets


def test_write_atomically_replaces_the_file(tmp_path: Path) -> None:
    target = tmp_path / "leader-epoch-checkpoint"
    write_atomically(target, b"0\n0\n")
    write_atomically(target, b"0\n1\n0 0\n")
    assert target.read_bytes() == b"0\n1\n0 0\n"
    assert [p.name for p in tmp_path.iterdir()] == ["leader-epoch-checkpoint"]
