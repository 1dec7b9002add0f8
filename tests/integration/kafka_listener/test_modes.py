"""The listener under the other consumption modes (``tiered_kafka.modes``), and a recorded gap.

KAFKA_PREFERRED: Kafka first; below Kafka's log start (OFFSET_OUT_OF_RANGE) remote storage, so a
reader from 0 still gets every offset. REMOTE_ONLY: the remote end is the log end (ListOffsets
latest, the high watermark), a Fetch there waits MaxWaitMs and answers no records; the listener
sends Kafka nothing. A recorded gap no tier holds is OFFSET_OUT_OF_RANGE, never silence.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition

from tests.integration.kafka_listener.conftest import PRODUCED, TOPIC, ListenerStack, another_listener
from tests.integration.kafka_listener.test_confluent import as_rec, read_all
from tests.support.stack_env import topic_with_a_lost_segment
from tiered_kafka_gateway.kafka_listener.upstream import Connection

pytestmark = pytest.mark.integration


def test_kafka_preferred_reads_remote_below_kafkas_log_start(tiered: ListenerStack, s3_server: Any) -> None:
    with another_listener(tiered, s3_server, mode="KAFKA_PREFERRED") as address:
        consumer = Consumer({"bootstrap.servers": address, "group.id": "kp", "enable.auto.commit": False})
        try:
            consumer.assign([TopicPartition(TOPIC, 0, 0)])
            got = read_all(consumer, {0: len(PRODUCED[0])})[0]
            assert [m.offset() for m in got] == list(range(len(PRODUCED[0])))
            assert [as_rec(m) for m in got] == PRODUCED[0]
        finally:
            consumer.close()


async def fetch_at(address: str, topic: str, offset: int, max_wait_ms: int = 0) -> dict[str, Any]:
    host, port = address.split(":")
    conn = await Connection.open(host, int(port))
    try:
        answer = await conn.request(1, "Fetch", 12, {"ReplicaId": -1, "MaxWaitMs": max_wait_ms, "MinBytes": 1, "MaxBytes": 1 << 20, "SessionEpoch": -1,
                                                     "Topics": [{"Topic": topic, "Partitions": [{"Partition": 0, "FetchOffset": offset, "PartitionMaxBytes": 1 << 20}]}],
                                                     "ForgottenTopicsData": []})
        return answer["Responses"][0]["Partitions"][0]
    finally:
        conn.close()


def test_remote_only_ends_at_the_remote_end_and_a_gap_is_out_of_range(tiered: ListenerStack, s3_server: Any) -> None:
    gappy = f"gappy-{uuid.uuid4().hex[:6]}"
    lost = topic_with_a_lost_segment(tiered.stack, gappy, 1500)
    remote_end = tiered.stack.registry.partition_info(TOPIC, 0).latest_offset + 1
    with another_listener(tiered, s3_server, mode="REMOTE_ONLY") as address:
        consumer = Consumer({"bootstrap.servers": address, "group.id": "ro", "enable.auto.commit": False})
        try:
            assert consumer.get_watermark_offsets(TopicPartition(TOPIC, 0), timeout=10, cached=False) == (0, remote_end)
        finally:
            consumer.close()
        started = time.monotonic()
        at_end = asyncio.run(fetch_at(address, TOPIC, remote_end, max_wait_ms=300))
        assert time.monotonic() - started >= 0.3  # the live end waits MaxWaitMs, as Kafka's does
        assert (at_end["ErrorCode"], at_end["HighWatermark"], at_end["Records"]) == (0, remote_end, b"")
        in_gap = asyncio.run(fetch_at(address, gappy, lost.base_offset))
        assert (in_gap["ErrorCode"], in_gap["LogStartOffset"]) == (1, lost.last_offset + 1)  # OFFSET_OUT_OF_RANGE; data resumes after it
        before_gap = asyncio.run(fetch_at(address, gappy, 0))
        assert before_gap["ErrorCode"] == 0 and before_gap["Records"]
