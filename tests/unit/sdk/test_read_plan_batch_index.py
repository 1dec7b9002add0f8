"""Read plans from a batch index (in memory) against plans from the .index and batch headers.

Given the same candidate boundaries (the .index's batch starts) the two paths must plan the very
same ranges; with every batch start as a candidate (the gateway's batch-index path) ranges must
still be batch-aligned with exact offsets, and identical where the .index indexes every batch."""

from __future__ import annotations

import bisect
import random

import pytest

from tests.support.batches import build_control, build_v2, sample_records
from tests.support.fixtures import partitions, segment_logs
from tiered_kafka.errors import OffsetOutOfRangeError
from tiered_kafka.format.batch_index import BatchIndex, build
from tiered_kafka.format.offset_index import OffsetIndex
from tiered_kafka.format.record_batch import iter_batches
from tiered_kafka.read_plan import BatchHeaders, BatchIndexSource, ByteRange, plan_from, plan_from_batch_index, plan_ranges


class IndexedOnly(BatchIndexSource):
    """The batch-index source restricted to the .index's candidate boundaries."""

    def __init__(self, index: BatchIndex, offset_index: OffsetIndex) -> None:
        super().__init__(index)
        self.offset_index = offset_index

    def boundaries(self, low: int, high: int) -> list[int]:
        return self.offset_index.positions_between(low, high)


def _kafka_index(data: bytes, base: int, interval: int) -> OffsetIndex:
    """The .index Kafka's LogSegment.append writes: an entry (last offset, position) for a batch
    appended when more than index.interval.bytes were appended since the last entry."""
    index, since = OffsetIndex(base, []), 0
    for batch in iter_batches(data, verify_crc=False):
        if since > interval:
            index.append(batch.last_offset, batch.position)
            since = 0
        since += batch.size
    return index


def _generated(seed: int) -> tuple[bytes, int]:
    rng = random.Random(seed)
    base = 5000 + seed
    data, offset = bytearray(), base
    for _ in range(rng.randint(20, 80)):
        if rng.random() < 0.1:
            data += build_control(rng.choice([0, 1]), base_offset=offset)
            offset += 1
            continue
        n = rng.randint(1, 12)
        data += build_v2(sample_records(n, value_size=rng.choice([10, 300, 1024])), base_offset=offset)
        offset += n + (rng.randint(1, 5) if rng.random() < 0.1 else 0)  # compaction-like offset holes
    return bytes(data), base


def _cases() -> list:
    cases = [pytest.param(log.read_bytes(), int(log.stem), OffsetIndex.read(log.with_suffix(".index"), int(log.stem)), id=f"{p}/{log.stem}")
             for p in partitions() for log in segment_logs(p)[:3]]
    for seed in range(6):
        data, base = _generated(seed)
        for interval in (0, 4096):
            cases.append(pytest.param(data, base, _kafka_index(data, base, interval), id=f"generated-{seed}-interval-{interval}"))
    return cases


def _check(data: bytes, ranges: list[ByteRange], offset: int, max_bytes: int) -> None:
    assert ranges and ranges[0].first_offset <= offset <= ranges[0].last_offset or ranges[0].first_offset > offset
    for previous, current in zip(ranges, ranges[1:]):
        assert previous.end == current.start and previous.last_offset + 1 == current.first_offset
    for r in ranges:
        batches = list(iter_batches(data[r.start : r.end], position=r.start))
        assert batches[0].base_offset == r.first_offset and batches[-1].last_offset <= r.last_offset
    assert ranges[-1].end - ranges[0].start <= max_bytes or len(ranges) == 1


@pytest.mark.parametrize(("data", "base", "offset_index"), _cases())
def test_index_path_plans_what_the_header_path_plans(data: bytes, base: int, offset_index: OffsetIndex) -> None:
    batch_index = BatchIndex.from_bytes(build(data, base).to_bytes())
    last = batch_index.last_offset
    every_batch_indexed = len(offset_index) == len(batch_index) - 1
    rng = random.Random(base)
    offsets = sorted({base, base + 1, (base + last) // 2, last, *(rng.randint(base, last) for _ in range(8))})
    for offset in offsets:
        for max_bytes in (1, 3000, 50_000, 10**9):
            for range_bytes in (4096, 65_536, 8 << 20):
                headers = BatchHeaders(lambda s, e: data[s:e], len(data))
                expected = plan_ranges(index=offset_index, headers=headers, segment_last_offset=last, offset=offset, max_bytes=max_bytes, range_bytes=range_bytes)
                same_candidates = plan_from(
                    IndexedOnly(batch_index, offset_index), base_offset=base, segment_last_offset=last, offset=offset, max_bytes=max_bytes, range_bytes=range_bytes
                )
                assert same_candidates == expected
                from_memory = plan_from_batch_index(batch_index, segment_last_offset=last, offset=offset, max_bytes=max_bytes, range_bytes=range_bytes)
                _check(data, from_memory, offset, max_bytes)
                assert from_memory[0].start == expected[0].start and from_memory[0].first_offset == expected[0].first_offset
                if every_batch_indexed:
                    assert from_memory == expected
                for r in from_memory:  # every batch start is a candidate: a range exceeds range_bytes only for one batch
                    slot = bisect.bisect_left(batch_index.positions, r.start)
                    assert r.size <= range_bytes or batch_index.entry(slot).size == r.size


def test_every_batch_start_fills_ranges_closer_to_range_bytes() -> None:
    log = segment_logs("large_segments-0")[1]
    data, base = log.read_bytes(), int(log.stem)
    index = build(data, base)
    ranges = plan_from_batch_index(index, segment_last_offset=index.last_offset, offset=base, max_bytes=10**9, range_bytes=100_000)
    assert all(100_000 - 200 <= r.size <= 100_000 for r in ranges[:-1])


def test_out_of_range_offsets() -> None:
    data, base = _generated(1)
    index = build(data, base)
    with pytest.raises(OffsetOutOfRangeError):
        plan_from_batch_index(index, segment_last_offset=index.last_offset, offset=base - 1, max_bytes=1000)
    with pytest.raises(OffsetOutOfRangeError):
        plan_from_batch_index(index, segment_last_offset=index.last_offset, offset=index.last_offset + 1, max_bytes=1000)
