"""The sparse plan index: a few batch starts per segment, small enough to live in the registry entry.

The batch index (``format.batch_index``) lists every batch, so the gateway must GET it from S3
before it can plan a segment the first time. The sparse plan index keeps only batch starts at
least ``SPARSE_INTERVAL`` bytes apart (the first batch, then each first batch starting
``interval`` or more bytes after the previous kept one), with their base offsets. The agent
derives it from the batch index it built and stores it in the segment's registry entry (field
``sparse_index``, ``tiered_kafka.registry``), so the gateway's first plan of a segment needs no S3
request: every kept position is a batch boundary, and the base offsets name the offsets between
two of them (``read_plan.plan_from_sparse_index``). Not a Kafka file; it plays the part of
Kafka's sparse ``.index`` (one entry per ``index.interval.bytes``) but names each entry by the
*base* offset of the batch starting there, which is what a batch-aligned range needs.

Layout, big-endian, version 1::

    version             int8     1 (readers refuse others: a new layout gets a new number)
    crc                 uint32   CRC-32C (Castagnoli) of every byte after this field
    interval            uint32   the spacing the writer used (entries are at least this far apart)
    entries             n x 8 bytes, n = (length - 9) / 8, in file order:
        position            uint32  byte position of a batch in the .log (first entry: 0)
        relativeBaseOffset  uint32  that batch's baseOffset - the segment's baseOffset

Positions and relative offsets fit 32 bits for the reasons the batch index gives (a segment is
at most 2 GiB and rolls before a relative offset overflows an int32). The segment's base offset
and size are not repeated: they are the registry entry's, and ``from_bytes`` checks the entries
against them. Fixed-width entries parse without a Python loop per byte (``array``), so a cold plan
pays microseconds for it.

Why ``SPARSE_INTERVAL`` = 1 MiB (measured by ``bench/bench_plans.py``, which prints the entry size):
8 bytes per MiB is 8 KiB per 1 GiB segment (about 11 KB of base64 text in Redis, read with every
registry lookup of the segment), and a cold plan starts at most one interval plus one batch
before the requested offset's batch (a client skips the earlier records; a sequential reader
loses nothing, since every range of a sparse plan ends on a kept boundary, where its next plan
starts). 256 KiB would mean 32 KiB per GiB; 4 MiB would make cold plans below ~4 MiB impossible
(a plan from the sparse index needs ``max_bytes`` >= the span holding the offset; smaller plans
take the exact path, one GET of the batch index).
"""

from __future__ import annotations

import bisect
import struct
import sys
from array import array

import crc32c

from tiered_kafka.errors import CorruptIndexError
from tiered_kafka.format.batch_index import BatchIndex

VERSION = 1
SPARSE_INTERVAL = 1024 * 1024

HEADER_STRUCT = struct.Struct(
    ">b"  # version
    "I"  # crc
    "I"  # interval
)
HEADER_SIZE = HEADER_STRUCT.size  # 9
ENTRY_SIZE = 8
_CRC_START = 5  # the CRC covers interval and entries
_LITTLE_ENDIAN = sys.byteorder == "little"


