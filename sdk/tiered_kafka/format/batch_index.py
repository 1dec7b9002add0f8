"""The batch index: one entry per record batch of a segment (our ``{base}.batchindex`` object).

Kafka's ``.index`` (``offset_index``) is sparse — one entry per ``index.interval.bytes`` — and
names a batch by its *last* offset, so exact batch-aligned ranges cannot be planned from it
without reading batch headers from the ``.log``. The agent already reads every batch header when
it checks CRCs before an upload (``tiered_kafka_agent.local_segments.read_stats``); it keeps one
entry per batch and uploads them beside the segment. A reader that has this file plans any range
and answers offsets-for-timestamp from memory, with no ``.index``, ``.timeindex`` or header read.
Not a Kafka file: Kafka has no per-batch index (its ``LogSegment.read`` scans headers from the
``.index`` position, as ``read_plan`` does without this file).
The registry entry carries a small digest of it, the sparse plan index (``format.sparse_index``:
every batch start at least 1 MiB after the previous kept one), so the first plan of a segment
needs no GET of this file.

Layout, big-endian, version 1::

    magic               4 bytes  b"TKBI"
    version             int16    1 (readers refuse others: a new layout gets a new number)
    crc                 uint32   CRC-32C (Castagnoli) of every byte after this field
    baseOffset          int64    the segment's base offset (its file name)
    segmentSize         int64    bytes of the .log the entries describe
    entryCount          int32
    entries             entryCount x 26 bytes, in file order:
        position            uint32  byte position of the batch in the .log (first entry: 0)
        relativeBaseOffset  int32   the batch's baseOffset - the segment's baseOffset
        lastOffsetDelta     int32   the batch header's lastOffsetDelta (lastOffset - baseOffset)
        maxTimestamp        int64   the batch header's maxTimestamp
        recordCount         int32   the batch header's recordCount
        attributes          int16   the batch header's attributes (Kafka's bits: ``record_batch.ATTR_*``;
                                    0x10 transactional, 0x20 control)

Why these choices: the CRC sits in the header, as in Kafka's producer snapshot, so the bytes S3
returns are validated before any entry is believed; a batch's size is the next entry's position
minus its own (the segment size for the last), so it is not stored; positions and relative
offsets fit 32 bits because Kafka's own ``.index`` relies on the same bounds (a segment is at
most 2 GiB, and rolls before a relative offset overflows an int32). 26 bytes per batch: about
0.16% of a segment written in 16 KiB batches, 2.4% in the worst case of one 1 KiB record per
batch. Only magic 2 batches are indexed (older message sets have no lastOffsetDelta or
maxTimestamp in a fixed place): a segment holding others has no batch index
(``UnsupportedFormatError`` from ``build``).
"""

from __future__ import annotations

import bisect
import struct
from array import array
from collections.abc import Iterable
from dataclasses import dataclass

import crc32c

from tiered_kafka.errors import CorruptIndexError, TieredKafkaError
from tiered_kafka.format.record_batch import ATTR_CONTROL, ATTR_TRANSACTIONAL, HEADER_V2_SIZE, RecordBatch, iter_batches

MAGIC = b"TKBI"
VERSION = 1

PREFIX_STRUCT = struct.Struct(
    ">4s"  # magic
    "h"  # version
    "I"  # crc
)
BODY_HEADER_STRUCT = struct.Struct(
    ">q"  # baseOffset
    "q"  # segmentSize
    "i"  # entryCount
)
HEADER_SIZE = PREFIX_STRUCT.size + BODY_HEADER_STRUCT.size  # 30
ENTRY_STRUCT = struct.Struct(
    ">I"  # position
    "i"  # relativeBaseOffset
    "i"  # lastOffsetDelta
    "q"  # maxTimestamp
    "i"  # recordCount
    "h"  # attributes
)
ENTRY_SIZE = ENTRY_STRUCT.size  # 26
MAX_POSITION = 2**32 - 1


class UnsupportedFormatError(TieredKafkaError):
    """A segment whose batches are not magic 2 cannot be indexed or planned from headers alone."""


@dataclass(frozen=True, slots=True)
class BatchEntry:
    """One batch as the index describes it (absolute offsets)."""

    position: int
    size: int
    base_offset: int
    last_offset: int
    max_timestamp: int
    record_count: int
    attributes: int

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & ATTR_CONTROL)

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & ATTR_TRANSACTIONAL)


