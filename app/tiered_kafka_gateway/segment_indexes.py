"""A segment's index objects as the gateway reads them: ``.index``, ``.timeindex``, batch headers,
the batch index and the sparse plan index, each loaded once and cached (bounded by bytes).

``SegmentIndexes`` is a part of ``remote.ClusterReader`` (its mixin): it needs the reader's
``_get`` (one counted S3 GET: ``s3_objects``) and caches. The rules for choosing among them live in
``remote`` (the module docstring there); this module only loads and checks.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from typing import Any

from tiered_kafka.errors import CorruptIndexError
from tiered_kafka.format.batch_index import BatchIndex
from tiered_kafka.format.offset_index import OffsetIndex
from tiered_kafka.format.segment_names import FileKind
from tiered_kafka.format.sparse_index import SparseIndex
from tiered_kafka.format.time_index import TimeIndex
from tiered_kafka.read_plan import BatchHeaders, ByteRange
from tiered_kafka.registry import SegmentEntry
from tiered_kafka_gateway.caches import LRU, RemoteSegment
from tiered_kafka_gateway.errors import ErrorCode, GatewayError

log = logging.getLogger(__name__)


class SegmentIndexes:
    indexes: LRU[str, OffsetIndex | TimeIndex]
    headers: LRU[str, BatchHeaders]
    batch_indexes: LRU[str, BatchIndex]
    sparse_indexes: LRU[str, SparseIndex | None]

    def _get(self, key: str, byte_range: str | None = None) -> bytes:
        raise NotImplementedError

    def offset_index(self, log_key: str, base_offset: int) -> OffsetIndex:
        key = log_key[: -len(FileKind.LOG.value)] + FileKind.INDEX.value
        return self.indexes.get_or_load(key, lambda: _parse(OffsetIndex.from_bytes, self._get(key), base_offset, key))  # type: ignore[return-value]

    def time_index(self, log_key: str, base_offset: int) -> TimeIndex:
        key = log_key[: -len(FileKind.LOG.value)] + FileKind.TIMEINDEX.value
        return self.indexes.get_or_load(key, lambda: _parse(TimeIndex.from_bytes, self._get(key), base_offset, key))  # type: ignore[return-value]

    def batch_headers(self, log_key: str, size: int) -> BatchHeaders:
        def read(start: int, end: int) -> bytes:
            data = self._get(log_key, f"bytes={start}-{end - 1}")
            if len(data) != end - start:
                raise GatewayError(ErrorCode.CORRUPT_REMOTE_DATA, f"{log_key}: asked {end - start} bytes at {start}, got {len(data)}")
            return data

        return self.headers.get_or_load(log_key, lambda: BatchHeaders(read, size, on_load=lambda grown: self.headers.put(log_key, grown)))

    def batch_index(self, segment: RemoteSegment | SegmentEntry) -> BatchIndex | None:
        """The segment's batch index (one GET, then cached), or None when it was uploaded without one."""
        if FileKind.BATCHINDEX.value not in segment.files:
            return None
        key = segment.object_key[: -len(FileKind.LOG.value)] + FileKind.BATCHINDEX.value

        def load() -> BatchIndex:
            index = _parse(lambda data, base, name: BatchIndex.from_bytes(data, name=name), self._get(key), segment.base_offset, key)
            if (index.base_offset, index.segment_size, index.last_offset) != (segment.base_offset, segment.size, segment.last_offset):
                raise GatewayError(
                    ErrorCode.CORRUPT_REMOTE_DATA,
                    f"{key} describes offsets {index.base_offset}..{index.last_offset} in {index.segment_size} bytes; the registry says "
                    f"{segment.base_offset}..{segment.last_offset} in {segment.size}",
                )
            # its sparse digest outlives it in the cache: a later first plan, after the (large) batch
            # index was evicted, needs no GET (``remote`` module doc; the registry no longer holds it)
            self.sparse_indexes.put(segment.object_key, SparseIndex.from_batch_index(index))
            return index

        return self.batch_indexes.get_or_load(key, load)

    def batches_reaching(self, segment: RemoteSegment | SegmentEntry, timestamp: int) -> Iterator[ByteRange]:
        """The segment's batches whose maxTimestamp is >= ``timestamp``, in order, as byte ranges
        (offsets-for-timestamp: the first record at or after a time is in the first of them that
        holds a non-control record reaching it). From the batch index when the segment has one (no
        .timeindex, .index or header read); else from the .timeindex, .index and batch headers."""
        index = self.batch_index(segment)
        if index is not None:
            slot = index.first_reaching(timestamp)
            for s in range(len(index) if slot is None else slot, len(index)):
                e = index.entry(s)
                if e.max_timestamp >= timestamp:
                    yield ByteRange(e.position, e.position + e.size, e.base_offset, e.last_offset)
            return
        start = self.time_index(segment.object_key, segment.base_offset).lookup(timestamp).offset
        position = self.offset_index(segment.object_key, segment.base_offset).lookup(start).position
        headers = self.batch_headers(segment.object_key, segment.size)
        while position < segment.size:
            header = headers.at(position)
            if header.max_timestamp >= timestamp:
                yield ByteRange(position, position + header.size, header.base_offset, header.last_offset)
            position += header.size

    def sparse_index(self, segment: RemoteSegment) -> SparseIndex | None:
        """The segment's sparse plan index, parsed once (cached); for an entry without one (every
        entry of registry layout 2), the one derived from its batch index when that was fetched
        before (cached); None when neither, or one that is corrupt or contradicts the entry (logged:
        plans then take the exact path)."""
        if segment.sparse_index is None:  # the registry holds none (layout 2): derived from a batch index fetched before, if cached
            return self.sparse_indexes.peek(segment.object_key)

        def load() -> SparseIndex | None:
            name = f"the sparse index of {segment.object_key}"
            try:
                index = SparseIndex.from_bytes(segment.sparse_index, base_offset=segment.base_offset, segment_size=segment.size, name=name)
                if len(index) and index.base_offset_at(index.positions[-1]) > segment.last_offset:
                    raise CorruptIndexError(f"{name} names offsets past the segment's last offset {segment.last_offset}")
            except CorruptIndexError as err:
                log.warning("%s; planning from the batch index instead", err)
                return None
            return index

        return self.sparse_indexes.get_or_load(segment.object_key, load)


def last_offset_in(index: OffsetIndex, headers: BatchHeaders, base_offset: int, size: int) -> int:
    """A segment's last offset when nothing recorded it: from the offset index's last entry (a
    batch start), the batch headers to the end of the ``.log`` (``size`` bytes); ``base_offset - 1``
    for an empty segment."""
    position = index.entries()[-1].position if len(index) else 0
    last = base_offset - 1
    while position < size:
        header = headers.at(position)
        last, position = header.last_offset, position + header.size
    return last


def _parse(parser: Callable[..., Any], data: bytes, base: int, key: str) -> Any:
    """``parser`` over an index object's bytes (a ``CorruptIndexError`` naming ``key`` is a 502: ``errors.ANSWERS``)."""
    return parser(data, base, name=key)
