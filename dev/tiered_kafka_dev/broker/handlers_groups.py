"""Consumer group APIs: FindCoordinator (for groups and transactions), JoinGroup, SyncGroup, Heartbeat, LeaveGroup,
OffsetCommit, OffsetFetch, ListGroups, DescribeGroups.

This broker coordinates every group itself; the state machine lives in ``groups``, and these
handlers only translate between kio's versioned requests and it.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from tiered_kafka_dev.broker.offset_store import CommittedOffset
from tiered_kafka_dev.broker.protocol import RequestContext, millis

if TYPE_CHECKING:
    from tiered_kafka_dev.broker.server import Broker

KEY_TYPE_GROUP = 0
KEY_TYPE_TRANSACTION = 1
NO_AUTHORIZED_OPERATIONS = -2147483648


async def find_coordinator(broker: Broker, ctx: RequestContext, request: Any) -> dict[str, Any]:
    """This broker coordinates every group (key type 0) and every transactional.id (key type 1);
    v4+ batches keys in ``coordinator_keys`` (librdkafka 2.x sends v0-v2, one key)."""
    keys = list(getattr(request, "coordinator_keys", ())) or [getattr(request, "key", "")]
    supported = getattr(request, "key_type", KEY_TYPE_GROUP) in (KEY_TYPE_GROUP, KEY_TYPE_TRANSACTION)
    error = ErrorCode.none if supported else ErrorCode.invalid_request
    message = None if supported else f"unknown coordinator key type {request.key_type}"
    node = broker.node_id if supported else -1
    coordinators = [
        {"key": key, "node_id": node, "host": broker.host if supported else "", "port": broker.port if supported else -1, "error_code": error, "error_message": message}
        for key in keys
    ]
    return {"throttle_time": 0, **coordinators[0], "coordinators": coordinators}


async def join_group(broker: Broker, ctx: RequestContext, request: Any) -> dict[str, Any]:
    session_ms = millis(request.session_timeout)
    result = await broker.groups.join_group(
        group_id=request.group_id,
        member_id=request.member_id,
        group_instance_id=getattr(request, "group_instance_id", None),
        client_id=ctx.client_id or "",
        client_host=f"/{ctx.client_host}",
        session_timeout_ms=session_ms,
        rebalance_timeout_ms=millis(getattr(request, "rebalance_timeout", session_ms)),
        protocol_type=request.protocol_type,
        protocols=[(p.name, bytes(p.metadata)) for p in request.protocols],
        require_known_member_id=ctx.api_version >= 4,
        reason=getattr(request, "reason", None),
    )
    return {
        "throttle_time": 0,
        "error_code": result.error_code,
        "generation_id": result.generation_id,
        "protocol_type": result.protocol_type,
        "protocol_name": result.protocol_name if ctx.api_version >= 7 else (result.protocol_name or ""),
        "leader": result.leader_id,
        "skip_assignment": result.skip_assignment,
        "member_id": result.member_id,
        "members": [{"member_id": m.member_id, "group_instance_id": m.group_instance_id, "metadata": m.metadata} for m in result.members],
    }


async def sync_group(broker: Broker, ctx: RequestContext, request: Any) -> dict[str, Any]:
    result = await broker.groups.sync_group(
        group_id=request.group_id,
        generation_id=request.generation_id,
        member_id=request.member_id,
        group_instance_id=getattr(request, "group_instance_id", None),
        protocol_type=getattr(request, "protocol_type", None),
        protocol_name=getattr(request, "protocol_name", None),
        assignments={a.member_id: bytes(a.assignment) for a in request.assignments},
    )
    return {
        "throttle_time": 0,
        "error_code": result.error_code,
        "protocol_type": result.protocol_type,
        "protocol_name": result.protocol_name,
        "assignment": result.assignment,
    }


async def heartbeat(broker: Broker, ctx: RequestContext, request: Any) -> dict[str, Any]:
    error = broker.groups.heartbeat(
        group_id=request.group_id,
        generation_id=request.generation_id,
        member_id=request.member_id,
        group_instance_id=getattr(request, "group_instance_id", None),
    )
    return {"throttle_time": 0, "error_code": error}


async def leave_group(broker: Broker, ctx: RequestContext, request: Any) -> dict[str, Any]:
    if ctx.api_version >= 3:
        members = [(m.member_id, m.group_instance_id) for m in request.members]
    else:
        members = [(request.member_id, None)]
    error, results = broker.groups.leave_group(group_id=request.group_id, members=members)
    if ctx.api_version < 3 and results:
        error = results[0][2] if error == ErrorCode.none else error
    return {
        "throttle_time": 0,
        "error_code": error,
        "members": [{"member_id": m, "group_instance_id": i, "error_code": e} for m, i, e in results],
    }


def requested_offsets(request: Any) -> dict[tuple[str, int], CommittedOffset]:
    """The offsets of an OffsetCommit or TxnOffsetCommit request, stamped with the time now."""
    now_ms = time.time_ns() // 1_000_000
    return {
        (topic.name, p.partition_index): CommittedOffset(
            offset=p.committed_offset,
            leader_epoch=getattr(p, "committed_leader_epoch", -1),
            metadata=p.committed_metadata,
            commit_timestamp_ms=now_ms,
        )
        for topic in request.topics
        for p in topic.partitions
    }


async def offset_commit(broker: Broker, ctx: RequestContext, request: Any) -> dict[str, Any]:
    offsets = requested_offsets(request)
    unknown = {key for key in offsets if broker.logs.partition(*key) is None}
    errors = broker.groups.commit_offsets(
        group_id=request.group_id,
        generation_id=request.generation_id_or_member_epoch,
        member_id=request.member_id,
        group_instance_id=getattr(request, "group_instance_id", None),
        offsets={k: v for k, v in offsets.items() if k not in unknown},
    )
    errors.update({key: ErrorCode.unknown_topic_or_partition for key in unknown})
    topics: dict[str, list[dict[str, Any]]] = {}
    for (topic, partition), error in errors.items():
        topics.setdefault(topic, []).append({"partition_index": partition, "error_code": error})
    return {"throttle_time": 0, "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()]}


def _fetch_group(broker: Broker, group_id: str, topics: Any, require_stable: bool = False) -> tuple[ErrorCode, list[dict[str, Any]]]:
    """Committed offsets; with ``require_stable`` (OffsetFetch v7+, sent by read_committed consumers) a
    partition with transactional offsets still pending answers UNSTABLE_OFFSET_COMMIT, as Kafka does."""
    wanted = None if topics is None else [(t.name, p) for t in topics for p in t.partition_indexes]
    error, found = broker.groups.fetch_offsets(group_id=group_id, partitions=wanted)
    unstable = broker.transactions.pending_partitions(group_id) if require_stable else set()
    by_topic: dict[str, list[dict[str, Any]]] = {}
    for (topic, partition), committed in found.items():
        entry = {"partition_index": partition, "committed_offset": -1, "committed_leader_epoch": -1, "metadata": "", "error_code": ErrorCode.none}
        if (topic, partition) in unstable:
            entry["error_code"] = ErrorCode.unstable_offset_commit
        elif committed is not None:
            entry.update(committed_offset=committed.offset, committed_leader_epoch=committed.leader_epoch, metadata=committed.metadata or "")
        by_topic.setdefault(topic, []).append(entry)
    return error, [{"name": t, "partitions": ps} for t, ps in by_topic.items()]


async def offset_fetch(broker: Broker, ctx: RequestContext, request: Any) -> dict[str, Any]:
    if ctx.api_version >= 8:
        groups = []
        for group in request.groups:
            error, topics = _fetch_group(broker, group.group_id, group.topics, request.require_stable)
            groups.append({"group_id": group.group_id, "topics": topics, "error_code": error})
        return {"throttle_time": 0, "groups": groups}
    error, topics = _fetch_group(broker, request.group_id, request.topics, getattr(request, "require_stable", False))
    return {"throttle_time": 0, "topics": topics, "error_code": error}


async def list_groups(broker: Broker, ctx: RequestContext, request: Any) -> dict[str, Any]:
    states = list(getattr(request, "states_filter", ())) or None
    groups = [
        {"group_id": g.group_id, "protocol_type": g.protocol_type, "group_state": g.state}
        for g in broker.groups.list_groups(states)
    ]
    return {"throttle_time": 0, "error_code": ErrorCode.none, "groups": groups}


async def describe_groups(broker: Broker, ctx: RequestContext, request: Any) -> dict[str, Any]:
    described = []
    for group_id in request.groups:
        d = broker.groups.describe_group(group_id)
        described.append(
            {
                "error_code": d.error_code,
                "group_id": d.group_id,
                "group_state": d.state,
                "protocol_type": d.protocol_type or "",
                "protocol_data": d.protocol_name or "",
                "members": [
                    {
                        "member_id": m.member_id,
                        "group_instance_id": m.group_instance_id,
                        "client_id": m.client_id,
                        "client_host": m.client_host,
                        "member_metadata": m.metadata,
                        "member_assignment": m.assignment,
                    }
                    for m in d.members
                ],
                "authorized_operations": NO_AUTHORIZED_OPERATIONS,
            }
        )
    return {"throttle_time": 0, "groups": described}