class SparseIndex:
    """Kept batch starts of one segment (positions ascending, absolute base offsets ascending).

    >>> full = BatchIndex.from_entries(100, 300, [(0, 100, 104, 7, 5, 0), (150, 105, 109, 9, 5, 0)])
    >>> sparse = SparseIndex.from_batch_index(full, interval=100)
    >>> list(sparse.positions), SparseIndex.from_bytes(sparse.to_bytes(), base_offset=100, segment_size=300).base_offset_at(150)
    ([0, 150], 105)
    """

    __slots__ = ("base_offset", "segment_size", "interval", "positions", "_relative")

    def __init__(self, base_offset: int, segment_size: int, interval: int, positions: array, relative: array) -> None:
        self.base_offset = base_offset
        self.segment_size = segment_size
        self.interval = interval
        self.positions = positions  # array("I"), do not modify
        self._relative = relative

    @classmethod
    def from_batch_index(cls, index: BatchIndex, *, interval: int = SPARSE_INTERVAL) -> SparseIndex:
        """Keep the first batch, then each first batch at least ``interval`` bytes after the last kept one."""
        if not 0 < interval <= 0xFFFFFFFF:
            raise ValueError(f"interval must be in 1..2**32-1, got {interval}")
        positions, relative = array("I"), array("I")
        next_at = 0
        for slot, position in enumerate(index.positions):
            if position >= next_at:
                positions.append(position)
                relative.append(index.entry(slot).base_offset - index.base_offset)
                next_at = position + interval
        return cls(index.base_offset, index.segment_size, interval, positions, relative)

    def to_bytes(self) -> bytes:
        entries = array("I", (v for pair in zip(self.positions, self._relative, strict=True) for v in pair))
        if _LITTLE_ENDIAN:
            entries.byteswap()
        body = struct.pack(">I", self.interval) + entries.tobytes()
        return struct.pack(">bI", VERSION, crc32c.crc32c(body)) + body

    @classmethod
    def from_bytes(cls, data: bytes | memoryview, *, base_offset: int, segment_size: int, name: str = "sparse index") -> SparseIndex:
        """Parse the layout; CorruptIndexError names what is wrong (version, size, CRC, or entries
        that are not batch starts of a segment of ``segment_size`` bytes in increasing order)."""
        if len(data) < HEADER_SIZE:
            raise CorruptIndexError(f"{name}: {len(data)} bytes is shorter than the {HEADER_SIZE}-byte header (truncated)")
        version, crc, interval = HEADER_STRUCT.unpack_from(data, 0)
        if version != VERSION:
            raise CorruptIndexError(f"{name}: version {version} is not supported (this reader knows version {VERSION})")
        if (len(data) - HEADER_SIZE) % ENTRY_SIZE:
            raise CorruptIndexError(f"{name}: {len(data) - HEADER_SIZE} bytes of entries is not a multiple of {ENTRY_SIZE} (truncated or padded)")
        actual = crc32c.crc32c(memoryview(data)[_CRC_START:])
        if actual != crc:
            raise CorruptIndexError(f"{name}: CRC-32C {actual:08x} does not match the stored {crc:08x}")
        entries = array("I")
        entries.frombytes(bytes(memoryview(data)[HEADER_SIZE:]))
        if _LITTLE_ENDIAN:
            entries.byteswap()
        positions, relative = entries[0::2], entries[1::2]
        if segment_size and (not positions or positions[0] != 0):
            raise CorruptIndexError(f"{name}: the first entry must be at position 0 of a {segment_size}-byte segment")
        if positions and positions[-1] >= segment_size:
            raise CorruptIndexError(f"{name}: position {positions[-1]} is past the segment end {segment_size}")
        for i in range(1, len(positions)):
            if positions[i] <= positions[i - 1] or relative[i] <= relative[i - 1]:
                raise CorruptIndexError(
                    f"{name}: entry {i} (position {positions[i]}, offset {base_offset + relative[i]}) does not follow "
                    f"entry {i - 1} (position {positions[i - 1]}, offset {base_offset + relative[i - 1]})"
                )
        return cls(base_offset, segment_size, interval, positions, relative)

    def __len__(self) -> int:
        return len(self.positions)

    @property
    def nbytes(self) -> int:
        """Memory held by the entries (for caches bounded by bytes)."""
        return 8 * len(self.positions) + 120

    def base_offset_at(self, position: int) -> int:
        """The base offset of the batch starting at kept ``position``; KeyError when none is kept there."""
        slot = bisect.bisect_left(self.positions, position)
        if slot >= len(self.positions) or self.positions[slot] != position:
            raise KeyError(f"no kept batch starts at position {position}")
        return self.base_offset + self._relative[slot]

    def span_holding(self, offset: int) -> tuple[int, int, int]:
        """(start, end, base offset) of the span between kept entries that an ``offset`` of the
        segment falls in: the last kept batch whose base offset is <= ``offset`` (the first one
        when the offset is below every kept base), up to the next kept one or the segment end.
        The batch holding ``offset`` (Kafka's rule: the first whose last offset reaches it) starts
        in this span or at its end."""
        slot = max(0, bisect.bisect_right(self._relative, offset - self.base_offset) - 1)
        end = self.positions[slot + 1] if slot + 1 < len(self.positions) else self.segment_size
        return self.positions[slot], end, self.base_offset + self._relative[slot]
