"""Kafka's transaction protocol on the development broker, driven by real clients: confluent-kafka's
transactional Producer, confluent-kafka consumers under both isolation levels, and aiokafka as an
independent reader. The log.dir is checked against what a Kafka broker writes: control batches, the
``.txnindex`` (Java ``TransactionIndex``/``AbortedTxn``) and producer ``.snapshot`` files on roll."""

from __future__ import annotations

import asyncio
import datetime
import struct
import time
import uuid
from pathlib import Path

import crc32c
import pytest
from aiokafka import AIOKafkaConsumer
from aiokafka.structs import TopicPartition as AioTopicPartition
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from kio.schema.errors import ErrorCode
from kio.schema.init_producer_id.v4 import request as init4
from kio.schema.produce.v9 import request as produce9

from tests.support.batches import Rec, build_v2
from tests.support.kafka_clients import create_topic
from tests.support.kafka_wire import WireClient
from tiered_kafka.format import producer_snapshot, txn_index, txn_marker
from tiered_kafka.format.record_batch import ControlRecordType, iter_batches
from tiered_kafka_dev.broker.server import BrokerThread

pytestmark = pytest.mark.integration

Row = tuple[int, bytes]  # offset, value


def _producer(bootstrap: str, txn_id: str | None = None, **config: object) -> Producer:
    settings: dict[str, object] = {"bootstrap.servers": bootstrap, "linger.ms": 1, **config}
    if txn_id is not None:
        settings["transactional.id"] = txn_id
    return Producer(settings)


def _read(bootstrap: str, topic: str, partition: int, isolation: str) -> list[Row]:
    """Every record of a partition a confluent-kafka consumer delivers under ``isolation``, to the end."""
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": f"read-{uuid.uuid4().hex[:8]}", "isolation.level": isolation, "enable.partition.eof": True, "enable.auto.commit": False}
    )
    consumer.assign([TopicPartition(topic, partition, 0)])
    rows: list[Row] = []
    deadline = time.monotonic() + 20
    try:
        while time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is None:
                continue
            if message.error():
                if message.error().code() == KafkaError._PARTITION_EOF:
                    return rows
                raise KafkaException(message.error())
            rows.append((message.offset(), message.value()))
    finally:
        consumer.close()
    raise AssertionError(f"no end of partition {topic}-{partition} within 20 s; read {rows}")


def _read_aiokafka(bootstrap: str, topic: str, partition: int) -> list[Row]:
    """The same partition read by aiokafka under read_committed, up to its end offset (the LSO)."""

    async def run() -> list[Row]:
        consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, isolation_level="read_committed", enable_auto_commit=False, auto_offset_reset="earliest")
        await consumer.start()
        try:
            tp = AioTopicPartition(topic, partition)
            consumer.assign([tp])
            await consumer.seek_to_beginning(tp)
            end = (await consumer.end_offsets([tp]))[tp]
            rows: list[Row] = []
            deadline = time.monotonic() + 20
            while await consumer.position(tp) < end and time.monotonic() < deadline:
                for records in (await consumer.getmany(tp, timeout_ms=500)).values():
                    rows += [(r.offset, r.value) for r in records]
            return rows
        finally:
            await consumer.stop()

    return asyncio.run(run())


def _markers(directory: Path) -> list[tuple[int, int, int, ControlRecordType]]:
    """(offset, producer id, epoch, type) of every control batch of a partition directory."""
    found = []
    for log in sorted(directory.glob("*.log")):
        for batch in iter_batches(log.read_bytes()):
            if batch.is_control:
                marker = txn_marker.parse(batch)
                assert batch.is_transactional and marker.coordinator_epoch == 0
                found.append((batch.base_offset, batch.producer_id, batch.producer_epoch, marker.control_type))
    return found


def _lso(dev_broker: BrokerThread, topic: str, partition: int) -> tuple[int, int]:
    plog = dev_broker.broker.logs.partition(topic, partition)
    assert plog is not None
    return plog.last_stable_offset, plog.log_end_offset