class BatchIndex:
    """Every batch of one segment, held in compact arrays (about 50 bytes per batch in memory).

    >>> index = BatchIndex.from_entries(100, 300, [(0, 100, 104, 7, 5, 0), (150, 105, 109, 9, 5, 0)])
    >>> index.holding(106).position, BatchIndex.from_bytes(index.to_bytes()).holding(106).size
    (150, 150)
    """

    __slots__ = ("base_offset", "segment_size", "_positions", "_bases", "_lasts", "_max_ts", "_counts", "_attrs", "_reach")

    def __init__(self, base_offset: int, segment_size: int) -> None:
        self.base_offset = base_offset
        self.segment_size = segment_size
        self._positions = array("q")
        self._bases = array("q")
        self._lasts = array("q")
        self._max_ts = array("q")
        self._counts = array("i")
        self._attrs = array("h")
        self._reach = array("q")  # running maximum of maxTimestamp: bisect finds the first batch reaching a time

    # -- building and checking -------------------------------------------------------------
    @classmethod
    def from_entries(
        cls, base_offset: int, segment_size: int, entries: Iterable[tuple[int, int, int, int, int, int]], *, name: str = ".batchindex"
    ) -> BatchIndex:
        """From (position, base offset, last offset, max timestamp, record count, attributes)
        tuples in file order; CorruptIndexError unless they tile the segment with increasing offsets."""
        index = cls(base_offset, segment_size)
        for position, base, last, max_ts, count, attrs in entries:
            index._append(position, base, last, max_ts, count, attrs, name)
        index._check_end(name)
        return index

    def _append(self, position: int, base: int, last: int, max_ts: int, count: int, attrs: int, name: str) -> None:
        n = len(self._positions)
        if n == 0:
            if position != 0 or base < self.base_offset:
                raise CorruptIndexError(f"{name}: entry 0 is at position {position}, offset {base}; expected position 0, offset >= {self.base_offset}")
        elif position - self._positions[-1] < HEADER_V2_SIZE or base <= self._lasts[-1]:
            raise CorruptIndexError(
                f"{name}: entry {n} (position {position}, offset {base}) does not follow entry {n - 1} "
                f"(position {self._positions[-1]}, last offset {self._lasts[-1]})"
            )
        if last < base or position > self.segment_size - HEADER_V2_SIZE or count < 0:
            raise CorruptIndexError(f"{name}: entry {n} is impossible (position {position}, offsets {base}..{last}, {count} records)")
        if base - self.base_offset > 2**31 - 1 or last - base > 2**31 - 1:
            raise CorruptIndexError(f"{name}: entry {n}'s offsets {base}..{last} do not fit a segment based at {self.base_offset}")
        self._positions.append(position)
        self._bases.append(base)
        self._lasts.append(last)
        self._max_ts.append(max_ts)
        self._counts.append(count)
        self._attrs.append(attrs)
        self._reach.append(max(max_ts, self._reach[-1]) if n else max_ts)

    def _check_end(self, name: str) -> None:
        if self._positions and self.segment_size - self._positions[-1] < HEADER_V2_SIZE:
            raise CorruptIndexError(f"{name}: the last entry at {self._positions[-1]} leaves no whole batch before the segment end {self.segment_size}")
        if not self._positions and self.segment_size:
            raise CorruptIndexError(f"{name}: no entries for a segment of {self.segment_size} bytes")

    # -- the file ----------------------------------------------------------------------------
    @classmethod
    def from_bytes(cls, data: bytes | memoryview, *, name: str = ".batchindex") -> BatchIndex:
        """Parse a ``.batchindex`` file; CorruptIndexError names what is wrong (magic, version,
        size, CRC, or entries that do not tile the segment)."""
        if len(data) < HEADER_SIZE:
            raise CorruptIndexError(f"{name}: {len(data)} bytes is shorter than the {HEADER_SIZE}-byte header (truncated)")
        magic, version, crc = PREFIX_STRUCT.unpack_from(data, 0)
        if magic != MAGIC:
            raise CorruptIndexError(f"{name}: magic {bytes(magic)!r} is not {MAGIC!r}: not a batch index")
        if version != VERSION:
            raise CorruptIndexError(f"{name}: version {version} is not supported (this reader knows version {VERSION})")
        base_offset, segment_size, count = BODY_HEADER_STRUCT.unpack_from(data, PREFIX_STRUCT.size)
        expected = HEADER_SIZE + count * ENTRY_SIZE if count >= 0 else -1
        if len(data) != expected:
            raise CorruptIndexError(f"{name}: {len(data)} bytes for {count} entries; expected {expected} (truncated or padded)")
        actual = crc32c.crc32c(memoryview(data)[PREFIX_STRUCT.size :])
        if actual != crc:
            raise CorruptIndexError(f"{name}: CRC-32C {actual:08x} does not match the stored {crc:08x}")
        if base_offset < 0 or segment_size < 0:
            raise CorruptIndexError(f"{name}: negative base offset {base_offset} or segment size {segment_size}")
        entries = (
            (position, base_offset + rel, base_offset + rel + delta, max_ts, n, attrs)
            for position, rel, delta, max_ts, n, attrs in ENTRY_STRUCT.iter_unpack(memoryview(data)[HEADER_SIZE:])
        )
        return cls.from_entries(base_offset, segment_size, entries, name=name)

    def to_bytes(self) -> bytes:
        body = BODY_HEADER_STRUCT.pack(self.base_offset, self.segment_size, len(self)) + b"".join(
            ENTRY_STRUCT.pack(p, b - self.base_offset, last - b, ts, n, a)
            for p, b, last, ts, n, a in zip(self._positions, self._bases, self._lasts, self._max_ts, self._counts, self._attrs, strict=True)
        )
        return PREFIX_STRUCT.pack(MAGIC, VERSION, crc32c.crc32c(body)) + body

    # -- lookups -------------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self._positions)

    @property
    def nbytes(self) -> int:
        """Memory held by the entries (for caches bounded by bytes)."""
        return sum(a.itemsize * len(a) for a in (self._positions, self._bases, self._lasts, self._max_ts, self._counts, self._attrs, self._reach))

    @property
    def last_offset(self) -> int:
        """The last offset of the last batch (base offset - 1 for an empty segment)."""
        return self._lasts[-1] if self._lasts else self.base_offset - 1

    @property
    def positions(self) -> array:
        """Batch start positions, ascending (do not modify)."""
        return self._positions

    def entry(self, slot: int) -> BatchEntry:
        end = self._positions[slot + 1] if slot + 1 < len(self._positions) else self.segment_size
        return BatchEntry(
            self._positions[slot], end - self._positions[slot], self._bases[slot], self._lasts[slot], self._max_ts[slot], self._counts[slot], self._attrs[slot]
        )

    def slot_at(self, position: int) -> int:
        """The slot of the batch starting at ``position``; KeyError when none starts there."""
        slot = bisect.bisect_left(self._positions, position)
        if slot >= len(self._positions) or self._positions[slot] != position:
            raise KeyError(f"no batch starts at position {position}")
        return slot

    def holding(self, offset: int) -> BatchEntry:
        """The first batch whose last offset is >= ``offset`` (Kafka's fetch rule: the batch
        holding it, or the next one when compaction removed it); KeyError past the last batch."""
        slot = bisect.bisect_left(self._lasts, offset)
        if slot >= len(self._lasts):
            raise KeyError(f"offset {offset} is past the last batch (last offset {self.last_offset})")
        return self.entry(slot)

    def first_reaching(self, timestamp: int) -> int | None:
        """The slot of the first batch whose maxTimestamp is >= ``timestamp``, None if none."""
        slot = bisect.bisect_left(self._reach, timestamp)
        return slot if slot < len(self._reach) else None


