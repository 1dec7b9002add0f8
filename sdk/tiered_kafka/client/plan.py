"""A read plan as clients hold it, and the range math the readers share.

The gateway's ``/plan`` answer (``PlanResponse`` of ``openapi/openapi.json``), parsed by
``GatewayClient.plan``: one segment object's batch-aligned byte ranges (``PlannedRange``, each
with the presigned URL to GET it; ``ChunkedRange`` behind a range of a compressed KIP-405
segment), the offset to ask next, and the gap remote storage has recorded there (``PlanGap``).
Two rules every reader (``TieredConsumer``, ``BulkReader``, the Spark source) applies to a plan
live here, once: which of its ranges one GET may fetch together (``coalesce_ranges``), and which
offsets a read meets as a gap (``read_gap``). Pure data and arithmetic: no I/O.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class ChunkedRange:
    """The stored chunks behind a range of a compressed KIP-405 segment (``ChunkedRange`` of the
    API): each a zstd frame; ``remote_read.fetch_range`` decompresses them and keeps ``[start, end)``."""

    compression: str
    fetch_start: int
    fetch_end: int
    range_header: str
    chunk_sizes: tuple[int, ...]
    original_chunk_sizes: tuple[int, ...]
    original_start: int


@dataclass(frozen=True, slots=True)
class PlannedRange:
    """One presigned, batch-aligned byte range of a segment object (``RangeOut``).

    ``transformed``: set when the URL serves stored (compressed) chunks rather than these bytes."""

    start: int
    end: int
    first_offset: int
    last_offset: int
    url: str = field(repr=False)  # a presigned URL is a credential (its signature): out of the default repr
    range_header: str
    transformed: ChunkedRange | None = None

    @property
    def size(self) -> int:
        return self.end - self.start


MIN_RANGE_BYTES = 4096
"""The smallest ``range_bytes`` a plan may ask (the gateway's bound)."""


def coalesce_ranges(ranges: Sequence[PlannedRange], max_bytes: int) -> list[PlannedRange]:
    """Merge a plan's contiguous ranges into as few GETs as ``max_bytes`` allows (#15).

    A plan's ranges lie back to back in one segment object (each ends where the next starts), so
    consecutive ones join into one batch-aligned range holding the first's first offset to the
    last's last offset, fetched with one GET of the shared URL. The gateway's presigned URLs bind
    one object *and one range* (DESIGN.md: Range is a signed header), so only ranges carrying the
    very same URL merge (one signed for the object, or unsigned); a plan asked with
    ``range_bytes`` = ``max_bytes`` (``GatewayClient.plan``'s default) has the fewest ranges the
    batches allow already, each with its own URL. A range alone larger than ``max_bytes`` stays
    whole: batches are never split. Ranges that do not touch (another object, a hole) never merge.

    >>> a = PlannedRange(0, 10, 0, 4, "u", "bytes=0-9"); b = PlannedRange(10, 30, 5, 9, "u", "bytes=10-29")
    >>> [(r.start, r.end, r.first_offset, r.last_offset, r.range_header) for r in coalesce_ranges([a, b], 64)]
    [(0, 30, 0, 9, 'bytes=0-29')]
    >>> len(coalesce_ranges([a, b], 20))
    2
    """
    merged: list[PlannedRange] = []
    for planned in ranges:
        last = merged[-1] if merged else None
        if (
            last is not None and last.end == planned.start and last.url == planned.url and planned.end - last.start <= max_bytes
            and last.transformed is None and planned.transformed is None  # chunk-aligned ranges never merge
        ):
            merged[-1] = PlannedRange(
                start=last.start,
                end=planned.end,
                first_offset=last.first_offset,
                last_offset=planned.last_offset,
                url=last.url,
                range_header=f"bytes={last.start}-{planned.end - 1}",
            )
        else:
            merged.append(planned)
    return merged


@dataclass(frozen=True, slots=True)
class PlanGap:
    """Offsets ``start_offset``..``end_offset`` (inclusive) remote storage does not hold, and why
    (``GapOut``: ``reason`` as the agent recorded it, or no remote segment holding them)."""

    start_offset: int
    end_offset: int
    reason: str


@dataclass(frozen=True, slots=True)
class Plan:
    """A read plan (``PlanResponse``): ranges of one segment, the first holding ``offset``."""

    topic: str
    partition: int
    offset: int
    object_key: str
    segment_base_offset: int
    segment_last_offset: int
    ranges: tuple[PlannedRange, ...]
    next_offset: int
    expires_at_ms: int
    gap: PlanGap | None
    last_stable_offset: int | None = None  # asked with read_committed: the remote LSO (None: unknown)


def read_gap(plan: Plan, offset: int, end: int) -> PlanGap | None:
    """The gap a read of [``offset``, ``end``) meets in ``plan`` (asked at ``offset``): the offsets
    ``offset``..(its first range's first offset or ``end``) - 1 with ``plan.gap``'s reason; None
    when the plan has no gap. The one rule of the bulk API and the Spark source.

    Only ``plan.gap`` (recorded by the agent, or no remote segment holding the offset) is a gap.
    A first range starting after ``offset`` without one is not: its segment holds no batch there
    because compaction removed whole batches (or the segment's base offset lies below its first
    batch), and a Kafka consumer passes such offsets silently (the broker's fetch answers from the
    next batch, ``FetchCollector`` delivers what it gets; Spark's ``KafkaDataConsumer.fetchRecord``
    skips an offset that is "still valid but invisible" and reports data loss only below the
    earliest offset)."""
    if plan.gap is None:
        return None
    first = plan.ranges[0].first_offset
    return PlanGap(offset, max(offset, min(first, end) - 1), plan.gap.reason)
