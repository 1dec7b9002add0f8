"""The .index and .timeindex readers: Kafka's lookups, the preallocated tail, corrupt files."""

from __future__ import annotations

import pytest

from tiered_kafka.errors import CorruptIndexError
from tiered_kafka.format import offset_index, time_index
from tiered_kafka.format.offset_index import OffsetIndex, OffsetPosition
from tiered_kafka.format.time_index import TimeIndex, TimestampOffset

BASE = 1000


def _offset_index(entries: list[tuple[int, int]], zero_tail: int = 0) -> bytes:
    return b"".join(offset_index.encode_entry(BASE, o, p) for o, p in entries) + b"\x00" * zero_tail


def test_offset_lookup_is_largest_entry_at_or_below() -> None:
    index = OffsetIndex.from_bytes(_offset_index([(1010, 4200), (1025, 8500), (1040, 12900)]), BASE)
    assert index.lookup(999) == OffsetPosition(BASE, 0)
    assert index.lookup(1000) == OffsetPosition(BASE, 0)
    assert index.lookup(1009) == OffsetPosition(BASE, 0)
    assert index.lookup(1010) == OffsetPosition(1010, 4200)
    assert index.lookup(1039) == OffsetPosition(1025, 8500)
    assert index.lookup(10**9) == OffsetPosition(1040, 12900)


def test_preallocated_zero_tail_of_an_active_index_is_ignored() -> None:
    data = _offset_index([(1010, 4200), (1025, 8500)], zero_tail=8 * 1000)
    index = OffsetIndex.from_bytes(data, BASE)
    assert len(index) == 2 and index.to_bytes() == data[:16]
    times = TimeIndex.from_bytes(time_index.encode_entry(BASE, 5000, 1010) + b"\x00" * 1200, BASE)
    assert times.entries() == [TimestampOffset(5000, 1010)]


def test_empty_indexes() -> None:
    assert len(OffsetIndex.from_bytes(b"", BASE)) == 0
    assert TimeIndex.from_bytes(b"", BASE).last_entry == TimestampOffset(-1, BASE)


def test_time_lookup_is_largest_entry_at_or_below() -> None:
    data = b"".join(time_index.encode_entry(BASE, t, o) for t, o in [(100, 1005), (200, 1010), (300, 1020)])
    times = TimeIndex.from_bytes(data, BASE)
    assert times.lookup(99) == TimestampOffset(-1, BASE)
    assert times.lookup(100) == TimestampOffset(100, 1005)
    assert times.lookup(250) == TimestampOffset(200, 1010)
    assert times.lookup(10**15) == TimestampOffset(300, 1020)
    assert times.last_entry == TimestampOffset(300, 1020)


@pytest.mark.parametrize(
    "data",
    [
        pytest.param(_offset_index([(1010, 4200), (1005, 8500)]), id="offset-goes-back"),
        pytest.param(_offset_index([(1010, 4200), (1020, 4200)]), id="position-stalls"),
        pytest.param(_offset_index([(1010, 4200)]) + b"\x01\x02\x03", id="ragged-size"),
        pytest.param(offset_index.ENTRY_STRUCT.pack(-5, 10), id="negative-relative"),
    ],
)
def test_corrupt_offset_index(data: bytes) -> None:
    with pytest.raises(CorruptIndexError):
        OffsetIndex.from_bytes(data, BASE, name="x.index")


def test_corrupt_time_index() -> None:
    data = time_index.encode_entry(BASE, 300, 1010) + time_index.encode_entry(BASE, 200, 1020)
    with pytest.raises(CorruptIndexError, match="does not increase"):
        TimeIndex.from_bytes(data, BASE)