def test_commits_and_aborts_interleaved_across_partitions(dev_broker: BrokerThread) -> None:
    bootstrap = dev_broker.broker.bootstrap_servers
    create_topic(bootstrap, "txn", 2)
    plain = _producer(bootstrap)
    txn = _producer(bootstrap, "interleaved")
    txn.init_transactions(20)
    # offsets per partition: p0: c0 c1 | COMMIT | plain | a0 | ABORT | c2 | COMMIT ; p1: c0' | COMMIT | a1' | ABORT
    txn.begin_transaction()
    txn.produce("txn", value=b"c0", partition=0)
    txn.produce("txn", value=b"c1", partition=0)
    txn.produce("txn", value=b"c0'", partition=1)
    txn.commit_transaction(20)
    plain.produce("txn", value=b"plain", partition=0)
    assert plain.flush(10) == 0
    txn.begin_transaction()
    txn.produce("txn", value=b"a0", partition=0)
    txn.produce("txn", value=b"a1'", partition=1)
    txn.flush(10)
    txn.abort_transaction(20)
    txn.begin_transaction()
    txn.produce("txn", value=b"c2", partition=0)
    txn.commit_transaction(20)

    assert _read(bootstrap, "txn", 0, "read_committed") == [(0, b"c0"), (1, b"c1"), (3, b"plain"), (6, b"c2")]
    assert _read(bootstrap, "txn", 0, "read_uncommitted") == [(0, b"c0"), (1, b"c1"), (3, b"plain"), (4, b"a0"), (6, b"c2")]
    assert _read(bootstrap, "txn", 1, "read_committed") == [(0, b"c0'")]
    assert _read(bootstrap, "txn", 1, "read_uncommitted") == [(0, b"c0'"), (2, b"a1'")]
    assert _read_aiokafka(bootstrap, "txn", 0) == [(0, b"c0"), (1, b"c1"), (3, b"plain"), (6, b"c2")]
    assert _read_aiokafka(bootstrap, "txn", 1) == [(0, b"c0'")]

    producer_id, epoch = dev_broker.broker.transactions.producer_ids()["interleaved"]
    log_dir = dev_broker.broker.config.log_dir
    assert _markers(log_dir / "txn-0") == [
        (2, producer_id, epoch, ControlRecordType.COMMIT),
        (5, producer_id, epoch, ControlRecordType.ABORT),
        (7, producer_id, epoch, ControlRecordType.COMMIT),
    ]
    assert _markers(log_dir / "txn-1") == [(1, producer_id, epoch, ControlRecordType.COMMIT), (3, producer_id, epoch, ControlRecordType.ABORT)]
    # .txnindex, Kafka's AbortedTxn layout: version 0, producer id, first offset, last offset (the
    # ABORT marker), last stable offset after the abort (no other transaction open: marker + 1)
    assert (log_dir / "txn-0" / "00000000000000000000.txnindex").read_bytes() == struct.pack(">hqqqq", 0, producer_id, 4, 5, 6)
    assert (log_dir / "txn-1" / "00000000000000000000.txnindex").read_bytes() == struct.pack(">hqqqq", 0, producer_id, 2, 3, 4)
    assert _lso(dev_broker, "txn", 0) == (8, 8)


def test_an_open_transaction_holds_the_lso_and_another_producers_abort_records_it(dev_broker: BrokerThread) -> None:
    """Two transactional producers on one partition: the LSO is the first offset of the earliest open
    transaction, read_committed stops there, and an abort while the other is open records that LSO."""
    bootstrap = dev_broker.broker.bootstrap_servers
    create_topic(bootstrap, "lso", 1)
    first, second = _producer(bootstrap, "lso-a"), _producer(bootstrap, "lso-b")
    first.init_transactions(20)
    second.init_transactions(20)
    first.begin_transaction()
    first.produce("lso", value=b"a0", partition=0)  # 0, open
    first.flush(10)
    second.begin_transaction()
    second.produce("lso", value=b"b0", partition=0)  # 1
    second.flush(10)
    second.abort_transaction(20)  # ABORT at 2, while a's transaction (first offset 0) is open
    assert _lso(dev_broker, "lso", 0) == (0, 3)
    assert _read(bootstrap, "lso", 0, "read_committed") == []
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "lso-watch", "isolation.level": "read_committed"})
    assert consumer.get_watermark_offsets(TopicPartition("lso", 0), timeout=10)[1] == 0  # ListOffsets LATEST: the LSO
    consumer.close()
    first.commit_transaction(20)  # COMMIT at 3
    assert _read(bootstrap, "lso", 0, "read_committed") == [(0, b"a0")]
    b_id = dev_broker.broker.transactions.producer_ids()["lso-b"][0]
    entries = txn_index.parse((dev_broker.broker.config.log_dir / "lso-0" / "00000000000000000000.txnindex").read_bytes())
    assert entries == [txn_index.AbortedTxn(b_id, 1, 2, 0)]


