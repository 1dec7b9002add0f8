"""The batch index layout (format.batch_index): round trips, refusals that name the problem, fixtures."""

from __future__ import annotations

import struct
from pathlib import Path

import crc32c
import pytest

from tests.support.batches import build_control, build_legacy, build_v2, sample_records
from tests.support.fixtures import partitions, segment_logs
from tiered_kafka.errors import CorruptIndexError, CorruptRecordError
from tiered_kafka.format.batch_index import ENTRY_SIZE, HEADER_SIZE, PREFIX_STRUCT, BatchIndex, UnsupportedFormatError, build
from tiered_kafka.format.record_batch import iter_batches

SEGMENTS = [pytest.param(log, id=f"{p}/{log.stem}") for p in partitions() for log in segment_logs(p)]


def _segment(base: int = 1000) -> bytes:
    """Batches of 1..9 records, a transactional batch and its COMMIT marker."""
    data, offset = bytearray(), base
    for n in range(1, 10):
        data += build_v2(sample_records(n, start_ts=1_700_000_000_000 + 1000 * n), base_offset=offset)
        offset += n
    data += build_v2(sample_records(3), base_offset=offset, producer_id=7, transactional=True)
    data += build_control(1, base_offset=offset + 3, producer_id=7)
    return bytes(data)


def test_layout_sizes() -> None:
    assert (HEADER_SIZE, ENTRY_SIZE) == (30, 26)


def test_round_trip_and_lookups() -> None:
    data = _segment()
    index = build(data, 1000)
    batches = list(iter_batches(data))
    assert len(index) == len(batches) and index.segment_size == len(data) and index.last_offset == batches[-1].last_offset
    again = BatchIndex.from_bytes(index.to_bytes())
    assert again.to_bytes() == index.to_bytes()
    for slot, batch in enumerate(batches):
        e = again.entry(slot)
        assert (e.position, e.size, e.base_offset, e.last_offset, e.max_timestamp, e.record_count) == (
            batch.position, batch.size, batch.base_offset, batch.last_offset, batch.max_timestamp, batch.record_count,
        )
        assert (e.is_control, e.is_transactional) == (batch.is_control, batch.is_transactional)
        assert again.holding(batch.base_offset) == e == again.holding(batch.last_offset)
    assert again.entry(len(batches) - 1).is_control and again.entry(len(batches) - 2).is_transactional
    with pytest.raises(KeyError):
        again.holding(batches[-1].last_offset + 1)


def test_first_reaching_a_timestamp_is_the_first_batch_whose_max_reaches_it() -> None:
    data = _segment()
    index = build(data, 1000)
    batches = list(iter_batches(data))
    for ts in (0, 1_700_000_003_100, 1_700_000_009_500, 1_700_000_009_999, 2**62):
        expected = next((i for i, b in enumerate(batches) if b.max_timestamp >= ts), None)
        assert index.first_reaching(ts) == expected


@pytest.mark.parametrize("log", SEGMENTS)
def test_fixture_segments(log: Path) -> None:
    data = log.read_bytes()
    index = BatchIndex.from_bytes(build(data, int(log.stem)).to_bytes(), name=log.name)
    batches = list(iter_batches(data, verify_crc=False))
    assert [index.entry(i).position for i in range(len(index))] == [b.position for b in batches]
    assert index.last_offset == batches[-1].last_offset and index.base_offset == int(log.stem)


def test_size_for_1kib_records_in_16kib_batches() -> None:
    data, offset = bytearray(), 0
    for _ in range(64):
        data += build_v2(sample_records(16, value_size=1024), base_offset=offset)
        offset += 16
    ratio = len(build(bytes(data), 0).to_bytes()) / len(data)
    assert ratio < 0.005, ratio


def _corrupt(data: bytes, at: int, value: bytes, *, recrc: bool = True) -> bytes:
    out = bytearray(data)
    out[at : at + len(value)] = value
    if recrc:
        struct.pack_into(">I", out, 6, crc32c.crc32c(bytes(out[PREFIX_STRUCT.size :])))
    return bytes(out)


GOOD = build(_segment(), 1000).to_bytes()


@pytest.mark.parametrize(
    ("data", "problem"),
    [
        pytest.param(GOOD[:20], "shorter than the 30-byte header", id="truncated-header"),
        pytest.param(GOOD[:-5], "truncated or padded", id="truncated-entries"),
        pytest.param(GOOD + b"\0", "truncated or padded", id="padded"),
        pytest.param(b"XXXX" + GOOD[4:], "not a batch index", id="wrong-magic"),
        pytest.param(GOOD[:4] + b"\x00\x02" + GOOD[6:], "version 2 is not supported", id="wrong-version"),
        pytest.param(_corrupt(GOOD, HEADER_SIZE + 5, b"\x09", recrc=False), "CRC-32C", id="bit-flip"),
        pytest.param(_corrupt(GOOD, HEADER_SIZE + ENTRY_SIZE + 4, struct.pack(">i", 0)), "does not follow", id="offsets-go-back"),
        pytest.param(_corrupt(GOOD, HEADER_SIZE, struct.pack(">I", 5)), "expected position 0", id="first-not-at-0"),
        pytest.param(_corrupt(GOOD, PREFIX_STRUCT.size + 8, struct.pack(">q", 100)), "leaves no whole batch|impossible", id="size-too-small"),
    ],
)
def test_corrupt_files_are_refused_naming_the_problem(data: bytes, problem: str) -> None:
    with pytest.raises(CorruptIndexError, match=problem):
        BatchIndex.from_bytes(data, name="seg.batchindex")


def test_legacy_and_corrupt_segments() -> None:
    with pytest.raises(UnsupportedFormatError, match="magic 1"):
        build(build_legacy(sample_records(3), magic=1), 0)
    bad = bytearray(_segment())
    bad[100] ^= 0xFF
    with pytest.raises(CorruptRecordError):
        build(bytes(bad), 1000)
