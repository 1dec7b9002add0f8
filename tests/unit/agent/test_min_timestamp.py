"""A segment's ``min_timestamp`` is its smallest *record* timestamp (``local_segments.MinTimestamp``),
not its smallest batch base timestamp: a later record of a batch may be older than the first."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.batches import Rec, build_control, build_legacy, build_v2, sample_records
from tiered_kafka.format.record_batch import iter_batches
from tiered_kafka_agent.local_segments import MinTimestamp, SegmentStats, list_segments, open_segment, read_stats

T0 = 1_700_000_000_000


def stats_of(tmp_path: Path, batches: list[bytes]) -> SegmentStats:
    """read_stats of a rotated segment holding ``batches`` (an empty active segment after it)."""
    directory = tmp_path / "t-0"
    directory.mkdir()
    data = b"".join(batches)
    (directory / f"{0:020d}.log").write_bytes(data)
    for kind in ("index", "timeindex"):
        (directory / f"{0:020d}.{kind}").write_bytes(b"")
    next_base = max((b.next_offset for b in iter_batches(data)), default=1)
    (directory / f"{next_base:020d}.log").write_bytes(b"")
    segments, _active = list_segments(directory)
    with open_segment(segments[0]) as opened:
        return read_stats(opened)


def out_of_order(base_offset: int, codec: int = 0) -> bytes:
    """A batch whose first record (its baseTimestamp) is T0 + 500 and whose third is T0 + 7."""
    stamps = [T0 + 500, T0 + 900, T0 + 7, T0 + 600]
    return build_v2([Rec(b"k", f"v{i}".encode() * 20, t) for i, t in enumerate(stamps)], codec=codec, base_offset=base_offset)


@pytest.mark.parametrize(("codec", "name"), [(0, "none"), (1, "gzip"), (2, "snappy"), (3, "lz4"), (4, "zstd")])
def test_an_older_record_inside_a_batch_sets_min_timestamp(tmp_path: Path, codec: int, name: str) -> None:
    later = build_v2([Rec(b"k", b"v", T0 + 2000), Rec(b"k", b"v", T0 + 2001)], codec=codec, base_offset=4)
    stats = stats_of(tmp_path, [out_of_order(0, codec), later])
    assert [b.base_timestamp for b in iter_batches((tmp_path / "t-0" / f"{0:020d}.log").read_bytes())] == [T0 + 500, T0 + 2000]
    assert (stats.min_timestamp, stats.max_timestamp, stats.min_timestamp_exact) == (T0 + 7, T0 + 2001, True), name


def test_header_only_batches_and_legacy_messages(tmp_path: Path) -> None:
    single = build_v2([Rec(b"k", b"v", T0 + 50)], base_offset=0)
    marker = build_control(1, base_offset=1, timestamp=T0 + 40)
    magic1 = build_legacy(sample_records(3, start_ts=T0 + 30), magic=1, codec=1, base_offset=2)  # a gzip wrapper: inner stamps T0+30, +67, +104
    assert stats_of(tmp_path, [single, marker, magic1]).min_timestamp == T0 + 30


def test_magic_0_records_have_no_timestamp(tmp_path: Path) -> None:
    stats = stats_of(tmp_path, [build_legacy(sample_records(3), magic=0)])
    assert (stats.min_timestamp, stats.max_timestamp) == (-1, -1)


def test_spans_are_decoded_in_parts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Spans flushed at SPAN_BYTES still see every record: the oldest record in the last batch."""
    monkeypatch.setattr(MinTimestamp, "SPAN_BYTES", 300)
    batches = [build_v2([Rec(b"k", b"x" * 100, T0 + 1000 + 10 * i + j) for j in range(3)], base_offset=3 * i) for i in range(8)]
    batches.append(out_of_order(24, codec=4))
    assert stats_of(tmp_path, batches).min_timestamp == T0 + 7


