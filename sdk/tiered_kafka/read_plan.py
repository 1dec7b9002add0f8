"""The read plan (DESIGN.md contract 3): batch-aligned byte ranges of one segment object.

For (topic, partition, offset, max_bytes) a plan names one segment object and byte ranges of
it that start and end on record-batch boundaries, each with the exact first and last offset it
holds. The first range holds the requested offset. A client decodes a range with any Kafka
record-batch parser and never sees a torn batch; the gateway adds a presigned URL per range.

Planning needs batch boundaries, which neither the registry nor Kafka's ``.index`` holds
exactly: an index entry gives a batch's start position and its *last* offset. The planner
therefore reads batch headers (the 61-byte magic 2 header, ``format.record_batch``) through a
caller-supplied ``read(start, end)`` — file slices in tests, cached ranged GETs in the gateway —
in windows of ``HEADER_WINDOW`` bytes, and uses the ``.index`` to jump close to the offset:

1. start: the index entry at or below the offset gives a batch start; headers are scanned
   forward to the batch whose last offset reaches the requested one;
2. boundaries: batch starts from the index between the start and ``start + max_bytes`` (plus the
   segment end), chosen so that each range stays within ``range_bytes`` where the index allows;
3. each range's last offset is the next boundary batch's base offset minus one (or the segment's
   last offset at its end).

At least one whole batch is planned even when it is larger than ``max_bytes`` (as Kafka's fetch
does, KIP-74). Only magic 2 segments are planned; older formats raise ``UnsupportedFormatError``.

A segment uploaded with a batch index (``format.batch_index``: every batch's position and
offsets) is planned from it in memory (``plan_from_batch_index``): step 1 is a bisection, and the
candidate boundaries of step 2 are *every* batch start, not only the indexed ones, so ranges come
closer to ``range_bytes``. Both paths share the rule above (``plan_from``, over a
``BatchSource``); given the same candidate boundaries they plan the same ranges (tested).
"""

from __future__ import annotations

import bisect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from tiered_kafka.errors import CorruptRecordError, OffsetOutOfRangeError
from tiered_kafka.format.batch_index import BatchIndex, UnsupportedFormatError
from tiered_kafka.format.offset_index import OffsetIndex
from tiered_kafka.format.record_batch import (
    HEADER_V2_SIZE,
    LAST_OFFSET_DELTA_OFFSET,
    LOG_OVERHEAD,
    LOG_OVERHEAD_STRUCT,
    MAGIC_OFFSET,
    MAX_TIMESTAMP_OFFSET,
)

HEADER_WINDOW = 64 * 1024
DEFAULT_RANGE_BYTES = 8 * 1024 * 1024

Reader = Callable[[int, int], bytes]


__all__ = ["BatchHeader", "BatchHeaders", "BatchIndexSource", "BatchSource", "ByteRange", "HeaderSource", "UnsupportedFormatError", "plan_from", "plan_from_batch_index", "plan_ranges"]


@dataclass(frozen=True, slots=True)
class ByteRange:
    """Bytes [start, end) of the segment object, holding offsets first_offset..last_offset."""

    start: int
    end: int
    first_offset: int
    last_offset: int

    @property
    def size(self) -> int:
        return self.end - self.start

    @property
    def http_range(self) -> str:
        """The HTTP ``Range`` header value for these bytes (inclusive end)."""
        return f"bytes={self.start}-{self.end - 1}"


@dataclass(frozen=True, slots=True)
class BatchHeader:
    position: int
    size: int
    base_offset: int
    last_offset: int
    max_timestamp: int


class BatchHeaders:
    """Batch headers of one segment object, read on demand in windows and remembered."""

    def __init__(self, read: Reader, segment_size: int, *, window: int = HEADER_WINDOW) -> None:
        self._read = read
        self.segment_size = segment_size
        self._window = window
        self._known: dict[int, BatchHeader] = {}

    def at(self, position: int) -> BatchHeader:
        """The header of the batch starting at ``position`` (which must be a batch start)."""
        header = self._known.get(position)
        if header is None:
            self._load(position)
            header = self._known.get(position)
            if header is None:
                raise CorruptRecordError("no batch header where one must start", position=position)
        return header

    def _load(self, position: int) -> None:
        """Read a window from ``position`` and remember every whole header in it."""
        data = self._read(position, min(self.segment_size, position + max(self._window, HEADER_V2_SIZE)))
        pos = 0
        while pos + HEADER_V2_SIZE <= len(data):
            base_offset, length = LOG_OVERHEAD_STRUCT.unpack_from(data, pos)
            size = LOG_OVERHEAD + length
            if length <= 0 or position + pos + size > self.segment_size:
                raise CorruptRecordError(f"invalid batch length {length}", position=position + pos, base_offset=base_offset)
            magic = data[pos + MAGIC_OFFSET]
            if magic != 2:
                raise UnsupportedFormatError(f"batch at position {position + pos} has magic {magic}; read plans need magic 2")
            delta = int.from_bytes(data[pos + LAST_OFFSET_DELTA_OFFSET : pos + LAST_OFFSET_DELTA_OFFSET + 4], "big", signed=True)
            max_ts = int.from_bytes(data[pos + MAX_TIMESTAMP_OFFSET : pos + MAX_TIMESTAMP_OFFSET + 8], "big", signed=True)
            self._known[position + pos] = BatchHeader(position + pos, size, base_offset, base_offset + delta, max_ts)
            pos += size


