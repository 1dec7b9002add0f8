"""Metadata (``MetadataRequest.json``/``MetadataResponse.json``, api key 3): this listener leads every
partition it serves.

Brokers: the listener alone (``node_id`` at its advertised host and port; every replica behind a load
balancer advertises the same), also the ControllerId. Each partition: LeaderId the listener,
ReplicaNodes and IsrNodes ``[node_id]``, LeaderEpoch -1 (unknown: clients then skip KIP-320's
epoch validation, which has nothing to validate against a read replica whose data never truncates).
ClusterId: Kafka's when the listener reaches Kafka, else the cluster's name.

Topics (``context.Listing``): all of them (Topics null, or empty at v0) lists only those the caller
may read, as Kafka leaves out topics the principal may not Describe; a topic named and not readable
is TOPIC_AUTHORIZATION_FAILED (29), one the listener does not serve UNKNOWN_TOPIC_OR_PARTITION (3),
a topic id it does not know UNKNOWN_TOPIC_ID (100). Topics are never created (AllowAutoTopicCreation
is ignored: this is a read replica).
"""

from __future__ import annotations

from typing import Any

from tiered_kafka_gateway.deps import Access
from tiered_kafka_gateway.kafka_listener.context import ListenerContext
from tiered_kafka_gateway.kafka_listener.errors import TOPIC_AUTHORIZATION_FAILED, UNKNOWN_TOPIC_ID, UNKNOWN_TOPIC_OR_PARTITION


def broker(ctx: ListenerContext) -> dict[str, Any]:
    host, port = ctx.advertised
    return {"NodeId": ctx.node_id, "Host": host, "Port": port, "Rack": None}


async def handle(ctx: ListenerContext, access: Access, version: int, request: dict[str, Any]) -> dict[str, Any]:
    listing = await ctx.listing()
    asked = request.get("Topics")
    if asked is None or (version == 0 and not asked):
        names = sorted(t for t in listing.partitions if access.allows(t))
        wanted: list[tuple[str | None, bytes | None]] = [(t, None) for t in names]
    else:
        wanted = [(t.get("Name"), t.get("TopicId")) for t in asked]
    topics = []
    node = ctx.node_id
    for name, topic_id in wanted:
        if name is None and topic_id is not None and any(topic_id):
            name = listing.by_id.get(topic_id)
            if name is None:
                topics.append({"ErrorCode": UNKNOWN_TOPIC_ID, "Name": None, "TopicId": topic_id, "Partitions": []})
                continue
        if name is None:
            continue
        if not access.allows(name):
            topics.append({"ErrorCode": TOPIC_AUTHORIZATION_FAILED, "Name": name, "TopicId": bytes(16), "Partitions": []})
            continue
        count = listing.partitions.get(name)
        if count is None:
            listing = await ctx.listing(refresh=True)
            count = listing.partitions.get(name)
        if count is None:
            topics.append({"ErrorCode": UNKNOWN_TOPIC_OR_PARTITION, "Name": name, "TopicId": bytes(16), "Partitions": []})
            continue
        partitions = [
            {"ErrorCode": 0, "PartitionIndex": p, "LeaderId": node, "LeaderEpoch": -1, "ReplicaNodes": [node], "IsrNodes": [node], "OfflineReplicas": []}
            for p in range(count)
        ]
        topics.append({"ErrorCode": 0, "Name": name, "TopicId": listing.ids[name], "IsInternal": False, "Partitions": partitions})
    return {"ThrottleTimeMs": 0, "Brokers": [broker(ctx)], "ClusterId": listing.cluster_id, "ControllerId": node, "Topics": topics}