def build(data: bytes | memoryview, base_offset: int, *, verify_crc: bool = True) -> BatchIndex:
    """The batch index of a ``.log``'s bytes (each batch's CRC checked unless told otherwise).

    Raises CorruptRecordError for a corrupt .log, UnsupportedFormatError when a batch is not magic 2."""
    builder = BatchIndexBuilder(base_offset)
    for batch in iter_batches(data, verify_crc=verify_crc):
        builder.add(batch)
    return builder.finish(len(data))


class BatchIndexBuilder:
    """Collects entries from batches as a scan meets them (the agent's CRC pass)."""

    def __init__(self, base_offset: int) -> None:
        self.base_offset = base_offset
        self._entries: list[tuple[int, int, int, int, int, int]] = []
        self.unsupported: str | None = None  # why this segment cannot be indexed, once known

    def add(self, batch: RecordBatch) -> None:
        if batch.magic != 2:
            self.unsupported = f"batch at position {batch.position} has magic {batch.magic}; batch indexes need magic 2"
            return
        self._entries.append((batch.position, batch.base_offset, batch.last_offset, batch.max_timestamp, batch.record_count, batch.attributes))

    def finish(self, segment_size: int) -> BatchIndex:
        if self.unsupported is not None:
            raise UnsupportedFormatError(self.unsupported)
        if segment_size > MAX_POSITION:
            raise UnsupportedFormatError(f"a segment of {segment_size} bytes is beyond 32-bit positions")
        return BatchIndex.from_entries(self.base_offset, segment_size, self._entries)
