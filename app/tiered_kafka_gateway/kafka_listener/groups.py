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
"""

from __future__ import annotations

import struct
from typing import Any

from tiered_kafka_gateway.kafka_listener import errors as kafka_errors
from tiered_kafka_gateway.kafka_listener.codec import decode
from tiered_kafka_gateway.kafka_listener.context import ListenerContext
from tiered_kafka_gateway.kafka_listener.framing import API_VERSIONS, RequestHeader
from tiered_kafka_gateway.kafka_listener.upstream import Connection, KafkaUpstreamError

GROUP_TIMEOUT_S = 330.0  # above a JoinGroup's default rebalance wait (max.poll.interval.ms, 300 s)


async def find_coordinator(ctx: ListenerContext, version: int, request: dict[str, Any], coordinators: dict[str, Any]) -> dict[str, Any]:
    host, port = ctx.advertised
    keys = request.get("CoordinatorKeys") if version >= 4 else [request.get("Key")]
    results = []
    for key in keys or []:
        coordinators.pop(key, None)  # a client asks again after NOT_COORDINATOR: find Kafka's anew
        if request.get("KeyType", 0) != 0 or ctx.upstream is None:
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


def group_of(header: RequestHeader, frame: bytes | memoryview) -> str:
    body, _ = decode(API_VERSIONS[header.api_key][0] + "Request", header.api_version, frame, header.body_offset)
    if "Groups" in body and header.api_key == 9 and header.api_version >= 8:
        groups = body["Groups"] or []
        return groups[0]["GroupId"] if groups else ""
    return body.get("GroupId") or ""


async def forward(ctx: ListenerContext, header: RequestHeader, frame: bytes | memoryview, conns: dict[tuple[str, int], Connection],
                  coordinators: dict[str, tuple[str, int]]) -> bytes | None:
    """Kafka's response to the forwarded request, with the client's correlation id; None: no coordinator
    reachable (the connection is closed, as a broker that went away; the client reconnects and asks again)."""
    if ctx.upstream is None:
        return None
    group = group_of(header, frame)
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
    return struct.pack(">i", header.correlation_id) + response[4:]
