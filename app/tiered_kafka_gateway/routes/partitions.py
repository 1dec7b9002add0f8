"""Clusters, topics, partitions, read plans and offsets for a timestamp.

Remote data is served whether or not Kafka knows the topic: the partition endpoint reports the
remote extent, and Kafka's (``kafka``) only when Kafka knows the partition; when Kafka is configured
but does not know it, ``kafka`` is null and ``kafka_error`` says so. It answers 404 only when
nothing at all is known of the partition: no remote data, no coverage start, no gap, not in Kafka.
Offsets before the coverage start and recorded gaps are reported as such (``coverage_start_offset``,
``gaps``), never left for the reader to discover as silence.

A plan holds at most ``max_ranges_per_plan`` ranges (``remote`` module doc, "Bounds"): ``max_bytes``
is first lowered to ``range_bytes`` times that many, then the ranges cut to it; ``next_offset``
says where the next plan continues (decision: what fits rather than a 400).
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query, Response

from tiered_kafka.format.record_batch import iter_batches
from tiered_kafka.registry import SegmentEntry
from tiered_kafka.client.remote_read import DecodedBatch, decode_batch
from tiered_kafka_gateway import kafka_offsets
from tiered_kafka_gateway.deps import Caller, Cluster, PartitionId, Settings, Topic, visible_clusters
from tiered_kafka_gateway.errors import ErrorCode, GatewayError
from tiered_kafka_gateway.records import MAX_RECORDS_LIMIT, DecodeBudget, IsolationLevel, committed_batches, max_decoded_bytes
from tiered_kafka_gateway.partition_listing import format_cursor, parse_cursor, topic_map
from tiered_kafka_gateway.remote import max_ranges_per_plan
from tiered_kafka_gateway.models import (
    ClusterList,
    ErrorDetail,
    ErrorResponse,
    GapOut,
    KafkaExtent,
    OffsetForTime,
    PartitionDetail,
    PlanResponse,
    RangeOut,
    RemoteExtent,
    SegmentRef,
    TopicList,
    TopicPartitions,
)

ERRORS = {status: {"model": ErrorResponse} for status in (401, 404, 409, 416, 422, 500, 502, 503)}
# the routes of one topic also answer 403 topic_authorization_failed (deps module docstring)
TOPIC_ERRORS = {403: {"model": ErrorResponse, "description": "topic_authorization_failed: the token may not read the topic"}}
TOPIC_PAGE = 1000
MAX_TOPIC_PAGE = 10_000

router = APIRouter(prefix="/v1", responses=ERRORS)  # type: ignore[arg-type]
Offset = Annotated[int, Query(ge=0, le=2**63 - 1, description="Kafka offset")]


@router.get("/clusters", operation_id="listClusters", summary="Clusters served by this gateway")
def clusters_(settings: Settings, caller: Caller) -> ClusterList:
    return ClusterList(clusters=visible_clusters(settings, caller))


@router.get("/clusters/{cluster}/topics", operation_id="listTopics", summary="Topics with remote data (those the caller may read)")
def list_topics(
    cluster: Cluster,
    caller: Caller,
    after: Annotated[str | None, Query(description="the cursor of the previous page's next_after")] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_TOPIC_PAGE, description="partitions a page")] = TOPIC_PAGE,
) -> TopicList:
    """A page of the listing (issue 34: paged, costs the page): ``limit`` partitions after ``after``."""
    try:
        cursor = None if after is None else parse_cursor(after)
    except ValueError as err:
        raise GatewayError(ErrorCode.INVALID_REQUEST, str(err)) from None
    page = cluster.partition_page(after=cursor, limit=limit)
    topics = topic_map(page.partitions)
    return TopicList(
        cluster=cluster.name,
        topics=[TopicPartitions(name=t, partitions=ps) for t, ps in topics.items() if caller.allows(t)],
        complete=page.complete,
        next_after=None if page.next_after is None else format_cursor(page.next_after),
        total_partitions=page.total,
    )


@router.get(
    "/clusters/{cluster}/topics/{topic}/partitions/{partition}",
    operation_id="getPartition",
    summary="Remote and broker offsets, coverage start and gaps",
    responses=TOPIC_ERRORS,  # type: ignore[arg-type]
)
def get_partition(cluster: Cluster, topic: Topic, partition: PartitionId) -> PartitionDetail:
    info = cluster.partition_info(topic, partition)
    remote = None
    if info is not None and not info.is_empty:
        remote = RemoteExtent(
            earliest_offset=info.earliest_offset,
            latest_offset=info.latest_offset,
            segment_count=info.segment_count,
            total_bytes=info.total_bytes,
            last_stable_offset=cluster.last_stable_offset(topic, partition, info),
        )
    coverage = cluster.coverage_start(topic, partition)
    gaps = [GapOut(start_offset=g.start_offset, end_offset=g.end_offset, reason=g.reason) for g in cluster.gaps(topic, partition)]
    kafka = kafka_error = None
    if cluster.bootstrap_servers:
        try:
            low, high = kafka_offsets.watermarks(cluster, topic, partition)
            kafka = KafkaExtent(log_start_offset=low, high_watermark=high)
        except GatewayError as err:
            if err.error is not ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
                raise
            kafka_error = ErrorDetail(code=err.error.code, message=err.message)
    if remote is None and kafka is None and coverage is None and not gaps:
        where = "remote storage and Kafka" if cluster.bootstrap_servers else "remote storage (no Kafka is configured)"
        raise GatewayError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"no data for {topic}-{partition} in cluster {cluster.name}: {where} know nothing of it")
    return PartitionDetail(
        cluster=cluster.name,
        topic=topic,
        partition=partition,
        remote=remote,
        kafka=kafka,
        kafka_error=kafka_error,
        coverage_start_offset=None if coverage is None else coverage.offset,
        coverage_observed_ms=None if coverage is None else coverage.observed_ms,
        gaps=gaps,
    )


@router.get(
    "/clusters/{cluster}/topics/{topic}/partitions/{partition}/plan",
    operation_id="locate",
    summary="Presigned, batch-aligned byte ranges for reading from an offset",
    response_model=PlanResponse,
    responses=TOPIC_ERRORS,  # type: ignore[arg-type]
)
def locate(
    cluster: Cluster,
    topic: Topic,
    partition: PartitionId,
    offset: Offset,
    max_bytes: Annotated[int | None, Query(ge=1, description="bytes to plan (default: default_max_bytes)")] = None,
    isolation_level: Annotated[
        IsolationLevel, Query(description="read_committed: the plan also carries the remote last stable offset (one more registry read)")
    ] = IsolationLevel.READ_UNCOMMITTED,
    range_bytes: Annotated[
        int | None,
        Query(ge=4096, description="preferred size of one range, up to max_bytes_limit (default: range_bytes); max_bytes gives the fewest ranges, hence GETs; "
        "a plan holds at most max_ranges_per_plan ranges (next_offset continues)"),
    ] = None,
) -> Response:
    settings = cluster.settings
    wanted = settings.default_max_bytes if max_bytes is None else max_bytes
    if wanted > settings.max_bytes_limit:
        raise GatewayError(ErrorCode.INVALID_REQUEST, f"max_bytes {wanted} is above the limit {settings.max_bytes_limit}")
    if range_bytes is not None and range_bytes > settings.max_bytes_limit:
        raise GatewayError(ErrorCode.INVALID_REQUEST, f"range_bytes {range_bytes} is above the limit {settings.max_bytes_limit}")
    wanted = min(wanted, (range_bytes or settings.range_bytes) * max_ranges_per_plan(settings))  # module doc: bounded presigns
    plan = cluster.plan(topic, partition, offset, wanted, range_bytes=range_bytes)
    body = PlanResponse(
        cluster=cluster.name,
        topic=topic,
        partition=partition,
        offset=offset,
        segment=SegmentRef(object_key=plan.segment.object_key, base_offset=plan.segment.base_offset, last_offset=plan.segment.last_offset, size=plan.segment.size),
        ranges=[
            RangeOut(start=r.start, end=r.end, size=r.size, first_offset=r.first_offset, last_offset=r.last_offset, url=u, range_header=r.http_range, transformed=t)
            for r, u, t in zip(plan.ranges, plan.urls, plan.transformed or [None] * len(plan.ranges), strict=True)
        ],
        next_offset=plan.ranges[-1].last_offset + 1,
        expires_at_ms=plan.expires_at_ms,
        gap=None if plan.gap is None else GapOut(start_offset=plan.gap.start_offset, end_offset=plan.gap.end_offset, reason=plan.gap.reason),
        last_stable_offset=cluster.last_stable_offset(topic, partition) if isolation_level is IsolationLevel.READ_COMMITTED else None,
    )
    # the hot path: serialized once here (built through the model, so it matches the schema),
    # instead of being validated again by FastAPI's response_model machinery
    return Response(body.model_dump_json(), media_type="application/json")


@router.get(
    "/clusters/{cluster}/topics/{topic}/partitions/{partition}/offsets",
    operation_id="offsetForTimestamp",
    summary="The first remote offset whose timestamp is at or after a time",
    responses=TOPIC_ERRORS,  # type: ignore[arg-type]
)
def offset_for_timestamp(
    cluster: Cluster,
    topic: Topic,
    partition: PartitionId,
    timestamp: Annotated[int, Query(ge=0, le=2**63 - 1, description="epoch milliseconds")],
    isolation_level: Annotated[
        IsolationLevel, Query(description="read_committed: no offset whose transaction is still open in remote storage (Kafka's ListOffsets)")
    ] = IsolationLevel.READ_UNCOMMITTED,
) -> OffsetForTime:
    found = remote_offset_for_timestamp(cluster, topic, partition, timestamp, isolation_level)
    return OffsetForTime(
        cluster=cluster.name,
        topic=topic,
        partition=partition,
        timestamp=timestamp,
        offset=None if found is None else found[0],
        record_timestamp=None if found is None else found[1],
    )


def remote_offset_for_timestamp(
    cluster: Cluster, topic: str, partition: int, timestamp: int, isolation_level: IsolationLevel = IsolationLevel.READ_UNCOMMITTED
) -> tuple[int, int] | None:
    """Kafka's ListOffsets rule over remote data: the first record (control records aside) whose
    timestamp is >= ``timestamp``, as (offset, its timestamp), or None. The registry's per-segment
    max timestamps pick the segment, its batch index (or, without one, its .timeindex, .index and
    batch headers: ``ClusterSource.batches_reaching``) the batch; only that batch is downloaded.

    Under read_committed, as Kafka's ListOffsets with READ_COMMITTED answers no offset at or past
    the last stable offset: when the record found belongs to a transaction that is undecided in
    remote storage (``tiered_kafka.transactions``: no marker of its producer after it in remote
    data, read ahead for markers only as the records endpoint does), the answer is None. A record
    of an aborted transaction is answered, as Kafka does: a read_committed reader starting there
    skips it. Nor is an offset at or past the remote last stable offset answered
    (``ClusterSource.last_stable_offset``; when unknown, transactions of other producers opened
    before the record are not searched for)."""
    if cluster.partition_info(topic, partition) is None:
        raise GatewayError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"no remote data for {topic}-{partition}")
    budget = DecodeBudget(0, MAX_RECORDS_LIMIT, max_decoded_bytes(cluster.settings))  # records module doc, "Bounded decoding"
    for segment in cluster.segments_from_time(topic, partition, timestamp):  # the registry's time index: logarithmic (issue 34)
        if segment.max_timestamp < timestamp:
            continue
        for batch_range in cluster.batches_reaching(segment, timestamp):
            data = cluster.read_range(segment.object_key, batch_range)
            for batch in iter_batches(data, position=batch_range.start):
                if batch.is_control:
                    continue
                budget.charge(batch, "/offsets answer")  # before it is inflated
                for record in batch:
                    if record.timestamp is not None and record.timestamp >= timestamp:
                        if isolation_level is IsolationLevel.READ_COMMITTED and not _committed_visible(cluster, topic, partition, segment, batch, record.offset):
                            return None
                        return record.offset, record.timestamp
    return None


def _committed_visible(cluster: Cluster, topic: str, partition: int, segment: SegmentEntry, batch: Any, offset: int) -> bool:
    """Whether read_committed may answer ``offset`` (of ``batch``): below the remote LSO, and decided."""
    stable_end = cluster.last_stable_offset(topic, partition)
    if stable_end is not None and offset >= stable_end:
        return False
    return _decided(cluster, topic, partition, segment, decode_batch(batch, with_records=False))


def _decided(cluster: Cluster, topic: str, partition: int, segment: SegmentEntry, batch: DecodedBatch) -> bool:
    """Whether read_committed has decided ``batch`` from remote data (committed or aborted): the rule's answer."""
    info = cluster.partition_info(topic, partition)
    latest = batch.last_offset if info is None else info.latest_offset
    aborted = cluster.aborted_txns(topic, partition, segment)
    _, held = committed_batches(cluster, topic, partition, [batch], aborted, {segment.object_key}, batch.last_offset + 1, latest)
    return held is None