def test_send_offsets_to_transaction_commits_offsets_only_with_the_transaction(dev_broker: BrokerThread) -> None:
    bootstrap = dev_broker.broker.bootstrap_servers
    create_topic(bootstrap, "source", 1)
    create_topic(bootstrap, "sink", 1)
    plain = _producer(bootstrap)
    for i in range(6):
        plain.produce("source", value=f"in-{i}".encode(), partition=0)
    assert plain.flush(10) == 0

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "ctp", "isolation.level": "read_committed", "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    consumer.subscribe(["source"])
    producer = _producer(bootstrap, "ctp-txn")
    producer.init_transactions(20)
    # read_uncommitted: OffsetFetch without require_stable answers the last committed offset
    observer = Consumer({"bootstrap.servers": bootstrap, "group.id": "ctp", "enable.auto.commit": False, "isolation.level": "read_uncommitted"})
    stable = Consumer({"bootstrap.servers": bootstrap, "group.id": "ctp", "enable.auto.commit": False, "isolation.level": "read_committed"})

    def committed() -> int:
        return observer.committed([TopicPartition("source", 0)], timeout=10)[0].offset

    def process(count: int) -> None:
        producer.begin_transaction()
        taken: list = []
        deadline = time.monotonic() + 20
        while len(taken) < count and time.monotonic() < deadline:
            taken += [m for m in consumer.consume(count - len(taken), 0.5) if not m.error()]
        assert len(taken) == count
        for message in taken:
            producer.produce("sink", value=message.value().upper(), partition=0)
        producer.send_offsets_to_transaction(consumer.position(consumer.assignment()), consumer.consumer_group_metadata(), 20)
        producer.flush(10)

    try:
        process(3)
        assert committed() < 0  # pending in the transaction: not visible
        # read_committed asks for stable offsets: UNSTABLE_OFFSET_COMMIT, retried until the transaction ends
        with pytest.raises(KafkaException, match="Timed out"):
            stable.committed([TopicPartition("source", 0)], timeout=2)
        producer.commit_transaction(20)
        assert committed() == 3
        assert stable.committed([TopicPartition("source", 0)], timeout=10)[0].offset == 3
        process(3)
        producer.abort_transaction(20)
        assert committed() == 3  # the aborted transaction's offsets are discarded
    finally:
        consumer.close()
        observer.close()
        stable.close()
    assert _read(bootstrap, "sink", 0, "read_committed") == [(0, b"IN-0"), (1, b"IN-1"), (2, b"IN-2")]


def test_a_second_producer_with_the_same_transactional_id_fences_the_first(dev_broker: BrokerThread) -> None:
    bootstrap = dev_broker.broker.bootstrap_servers
    create_topic(bootstrap, "fence", 1)
    zombie = _producer(bootstrap, "fenced")
    zombie.init_transactions(20)
    zombie.begin_transaction()
    zombie.produce("fence", value=b"zombie", partition=0)
    zombie.flush(10)
    first_id, first_epoch = dev_broker.broker.transactions.producer_ids()["fenced"]

    successor = _producer(bootstrap, "fenced")
    successor.init_transactions(20)  # aborts the zombie's open transaction, bumps the epoch twice
    second_id, second_epoch = dev_broker.broker.transactions.producer_ids()["fenced"]
    assert second_id == first_id and second_epoch == first_epoch + 2

    with pytest.raises(KafkaException) as failed:
        zombie.commit_transaction(20)
    error = failed.value.args[0]
    assert error.fatal() and error.code() in (KafkaError._FENCED, KafkaError.PRODUCER_FENCED, KafkaError.INVALID_PRODUCER_EPOCH)

    successor.begin_transaction()
    successor.produce("fence", value=b"successor", partition=0)
    successor.commit_transaction(20)
    assert _read(bootstrap, "fence", 0, "read_committed") == [(2, b"successor")]
    # the zombie's transaction was aborted with the fencing epoch
    assert _markers(dev_broker.broker.config.log_dir / "fence-0") == [
        (1, first_id, first_epoch + 1, ControlRecordType.ABORT),
        (3, first_id, second_epoch, ControlRecordType.COMMIT),
    ]