def test_exactness_is_recorded_in_the_registry_and_the_object_metadata() -> None:
    """Entries from before the flag (no field, no ``tk-min-timestamp-exact``) read as not exact."""
    from tiered_kafka.registry import SegmentEntry
    from tiered_kafka_agent.remote_store import entry_from_metadata, entry_metadata

    entry = SegmentEntry(
        topic="t", partition=0, base_offset=0, last_offset=9, object_key="k/0.log", size=100, record_count=10, min_timestamp=T0 + 7,
        max_timestamp=T0 + 900, checksum="crc32c:00000000", leader_epoch=0, upload_time_ms=1, files=("log",), min_timestamp_exact=True,
    )  # fmt: skip
    fields = entry.to_fields()
    assert fields["min_timestamp_exact"] == "1" and SegmentEntry.from_fields("t", 0, fields) == entry
    del fields["min_timestamp_exact"]
    assert not SegmentEntry.from_fields("t", 0, fields).min_timestamp_exact
    metadata = entry_metadata(entry)
    assert entry_from_metadata("t", 0, "k/0.log", 100, metadata) == entry
    del metadata["tk-min-timestamp-exact"]
    assert not entry_from_metadata("t", 0, "k/0.log", 100, metadata).min_timestamp_exact


def test_an_undecodable_codec_is_uploaded_with_an_inexact_minimum(tmp_path: Path) -> None:
    import struct

    import crc32c

    data = bytearray(out_of_order(0, codec=1))
    struct.pack_into(">h", data, 21, (struct.unpack_from(">h", data, 21)[0] & ~0x07) | 0x05)  # codec id 5: none known
    struct.pack_into(">I", data, 17, crc32c.crc32c(bytes(data[21:])))
    stats = stats_of(tmp_path, [bytes(data)])
    assert (stats.min_timestamp, stats.min_timestamp_exact) == (T0 + 500, False)  # the batch's base: kept by pruning


def with_max_timestamp(batch: bytes, max_timestamp: int) -> bytes:
    """``batch`` (magic 2) with its header's maxTimestamp set, as Java's broker writes it, CRC redone."""
    import struct

    import crc32c

    data = bytearray(batch)
    struct.pack_into(">q", data, 35, max_timestamp)  # baseOffset 8, length 4, epoch 4, magic 1, crc 4, attributes 2, lastOffsetDelta 4, baseTimestamp 8
    struct.pack_into(">I", data, 17, crc32c.crc32c(bytes(data[21:])))
    return bytes(data)


def test_a_negative_timestamp_below_minus_one_is_a_real_one(tmp_path: Path) -> None:
    """Only -1 means "no timestamp" (Java ``RecordBatch.NO_TIMESTAMP``); -5 is 5 ms before 1970 and
    sets the minimum, and the span's other records are not passed over with it (the minimum was
    T0 + 500, the header-only batch's, and pruning [T0, T0 + 100] lost the record at T0 + 10)."""
    first = build_v2([Rec(b"k", b"v", T0 + 500)], base_offset=0)
    mixed = build_v2([Rec(b"k", b"v", T0 + 20), Rec(b"k", b"v", -5), Rec(b"k", b"v", T0 + 10)], base_offset=1)
    stats = stats_of(tmp_path, [first, mixed])
    assert (stats.min_timestamp, stats.max_timestamp, stats.min_timestamp_exact) == (-5, T0 + 500, True)


def test_a_one_record_batch_whose_header_says_no_timestamp_is_decoded(tmp_path: Path) -> None:
    """Kafka's maxTimestamp starts at -1 (``LogValidator``): a record stamped -7 leaves -1 in the header."""
    alone = with_max_timestamp(build_v2([Rec(b"k", b"v", -7)], base_offset=1), -1)
    assert next(iter(iter_batches(alone))).max_timestamp == -1
    stats = stats_of(tmp_path, [build_v2([Rec(b"k", b"v", T0)], base_offset=0), alone])
    assert (stats.min_timestamp, stats.max_timestamp) == (-7, T0)
    none = with_max_timestamp(build_v2([Rec(b"k", b"v", -1)], base_offset=0), -1)  # -1 itself: no timestamp
    (tmp_path / "none").mkdir()
    assert stats_of(tmp_path / "none", [none]).min_timestamp == -1
