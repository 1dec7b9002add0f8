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

Before the batch index is in memory, a segment whose registry entry carries a sparse plan index
(``format.sparse_index``: batch starts at least ``SPARSE_INTERVAL`` bytes apart, with their base
offsets) is planned from it (``plan_from_sparse_index``), again with no read: the span between two
kept starts plays the part of one batch. Ranges start and end on kept starts (batch boundaries),
so the first range starts at the kept start at or below the requested offset's batch — up to one
interval plus one batch earlier than the exact plan — and still holds the offset (its
first..last offsets include it); clients skip the records before the offset they asked for, as
they do for a batch holding earlier offsets. A sequential reader asks next for the offset after a
range, which starts on a kept boundary: its plans are exact. ``sparse_plan_fits`` says whether
the span holding the offset fits ``max_bytes`` (else the exact path keeps the max_bytes rule).
"""

from __future__ import annotations

import bisect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from tiered_kafka.errors import CorruptRecordError, OffsetOutOfRangeError
from tiered_kafka.format.batch_index import BatchIndex, UnsupportedFormatError
from tiered_kafka.format.offset_index import OffsetIndex
from tiered_kafka.format.sparse_index import SparseIndex
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


__all__ = ["BatchHeader", "BatchHeaders", "BatchIndexSource", "BatchSource", "ByteRange", "HeaderSource",
           "SparseIndexSource", "UnsupportedFormatError", "plan_from", "plan_from_batch_index", "plan_from_sparse_index", "plan_ranges",
           "sparse_plan_fits"]


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

    def __init__(self, read: Reader, segment_size: int, *, window: int = HEADER_WINDOW, on_load: Callable[[BatchHeaders], None] | None = None) -> None:
        self._read = read
        self.segment_size = segment_size
        self._window = window
        self._known: dict[int, BatchHeader] = {}
        self._on_load = on_load  # called after each window read (a cache bounded by bytes weighs it again)

    def __len__(self) -> int:
        return len(self._known)

    @property
    def nbytes(self) -> int:
        """Estimated memory of the headers known (a BatchHeader, its ints and its dict slot: ~330 bytes)."""
        return 100 + 330 * len(self._known)

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
        if self._on_load is not None:
            self._on_load(self)


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


class SparseIndexSource:
    """Batches known from a sparse plan index: each span between kept starts acts as one batch."""

    def __init__(self, index: SparseIndex, segment_last_offset: int) -> None:
        self.index = index
        self.segment_size = index.segment_size
        self._last_offset = segment_last_offset

    def holding(self, offset: int) -> BatchHeader:
        start, end, base = self.index.span_holding(offset)
        last = self._last_offset if end >= self.segment_size else self.index.base_offset_at(end) - 1
        return BatchHeader(start, end - start, base, last, -1)

    def boundaries(self, low: int, high: int) -> list[int]:
        positions = self.index.positions
        return list(positions[bisect.bisect_right(positions, low) : bisect.bisect_right(positions, high)])

    def base_offset_at(self, position: int) -> int:
        try:
            return self.index.base_offset_at(position)
        except KeyError as err:
            raise CorruptRecordError("no kept batch starts here in the sparse index", position=position) from err


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


def sparse_plan_fits(index: SparseIndex, offset: int, max_bytes: int) -> bool:
    """Whether a plan from ``index`` at ``offset`` keeps within ``max_bytes`` (the span holding it fits)."""
    start, end, _ = index.span_holding(offset)
    return end - start <= max_bytes


def plan_from_sparse_index(
    index: SparseIndex, *, segment_last_offset: int, offset: int, max_bytes: int, range_bytes: int = DEFAULT_RANGE_BYTES
) -> list[ByteRange]:
    """Ranges on the kept starts of a sparse plan index, in memory (module doc): the first range
    starts at the kept start at or below the batch holding ``offset``."""
    return plan_from(
        SparseIndexSource(index, segment_last_offset), base_offset=index.base_offset, segment_last_offset=segment_last_offset,
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
