"""read_committed in every mode (issue 12) over a log real transactional producers wrote to a real
broker (``tests.support.transactions.RealTransactionalLog``): transactions committed and aborted,
interleaved, an ABORT marker segments after its records, and last a transaction D whose records
are uploaded while it was open and whose COMMIT marker is the last batch of the log, in the active
segment only Kafka has.

Every reader equals a plain confluent-kafka read_committed consumer of the broker: no aborted
record, no control record. Remote storage holds D undecided and hands over to Kafka at D's first
offset, where Kafka's read_committed takes over; a resume from a committed offset inside D
delivers nothing below it; the position passes the trailing marker, so the committed offset
reaches the high watermark (lag 0)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition

from tests.integration.sdk.test_consumer_modes import read_all
from tests.support.kafka_clients import drain
from tests.support.stack_env import TieredStack, create_tiered_topic, own_tiered_stack
from tests.support.transactions import RealTransactionalLog
from tiered_kafka.consumer import TieredConsumer

pytestmark = pytest.mark.integration
TOPIC = "txn"
TP0 = TopicPartition(TOPIC, 0)


class TxnLog:
    def __init__(self, stack: TieredStack, log: RealTransactionalLog, reference: list[int], end: int) -> None:
        self.stack = stack
        self.d_first = log.last_first_offset  # D's first offset
        self.reference = reference  # a plain read_committed consumer's offsets from 0
        self.end = end  # the high watermark: one past D's COMMIT marker


def _broker_offsets(bootstrap: str, start: int) -> list[int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "ref", "isolation.level": "read_committed", "enable.auto.commit": False})
    consumer.assign([TopicPartition(TOPIC, 0, start)])
    try:
        return [m.offset() for m in drain(consumer)]
    finally:
        consumer.close()


@pytest.fixture(scope="module")
def txn_log(tmp_path_factory: pytest.TempPathFactory, redis_server: Any, s3_server: Any) -> Iterator[TxnLog]:
    root: Path = tmp_path_factory.mktemp("consumer-txn")
    with own_tiered_stack(root, redis_server, s3_server, "ctxn") as stack:
        log = RealTransactionalLog(TOPIC)
        try:
            create_tiered_topic(stack, TOPIC, 1, segment_bytes=16_000)
            log.write_until_open(stack.bootstrap)
            stack.wait_uploaded(TOPIC)
            segments = stack.registry.segments(TOPIC, 0)
            assert any(s.base_offset > log.last_first_offset for s in segments), "D's records did not rotate out of the active segment"
            log.commit_last()
        finally:
            log.close()
        consumer = Consumer({"bootstrap.servers": stack.bootstrap, "group.id": "hw"})
        try:
            end = consumer.get_watermark_offsets(TP0, timeout=10, cached=False)[1]
        finally:
            consumer.close()
        reference = _broker_offsets(stack.bootstrap, 0)
        # the log as written: D committed, the marker last; aborted and control records are not offsets read_committed returns
        assert reference[-1] < end - 1 and log.last_first_offset in reference
        assert len(reference) == RealTransactionalLog.HEAD + 3 + 1 + 1 + RealTransactionalLog.FILLER + 1 + 2 + RealTransactionalLog.FILLER
        assert stack.registry.segments(TOPIC, 0)[-1].last_offset < end - 1  # the COMMIT marker is not remote
        yield TxnLog(stack, log, reference, end)


def consumer_for(log: TxnLog, mode: str) -> TieredConsumer:
    return TieredConsumer(log.stack.consumer_config(mode, **{"isolation.level": "read_committed", "enable.auto.commit": False, "tiered.remote.poll.interval.ms": 100}))


@pytest.mark.parametrize("mode", ["KAFKA_ONLY", "REMOTE_PREFERRED", "KAFKA_PREFERRED"])
def test_read_committed_in_each_mode_and_lag_reaches_zero(txn_log: TxnLog, mode: str) -> None:
    consumer = consumer_for(txn_log, mode)
    try:
        consumer.assign([TopicPartition(TOPIC, 0, 0)])
        got = read_all(consumer, {0: len(txn_log.reference)}, max_polls=120)[0]
        assert [m.offset() for m in got] == txn_log.reference, mode
        assert consumer.consume(10, 1.0) == []
        assert consumer.position([TP0])[0].offset == txn_log.end  # past D's COMMIT marker
        consumer.commit(asynchronous=False)
        committed = consumer.committed([TP0], timeout=10)[0].offset
        assert committed == consumer.get_watermark_offsets(TP0, timeout=10)[1] == txn_log.end, "committed lag is 0"
        if mode == "REMOTE_PREFERRED":  # remote storage up to D, undecided there; Kafka from D on
            by = consumer.delivered_by_source()[(TOPIC, 0)]
            assert by == {"remote": txn_log.reference.index(txn_log.d_first), "kafka": len(txn_log.reference) - txn_log.reference.index(txn_log.d_first)}, by
    finally:
        consumer.close()


@pytest.mark.parametrize("mode", ["REMOTE_ONLY", "REMOTE_PREFERRED", "KAFKA_PREFERRED", "KAFKA_ONLY"])
def test_a_resume_inside_an_open_transaction_delivers_nothing_below_it(txn_log: TxnLog, mode: str) -> None:
    """D's second record, undecided in remote storage (its marker is only in Kafka)."""
    start = txn_log.d_first + 1
    consumer = consumer_for(txn_log, mode)
    try:
        consumer.assign([TopicPartition(TOPIC, 0, start)])
        if mode == "REMOTE_ONLY":  # remote storage has no marker for D: nothing is decided after its first offset
            assert consumer.consume(10, 1.5) == []
            assert consumer.position([TP0])[0].offset == start
            return
        want = [o for o in txn_log.reference if o >= start]
        assert want == _broker_offsets(txn_log.stack.bootstrap, start)
        got = read_all(consumer, {0: len(want)}, max_polls=60)[0]
        assert [m.offset() for m in got] == want
        assert consumer.consume(10, 0.5) == [] and consumer.position([TP0])[0].offset == txn_log.end
    finally:
        consumer.close()
