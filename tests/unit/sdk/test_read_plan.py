"""Read plans: batch-aligned ranges with exact offsets, checked by decoding every range."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from tests.support.fixtures import segment_logs
from tiered_kafka.errors import OffsetOutOfRangeError
from tiered_kafka.format.offset_index import OffsetIndex
from tiered_kafka.format.record_batch import iter_batches
from tiered_kafka.read_plan import BatchHeaders, UnsupportedFormatError, plan_ranges


class CountingFile:
    def __init__(self, path: Path) -> None:
        self.data = path.read_bytes()
        self.reads = 0

    def read(self, start: int, end: int) -> bytes:
        assert 0 <= start < end <= len(self.data)
        self.reads += 1
        return self.data[start:end]


def _plan(log: Path, offset: int, max_bytes: int, range_bytes: int = 8 * 1024 * 1024):
    source = CountingFile(log)
    base = int(log.stem)
    index = OffsetIndex.read(log.with_suffix(".index"), base)
    last = list(iter_batches(source.data, verify_crc=False))[-1].last_offset
    headers = BatchHeaders(source.read, len(source.data))
    ranges = plan_ranges(index=index, headers=headers, segment_last_offset=last, offset=offset, max_bytes=max_bytes, range_bytes=range_bytes)
    return source, ranges, last


def _check(source: CountingFile, ranges, offset: int, max_bytes: int) -> None:
    assert ranges and ranges[0].first_offset <= offset <= ranges[0].last_offset
    for previous, current in zip(ranges, ranges[1:]):
        assert previous.end == current.start and previous.last_offset + 1 == current.first_offset
    for r in ranges:  # every range decodes, CRC-checked, to exactly the offsets it promises
        batches = list(iter_batches(source.data[r.start : r.end], position=r.start))
        assert batches[0].base_offset == r.first_offset and batches[-1].last_offset == r.last_offset
    total = ranges[-1].end - ranges[0].start
    assert total <= max_bytes or len(ranges) == 1


@pytest.mark.parametrize("partition", ["large_segments-0", "test_topic_a-1"])
def test_plans_at_starts_middles_and_ends(partition: str) -> None:
    rng = random.Random(5)
    for log in segment_logs(partition)[1:4]:
        base = int(log.stem)
        data = log.read_bytes()
        last = list(iter_batches(data, verify_crc=False))[-1].last_offset
        for offset in {base, base + 1, (base + last) // 2, last - 1, last, rng.randint(base, last)}:
            for max_bytes in (1, 1000, 20_000, 300_000, 10**9):
                for range_bytes in (4096, 65536, 8 * 1024 * 1024):
                    source, ranges, _ = _plan(log, offset, max_bytes, range_bytes)
                    _check(source, ranges, offset, max_bytes)
                    if max_bytes >= len(data) and offset == base:
                        assert ranges[0].start == 0 and ranges[-1].end == len(data) and ranges[-1].last_offset == last


def test_ranges_respect_range_bytes_where_the_index_allows() -> None:
    log = segment_logs("large_segments-0")[1]
    source, ranges, _ = _plan(log, int(log.stem), 10**9, range_bytes=100_000)
    assert len(ranges) > 5
    assert all(r.size <= 100_000 + 5000 for r in ranges)  # index entries every ~4 KiB
    _check(source, ranges, int(log.stem), 10**9)


def test_headers_are_read_in_windows_and_remembered() -> None:
    log = segment_logs("large_segments-0")[1]
    source = CountingFile(log)
    base = int(log.stem)
    index = OffsetIndex.read(log.with_suffix(".index"), base)
    headers = BatchHeaders(source.read, len(source.data))
    last = list(iter_batches(source.data, verify_crc=False))[-1].last_offset
    plan_ranges(index=index, headers=headers, segment_last_offset=last, offset=base + 100, max_bytes=50_000)
    first_reads = source.reads
    plan_ranges(index=index, headers=headers, segment_last_offset=last, offset=base + 100, max_bytes=50_000)
    assert source.reads == first_reads <= 3


def test_out_of_range_and_bad_sizes() -> None:
    log = segment_logs("test_topic_a-0")[2]
    base = int(log.stem)
    with pytest.raises(OffsetOutOfRangeError):
        _plan(log, base - 1, 1000)
    with pytest.raises(OffsetOutOfRangeError):
        _plan(log, 10**9, 1000)
    with pytest.raises(ValueError):
        _plan(log, base, 0)


def test_legacy_segments_are_refused_clearly(tmp_path: Path) -> None:
    from tests.support.batches import build_legacy, sample_records

    data = build_legacy(sample_records(3), magic=1)
    (tmp_path / "00000000000000000000.log").write_bytes(data)
    (tmp_path / "00000000000000000000.index").write_bytes(b"")
    with pytest.raises(UnsupportedFormatError, match="magic 1"):
        _plan(tmp_path / "00000000000000000000.log", 0, 1000)
