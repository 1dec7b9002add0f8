"""A read plan as every cluster source answers it, and the answer for an offset outside the remote range.

``Plan``: one segment's batch-aligned byte ranges from an offset (``tiered_kafka.read_plan``), each
with the URL a client GETs it by, when the URLs expire, and the gap the offset fell in (the plan then
starts after it). ``out_of_range``: the 416 for an offset the source does not hold, as
``offset_not_in_remote_storage`` past the remote range's end (it may still be uploaded) and
``offset_out_of_range`` below its start, both with the range in ``earliest_offset``/``latest_offset``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tiered_kafka.read_plan import ByteRange
from tiered_kafka.registry import Gap
from tiered_kafka_gateway.caches import RemoteSegment
from tiered_kafka_gateway.errors import ErrorCode, GatewayError


@dataclass(frozen=True)
class Plan:
    segment: RemoteSegment
    ranges: list[ByteRange]
    urls: list[str] = field(repr=False)  # presigned: each is a credential for its range (issue 36: out of reprs)
    expires_at_ms: int
    gap: Gap | None  # set when the requested offset fell in a gap and the plan starts after it
    transformed: list[Any] | None = None  # per range, a models.ChunkedRange or None (compressed KIP-405 segments: rsm_reader)


def max_ranges_per_plan(settings: Any) -> int:
    """The ``max_ranges_per_plan`` setting: the most ranges one plan holds, whichever source plans it
    (``remote`` module doc, "Bounds"; the KIP-405 reader too: issue 36); ``next_offset`` continues after the last."""
    return int(settings.max_ranges_per_plan)


def out_of_range(topic: str, partition: int, offset: int, earliest: int, latest: int) -> GatewayError:
    """The 416 for ``offset`` outside ``earliest..latest`` (module docstring)."""
    error = ErrorCode.OFFSET_NOT_REMOTE if offset > latest else ErrorCode.OFFSET_OUT_OF_RANGE
    return GatewayError(
        error,
        f"offset {offset} of {topic}-{partition} is outside the remote range {earliest}..{latest}",
        earliest_offset=earliest,
        latest_offset=latest,
    )
