"""ListOffsets (``ListOffsetsRequest.json``, api key 2, v1-10) and OffsetForLeaderEpoch
(``OffsetForLeaderEpochRequest.json``, api key 23, v2-4) over both tiers, by the mode.

ListOffsets' Timestamp:

    -2 EARLIEST        the first offset a tier the mode reads holds (``tiered_kafka.modes.earliest``)
    -1 LATEST          Kafka's (high watermark, or last stable offset under read_committed) when the mode
                       reads Kafka and Kafka has the partition; else remote storage's end (its last stable
                       offset under read_committed): REMOTE_ONLY's log end is the remote end
    -3 MAX_TIMESTAMP   the record with the largest timestamp of either tier the mode reads
    -4, -5             (earliest local, earliest pending upload: KIP-405's) Kafka's answer; remote only: -2's
    t >= 0             the first record at or after t: remote storage's answer first
                       (``routes.partitions.remote_offset_for_timestamp``, the HTTP side's rule), Kafka's
                       when remote storage has none and the mode reads Kafka; none: offset -1

OffsetForLeaderEpoch: the listener holds no leader-epoch history of its own and its data never
truncates, so every epoch asked ends at the log end (the LATEST answer): a client validating its
position (KIP-320) always finds it valid.
"""

from __future__ import annotations

from typing import Any

from tiered_kafka.modes import earliest, reads_kafka, reads_remote
from tiered_kafka_gateway.deps import Access
from tiered_kafka_gateway.errors import GatewayError
from tiered_kafka_gateway.kafka_listener import errors as kafka_errors
from tiered_kafka_gateway.kafka_listener.context import ListenerContext
from tiered_kafka_gateway.kafka_listener.upstream import KafkaUpstreamError
from tiered_kafka_gateway.records import IsolationLevel


async def _kafka(ctx: ListenerContext, topic: str, partition: int, timestamp: int, isolation: int) -> tuple[int, int, int] | None:
    """(offset, timestamp, epoch) of Kafka's ListOffsets, None when the mode does not read Kafka or it cannot answer."""
    if ctx.upstream is None or not reads_kafka(ctx.mode):
        return None
    try:
        error, offset, ts, epoch = await ctx.upstream.list_offset(topic, partition, timestamp, isolation)
    except KafkaUpstreamError:
        return None
    return None if error else (offset, ts, epoch)


async def answer(ctx: ListenerContext, topic: str, partition: int, timestamp: int, isolation: int) -> tuple[int, int, int]:
    """(error code, offset, timestamp) for one partition (module docstring)."""
    source = ctx.source
    info = await ctx.blocking(source.partition_info, topic, partition) if reads_remote(ctx.mode) else None
    remote = info if info is not None and not info.is_empty else None
    kafka_known = ctx.upstream is not None and reads_kafka(ctx.mode)
    if timestamp in (-2, -4, -5):
        kafka = await _kafka(ctx, topic, partition, timestamp if timestamp != -5 or remote is None else -2, isolation)
        if timestamp != -2 and kafka is not None:
            return 0, kafka[0], -1
        first = earliest(ctx.mode, kafka[0] if kafka is not None else None, remote.earliest_offset if remote is not None else None)
        return (0, first, -1) if first is not None else (kafka_errors.UNKNOWN_TOPIC_OR_PARTITION, -1, -1)
    if timestamp == -1:
        kafka = await _kafka(ctx, topic, partition, -1, isolation)
        if kafka is not None:
            return 0, max(kafka[0], remote.latest_offset + 1 if remote is not None and not isolation else 0), -1
        if remote is None:
            return kafka_errors.UNKNOWN_TOPIC_OR_PARTITION, -1, -1
        end = remote.latest_offset + 1
        if isolation:
            stable = await ctx.blocking(source.last_stable_offset, topic, partition, remote)
            end = stable if stable is not None else end
        return 0, end, -1
    if timestamp == -3:
        kafka = await _kafka(ctx, topic, partition, -3, isolation)
        best = (kafka[0], kafka[1]) if kafka is not None and kafka[0] >= 0 else None
        if remote is not None:
            segments = await ctx.blocking(source.segments, topic, partition)
            top = max((s.max_timestamp for s in segments), default=-1)
            if top >= 0 and (best is None or top > best[1]):
                found = await _remote_at(ctx, topic, partition, top, isolation)
                best = found or best
        if best is None:
            return (0, -1, -1) if remote is not None or kafka_known else (kafka_errors.UNKNOWN_TOPIC_OR_PARTITION, -1, -1)
        return 0, best[0], best[1]
    if timestamp < 0:
        return kafka_errors.INVALID_REQUEST, -1, -1
    if remote is not None:
        found = await _remote_at(ctx, topic, partition, timestamp, isolation)
        if found is not None:
            return 0, found[0], found[1]
    kafka = await _kafka(ctx, topic, partition, timestamp, isolation)
    if kafka is not None:
        return 0, kafka[0], kafka[1]
    if remote is None and not kafka_known:
        return kafka_errors.UNKNOWN_TOPIC_OR_PARTITION, -1, -1
    return 0, -1, -1


