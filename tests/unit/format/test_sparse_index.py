"""The sparse plan index (format.sparse_index) and plans from it (read_plan.plan_from_sparse_index):
layout round trips, refusals naming the problem, and plans that are batch-aligned, hold the
requested offset and read the same bytes as plans from the full batch index."""

from __future__ import annotations

import random
import struct

import crc32c
import pytest

from tests.support.batches import build_v2, sample_records
from tiered_kafka.errors import CorruptIndexError
from tiered_kafka.format.batch_index import build
from tiered_kafka.format.record_batch import iter_batches
from tiered_kafka.format.sparse_index import HEADER_SIZE, SPARSE_INTERVAL, VERSION, SparseIndex
from tiered_kafka.read_plan import plan_from_batch_index, plan_from_sparse_index, sparse_plan_fits

BASE = 5000
INTERVAL = 4096


def _segment() -> bytes:
    """About 120 batches of 1..12 records of 40..400-byte values, with offset holes (as compaction leaves)."""
    rng = random.Random(3)
    data, offset = bytearray(), BASE
    for _ in range(120):
        n = rng.randint(1, 12)
        data += build_v2(sample_records(n, value_size=rng.randint(40, 400)), base_offset=offset)
        offset += n + (rng.randint(1, 50) if rng.random() < 0.2 else 0)
    return bytes(data)


DATA = _segment()
FULL = build(DATA, BASE)
SPARSE = SparseIndex.from_batch_index(FULL, interval=INTERVAL)
STARTS = set(FULL.positions) | {len(DATA)}


def test_keeps_batch_starts_at_least_an_interval_apart() -> None:
    positions = list(SPARSE.positions)
    assert positions[0] == 0 and set(positions) <= set(FULL.positions) and 5 < len(positions) < len(FULL)
    for a, b in zip(positions, positions[1:]):
        assert b - a >= INTERVAL
        # the kept start is the first batch start at or after the interval: no batch start in between
        assert not [p for p in FULL.positions if a + INTERVAL <= p < b]
    for p in positions:
        slot = FULL.slot_at(p)
        assert SPARSE.base_offset_at(p) == FULL.entry(slot).base_offset


def test_round_trip_and_size() -> None:
    data = SPARSE.to_bytes()
    assert len(data) == HEADER_SIZE + 8 * len(SPARSE) and data[0] == VERSION
    again = SparseIndex.from_bytes(data, base_offset=BASE, segment_size=len(DATA))
    assert list(again.positions) == list(SPARSE.positions) and again.interval == INTERVAL and again.to_bytes() == data
    assert [again.base_offset_at(p) for p in again.positions] == [SPARSE.base_offset_at(p) for p in SPARSE.positions]
    # the default interval: 8 bytes per MiB of segment, a few KB for a 1 GiB segment
    assert SPARSE_INTERVAL == 1024 * 1024 and HEADER_SIZE + 8 * (2**30 // SPARSE_INTERVAL) <= 8 * 1024 + HEADER_SIZE


def _recrc(data: bytes) -> bytes:
    return data[:1] + struct.pack(">I", crc32c.crc32c(data[5:])) + data[5:]


def _at(data: bytes, at: int, value: bytes) -> bytes:
    return _recrc(data[:at] + value + data[at + len(value) :])


GOOD = SPARSE.to_bytes()


@pytest.mark.parametrize(
    ("data", "problem"),
    [
        (GOOD[:5], "shorter than the 9-byte header"),
        (b"\x02" + GOOD[1:], "version 2 is not supported"),
        (GOOD + b"\x00" * 3, "not a multiple of 8"),
        (GOOD[:-8], "CRC-32C"),
        (GOOD[:-1] + bytes([GOOD[-1] ^ 1]), "CRC-32C"),
        (_at(GOOD, HEADER_SIZE, struct.pack(">I", 7)), "first entry must be at position 0"),
        (_at(GOOD, HEADER_SIZE + 16, GOOD[HEADER_SIZE + 8 : HEADER_SIZE + 16]), "entry 2 .* does not follow entry 1"),
        (_recrc(GOOD + struct.pack(">II", len(DATA) + 10, 10**6)), "past the segment end"),
    ],
)
def test_bad_bytes_are_refused_naming_the_problem(data: bytes, problem: str) -> None:
    with pytest.raises(CorruptIndexError, match=f"sparse index of s3://b/k: .*{problem}"):
        SparseIndex.from_bytes(data, base_offset=BASE, segment_size=len(DATA), name="sparse index of s3://b/k")


def _decoded(r) -> tuple[int, int]:
    batches = list(iter_batches(DATA[r.start : r.end], position=r.start))
    return batches[0].base_offset, batches[-1].last_offset


@pytest.mark.parametrize("max_bytes", [INTERVAL * 3, 20_000, 60_000, len(DATA)])
def test_plans_are_batch_aligned_hold_the_offset_and_start_at_most_one_span_early(max_bytes: int) -> None:
    last = FULL.last_offset
    for offset in range(BASE, last + 1, 7):
        if not sparse_plan_fits(SPARSE, offset, max_bytes):
            continue
        ranges = plan_from_sparse_index(SPARSE, segment_last_offset=last, offset=offset, max_bytes=max_bytes, range_bytes=8192)
        exact = plan_from_batch_index(FULL, segment_last_offset=last, offset=offset, max_bytes=max_bytes, range_bytes=8192)
        assert ranges[0].first_offset <= offset <= ranges[0].last_offset
        assert ranges[0].start <= exact[0].start and ranges[0].start in SPARSE.positions
        span_start, span_end, _ = SPARSE.span_holding(offset)
        assert ranges[0].start == span_start and exact[0].start <= span_end
        assert ranges[-1].end - ranges[0].start <= max_bytes
        for a, b in zip(ranges, ranges[1:]):
            assert (a.end, a.last_offset + 1) == (b.start, b.first_offset)
        for r in ranges:
            assert r.start in STARTS and r.end in STARTS
            first, last_decoded = _decoded(r)
            assert first == r.first_offset and last_decoded <= r.last_offset


@pytest.mark.parametrize("max_bytes", [INTERVAL * 3, 20_000, len(DATA)])
def test_a_sequential_read_reads_the_same_bytes_as_from_the_full_index(max_bytes: int) -> None:
    def read(plan) -> bytes:
        out, offset = bytearray(), BASE
        while offset <= FULL.last_offset:
            ranges = plan(offset)
            assert ranges[0].start == len(out)  # each plan starts where the last one ended: no byte read twice
            out += b"".join(DATA[r.start : r.end] for r in ranges)
            offset = ranges[-1].last_offset + 1
        return bytes(out)

    last = FULL.last_offset
    sparse = read(lambda o: plan_from_sparse_index(SPARSE, segment_last_offset=last, offset=o, max_bytes=max_bytes, range_bytes=8192))
    full = read(lambda o: plan_from_batch_index(FULL, segment_last_offset=last, offset=o, max_bytes=max_bytes, range_bytes=8192))
    assert sparse == full == DATA


def test_a_plan_smaller_than_the_span_does_not_fit() -> None:
    start, end, _ = SPARSE.span_holding(BASE + 1)
    assert sparse_plan_fits(SPARSE, BASE + 1, end - start) and not sparse_plan_fits(SPARSE, BASE + 1, end - start - 1)
