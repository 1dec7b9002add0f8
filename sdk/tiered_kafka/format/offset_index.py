"""The offset index: a segment's ``.index`` file (Java ``org.apache.kafka.storage.internals.log.OffsetIndex``).

A sparse map from offset to the file position of the batch holding it. 8-byte entries::

    relativeOffset int32   offset - segment base offset (the *last* offset of the indexed batch)
    position       int32   byte position of that batch in the .log

Entries are strictly increasing in both fields. The broker adds one when more than
``index.interval.bytes`` were appended since the last entry (see ``tiered_kafka_dev.kafka_log.log_writer``, a test writer). The active
segment's file is preallocated to ``segment.index.bytes`` and zero-filled at its tail; an
all-zero entry can never be a real one (position 0 is never indexed, since an entry needs
bytes appended before it), so the valid entries end at the first all-zero entry.

Lookup is Kafka's: the largest entry whose offset is <= the target, or (base offset, 0)
when there is none; the reader then scans forward from that position.
"""

from __future__ import annotations

import bisect
import struct
from dataclasses import dataclass
from pathlib import Path

from tiered_kafka.errors import CorruptIndexError

ENTRY_STRUCT = struct.Struct(
    ">i"  # relativeOffset
    "i"  # position
)
ENTRY_SIZE = ENTRY_STRUCT.size  # 8


@dataclass(frozen=True, slots=True)
class OffsetPosition:
    """An absolute offset and the .log position of the batch that holds it."""

    offset: int
    position: int


class OffsetIndex:
    """The valid entries of one ``.index`` file, with Kafka's lookup."""

    __slots__ = ("base_offset", "_offsets", "_positions")

    def __init__(self, base_offset: int, entries: list[OffsetPosition]) -> None:
        self.base_offset = base_offset
        self._offsets = [e.offset for e in entries]
        self._positions = [e.position for e in entries]

    @classmethod
    def from_bytes(cls, data: bytes | memoryview, base_offset: int, *, name: str = ".index") -> OffsetIndex:
        """Parse index bytes, ignoring a zero-filled preallocated tail.

        Raises CorruptIndexError for a size that is not a multiple of 8 (unless the excess
        is zero padding), or entries that do not strictly increase.
        """
        usable = len(data) - len(data) % ENTRY_SIZE
        if usable != len(data) and any(bytes(data[usable:])):
            raise CorruptIndexError(f"{name}: size {len(data)} is not a multiple of {ENTRY_SIZE}")
        entries: list[OffsetPosition] = []
        last = OffsetPosition(base_offset - 1, -1)
        for relative, position in ENTRY_STRUCT.iter_unpack(data[:usable]):
            if relative == 0 and position == 0:
                break  # preallocated tail of an active segment's index
            entry = OffsetPosition(base_offset + relative, position)
            if relative < 0 or entry.offset <= last.offset or position <= last.position:
                raise CorruptIndexError(
                    f"{name}: entry {len(entries)} ({relative}, {position}) does not increase "
                    f"past ({last.offset - base_offset}, {last.position})"
                )
            entries.append(entry)
            last = entry
        return cls(base_offset, entries)

    @classmethod
    def read(cls, path: Path, base_offset: int) -> OffsetIndex:
        return cls.from_bytes(path.read_bytes(), base_offset, name=str(path))

    def __len__(self) -> int:
        return len(self._offsets)

    def append(self, offset: int, position: int) -> bytes:
        """Add an entry (the writer's side); returns its 8 bytes for the file."""
        if self._offsets and (offset <= self._offsets[-1] or position <= self._positions[-1]):
            raise CorruptIndexError(f"index entry ({offset}, {position}) does not increase past the last one")
        self._offsets.append(offset)
        self._positions.append(position)
        return encode_entry(self.base_offset, offset, position)

    def positions_between(self, low: int, high: int) -> list[int]:
        """Indexed batch positions p with low < p <= high, ascending (no entry objects built)."""
        return self._positions[bisect.bisect_right(self._positions, low) : bisect.bisect_right(self._positions, high)]

    def entries(self) -> list[OffsetPosition]:
        return [OffsetPosition(o, p) for o, p in zip(self._offsets, self._positions, strict=True)]

    def lookup(self, offset: int) -> OffsetPosition:
        """The largest entry with offset <= ``offset``; (base offset, 0) if none."""
        slot = bisect.bisect_right(self._offsets, offset) - 1
        if slot < 0:
            return OffsetPosition(self.base_offset, 0)
        return OffsetPosition(self._offsets[slot], self._positions[slot])

    def to_bytes(self) -> bytes:
        """The trimmed file contents (as the broker leaves a rotated segment's index)."""
        return b"".join(
            ENTRY_STRUCT.pack(o - self.base_offset, p) for o, p in zip(self._offsets, self._positions, strict=True)
        )


def encode_entry(base_offset: int, offset: int, position: int) -> bytes:
    """One 8-byte entry for ``offset`` at ``position`` in a segment based at ``base_offset``."""
    return ENTRY_STRUCT.pack(offset - base_offset, position)