def test_an_abandoned_transaction_is_aborted_after_transaction_timeout(start_dev_broker) -> None:
    broker = start_dev_broker(transaction_abort_interval_ms=200)
    bootstrap = broker.broker.bootstrap_servers
    create_topic(bootstrap, "abandoned", 1)
    producer = _producer(bootstrap, "abandoner", **{"transaction.timeout.ms": 1500, "message.timeout.ms": 1500})
    producer.init_transactions(20)
    producer.begin_transaction()
    producer.produce("abandoned", value=b"lost", partition=0)
    producer.flush(10)
    assert _lso(broker, "abandoned", 0) == (0, 1)
    deadline = time.monotonic() + 15
    while _lso(broker, "abandoned", 0)[0] == 0 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _lso(broker, "abandoned", 0) == (2, 2)
    producer_id, epoch = broker.broker.transactions.producer_ids()["abandoner"]
    assert _markers(broker.broker.config.log_dir / "abandoned-0") == [(1, producer_id, epoch, ControlRecordType.ABORT)]
    assert _read(bootstrap, "abandoned", 0, "read_committed") == []
    with pytest.raises(KafkaException):
        producer.commit_transaction(10)


def test_snapshots_on_roll_and_an_open_transaction_survives_a_restart(start_dev_broker, tmp_path: Path) -> None:
    log_dir = tmp_path / "restart-logs"
    broker = start_dev_broker(log_dir)
    bootstrap = broker.broker.bootstrap_servers
    create_topic(bootstrap, "rolling", 1, **{"segment.bytes": "2000"})
    producer = _producer(bootstrap, "roller")
    producer.init_transactions(20)
    producer.begin_transaction()
    for i in range(12):
        producer.produce("rolling", value=f"{i:03d}".encode() * 100, partition=0)
        producer.flush(10)  # one batch each: ~370 bytes, several segments
    producer_id, epoch = broker.broker.transactions.producer_ids()["roller"]
    directory = log_dir / "rolling-0"
    bases = sorted(int(p.stem) for p in directory.glob("*.log"))
    snapshots = sorted(int(p.stem) for p in directory.glob("*.snapshot"))
    assert len(bases) > 2 and snapshots == bases[1:]  # one per roll, named by the new segment's base
    for offset in snapshots:
        [entry] = producer_snapshot.parse((directory / f"{offset:020d}.snapshot").read_bytes())
        assert (entry.producer_id, entry.epoch, entry.current_txn_first_offset) == (producer_id, epoch, 0)
        assert entry.last_offset == offset - 1 and entry.last_sequence == offset - 1  # one record per batch
    assert _lso(broker, "rolling", 0) == (0, 12)
    producer.flush(10)

    port = broker.broker.port
    broker.stop()  # the transaction stays open across the restart
    broker = start_dev_broker(log_dir, port=port)
    assert _lso(broker, "rolling", 0) == (0, 12)
    producer.commit_transaction(30)  # librdkafka reconnects; the coordinator state came back from its file
    assert _lso(broker, "rolling", 0) == (13, 13)
    assert [offset for offset, _ in _read(broker.broker.bootstrap_servers, "rolling", 0, "read_committed")] == list(range(12))


