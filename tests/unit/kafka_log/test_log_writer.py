"""The log.dir writer: offsets, rolls, index rules, retention, DeleteRecords, reopen and recovery."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from tests.support.batches import build_legacy, build_v2, sample_records
from tiered_kafka.errors import AppendRefusedError, ConfigError, CorruptRecordError, LogWriteError, OffsetOutOfRangeError
from tiered_kafka.format.checkpoints import EpochEntry, parse_leader_epoch_checkpoint
from tiered_kafka_dev.kafka_log.log_config import LogConfig
from tiered_kafka_dev.kafka_log.log_writer import PartitionLog
from tiered_kafka.format.offset_index import OffsetIndex
from tiered_kafka.format.producer_state import AppendOrigin
from tiered_kafka.format import producer_snapshot, txn_marker
from tiered_kafka.format.record_batch import Codec, ControlRecordType, iter_batches, iter_records
from tiered_kafka.format.segment_names import FileKind, SegmentFileName
from tiered_kafka.format.time_index import TimeIndex
from tiered_kafka.format.txn_index import AbortedTxn

T0 = 1_700_000_000_000


class FakeClock:
    def __init__(self, now: int = T0) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now


def _batch(n: int = 10, *, ts: int = T0, value_size: int = 100, codec: Codec = Codec.NONE) -> bytes:
    return build_v2(sample_records(n, start_ts=ts, value_size=value_size), codec=codec)


def _names(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir())


def test_offsets_are_assigned_consecutively_and_bytes_kept(tmp_path: Path) -> None:
    plog = PartitionLog.create(tmp_path / "t-0", clock=FakeClock())
    infos = [plog.append(_batch(10, codec=c), leader_epoch=3) for c in (Codec.NONE, Codec.GZIP, Codec.ZSTD)]
    assert [(i.first_offset, i.last_offset) for i in infos] == [(0, 9), (10, 19), (20, 29)]
    assert plog.log_end_offset == 30
    plog.close()
    data = (tmp_path / "t-0" / "00000000000000000000.log").read_bytes()
    assert [r.offset for r in iter_records(data)] == list(range(30))
    assert {b.partition_leader_epoch for b in iter_batches(data)} == {3}
    assert parse_leader_epoch_checkpoint((tmp_path / "t-0" / "leader-epoch-checkpoint").read_text()) == [EpochEntry(3, 0)]


def test_legacy_batches_get_offsets_too(tmp_path: Path) -> None:
    plog = PartitionLog.create(tmp_path / "t-0", clock=FakeClock())
    plog.append(_batch(5))
    plog.append(build_legacy(sample_records(4), magic=1, codec=Codec.GZIP))
    plog.append(build_legacy(sample_records(3), magic=1))
    plog.close()
    data = (tmp_path / "t-0" / "00000000000000000000.log").read_bytes()
    assert [r.offset for r in iter_records(data)] == list(range(12))
    with pytest.raises(LogWriteError, match="magic 0"):
        PartitionLog.create(tmp_path / "t-1").append(build_legacy(sample_records(2), magic=0, codec=Codec.GZIP))


def test_roll_by_segment_bytes(tmp_path: Path) -> None:
    batch = _batch(10, value_size=200)
    config = LogConfig(segment_bytes=len(batch) * 3, retention_ms=-1)
    plog = PartitionLog.create(tmp_path / "t-0", config, clock=FakeClock())
    for _ in range(10):
        plog.append(batch)
    assert plog.segment_base_offsets() == [0, 30, 60, 90]
    rotated = tmp_path / "t-0" / "00000000000000000000"
    assert rotated.with_suffix(".log").stat().st_size == len(batch) * 3
    # the rotated segment's indexes are trimmed; the active one's are preallocated, zero-filled
    assert rotated.with_suffix(".index").stat().st_size % 8 == 0
    assert (tmp_path / "t-0" / "00000000000000000090.index").stat().st_size == config.segment_index_bytes
    assert len(TimeIndex.read(rotated.with_suffix(".timeindex"), 0)) >= 1  # the final entry on roll


def test_roll_by_segment_ms_uses_batch_timestamps(tmp_path: Path) -> None:
    config = LogConfig(segment_ms=60_000, retention_ms=-1)
    plog = PartitionLog.create(tmp_path / "t-0", config, clock=FakeClock())
    plog.append(_batch(2, ts=T0))
    plog.append(_batch(2, ts=T0 + 59_000))  # 59 s after the first batch: same segment
    assert plog.segment_base_offsets() == [0]
    plog.append(_batch(2, ts=T0 + 61_500))
    assert plog.segment_base_offsets() == [0, 4]


def test_index_entries_follow_kafkas_rule(tmp_path: Path) -> None:
    """An entry for a batch when more than index.interval.bytes were appended before it."""
    batch = _batch(4, value_size=300)
    interval = len(batch) * 2
    plog = PartitionLog.create(tmp_path / "t-0", LogConfig(index_interval_bytes=interval), clock=FakeClock())
    for _ in range(10):
        plog.append(batch)
    plog.close()
    index = OffsetIndex.read(tmp_path / "t-0" / "00000000000000000000.index", 0)
    # bytes before batch k: k*size; an entry at k=3 (3*size > 2*size), then at 6, then 9
    size = len(batch)
    assert [(e.offset, e.position) for e in index.entries()] == [(15, 3 * size), (27, 6 * size), (39, 9 * size)]


def test_replaying_batches_keeps_their_offsets(tmp_path: Path) -> None:
    plog = PartitionLog.create(tmp_path / "t-0", start_offset=100, clock=FakeClock())
    plog.append(build_v2(sample_records(5), base_offset=100), assign_offsets=False)
    plog.append(build_v2(sample_records(5), base_offset=120), assign_offsets=False)  # a gap is allowed
    assert plog.log_end_offset == 125
    with pytest.raises(LogWriteError, match="below the log end offset"):
        plog.append(build_v2(sample_records(5), base_offset=110), assign_offsets=False)


def test_corrupt_append_is_refused_whole(tmp_path: Path) -> None:
    plog = PartitionLog.create(tmp_path / "t-0", clock=FakeClock())
    good = _batch(3)
    bad = bytearray(_batch(3))
    bad[-1] ^= 1
    with pytest.raises(CorruptRecordError):
        plog.append(good + bytes(bad))
    with pytest.raises(LogWriteError, match="no record batch"):
        plog.append(b"")
    assert plog.log_end_offset == 0 and plog.size == 0


def test_retention_ms_renames_then_deletes_after_the_delay(tmp_path: Path) -> None:
    clock = FakeClock(T0)
    config = LogConfig(segment_bytes=2000, retention_ms=3_600_000, file_delete_delay_ms=60_000)
    plog = PartitionLog.create(tmp_path / "t-0", config, clock=clock)
    for i in range(6):
        plog.append(_batch(3, ts=T0 + i * 1000, value_size=400))
    bases = plog.segment_base_offsets()
    assert len(bases) >= 3
    clock.now = T0 + 3_600_000 + 2_500  # the first three batches are past retention
    deleted = plog.apply_retention()
    assert deleted and deleted[0] == 0
    assert plog.log_start_offset == plog.segment_base_offsets()[0] > 0
    deleted_files = [n for n in _names(tmp_path / "t-0") if n.endswith(".deleted")]
    assert str(SegmentFileName(0, FileKind.LOG)) + ".deleted" in deleted_files
    clock.now += 59_999
    assert plog.delete_expired_files() == 0
    clock.now += 1
    assert plog.delete_expired_files() == len(deleted_files)
    assert not [n for n in _names(tmp_path / "t-0") if n.endswith(".deleted")]


def test_retention_of_every_segment_rolls_first(tmp_path: Path) -> None:
    clock = FakeClock(T0)
    plog = PartitionLog.create(tmp_path / "t-0", LogConfig(retention_ms=1000), clock=clock)
    plog.append(_batch(5))
    clock.now = T0 + 10_000
    assert plog.apply_retention() == [0]
    assert plog.segment_base_offsets() == [5] and plog.log_start_offset == 5 and plog.log_end_offset == 5
    assert plog.apply_retention() == []  # an empty active segment is never deleted


def test_retention_bytes(tmp_path: Path) -> None:
    batch = _batch(5, value_size=300)
    config = LogConfig(segment_bytes=len(batch) * 2, retention_ms=-1, retention_bytes=len(batch) * 5)
    plog = PartitionLog.create(tmp_path / "t-0", config, clock=FakeClock())
    for _ in range(10):
        plog.append(batch)
    assert plog.size == len(batch) * 10
    plog.apply_retention()
    # Kafka deletes whole segments only while what remains stays >= retention.bytes
    assert plog.segment_base_offsets() == [20, 30, 40]
    assert plog.size - len(batch) * 2 < config.retention_bytes <= plog.size
    assert plog.log_start_offset == plog.segment_base_offsets()[0]


def test_delete_records_moves_the_log_start(tmp_path: Path) -> None:
    batch = _batch(10)
    plog = PartitionLog.create(tmp_path / "t-0", LogConfig(segment_bytes=len(batch) * 2, retention_ms=-1), clock=FakeClock())
    for _ in range(6):
        plog.append(batch)
    assert plog.segment_base_offsets() == [0, 20, 40]
    assert plog.delete_records(25) == 25
    plog.apply_retention()
    assert plog.segment_base_offsets() == [20, 40] and plog.log_start_offset == 25
    with pytest.raises(LogWriteError, match="high watermark"):
        plog.delete_records(61)
    with pytest.raises(OffsetOutOfRangeError, match="outside"):
        plog.read(24, 1000)


def test_read_returns_whole_batches(tmp_path: Path) -> None:
    batch = _batch(10, value_size=500)
    plog = PartitionLog.create(tmp_path / "t-0", LogConfig(index_interval_bytes=len(batch)), clock=FakeClock())
    for _ in range(20):
        plog.append(batch)
    position, data = plog.read(57, max_bytes=len(batch) * 3 + 10)
    batches = list(iter_batches(data, position=position))
    assert [b.base_offset for b in batches] == [50, 60, 70]
    _, one = plog.read(199, max_bytes=1)  # at least one whole batch (KIP-74)
    assert [b.base_offset for b in iter_batches(one)] == [190]


def test_reopen_continues_offsets_and_recovers_a_torn_tail(tmp_path: Path) -> None:
    directory = tmp_path / "t-0"
    batch = _batch(10)
    plog = PartitionLog.create(directory, LogConfig(segment_bytes=len(batch) * 2, retention_ms=-1), clock=FakeClock())
    for _ in range(5):
        plog.append(batch, leader_epoch=2)
    expected_index = (directory / "00000000000000000040.timeindex").read_bytes()
    plog._close_log_file()  # a crash: no clean shutdown, the active index stays preallocated
    with open(directory / "00000000000000000040.log", "ab") as f:
        f.write(batch[:30])  # a torn write
    (directory / "00000000000000000000.log.deleted").write_bytes(b"leftover")

    reopened = PartitionLog.open(directory, LogConfig(segment_bytes=len(batch) * 2, retention_ms=-1), clock=FakeClock())
    assert reopened.log_end_offset == 50 and reopened.segment_base_offsets() == [0, 20, 40]
    assert (directory / "00000000000000000040.log").stat().st_size == len(batch)
    assert (directory / "00000000000000000040.timeindex").read_bytes()[:12] == expected_index[:12]
    assert "00000000000000000000.log.deleted" not in _names(directory)
    assert reopened.leader_epochs == [EpochEntry(2, 0)]
    assert reopened.append(batch).first_offset == 50


def test_open_refuses_what_it_cannot_handle(tmp_path: Path) -> None:
    with pytest.raises(LogWriteError, match="not a partition directory"):
        PartitionLog.open(tmp_path / "missing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(LogWriteError, match="no .log segment"):
        PartitionLog.open(tmp_path / "empty")
    PartitionLog.create(tmp_path / "t-0").close()
    with pytest.raises(LogWriteError, match="already holds segments"):
        PartitionLog.create(tmp_path / "t-0")


def test_log_config_from_kafka_names() -> None:
    config = LogConfig.from_topic_configs({"segment.bytes": "1048576", "retention.ms": -1, "file.delete.delay.ms": "0"})
    assert (config.segment_bytes, config.retention_ms, config.file_delete_delay_ms) == (1048576, -1, 0)
    assert LogConfig.from_topic_configs(config.to_topic_configs()) == config
    with pytest.raises(ConfigError, match="unsupported topic config 'cleanup.policy'"):
        LogConfig.from_topic_configs({"cleanup.policy": "compact"})
    with pytest.raises(ConfigError, match="segment.bytes must be an integer"):
        LogConfig.from_topic_configs({"segment.bytes": "big"})
    with pytest.raises(ConfigError, match="retention.bytes must be >= -1"):
        LogConfig(retention_bytes=-2)


def test_offset_for_timestamp_and_max_timestamp(tmp_path: Path) -> None:
    """ListOffsets semantics: the first record with timestamp >= target, across segments."""
    batch_size = len(_batch(10, ts=T0))
    plog = PartitionLog.create(
        tmp_path / "t-0", LogConfig(segment_bytes=batch_size * 3, index_interval_bytes=100, retention_ms=-1), clock=FakeClock()
    )
    for i in range(10):
        plog.append(_batch(10, ts=T0 + i * 10_000))  # record timestamps: batch ts + (j*37) % 1000
    assert len(plog.segment_base_offsets()) > 2
    assert plog.offset_for_timestamp(0) == (0, T0)
    assert plog.offset_for_timestamp(T0 + 50_000) == (50, T0 + 50_000)
    assert plog.offset_for_timestamp(T0 + 50_001) == (51, T0 + 50_037)
    assert plog.offset_for_timestamp(T0 + 10**9) is None
    # sample_records' largest timestamp in a batch of 10 is record 9: (9*37) % 1000 = 333
    assert plog.max_timestamp() == (T0 + 90_333, 99)
    plog.delete_records(55)
    assert plog.offset_for_timestamp(T0 + 50_000)[0] == 55


def test_read_after_reopen_and_across_a_gap(tmp_path: Path) -> None:
    directory = tmp_path / "t-0"
    plog = PartitionLog.create(directory, LogConfig(retention_ms=-1), start_offset=0, clock=FakeClock())
    plog.append(build_v2(sample_records(5), base_offset=0), assign_offsets=False)
    plog.roll(100)
    plog.append(build_v2(sample_records(5), base_offset=100), assign_offsets=False)
    plog.close()
    reopened = PartitionLog.open(directory, LogConfig(retention_ms=-1), clock=FakeClock())
    position, data = reopened.read(7, 10_000)  # offsets 5..99 do not exist: the next batch is served
    assert [b.base_offset for b in iter_batches(data, position=position)] == [100]
    assert reopened.read(105, 100) == (reopened._active.size, b"")
    with pytest.raises(OffsetOutOfRangeError):
        reopened.read(106, 100)


def test_an_append_larger_than_segment_bytes_is_refused_as_record_batch_too_large(tmp_path: Path) -> None:
    big = _batch(20, value_size=500)
    plog = PartitionLog.create(tmp_path / "t-0", LogConfig(segment_bytes=len(big) // 2, retention_ms=-1), clock=FakeClock())
    with pytest.raises(AppendRefusedError, match="exceeds segment.bytes") as refused:
        plog.append(big)
    assert refused.value.kafka_error == "record_list_too_large"
    assert plog.log_end_offset == 0 and plog.segment_base_offsets() == [0]
    assert (tmp_path / "t-0" / "00000000000000000000.log").stat().st_size == 0


def test_a_producer_batch_above_max_message_bytes_is_refused_as_message_too_large(tmp_path: Path) -> None:
    big = _batch(20, value_size=500)
    config = LogConfig(max_message_bytes=len(big) - 1, retention_ms=-1)
    plog = PartitionLog.create(tmp_path / "t-0", config, clock=FakeClock())
    with pytest.raises(AppendRefusedError, match="max.message.bytes") as refused:
        plog.append(big, origin=AppendOrigin.CLIENT)
    assert refused.value.kafka_error == "message_too_large"
    assert plog.log_end_offset == 0
    # a replay (Kafka's follower path) is not held to max.message.bytes, only to segment.bytes
    assert plog.append(big).last_offset == 19


def test_offset_for_timestamp_zero(tmp_path: Path) -> None:
    from tests.support.batches import Rec

    plog = PartitionLog.create(tmp_path / "t-0", LogConfig(retention_ms=-1), clock=FakeClock())
    plog.append(build_v2([Rec(b"a", b"1", 0), Rec(b"b", b"2", 5)]))
    assert plog.offset_for_timestamp(0) == (0, 0)
    assert plog.offset_for_timestamp(1) == (1, 5)


# -- transactions ------------------------------------------------------------------------------


def _txn(producer_id: int, n: int) -> bytes:
    return build_v2(sample_records(n, start_ts=T0), producer_id=producer_id, transactional=True)


def _end(producer_id: int, kind: ControlRecordType) -> bytes:
    return txn_marker.build(kind, producer_id=producer_id, producer_epoch=0, coordinator_epoch=0, timestamp=T0)


def test_aborts_fill_the_txnindex_of_the_marker_segment_and_reopen_rebuilds_the_active_one(tmp_path: Path) -> None:
    directory = tmp_path / "t-0"
    plog = PartitionLog.create(directory, LogConfig(retention_ms=-1), clock=FakeClock())
    plog.append(_batch(2))  # 0-1
    plog.append(_txn(7, 2))  # 2-3, open
    plog.append(_txn(8, 2))  # 4-5
    assert plog.last_stable_offset == 2
    plog.append(_end(8, ControlRecordType.ABORT))  # 6: p7 still open, so the LSO recorded is 2
    assert (directory / "00000000000000000000.txnindex").read_bytes() == struct.pack(">hqqqq", 0, 8, 4, 6, 2)
    assert plog.read(0, 1 << 20, max_offset=plog.last_stable_offset)[1] == plog.read(0, 1 << 20)[1][: len(_batch(2))]
    assert plog.roll() == 7
    [p7, p8] = sorted(producer_snapshot.parse((directory / "00000000000000000007.snapshot").read_bytes()), key=lambda e: e.producer_id)
    assert (p7.producer_id, p7.current_txn_first_offset, p7.last_offset) == (7, 2, 3)
    assert (p8.producer_id, p8.current_txn_first_offset, p8.last_offset) == (8, -1, 5)
    plog.append(_end(7, ControlRecordType.COMMIT))  # 7: committed, not indexed
    plog.append(_txn(9, 1))  # 8
    plog.append(_end(9, ControlRecordType.ABORT))  # 9: nothing else open: LSO 10
    plog.append(_txn(10, 1))  # 10, left open
    assert plog.last_stable_offset == 10 and plog.log_end_offset == 11
    active_index = directory / "00000000000000000007.txnindex"
    assert active_index.read_bytes() == struct.pack(">hqqqq", 0, 9, 8, 9, 10)
    assert plog.aborted_transactions(0, 11) == [AbortedTxn(8, 4, 6, 2), AbortedTxn(9, 8, 9, 10)]
    assert plog.aborted_transactions(7, 11) == [AbortedTxn(9, 8, 9, 10)]
    plog.close()

    active_index.write_bytes(b"junk")  # recovery rebuilds the active segment's index from its batches
    reopened = PartitionLog.open(directory, LogConfig(retention_ms=-1), clock=FakeClock())
    assert active_index.read_bytes() == struct.pack(">hqqqq", 0, 9, 8, 9, 10)
    assert reopened.last_stable_offset == 10
    assert reopened.aborted_transactions(0, 11) == [AbortedTxn(8, 4, 6, 2), AbortedTxn(9, 8, 9, 10)]
    reopened.append(_end(10, ControlRecordType.COMMIT))
    assert reopened.last_stable_offset == reopened.log_end_offset == 12


def test_snapshots_go_with_their_segment_and_stale_ones_are_dropped_on_open(tmp_path: Path) -> None:
    directory = tmp_path / "t-0"
    clock = FakeClock()
    plog = PartitionLog.create(directory, LogConfig(retention_ms=-1, file_delete_delay_ms=0), clock=clock)
    for _ in range(3):
        plog.append(_txn(7, 2))
        plog.append(_end(7, ControlRecordType.COMMIT))
        plog.roll()
    assert sorted(p.name for p in directory.glob("*.snapshot")) == [f"{o:020d}.snapshot" for o in (3, 6, 9)]
    plog.delete_records(6)
    assert plog.apply_retention() == [0, 3]
    assert sorted(p.name for p in directory.glob("*.snapshot")) == [f"{o:020d}.snapshot" for o in (6, 9)]
    plog.close()
    (directory / f"{50:020d}.snapshot").write_bytes(producer_snapshot.serialize([]))  # past the log end
    PartitionLog.open(directory, LogConfig(retention_ms=-1), log_start_offset=6, clock=clock).close()
    assert sorted(p.name for p in directory.glob("*.snapshot")) == [f"{o:020d}.snapshot" for o in (6, 9)]


def test_one_append_holding_a_marker_then_the_producers_next_transaction_keeps_the_lso_at_it(tmp_path: Path) -> None:
    """A replicated append may carry producer 7's ABORT and then its next transaction: the new
    transaction stays open (the LSO stops at it) and the abort's .txnindex LSO is the marker + 1."""
    directory = tmp_path / "t-0"
    plog = PartitionLog.create(directory, LogConfig(retention_ms=-1), clock=FakeClock())
    plog.append(_txn(7, 2))  # 0-1, open
    plog.append(_end(7, ControlRecordType.ABORT) + _txn(7, 2))  # 2: the abort, 3-4: the next transaction
    assert (plog.log_end_offset, plog.last_stable_offset) == (5, 3)
    assert plog.aborted_transactions(0, 5) == [AbortedTxn(7, 0, 2, 3)]
    plog.close()
    reopened = PartitionLog.open(directory, LogConfig(retention_ms=-1), clock=FakeClock())  # replayed batch by batch
    assert reopened.last_stable_offset == 3
    reopened.close()
