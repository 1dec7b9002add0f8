"""Planning a KIP-405 segment that serves less than its own end (``rsm_catalog.resolve_lineage``:
a segment overlapping a later lineage in part, ``RsmSegment.serve_last``).

``read_plan.plan_ranges`` plans up to a segment's end. ``ending_with`` gives it the segment's offset
index and batch headers as if the segment ended with the batch holding the last served offset: no
range reaches the offsets another segment serves, and the last range's last offset is that batch's
(when the two segments' batches line up, as replicas of one log do, exactly the last served offset).
"""

from __future__ import annotations

from typing import Any

from tiered_kafka.format.offset_index import OffsetIndex
from tiered_kafka.read_plan import BatchHeader, BatchHeaders, HeaderSource


def ending_with(index: OffsetIndex, headers: BatchHeaders, last_served: int) -> tuple[Any, Any, int]:
    """(index, headers, segment last offset) for ``plan_ranges`` of the segment cut after the batch
    holding ``last_served`` (``OffsetOutOfRangeError`` when the segment does not hold it)."""
    end = HeaderSource(index, headers).holding(last_served)
    return _IndexUpTo(index, end.position + end.size), _HeadersUpTo(headers, end), end.last_offset


class _IndexUpTo:
    """An offset index seen up to original position ``end`` (``plan``: a segment clipped at its end)."""

    def __init__(self, index: OffsetIndex, end: int) -> None:
        self.index, self.end, self.base_offset = index, end, index.base_offset

    def lookup(self, offset: int) -> Any:
        return self.index.lookup(offset)

    def positions_between(self, low: int, high: int) -> list[int]:
        return [p for p in self.index.positions_between(low, high) if p < self.end]


class _HeadersUpTo:
    """Batch headers seen up to the end of batch ``last`` (its end is the segment's end for planning)."""

    def __init__(self, headers: BatchHeaders, last: BatchHeader) -> None:
        self.headers, self.segment_size = headers, last.position + last.size

    def at(self, position: int) -> BatchHeader:
        return self.headers.at(position)