async def _remote_at(ctx: ListenerContext, topic: str, partition: int, timestamp: int, isolation: int) -> tuple[int, int] | None:
    from tiered_kafka_gateway.routes.partitions import remote_offset_for_timestamp  # the HTTP side's rule

    level = IsolationLevel.READ_COMMITTED if isolation else IsolationLevel.READ_UNCOMMITTED
    try:
        return await ctx.blocking(remote_offset_for_timestamp, ctx.source, topic, partition, timestamp, level)
    except GatewayError:
        return None


async def handle_list_offsets(ctx: ListenerContext, access: Access, version: int, request: dict[str, Any]) -> dict[str, Any]:
    isolation = request.get("IsolationLevel", 0)
    topics = []
    for t in request["Topics"]:
        partitions = []
        for p in t["Partitions"]:
            if not access.allows(t["Name"]):
                error, offset, ts = kafka_errors.TOPIC_AUTHORIZATION_FAILED, -1, -1
            else:
                try:
                    error, offset, ts = await answer(ctx, t["Name"], p["PartitionIndex"], p["Timestamp"], isolation)
                except GatewayError:
                    error, offset, ts = kafka_errors.KAFKA_STORAGE_ERROR, -1, -1
            if error:
                ctx.metrics.errors.labels(ctx.name, "ListOffsets", str(error)).inc()
            partitions.append({"PartitionIndex": p["PartitionIndex"], "ErrorCode": error, "OldStyleOffsets": [offset] if offset >= 0 else [],
                               "Timestamp": ts, "Offset": offset, "LeaderEpoch": -1})
        topics.append({"Name": t["Name"], "Partitions": partitions})
    return {"ThrottleTimeMs": 0, "Topics": topics}


async def handle_offset_for_leader_epoch(ctx: ListenerContext, access: Access, version: int, request: dict[str, Any]) -> dict[str, Any]:
    topics = []
    for t in request["Topics"]:
        partitions = []
        for p in t["Partitions"]:
            if not access.allows(t["Topic"]):
                error, end = kafka_errors.TOPIC_AUTHORIZATION_FAILED, -1
            else:
                try:
                    error, end, _ts = await answer(ctx, t["Topic"], p["Partition"], -1, 0)
                except GatewayError:
                    error, end = kafka_errors.KAFKA_STORAGE_ERROR, -1
            partitions.append({"ErrorCode": error, "Partition": p["Partition"], "LeaderEpoch": p["LeaderEpoch"] if not error else -1, "EndOffset": end})
        topics.append({"Topic": t["Topic"], "Partitions": partitions})
    return {"ThrottleTimeMs": 0, "Topics": topics}