def test_batches_above_max_message_bytes_or_segment_bytes_are_refused(dev_broker: BrokerThread) -> None:
    bootstrap = dev_broker.broker.bootstrap_servers
    create_topic(bootstrap, "small-messages", 1, **{"max.message.bytes": "2000"})
    create_topic(bootstrap, "small-segments", 1, **{"segment.bytes": "2000"})
    errors: list[KafkaError] = []
    producer = _producer(bootstrap, None, **{"message.send.max.retries": 0})
    producer.produce("small-messages", value=b"x" * 5000, partition=0, on_delivery=lambda err, _m: errors.append(err))
    producer.produce("small-segments", value=b"y" * 5000, partition=0, on_delivery=lambda err, _m: errors.append(err))
    assert producer.flush(20) == 0
    producer.produce("small-messages", value=b"ok", partition=0, on_delivery=lambda err, _m: errors.append(err))
    assert producer.flush(20) == 0
    codes = sorted((e.code() if e else 0) for e in errors)
    assert codes == sorted([KafkaError.MSG_SIZE_TOO_LARGE, KafkaError.RECORD_LIST_TOO_LARGE, 0])
    log_dir = dev_broker.broker.config.log_dir
    assert (log_dir / "small-segments-0" / "00000000000000000000.log").stat().st_size == 0
    assert [offset for offset, _ in _read(bootstrap, "small-messages", 0, "read_uncommitted")] == [0]


def _idempotent_batch(producer_id: int, epoch: int, sequence: int, count: int, *, transactional: bool = False) -> bytes:
    data = bytearray(build_v2([Rec(b"k", b"v", 1_700_000_000_000)] * count, producer_id=producer_id, transactional=transactional))
    struct.pack_into(">hi", data, 51, epoch, sequence)  # producerEpoch, baseSequence (inside the CRC)
    struct.pack_into(">I", data, 17, crc32c.crc32c(bytes(data[21:])))
    return bytes(data)


def test_idempotent_sequences_duplicates_and_epochs_over_the_wire(dev_broker: BrokerThread) -> None:
    bootstrap = dev_broker.broker.bootstrap_servers
    create_topic(bootstrap, "idem", 1)
    with WireClient(bootstrap) as wire:
        init = wire.request(init4.InitProducerIdRequest(transactional_id=None, transaction_timeout=datetime.timedelta(seconds=60)))
        assert init.error_code == ErrorCode.none and init.producer_epoch == 0
        pid = init.producer_id

        def produce(records: bytes, transactional_id: str | None = None) -> tuple[ErrorCode, int]:
            request = produce9.ProduceRequest(
                transactional_id=transactional_id,
                acks=-1,
                timeout=datetime.timedelta(seconds=10),
                topic_data=(produce9.TopicProduceData(name="idem", partition_data=(produce9.PartitionProduceData(index=0, records=records),)),),
            )
            answer = wire.request(request).responses[0].partition_responses[0]
            return answer.error_code, answer.base_offset

        assert produce(_idempotent_batch(pid, 0, 0, 3)) == (ErrorCode.none, 0)
        assert produce(_idempotent_batch(pid, 0, 0, 3)) == (ErrorCode.none, 0)  # a retry: its original offset
        assert produce(_idempotent_batch(pid, 0, 5, 1))[0] == ErrorCode.out_of_order_sequence_number
        assert produce(_idempotent_batch(pid, 0, 3, 2)) == (ErrorCode.none, 3)
        assert produce(_idempotent_batch(pid, 1, 0, 1)) == (ErrorCode.none, 5)  # a new epoch restarts at 0
        assert produce(_idempotent_batch(pid, 0, 5, 1))[0] == ErrorCode.invalid_producer_epoch
        assert produce(_idempotent_batch(pid, 1, 0, 1, transactional=True))[0] == ErrorCode.invalid_txn_state  # no transaction
        marker = txn_marker.build(ControlRecordType.COMMIT, producer_id=pid, producer_epoch=1, coordinator_epoch=0, timestamp=0)
        assert produce(marker)[0] == ErrorCode.invalid_record  # clients may not write control batches
    assert dev_broker.broker.logs.partition("idem", 0).log_end_offset == 6
