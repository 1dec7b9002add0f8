"""The time index: a segment's ``.timeindex`` file (Java ``org.apache.kafka.storage.internals.log.TimeIndex``).

A sparse map from timestamp to offset. 12-byte entries::

    timestamp      int64   the segment's largest timestamp so far
    relativeOffset int32   offset - segment base offset, of the batch holding that timestamp

The broker appends an entry alongside each offset-index entry, but only when the max
timestamp grew, and once more when the segment rolls (see ``tiered_kafka_dev.kafka_log.log_writer``, a test writer). Timestamps
strictly increase. Like the offset index, the active segment's file is preallocated and
zero-filled; the valid entries end at the first all-zero entry.

Lookup is Kafka's: the largest entry whose timestamp is <= the target, or
(-1, base offset) when there is none.
"""

from __future__ import annotations

import bisect
import struct
from dataclasses import dataclass
from pathlib import Path

from tiered_kafka.errors import CorruptIndexError

ENTRY_STRUCT = struct.Struct(
    ">q"  # timestamp
    "i"  # relativeOffset
)
ENTRY_SIZE = ENTRY_STRUCT.size  # 12
NO_TIMESTAMP = -1


@dataclass(frozen=True, slots=True)
class TimestampOffset:
    """A timestamp and the absolute offset of the batch holding it."""

    timestamp: int
    offset: int


class TimeIndex:
    """The valid entries of one ``.timeindex`` file, with Kafka's lookup."""

    __slots__ = ("base_offset", "_timestamps", "_offsets")

    def __init__(self, base_offset: int, entries: list[TimestampOffset]) -> None:
        self.base_offset = base_offset
        self._timestamps = [e.timestamp for e in entries]
        self._offsets = [e.offset for e in entries]

    @classmethod
    def from_bytes(cls, data: bytes | memoryview, base_offset: int, *, name: str = ".timeindex") -> TimeIndex:
        """Parse time index bytes, ignoring a zero-filled preallocated tail."""
        usable = len(data) - len(data) % ENTRY_SIZE
        if usable != len(data) and any(bytes(data[usable:])):
            raise CorruptIndexError(f"{name}: size {len(data)} is not a multiple of {ENTRY_SIZE}")
        entries: list[TimestampOffset] = []
        for timestamp, relative in ENTRY_STRUCT.iter_unpack(data[:usable]):
            if timestamp == 0 and relative == 0:
                break  # preallocated tail of an active segment's time index
            entry = TimestampOffset(timestamp, base_offset + relative)
            if relative < 0 or (entries and (timestamp <= entries[-1].timestamp or entry.offset < entries[-1].offset)):
                raise CorruptIndexError(
                    f"{name}: entry {len(entries)} ({timestamp}, {relative}) does not increase past the previous one"
                )
            entries.append(entry)
        return cls(base_offset, entries)

    @classmethod
    def read(cls, path: Path, base_offset: int) -> TimeIndex:
        return cls.from_bytes(path.read_bytes(), base_offset, name=str(path))

    def __len__(self) -> int:
        return len(self._timestamps)

    def maybe_append(self, timestamp: int, offset: int) -> bytes:
        """Kafka's ``TimeIndex.maybeAppend``: add an entry only when ``timestamp`` grew past the
        last entry's; returns the 12 bytes written (empty when nothing was added)."""
        if timestamp <= self.last_entry.timestamp:
            return b""
        if offset < self.last_entry.offset:
            raise CorruptIndexError(f"time index entry ({timestamp}, {offset}) goes back in offsets")
        self._timestamps.append(timestamp)
        self._offsets.append(offset)
        return encode_entry(self.base_offset, timestamp, offset)

    def entries(self) -> list[TimestampOffset]:
        return [TimestampOffset(t, o) for t, o in zip(self._timestamps, self._offsets, strict=True)]

    @property
    def last_entry(self) -> TimestampOffset:
        """The last entry, or (-1, base offset) for an empty index (Kafka's ``lastEntry``)."""
        if not self._timestamps:
            return TimestampOffset(NO_TIMESTAMP, self.base_offset)
        return TimestampOffset(self._timestamps[-1], self._offsets[-1])

    def lookup(self, timestamp: int) -> TimestampOffset:
        """The largest entry with timestamp <= ``timestamp``; (-1, base offset) if none."""
        slot = bisect.bisect_right(self._timestamps, timestamp) - 1
        if slot < 0:
            return TimestampOffset(NO_TIMESTAMP, self.base_offset)
        return TimestampOffset(self._timestamps[slot], self._offsets[slot])

    def to_bytes(self) -> bytes:
        return b"".join(
            ENTRY_STRUCT.pack(t, o - self.base_offset) for t, o in zip(self._timestamps, self._offsets, strict=True)
        )


def encode_entry(base_offset: int, timestamp: int, offset: int) -> bytes:
    """One 12-byte entry: ``timestamp`` held by ``offset`` in a segment based at ``base_offset``."""
    return ENTRY_STRUCT.pack(timestamp, offset - base_offset)
