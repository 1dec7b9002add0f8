"""aiokafka (a second Python client library, its own protocol code) reads the topic through the listener:
every offset of every partition from 0, byte for byte."""

from __future__ import annotations

import asyncio

import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition

from tests.integration.kafka_listener.conftest import PARTITIONS, PRODUCED, TOPIC, ListenerStack, Rec

pytestmark = pytest.mark.integration


async def read_all(address: str) -> dict[int, list[Rec]]:
    consumer = AIOKafkaConsumer(bootstrap_servers=address, enable_auto_commit=False, group_id=None)
    await consumer.start()
    try:
        partitions = [TopicPartition(TOPIC, p) for p in range(PARTITIONS)]
        consumer.assign(partitions)
        for tp in partitions:
            consumer.seek(tp, 0)
        got: dict[int, list[Rec]] = {p: [] for p in range(PARTITIONS)}
        offsets: dict[int, list[int]] = {p: [] for p in range(PARTITIONS)}
        while any(len(got[p]) < len(PRODUCED[p]) for p in got):
            batch = await asyncio.wait_for(consumer.getmany(timeout_ms=1000), 60)
            for tp, messages in batch.items():
                for m in messages:
                    offsets[tp.partition].append(m.offset)
                    got[tp.partition].append(Rec(m.key, m.value, tuple((k, v) for k, v in m.headers), m.timestamp))
        assert offsets == {p: list(range(len(PRODUCED[p]))) for p in got}
        return got
    finally:
        await consumer.stop()


def test_aiokafka_reads_every_offset_from_zero(tiered: ListenerStack) -> None:
    assert asyncio.run(asyncio.wait_for(read_all(tiered.listener), 120)) == PRODUCED
