"""Fetch and ListOffsets of the development broker under both isolation levels, checked on the wire
(exact response fields confluent-kafka hides): Kafka's ``FetchResponse`` carries the last stable
offset for every isolation level, and under READ_COMMITTED (isolation_level 1) stops at it and lists
the aborted transactions of the range (Java ``Log.collectAbortedTransactions``); under
READ_UNCOMMITTED the list is null. ListOffsets LATEST answers the LSO under READ_COMMITTED, the high
watermark otherwise (``Partition.fetchOffsetForTimestamp``'s ``lastFetchableOffset``)."""

from __future__ import annotations

import datetime

import pytest
from confluent_kafka import Producer
from kio.schema.errors import ErrorCode
from kio.schema.fetch.v12 import request as fetch12
from kio.schema.list_offsets.v7 import request as list7

from tests.support.kafka_clients import create_topic
from tests.support.kafka_wire import WireClient
from tiered_kafka.format.record_batch import iter_batches
from tiered_kafka_dev.broker.server import BrokerThread

pytestmark = pytest.mark.integration

TOPIC = "wire-txn"


def _fetch(wire: WireClient, offset: int, isolation: int) -> fetch12.FetchRequest:
    request = fetch12.FetchRequest(
        max_wait=datetime.timedelta(milliseconds=100),
        min_bytes=1,
        isolation_level=isolation,
        topics=(fetch12.FetchTopic(topic=TOPIC, partitions=(fetch12.FetchPartition(partition=0, fetch_offset=offset, partition_max_bytes=1_000_000),)),),
        forgotten_topics_data=(),
        rack_id="",
    )
    [topic] = wire.request(request).responses
    [partition] = topic.partitions
    assert partition.error_code == ErrorCode.none
    return partition


def _latest(wire: WireClient, isolation: int) -> int:
    request = list7.ListOffsetsRequest(
        replica_id=-1,
        isolation_level=isolation,
        topics=(list7.ListOffsetsTopic(name=TOPIC, partitions=(list7.ListOffsetsPartition(partition_index=0, timestamp=-1),)),),
    )
    [partition] = wire.request(request).topics[0].partitions
    assert partition.error_code == ErrorCode.none
    return partition.offset


def _batches(records: bytes | None) -> list[tuple[int, int]]:
    """(base offset, last offset) of each batch of a Fetch response's records."""
    return [(b.base_offset, b.next_offset - 1) for b in iter_batches(records or b"", verify_crc=False, allow_truncated_tail=True)]


def test_fetch_and_list_offsets_under_both_isolation_levels(dev_broker: BrokerThread) -> None:
    bootstrap = dev_broker.broker.bootstrap_servers
    create_topic(bootstrap, TOPIC, 1)
    plain = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    aborter = Producer({"bootstrap.servers": bootstrap, "transactional.id": "wire-aborter", "linger.ms": 0})
    holder = Producer({"bootstrap.servers": bootstrap, "transactional.id": "wire-holder", "linger.ms": 0})
    aborter.init_transactions(20)
    holder.init_transactions(20)

    def send(producer: Producer, value: bytes) -> None:
        producer.produce(TOPIC, value=value, partition=0)
        assert producer.flush(10) == 0

    # 0 plain | 1 aborted | 2 ABORT | 3 plain | 4 open (first offset of the open transaction) | 5 plain
    send(plain, b"p0")
    aborter.begin_transaction()
    send(aborter, b"a0")
    aborter.abort_transaction(20)
    send(plain, b"p3")
    holder.begin_transaction()
    send(holder, b"h0")
    send(plain, b"p5")
    lso, high_watermark = 4, 6
    aborted_id = dev_broker.broker.transactions.producer_ids()["wire-aborter"][0]
    with WireClient(bootstrap) as wire:
        committed = _fetch(wire, 0, isolation=1)
        uncommitted = _fetch(wire, 0, isolation=0)
        for answer in (committed, uncommitted):
            assert (answer.high_watermark, answer.last_stable_offset, answer.log_start_offset) == (high_watermark, lso, 0)
        assert [(t.producer_id, t.first_offset) for t in committed.aborted_transactions] == [(aborted_id, 1)]
        assert uncommitted.aborted_transactions is None  # Kafka sends null under READ_UNCOMMITTED
        assert _batches(committed.records) == [(0, 0), (1, 1), (2, 2), (3, 3)]  # nothing at or past the LSO
        assert _batches(uncommitted.records) == [(0, 0), (1, 1), (2, 2), (3, 3), (4, 4), (5, 5)]

        at_lso = _fetch(wire, lso, isolation=1)  # waits max_wait, then answers empty
        assert (_batches(at_lso.records), at_lso.last_stable_offset, at_lso.high_watermark) == ([], lso, high_watermark)
        assert at_lso.aborted_transactions == ()  # an empty list, not null, under READ_COMMITTED
        assert _batches(_fetch(wire, lso, isolation=0).records) == [(4, 4), (5, 5)]

        assert _latest(wire, isolation=1) == lso
        assert _latest(wire, isolation=0) == high_watermark

        holder.commit_transaction(20)  # COMMIT marker at 6: the LSO moves to the high watermark
        after = _fetch(wire, 0, isolation=1)
        assert (after.last_stable_offset, after.high_watermark) == (7, 7)
        assert _batches(after.records)[-1] == (6, 6)
        assert _latest(wire, isolation=1) == _latest(wire, isolation=0) == 7
