"""ListOffsets (earliest, latest, by timestamp, max timestamp), OffsetForLeaderEpoch and Metadata's topic ids
through the listener, against Kafka's own answers; and the listener serves exactly what the SDK reads.

Record i of each partition has offset i and timestamp BASE_TS + 10 * i (``conftest``): the older half
is in S3 only, the active segment in Kafka only, so a timestamp answer comes from either tier.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition

from tests.integration.kafka_listener.conftest import BASE_TS, PARTITIONS, PRODUCED, TOPIC, ListenerStack, another_listener
from tests.integration.kafka_listener.test_confluent import as_rec, read_all
from tiered_kafka.consumer import TieredConsumer
from tiered_kafka_gateway.kafka_listener.context import stable_topic_id
from tiered_kafka_gateway.kafka_listener.upstream import Connection

pytestmark = pytest.mark.integration

END = len(PRODUCED[0])


async def ask(address: str, requests: list[tuple[int, str, int, dict[str, Any]]]) -> list[dict[str, Any]]:
    """Each (api key, name, version, body) on one raw connection to ``address``: the decoded answers."""
    host, port = address.split(":")
    conn = await Connection.open(host, int(port))
    try:
        return [await conn.request(*r) for r in requests]
    finally:
        conn.close()


def list_offsets(timestamp: int) -> tuple[int, str, int, dict[str, Any]]:
    return 2, "ListOffsets", 7, {"ReplicaId": -1, "IsolationLevel": 0,
                                 "Topics": [{"Name": TOPIC, "Partitions": [{"PartitionIndex": 0, "CurrentLeaderEpoch": -1, "Timestamp": timestamp}]}]}


def metadata() -> tuple[int, str, int, dict[str, Any]]:
    return 3, "Metadata", 12, {"Topics": [{"TopicId": bytes(16), "Name": TOPIC}], "AllowAutoTopicCreation": False}


def offset_answers(answers: list[dict[str, Any]]) -> list[tuple[int, int, int]]:
    found = [a["Topics"][0]["Partitions"][0] for a in answers]
    return [(p["ErrorCode"], p["Offset"], p["Timestamp"]) for p in found]


def test_list_offsets_and_leader_epochs_over_both_tiers(tiered: ListenerStack) -> None:
    in_s3_only = 100  # below Kafka's log start
    assert in_s3_only < tiered.log_start[0] <= END - 5
    timestamps = [-2, -1, BASE_TS + 10 * in_s3_only + 5, BASE_TS + 10 * (END - 5) + 5, -3, BASE_TS + 10 * END]
    answers = offset_answers(asyncio.run(ask(tiered.listener, [list_offsets(t) for t in timestamps])))
    assert answers == [
        (0, 0, -1),  # earliest: remote storage's first offset, below Kafka's log start
        (0, END, -1),  # latest: Kafka's high watermark
        (0, in_s3_only + 1, BASE_TS + 10 * (in_s3_only + 1)),  # the first record at or after t, from S3
        (0, END - 4, BASE_TS + 10 * (END - 4)),  # from Kafka's active segment
        (0, END - 1, BASE_TS + 10 * (END - 1)),  # max timestamp
        (0, -1, -1),  # past every record
    ]
    held = [1, 3, 4, 5]  # Kafka's own answers where it still holds the records...
    assert [answers[i] for i in held] == offset_answers(asyncio.run(ask(tiered.bootstrap, [list_offsets(timestamps[i]) for i in held])))
    kafka_first = offset_answers(asyncio.run(ask(tiered.bootstrap, [list_offsets(-2), list_offsets(timestamps[2])])))
    assert [o for _e, o, _t in kafka_first] == [tiered.log_start[0]] * 2  # ...not below its log start
    (epochs,) = asyncio.run(ask(tiered.listener, [(23, "OffsetForLeaderEpoch", 4, {"ReplicaId": -1, "Topics": [
        {"Topic": TOPIC, "Partitions": [{"Partition": p, "CurrentLeaderEpoch": -1, "LeaderEpoch": 0} for p in range(PARTITIONS)]}]})]))
    assert [(p["ErrorCode"], p["EndOffset"]) for p in epochs["Topics"][0]["Partitions"]] == [(0, len(PRODUCED[p])) for p in range(PARTITIONS)]


def test_remote_only_max_timestamp_and_stable_topic_ids(tiered: ListenerStack, s3_server: Any) -> None:
    (kafka_meta,) = asyncio.run(ask(tiered.bootstrap, [metadata()]))
    kafka_id = kafka_meta["Topics"][0]["TopicId"]
    (listener_meta,) = asyncio.run(ask(tiered.listener, [metadata()]))
    topic = listener_meta["Topics"][0]
    assert topic["TopicId"] == kafka_id and any(kafka_id)  # Kafka's id where Kafka knows the topic
    assert [p["LeaderId"] for p in topic["Partitions"]] == [listener_meta["Brokers"][0]["NodeId"]] * PARTITIONS
    remote_end = tiered.stack.registry.partition_info(TOPIC, 0).latest_offset + 1
    with another_listener(tiered, s3_server, mode="REMOTE_ONLY") as address:  # never asks Kafka: ids of its own
        meta, top = asyncio.run(ask(address, [metadata(), list_offsets(-3)]))
        stable = stable_topic_id(tiered.stack.cluster, TOPIC)
        assert meta["Topics"][0]["TopicId"] == stable != kafka_id
        assert offset_answers([top]) == [(0, remote_end - 1, BASE_TS + 10 * (remote_end - 1))]  # remote storage's max timestamp
        (fetched,) = asyncio.run(ask(address, [(1, "Fetch", 13, {
            "ReplicaId": -1, "MaxWaitMs": 0, "MinBytes": 1, "MaxBytes": 1 << 20, "SessionEpoch": -1, "ForgottenTopicsData": [],
            "Topics": [{"TopicId": stable, "Partitions": [{"Partition": 0, "FetchOffset": 0, "PartitionMaxBytes": 1 << 20}]}]})]))
        partition = fetched["Responses"][0]["Partitions"][0]
        assert partition["ErrorCode"] == 0 and partition["Records"]  # a Fetch by that id reads the topic


def test_the_listener_serves_what_the_sdk_reads(tiered: ListenerStack) -> None:
    """Every record of every partition from offset 0: the SDK's TieredConsumer (the gateway's HTTP side, then
    Kafka) and confluent-kafka through the listener read the same, which is what Kafka served before retention
    (``conftest``: PRODUCED)."""
    expected = {p: len(PRODUCED[p]) for p in range(PARTITIONS)}
    sdk = TieredConsumer(tiered.stack.consumer_config("REMOTE_PREFERRED", **{"enable.auto.commit": False}))
    try:
        sdk.assign([TopicPartition(TOPIC, p, 0) for p in range(PARTITIONS)])
        by_sdk = {p: [(m.offset(), as_rec(m)) for m in messages] for p, messages in read_all(sdk, expected).items()}
    finally:
        sdk.close()
    listener = Consumer({"bootstrap.servers": tiered.listener, "group.id": "same-as-sdk", "enable.auto.commit": False})
    try:
        listener.assign([TopicPartition(TOPIC, p, 0) for p in range(PARTITIONS)])
        by_listener = {p: [(m.offset(), as_rec(m)) for m in messages] for p, messages in read_all(listener, expected).items()}
    finally:
        listener.close()
    assert by_listener == by_sdk == {p: list(enumerate(PRODUCED[p])) for p in range(PARTITIONS)}
