"""A partition directory as the agent reads it: the snapshot that goes with a segment, marker counts."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.transactions import ABORTED_TXNS, write_transactional_log
from tiered_kafka.errors import CorruptIndexError
from tiered_kafka.format.segment_names import FileKind
from tiered_kafka.registry import describe_url
from tiered_kafka_agent.local_segments import list_segments, open_segment, read_stats, snapshot_ready


@pytest.fixture
def directory(tmp_path: Path) -> Path:
    plog = write_transactional_log(tmp_path / "txn-0")
    plog.close()
    return tmp_path / "txn-0"


def test_a_segment_ships_the_snapshot_named_by_the_next_segment(directory: Path) -> None:
    segments, active = list_segments(directory)
    assert [s.base_offset for s in segments] == [0, 14] and active == 22
    with open_segment(segments[0], 14) as opened:
        assert opened.names[FileKind.SNAPSHOT].name == "00000000000000000014.snapshot"
        assert snapshot_ready(opened)
    with open_segment(segments[0]) as opened:  # the next segment unknown: no snapshot
        assert FileKind.SNAPSHOT not in opened.files


def test_a_half_written_snapshot_is_not_ready(directory: Path) -> None:
    path = directory / "00000000000000000014.snapshot"
    path.write_bytes(path.read_bytes()[:-3] + b"\xff\xff\xff")
    segments, _ = list_segments(directory)
    with open_segment(segments[0], 14) as opened:
        assert not snapshot_ready(opened)
        opened.drop(FileKind.SNAPSHOT)
        assert FileKind.SNAPSHOT not in opened.files


def test_stats_count_control_records_and_aborted_transactions(directory: Path) -> None:
    segments, _ = list_segments(directory)
    counts = []
    for segment, next_base in zip(segments, (14, 22)):
        with open_segment(segment, next_base) as opened:
            stats = read_stats(opened)
            counts.append((stats.aborted_txns, stats.control_records))
    assert counts == [(len(ABORTED_TXNS[0]), 2), (len(ABORTED_TXNS[14]), 2)]
    (directory / "00000000000000000014.txnindex").unlink()  # none: zero, not unknown
    with open_segment(segments[1], 22) as opened:
        assert read_stats(opened).aborted_txns == 0


def test_a_corrupt_txnindex_is_refused(directory: Path) -> None:
    (directory / "00000000000000000000.txnindex").write_bytes(b"\x00" * 33)
    segments, _ = list_segments(directory)
    with open_segment(segments[0], 14) as opened, pytest.raises(CorruptIndexError, match="txnindex"):
        read_stats(opened)


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        pytest.param("redis://default:hunter2@h:6379/0", "redis://default:***@h:6379/0", id="user-and-password"),
        pytest.param("rediss://:tok@h/1", "rediss://:***@h/1", id="password-only"),
        pytest.param("redis://h:6379", "redis://h:6379", id="no-userinfo"),
        pytest.param("unix:///run/redis.sock", "unix:///run/redis.sock", id="unix"),
    ],
)
def test_redis_urls_are_logged_without_their_password(url: str, shown: str) -> None:
    assert describe_url(url) == shown
