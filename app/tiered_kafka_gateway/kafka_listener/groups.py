"""Consumer groups: they live in Kafka; the listener is their only address (decision, docs/design-notes.md).

FindCoordinator (``FindCoordinatorRequest.json``, api key 10) for a group answers the listener itself
(its node id, advertised host and port), so a client never learns a Kafka broker's address: were it
to, librdkafka would take Metadata from that broker too, find Kafka leading the partitions, and
fetch from Kafka. The group requests a client then sends the listener (JoinGroup, SyncGroup,
Heartbeat, LeaveGroup, OffsetCommit, OffsetFetch: the classic protocol; ConsumerGroupHeartbeat:
KIP-848's) are forwarded byte for byte to the group's coordinator in Kafka (found with Kafka's
FindCoordinator, by the group id the request names), over upstream connections of the client's own
connection (a broker answers a connection's requests one at a time: a JoinGroup held for a rebalance
must not hold anyone else's). Only the correlation id is rewritten, both ways. So groups, their
rebalances and committed offsets are Kafka's, visible to every Kafka tool, and a member may read
through the listener while another reads Kafka directly. KIP-848 assignments name topic ids: the
listener's Metadata gives Kafka's ids for the topics Kafka knows (``context``).

The versions advertised for these APIs are those both the listener's schemas and the cluster's
brokers support. Without ``bootstrap_servers`` there is no group coordinator: FindCoordinator answers
COORDINATOR_NOT_AVAILABLE (groups need Kafka; ``assign`` works without). Transaction coordinators
(KeyType 1) are never answered: a read replica takes no writes.

**A token's topic scope** (``sasl``) applies to the group requests too, as Kafka's authorizer applies
topic ACLs to them (``scoped``): an OffsetCommit's partitions of topics outside the scope are answered
TOPIC_AUTHORIZATION_FAILED by the listener and left out of what is forwarded (so a read token cannot
move the committed offsets of topics it may not read); an OffsetFetch's answer shows those topics'
partitions as TOPIC_AUTHORIZATION_FAILED with no offset (named ones) or leaves them out (all of a
group's, Topics null); a ConsumerGroupHeartbeat subscribing by name to such a topic is answered
TOPIC_AUTHORIZATION_FAILED without reaching Kafka, as Kafka answers it. Not scoped by topic: a KIP-848
regex subscription (resolved by Kafka's coordinator; a partition of a topic outside the scope it assigns
is still refused at Fetch).

**A token's groups** (``Access.may_use_group``, the grant's ``groups``; none unless named: ``tokens``)
are checked before anything reaches Kafka, as Kafka's authorizer checks a Group ACL (``group_refusal``):
FindCoordinator answers GROUP_AUTHORIZATION_FAILED for such a group id, and so does every group request
naming one (JoinGroup, SyncGroup, Heartbeat, LeaveGroup, ConsumerGroupHeartbeat at the top; OffsetCommit
per partition; OffsetFetch per group, a request naming several answered whole when one is refused).
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tiered_kafka_gateway.kafka_listener import errors as kafka_errors
from tiered_kafka_gateway.deps import Access
from tiered_kafka_gateway.kafka_listener.codec import Reader, decode, encode
from tiered_kafka_gateway.kafka_listener.context import ListenerContext
from tiered_kafka_gateway.kafka_listener.framing import API_VERSIONS, RequestHeader, is_flexible, response_header
from tiered_kafka_gateway.kafka_listener.upstream import Connection, KafkaUpstreamError

GROUP_TIMEOUT_S = 330.0  # above a JoinGroup's default rebalance wait (max.poll.interval.ms, 300 s)


async def find_coordinator(ctx: ListenerContext, version: int, request: dict[str, Any], coordinators: dict[str, Any],
                           access: Access | None = None) -> dict[str, Any]:
    host, port = ctx.advertised
    keys = request.get("CoordinatorKeys") if version >= 4 else [request.get("Key")]
    results = []
    for key in keys or []:
        coordinators.pop(key, None)  # a client asks again after NOT_COORDINATOR: find Kafka's anew
        if request.get("KeyType", 0) == 0 and access is not None and not access.may_use_group(key or ""):
            results.append({"Key": key, "NodeId": -1, "Host": "", "Port": -1, "ErrorCode": kafka_errors.GROUP_AUTHORIZATION_FAILED,
                            "ErrorMessage": "this token may not use that group (its grant's groups)"})
        elif request.get("KeyType", 0) != 0 or ctx.upstream is None:
            results.append({"Key": key, "NodeId": -1, "Host": "", "Port": -1, "ErrorCode": kafka_errors.COORDINATOR_NOT_AVAILABLE,
                            "ErrorMessage": "this read replica coordinates no transactions" if request.get("KeyType", 0) else
                            "groups need the cluster's Kafka (bootstrap_servers)"})
        else:
            results.append({"Key": key, "NodeId": ctx.node_id, "Host": host, "Port": port, "ErrorCode": 0, "ErrorMessage": None})
    if version >= 4:
        return {"ThrottleTimeMs": 0, "Coordinators": results}
    one = results[0]
    return {"ThrottleTimeMs": 0, "ErrorCode": one["ErrorCode"], "ErrorMessage": one["ErrorMessage"], "NodeId": one["NodeId"],
            "Host": one["Host"], "Port": one["Port"]}


OFFSET_COMMIT, OFFSET_FETCH, CONSUMER_GROUP_HEARTBEAT = 8, 9, 68


def request_body(header: RequestHeader, frame: bytes | memoryview) -> dict[str, Any]:
    return decode(API_VERSIONS[header.api_key][0] + "Request", header.api_version, frame, header.body_offset)[0]


def group_of(header: RequestHeader, frame: bytes | memoryview, body: dict[str, Any] | None = None) -> str:
    body = request_body(header, frame) if body is None else body
    if "Groups" in body and header.api_key == 9 and header.api_version >= 8:
        groups = body["Groups"] or []
        return groups[0]["GroupId"] if groups else ""
    return body.get("GroupId") or ""


@dataclass
class Scoped:
    """A group request under a token's topic scope (module docstring): the frame to forward (None: answer
    ``answer`` without asking Kafka) and how Kafka's response body becomes the client's."""

    frame: bytes | memoryview | None
    answer: dict[str, Any] | None = None
    fix: Callable[[dict[str, Any]], dict[str, Any]] | None = None


def groups_named(header: RequestHeader, body: dict[str, Any]) -> list[str]:
    """The group ids a group request names (OffsetFetch v8+ may name several)."""
    if header.api_key == OFFSET_FETCH and header.api_version >= 8:
        return [g["GroupId"] for g in body.get("Groups") or []]
    return [body.get("GroupId") or ""]


def group_refusal(header: RequestHeader, body: dict[str, Any], access: Access) -> dict[str, Any] | None:
    """The answer to a group request naming a group the token may not use (module docstring), or None."""
    named = groups_named(header, body)
    if all(access.may_use_group(g) for g in named):
        return None
    error = kafka_errors.GROUP_AUTHORIZATION_FAILED
    if header.api_key == OFFSET_COMMIT:
        return {"ThrottleTimeMs": 0, "Topics": [{"Name": t["Name"], "Partitions": [{"PartitionIndex": p["PartitionIndex"], "ErrorCode": error}
                                                                                    for p in t["Partitions"]]} for t in body.get("Topics") or []]}
    if header.api_key == OFFSET_FETCH and header.api_version >= 8:
        return {"ThrottleTimeMs": 0, "Groups": [{"GroupId": g, "Topics": [], "ErrorCode": error} for g in named]}
    if header.api_key == OFFSET_FETCH:
        return {"ThrottleTimeMs": 0, "Topics": [], "ErrorCode": error}
    return {"ThrottleTimeMs": 0, "ErrorCode": error, "ErrorMessage": "this token may not use that group (its grant's groups)", "MemberEpoch": 0}


def scoped(header: RequestHeader, frame: bytes | memoryview, body: dict[str, Any], access: Access) -> Scoped:
    """``header``'s request as the token's groups and topic scope let it through (module docstring)."""
    answer = group_refusal(header, body, access)
    if answer is not None:
        return Scoped(None, answer)
    if access.patterns is None:
        return Scoped(frame)
    key, version = header.api_key, header.api_version
    if key == OFFSET_COMMIT:
        denied = [t for t in body["Topics"] if not access.allows(t["Name"])]
        if not denied:
            return Scoped(frame)
        refused = [{"Name": t["Name"], "Partitions": [{"PartitionIndex": p["PartitionIndex"], "ErrorCode": kafka_errors.TOPIC_AUTHORIZATION_FAILED}
                                                      for p in t["Partitions"]]} for t in denied]
        allowed = [t for t in body["Topics"] if access.allows(t["Name"])]
        if not allowed:
            return Scoped(None, {"ThrottleTimeMs": 0, "Topics": refused})
        narrowed = bytes(frame[: header.body_offset]) + encode("OffsetCommitRequest", version, {**body, "Topics": allowed}).getvalue()
        return Scoped(narrowed, fix=lambda response: {**response, "Topics": list(response["Topics"]) + refused})
    if key == OFFSET_FETCH:
        def hide(topics: list[dict[str, Any]] | None, named: bool) -> list[dict[str, Any]] | None:
            if topics is None:
                return None
            if not named:  # every topic of the group: only those the token may read
                return [t for t in topics if access.allows(t["Name"])]
            return [t if access.allows(t["Name"]) else {**t, "Partitions": [
                {**p, "CommittedOffset": -1, "CommittedLeaderEpoch": -1, "Metadata": "", "ErrorCode": kafka_errors.TOPIC_AUTHORIZATION_FAILED}
                for p in t["Partitions"]]} for t in topics]

        if version < 8:
            named = body.get("Topics") is not None
            return Scoped(frame, fix=lambda response: {**response, "Topics": hide(response["Topics"], named)})
        named_by_group = {g["GroupId"]: g.get("Topics") is not None for g in body["Groups"] or []}
        return Scoped(frame, fix=lambda response: {**response, "Groups": [
            {**g, "Topics": hide(g["Topics"], named_by_group.get(g["GroupId"], False))} for g in response["Groups"] or []]})
    if key == CONSUMER_GROUP_HEARTBEAT:
        denied_names = [n for n in body.get("SubscribedTopicNames") or [] if not access.allows(n)]
        if denied_names:
            return Scoped(None, {"ThrottleTimeMs": 0, "ErrorCode": kafka_errors.TOPIC_AUTHORIZATION_FAILED,
                                 "ErrorMessage": f"not authorized to read topics: {', '.join(sorted(denied_names))}",
                                 "MemberId": None, "MemberEpoch": 0, "HeartbeatIntervalMs": 0, "Assignment": None})
    return Scoped(frame)


def response_body_offset(api_key: int, version: int, response: bytes) -> int:
    """Where a response's body starts after its header (correlation id, and tagged fields when flexible)."""
    reader = Reader(response, 4)
    if api_key != 18 and is_flexible(api_key, version, "Response"):
        for _ in range(reader.uvarint()):
            reader.uvarint()
            reader.take(reader.uvarint())
    return reader.pos


