"""The read side of a partition log (Java ``LocalLog.read``, ``LogSegment.read``,
``LocalLog.collectAbortedTransactions``, ``UnifiedLog.fetchOffsetByTimestamp``).

``LogReads`` is a mixin of ``log_writer.PartitionLog``, kept apart so that each module stays one
job: it reads the segments the writer keeps (``_segments``, ``_active``, ``_log_start_offset``,
``log_end_offset``) and never changes them.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from tiered_kafka.errors import OffsetOutOfRangeError
from tiered_kafka.format import txn_index
from tiered_kafka.format.record_batch import (
    LAST_OFFSET_DELTA_OFFSET,
    LOG_OVERHEAD,
    LOG_OVERHEAD_STRUCT,
    MAGIC_OFFSET,
    NO_TIMESTAMP,
    RecordBatch,
    iter_batches,
)
from tiered_kafka.format.segment_names import FileKind

if TYPE_CHECKING:
    from tiered_kafka_dev.kafka_log.log_segment import Segment as _Segment

_INT32 = struct.Struct(">i").unpack_from


class LogReads:
    """Reads of a partition log's segments (see the module docstring)."""

    directory: Path
    _segments: list[_Segment]
    _log_start_offset: int

    @property
    def _active(self) -> _Segment:
        return self._segments[-1]

    @property
    def log_end_offset(self) -> int:
        """The next offset to be assigned (also the high watermark: this log has one replica)."""
        return self._active.next_offset

    # -- reading ---------------------------------------------------------------------------
    def segment_for(self, offset: int) -> _Segment:
        if not self._log_start_offset <= offset < self.log_end_offset:
            raise OffsetOutOfRangeError(
                f"offset {offset} is outside [{self._log_start_offset}, {self.log_end_offset}) of {self.directory}"
            )
        return next(s for s in reversed(self._segments) if s.base_offset <= offset)

    def read(self, offset: int, max_bytes: int, *, min_one_batch: bool = True, max_offset: int | None = None) -> tuple[int, bytes]:
        """Whole batches starting with the one holding ``offset`` (Kafka's ``LocalLog.read``).

        Returns (file position, bytes). With ``min_one_batch`` the first batch is returned even
        when it is larger than ``max_bytes`` (KIP-74: the first partition of a Fetch response);
        without it such a read is empty. Batches stop before exceeding ``max_bytes``, and before
        the first batch at or past ``max_offset`` (read_committed passes the LSO; Kafka's
        maxOffsetMetadata bounds even the first batch). Bytes come from the segment file as
        written, never re-encoded. An offset at the log end gives empty bytes; one outside
        [log start, log end] raises OffsetOutOfRangeError.
        """
        if offset == self.log_end_offset:
            return self._active.size, b""
        if max_offset is not None and offset >= max_offset:
            self.segment_for(offset)  # still out of range below the log start
            return self._active.size, b""
        segment = self.segment_for(offset)
        with open(segment.path(FileKind.LOG), "rb", buffering=0) as f:
            fd = f.fileno()
            start, first_size = self._find_batch(fd, segment, offset)
            if start is None:  # a gap (replayed or compacted data): the next segment holds it
                return self._read_next_segment(segment, max_bytes, min_one_batch, max_offset)
            if first_size > max_bytes and not min_one_batch:
                return start, b""
            data = os.pread(fd, max(first_size, min(max_bytes, segment.size - start)), start)
        end = 0
        for batch in iter_batches(data, position=start, verify_crc=False, allow_truncated_tail=True):
            if max_offset is not None and batch.base_offset >= max_offset:
                break
            end = batch.next_position - start
        return start, data[:end]

    def _find_batch(self, fd: int, segment: _Segment, offset: int) -> tuple[int | None, int]:
        """(position, size) of the first batch whose last offset is >= ``offset``, scanning the
        batch headers forward from the index entry at or below it."""
        position = segment.index.lookup(offset).position
        while position < segment.size:
            header = os.pread(fd, LAST_OFFSET_DELTA_OFFSET + 4, position)
            batch = RecordBatch(memoryview(header), position, header[MAGIC_OFFSET])
            length = LOG_OVERHEAD_STRUCT.unpack_from(header)[1] + LOG_OVERHEAD
            last = batch.base_offset + _INT32(header, LAST_OFFSET_DELTA_OFFSET)[0] if batch.magic >= 2 else batch.base_offset
            if last >= offset:
                return position, length
            position += length
        return None, 0

    def _read_next_segment(self, segment: _Segment, max_bytes: int, min_one_batch: bool, max_offset: int | None) -> tuple[int, bytes]:
        later = [s for s in self._segments if s.base_offset > segment.base_offset]
        if not later:
            return self._active.size, b""
        return self.read(later[0].base_offset, max_bytes, min_one_batch=min_one_batch, max_offset=max_offset)

    def aborted_transactions(self, fetch_offset: int, upper_bound_offset: int) -> list[txn_index.AbortedTxn]:
        """The aborted transactions that can touch records in [fetch_offset, upper_bound_offset)
        (Kafka's ``LocalLog.collectAbortedTransactions``): from the segment holding ``fetch_offset``
        on, until an entry's last stable offset reaches the upper bound."""
        found: list[txn_index.AbortedTxn] = []
        start = next((s for s in reversed(self._segments) if s.base_offset <= fetch_offset), self._segments[0])
        for segment in self._segments[self._segments.index(start) :]:
            entries, complete = txn_index.collect_aborted(segment.aborted, fetch_offset, upper_bound_offset)
            found += entries
            if complete:
                break
        return found

    def offset_for_timestamp(self, timestamp: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record whose timestamp is >= ``timestamp``, or None.

        Kafka's ``UnifiedLog.fetchOffsetByTimestamp`` / ``LogSegment.findOffsetByTimestamp``: the
        first segment whose max timestamp reaches the target, its time index for a starting
        offset, its offset index for a position, then a scan of the batches and their records.
        """
        for segment in self._segments:
            if segment.max_timestamp < timestamp:
                continue
            start_offset = max(segment.times.lookup(timestamp).offset, self._log_start_offset)
            position = segment.index.lookup(start_offset).position
            with open(segment.path(FileKind.LOG), "rb") as f:
                f.seek(position)
                data = f.read(segment.size - position)
            for batch in iter_batches(data, position=position, verify_crc=False):
                if batch.max_timestamp < timestamp or batch.is_control:
                    continue
                for record in batch:
                    record_ts = -1 if record.timestamp is None else record.timestamp
                    if record.offset >= self._log_start_offset and record_ts >= timestamp:
                        return record.offset, record_ts
        return None

    def max_timestamp(self) -> tuple[int, int]:
        """(timestamp, offset) of the record with the largest timestamp (ListOffsets MAX_TIMESTAMP,
        KIP-734), or (-1, -1) for a log without timestamps."""
        best = max(self._segments, key=lambda s: s.max_timestamp)
        if best.max_timestamp < 0:
            return NO_TIMESTAMP, -1
        return best.max_timestamp, best.offset_of_max_timestamp

    def iter_segment_files(self) -> Iterator[tuple[int, Path]]:
        """(base offset, .log path) of every live segment, oldest first."""
        for segment in self._segments:
            yield segment.base_offset, segment.path(FileKind.LOG)