class BatchSource(Protocol):
    """What the planning rule needs to know about a segment's batches."""

    segment_size: int

    def holding(self, offset: int) -> BatchHeader:
        """The first batch whose last offset is >= ``offset``; OffsetOutOfRangeError past the last."""
        ...

    def boundaries(self, low: int, high: int) -> list[int]:
        """Candidate range ends: batch starts p with low < p <= high, ascending."""
        ...

    def base_offset_at(self, position: int) -> int:
        """The base offset of the batch starting at ``position``."""
        ...


class HeaderSource:
    """Batches known from the ``.index`` and headers read on demand (steps 1 and 2 of the module doc)."""

    def __init__(self, index: OffsetIndex, headers: BatchHeaders) -> None:
        self.index = index
        self.headers = headers
        self.segment_size = headers.segment_size

    def holding(self, offset: int) -> BatchHeader:
        position = self.index.lookup(offset).position
        while position < self.segment_size:
            header = self.headers.at(position)
            if header.last_offset >= offset:
                return header
            position += header.size
        raise OffsetOutOfRangeError(f"offset {offset} is past the segment's last batch")

    def boundaries(self, low: int, high: int) -> list[int]:
        return self.index.positions_between(low, high)

    def base_offset_at(self, position: int) -> int:
        return self.headers.at(position).base_offset


class BatchIndexSource:
    """Batches known from a batch index: every batch start is a candidate boundary."""

    def __init__(self, index: BatchIndex) -> None:
        self.index = index
        self.segment_size = index.segment_size

    def holding(self, offset: int) -> BatchHeader:
        try:
            e = self.index.holding(offset)
        except KeyError as err:
            raise OffsetOutOfRangeError(f"offset {offset} is past the segment's last batch") from err
        return BatchHeader(e.position, e.size, e.base_offset, e.last_offset, e.max_timestamp)

    def boundaries(self, low: int, high: int) -> list[int]:
        positions = self.index.positions
        return list(positions[bisect.bisect_right(positions, low) : bisect.bisect_right(positions, high)])

    def base_offset_at(self, position: int) -> int:
        try:
            return self.index.entry(self.index.slot_at(position)).base_offset
        except KeyError as err:
            raise CorruptRecordError("no batch starts here in the batch index", position=position) from err


def plan_ranges(
    *,
    index: OffsetIndex,
    headers: BatchHeaders,
    segment_last_offset: int,
    offset: int,
    max_bytes: int,
    range_bytes: int = DEFAULT_RANGE_BYTES,
) -> list[ByteRange]:
    """Batch-aligned ranges of one segment, starting with the batch that holds ``offset``.

    ``headers`` reads the segment's batch headers (and remembers them: keep one per segment)."""
    return plan_from(
        HeaderSource(index, headers), base_offset=index.base_offset, segment_last_offset=segment_last_offset,
        offset=offset, max_bytes=max_bytes, range_bytes=range_bytes,
    )


def plan_from_batch_index(
    index: BatchIndex, *, segment_last_offset: int, offset: int, max_bytes: int, range_bytes: int = DEFAULT_RANGE_BYTES
) -> list[ByteRange]:
    """``plan_ranges`` from a segment's batch index, in memory (no read at all)."""
    return plan_from(
        BatchIndexSource(index), base_offset=index.base_offset, segment_last_offset=segment_last_offset,
        offset=offset, max_bytes=max_bytes, range_bytes=range_bytes,
    )


def plan_from(
    source: BatchSource, *, base_offset: int, segment_last_offset: int, offset: int, max_bytes: int, range_bytes: int = DEFAULT_RANGE_BYTES
) -> list[ByteRange]:
    """The planning rule of the module doc over any ``BatchSource``."""
    if max_bytes <= 0 or range_bytes <= 0:
        raise ValueError(f"max_bytes and range_bytes must be positive, got {max_bytes} and {range_bytes}")
    if not base_offset <= offset <= segment_last_offset:
        raise OffsetOutOfRangeError(f"offset {offset} is outside the segment's {base_offset}..{segment_last_offset}")
    segment_size = source.segment_size
    first = source.holding(offset)
    boundaries = _boundaries(source, first, segment_size, max_bytes, range_bytes)
    ranges = []
    start, first_offset = first.position, first.base_offset
    for end in boundaries:
        last_offset = segment_last_offset if end >= segment_size else source.base_offset_at(end) - 1
        ranges.append(ByteRange(start, end, first_offset, last_offset))
        start, first_offset = end, last_offset + 1
    return ranges


def _boundaries(source: BatchSource, first: BatchHeader, segment_size: int, max_bytes: int, range_bytes: int) -> list[int]:
    """Range ends: candidate batch starts (or the segment end) after ``first``, within max_bytes."""
    limit = first.position + max(max_bytes, first.size)
    candidates = source.boundaries(first.position, limit)
    if segment_size <= limit:
        candidates.append(segment_size)
    if not candidates:
        candidates = [first.position + first.size]  # the first batch alone, at least
    ends: list[int] = []
    current = first.position
    while True:
        next_index = bisect.bisect_right(candidates, current)
        if next_index >= len(candidates):
            break
        farthest = bisect.bisect_right(candidates, current + range_bytes) - 1  # within range_bytes
        chosen = candidates[max(farthest, next_index)]
        ends.append(chosen)
        current = chosen
    return ends
