"""One segment of a partition log as the writer keeps it (Java ``LogSegment``): its files, its size,
the state the index rules need, and its ``.txnindex`` entries.

Indexes (``LogSegment.append``), per batch, *before* counting the batch's bytes:
    if bytesSinceLastIndexEntry > index.interval.bytes:
        offset index += (batch.lastOffset, position of the batch)
        time index   += (maxTimestampSoFar, offsetOfMaxTimestampSoFar) if the timestamp grew
        bytesSinceLastIndexEntry = 0
    bytesSinceLastIndexEntry += batch size
  where maxTimestampSoFar/offsetOfMaxTimestampSoFar track the largest batch maxTimestamp and
  the offset of the first record holding it (checked against broker-written fixtures). Active
  index files are preallocated (sparse, zero-filled) to segment.index.bytes, as Kafka's mmap'd
  indexes are; sealing a segment (``onBecomeInactiveSegment``, ``close``) adds the final time index
  entry and trims both files to their entries.

Transaction index (``LogSegment.updateTxnIndex``, ``TransactionIndex.append``): an ABORT marker
closing a transaction adds its AbortedTxn to the ``.txnindex`` of the segment receiving the marker,
a file created on its first entry (layout and rules: ``txn_index``).

``PartitionLog`` (``log_writer``) owns the list of segments; ``LogReads`` (``log_reader``) reads them.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from tiered_kafka.format import offset_index, time_index, txn_index
from tiered_kafka.format.record_batch import NO_TIMESTAMP, RecordBatch
from tiered_kafka.format.segment_names import FileKind, Suffix, segment_file_name


@dataclass(slots=True)
class Segment:
    """One segment: its files, size and the state the index rules need."""

    directory: Path
    base_offset: int
    created_ms: int
    index: offset_index.OffsetIndex
    times: time_index.TimeIndex
    size: int = 0
    next_offset: int = 0
    bytes_since_last_index_entry: int = 0
    max_timestamp: int = NO_TIMESTAMP
    offset_of_max_timestamp: int = -1
    first_batch_timestamp: int | None = None
    aborted: list[txn_index.AbortedTxn] = field(default_factory=list)  # its .txnindex entries

    @classmethod
    def empty(cls, directory: Path, base_offset: int, created_ms: int) -> Segment:
        return cls(
            directory,
            base_offset,
            created_ms,
            offset_index.OffsetIndex(base_offset, []),
            time_index.TimeIndex(base_offset, []),
            next_offset=base_offset,
        )

    def path(self, kind: FileKind, suffix: Suffix = Suffix.NONE) -> Path:
        return self.directory / segment_file_name(self.base_offset, kind, suffix)

    def files(self) -> list[Path]:
        kinds = (FileKind.LOG, FileKind.INDEX, FileKind.TIMEINDEX, FileKind.TXNINDEX, FileKind.SNAPSHOT)
        return [p for p in (self.path(k) for k in kinds) if p.exists()]

    @property
    def last_offset(self) -> int:
        return self.next_offset - 1

    def largest_timestamp(self) -> int:
        """Kafka's ``LogSegment.largestTimestamp``: max timestamp, or the file's mtime without one."""
        if self.max_timestamp >= 0:
            return self.max_timestamp
        return int(self.path(FileKind.LOG).stat().st_mtime * 1000)

    # -- indexes ---------------------------------------------------------------------------
    def preallocate_indexes(self, segment_index_bytes: int) -> None:
        """Create empty index files sized to segment.index.bytes (sparse, like Kafka's mmap'd indexes)."""
        for kind, entry_size in ((FileKind.INDEX, offset_index.ENTRY_SIZE), (FileKind.TIMEINDEX, time_index.ENTRY_SIZE)):
            with open(self.path(kind), "wb") as f:
                f.truncate(segment_index_bytes // entry_size * entry_size)

    def index_batches(self, batches: list[RecordBatch], index_interval_bytes: int) -> None:
        """Apply the index rules of the module docstring to batches just written at ``size``."""
        index_start = len(self.index) * offset_index.ENTRY_SIZE
        time_start = len(self.times) * time_index.ENTRY_SIZE
        position = self.size
        index_bytes = bytearray()
        time_bytes = bytearray()
        for batch in batches:
            self.track(batch)
            if self.bytes_since_last_index_entry > index_interval_bytes:
                index_bytes += self.index.append(batch.last_offset, position)
                time_bytes += self.times.maybe_append(self.max_timestamp, self.offset_of_max_timestamp)
                self.bytes_since_last_index_entry = 0
            position += batch.size
            self.bytes_since_last_index_entry += batch.size
        write_at(self.path(FileKind.INDEX), index_start, index_bytes)
        write_at(self.path(FileKind.TIMEINDEX), time_start, time_bytes)
        self.size = position

    def track(self, batch: RecordBatch) -> None:
        """Follow a batch of the segment: first and largest timestamps, next offset."""
        if self.first_batch_timestamp is None:
            self.first_batch_timestamp = batch.max_timestamp
        if batch.max_timestamp > self.max_timestamp:
            self.max_timestamp = batch.max_timestamp
            self.offset_of_max_timestamp = batch.offset_of_max_timestamp()
        self.next_offset = batch.last_offset + 1

    def seal(self) -> None:
        """Kafka's ``onBecomeInactiveSegment`` / ``close``: final time entry, trim the indexes."""
        time_start = len(self.times) * time_index.ENTRY_SIZE
        final = self.times.maybe_append(self.max_timestamp, self.offset_of_max_timestamp)
        write_at(self.path(FileKind.TIMEINDEX), time_start, final)
        os.truncate(self.path(FileKind.INDEX), len(self.index) * offset_index.ENTRY_SIZE)
        os.truncate(self.path(FileKind.TIMEINDEX), len(self.times) * time_index.ENTRY_SIZE)

    # -- transaction index -----------------------------------------------------------------
    def append_aborted(self, entries: Iterable[txn_index.AbortedTxn]) -> None:
        """Kafka's ``TransactionIndex.append``: more entries in the segment's .txnindex (created lazily)."""
        entries = list(entries)
        if not entries:
            return
        self.aborted += entries
        with open(self.path(FileKind.TXNINDEX), "ab") as f:
            f.write(b"".join(entry.to_bytes() for entry in entries))

    def load_aborted(self) -> None:
        """Read the segment's .txnindex, when it has one (CorruptIndexError when it is unreadable)."""
        txn_path = self.path(FileKind.TXNINDEX)
        if txn_path.exists():
            self.aborted = txn_index.parse(txn_path.read_bytes(), name=str(txn_path))


def write_at(path: Path, position: int, data: bytes | bytearray) -> None:
    """Write ``data`` at ``position`` of an existing file (nothing for empty data)."""
    if not data:
        return
    with open(path, "r+b") as f:
        f.seek(position)
        f.write(data)