async def forward(ctx: ListenerContext, header: RequestHeader, frame: bytes | memoryview, conns: dict[tuple[str, int], Connection],
                  coordinators: dict[str, tuple[str, int]], access: Access | None = None) -> bytes | None:
    """Kafka's response to the forwarded request (within ``access``'s topic scope: ``scoped``), with the
    client's correlation id; None: no coordinator reachable (the connection is closed, as a broker that went
    away; the client reconnects and asks again)."""
    if ctx.upstream is None:
        return None
    body = request_body(header, frame)
    scope = scoped(header, frame, body, access) if access is not None else Scoped(frame)
    name = API_VERSIONS[header.api_key][0] + "Response"
    if scope.frame is None:
        assert scope.answer is not None
        return response_header(header.api_key, header.api_version, header.correlation_id) + encode(name, header.api_version, scope.answer).getvalue()
    frame = scope.frame
    group = group_of(header, frame, body)
    address = coordinators.get(group)
    try:
        if address is None:
            error, found, _node = await ctx.upstream.find_coordinator(group)
            if error or found is None:
                return None
            address = coordinators[group] = found
        conn = conns.get(address)
        if conn is None or conn.closed:
            conn = conns[address] = await Connection.open(*address)
        response = await conn.forward(frame, GROUP_TIMEOUT_S)
    except KafkaUpstreamError:
        coordinators.pop(group, None)
        return None
    if scope.fix is not None:
        start = response_body_offset(header.api_key, header.api_version, response)
        fixed = scope.fix(decode(name, header.api_version, response, start)[0])
        return response_header(header.api_key, header.api_version, header.correlation_id) + encode(name, header.api_version, fixed).getvalue()
    return struct.pack(">i", header.correlation_id) + response[4:]
