"""Offset ranges of a partition proven to hold no record stamped in a time range (planner pruning).

``GET /v1/clusters/{cluster}/topics/{topic}/partitions/{partition}/time-ranges?from_timestamp=F&to_timestamp=T``
(ms since the epoch, both inclusive, signed: a bound before 1970 is negative) answers the remote
offsets a reader of [F, T] may skip, for a Spark batch read's timestamp pushdown
(``tiered_kafka.spark.pushdown``, rule 5).

Rule: a registered segment is *pruned* (none of its records can be stamped in [F, T]) when
``max_timestamp`` < F (exact for every entry: the batches' maxTimestamp, Java ``LogValidator``
sets it from the records; it starts at -1, so a segment whose records are stamped below -1 says
-1 and is pruned only for F >= 0, which such records miss), or when its ``min_timestamp_exact``
flag is set and ``min_timestamp`` > T (the agent decodes every record for it, a negative stamp
other than -1 included: ``tiered_kafka_agent.local_segments.MinTimestamp``). A segment without
the flag (registered before it) is kept whatever its ``min_timestamp`` and listed in
``inexact``, so a reader can tell a kept segment that may hold nothing from one that does. A
segment whose records have no timestamp (magic 0: ``max_timestamp`` -1) is pruned for F >= 0:
a NULL timestamp matches no range, as in Kafka's ListOffsets.

Cost (issue 34): the segments before the first whose max timestamp reaches F are pruned by rule
and read from the registry's time index alone (``ClusterSource.ranges_before_time``: no segment
entry, a logarithmic lookup plus their short index members); so is the run of last segments whose
exact min timestamps are all above T (``ranges_after_time``, read from the index's end). Only the
segments between the two are read as entries (``segments_from_time``, stopped at that run), for the
rules segment by segment and ``inexact``: what a reader of [F, T] reads anyway.

Decision: the answer is what is *pruned* (``pruned``: each a maximal run of adjacent pruned
segments' registered ranges [first_offset, last_offset], ``size`` their bytes), never what is
kept. A reader subtracts those from the [start, end) it resolved and reads all the rest, so any
offset the answer says nothing about (below the first registered segment, e.g. deleted by
retention since the reader resolved its offsets; a recorded gap; offsets compacted away; offsets
past the last segment) is read and meets the out-of-range, gap or failOnDataLoss path an
unpruned read meets, never passed over in silence. ``earliest_offset`` is the first registered
segment's first offset in the snapshot answered over (null: none registered): a reader that cut
its start by offsets-for-timestamp *before* this call knows the cut was computed over every
segment from its start on when ``earliest_offset`` <= its start (retention only raises it).

A partition known only from an S3 listing (Pinterest's layout: no registry, no per-segment
timestamps) prunes nothing; its whole extent is listed in ``inexact``: unknown is never empty.
A partition with no remote data at all is 404 ``unknown_topic_or_partition``, as the offsets
endpoint. F > T is 422 ``invalid_request``; a topic the token may not read, 403
``topic_authorization_failed``.
"""

from __future__ import annotations

import itertools
from typing import Annotated

from fastapi import APIRouter, Query

from tiered_kafka.registry import SegmentEntry
from tiered_kafka_gateway.deps import Cluster, PartitionId, Topic
from tiered_kafka_gateway.errors import ErrorCode, GatewayError
from tiered_kafka_gateway.models import OffsetSpan, TimeRanges
from tiered_kafka_gateway.routes.partitions import ERRORS, TOPIC_ERRORS

router = APIRouter(prefix="/v1", responses=ERRORS)  # type: ignore[arg-type]
Millis = Annotated[int, Query(ge=-(2**63), le=2**63 - 1, description="epoch milliseconds, inclusive (negative: before 1970)")]


def pruned(segment: SegmentEntry, low: int, high: int) -> bool:
    """Whether no record of ``segment`` can be stamped in [low, high] (module doc)."""
    return segment.max_timestamp < low or (segment.min_timestamp_exact and segment.min_timestamp > high)


@router.get(
    "/clusters/{cluster}/topics/{topic}/partitions/{partition}/time-ranges",
    operation_id="offsetRangesForTimes",
    summary="Remote offset ranges proven to hold no record stamped in [from_timestamp, to_timestamp] (pruned segments)",
    responses=TOPIC_ERRORS,  # type: ignore[arg-type]
)
def time_ranges(cluster: Cluster, topic: Topic, partition: PartitionId, from_timestamp: Millis, to_timestamp: Millis) -> TimeRanges:
    if from_timestamp > to_timestamp:
        raise GatewayError(ErrorCode.INVALID_REQUEST, f"from_timestamp {from_timestamp} is after to_timestamp {to_timestamp}")
    info = cluster.partition_info(topic, partition)
    if info is None:
        raise GatewayError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"no remote data for {topic}-{partition} in cluster {cluster.name}")
    body = TimeRanges(cluster=cluster.name, topic=topic, partition=partition, from_timestamp=from_timestamp, to_timestamp=to_timestamp)
    # the segments before the first reaching from_timestamp: all pruned, read from the time index (issue 34)
    before = cluster.ranges_before_time(topic, partition, from_timestamp)
    # the last segments all stamped after to_timestamp: pruned too, from the index's end (issue 34)
    after = cluster.ranges_after_time(topic, partition, to_timestamp)
    after_first = after[0][0] if after else None
    rest = cluster.segments_from_time(topic, partition, from_timestamp)
    first_rest = next(rest, None)
    if not before and first_rest is None:
        if not info.is_empty and not cluster.segments_page(topic, partition, 0, 1):  # listed, not registered: nothing known of its timestamps
            body.inexact = [OffsetSpan(first_offset=info.earliest_offset, last_offset=info.latest_offset, size=info.total_bytes)]
        return body
    body.earliest_offset = before[0][0] if before else first_rest.first  # type: ignore[union-attr]
    runs = _Runs()
    for first, last, size in before:
        runs.add(first, last, size)
    for segment in itertools.chain([first_rest] if first_rest is not None else [], rest):
        if after_first is not None and segment.first >= after_first:
            break  # the run read from the index's end starts here
        if not pruned(segment, from_timestamp, to_timestamp):
            if not segment.min_timestamp_exact:
                body.inexact.append(OffsetSpan(first_offset=segment.first, last_offset=segment.last_offset, size=segment.size))
            continue
        runs.add(segment.first, segment.last_offset, segment.size)
    last_pruned = runs.spans[-1][1] if runs.spans else -1
    for first, last, size in after:
        if first > last_pruned:  # never counted twice (a registration between the reads)
            runs.add(first, last, size)
    body.pruned = [OffsetSpan(first_offset=a, last_offset=b, size=n) for a, b, n in runs.spans]
    body.pruned_segments, body.pruned_bytes = runs.segments, runs.bytes
    return body


class _Runs:
    """Pruned segments as maximal runs of adjacent registered ranges (plain lists: thousands a call)."""

    def __init__(self) -> None:
        self.spans: list[list[int]] = []  # [first_offset, last_offset, size]
        self.segments = 0
        self.bytes = 0

    def add(self, first: int, last: int, size: int) -> None:
        """Count a pruned segment, merging it into the last run when adjacent."""
        self.segments += 1
        self.bytes += size
        if self.spans and self.spans[-1][1] + 1 == first:
            self.spans[-1][1] = last
            self.spans[-1][2] += size
        else:
            self.spans.append([first, last, size])
