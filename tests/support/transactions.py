"""A partition log with transactions, built by hand with the format core (independent of any broker).

Offsets (segment 0, segment 14, active segment 22):
    0-1 plain | 2-4 p7 | 5-7 p8 | 8 p7 | 9 COMMIT p7 | 10 ABORT p8 | 11-12 p9 | 13 plain
    14 ABORT p9 | 15-16 p10 | 17 plain | 18 ABORT p10 | 19-20 p11 | 21 plain
    22 COMMIT p11 (in the active segment: never uploaded)
read_committed over the uploaded segments: 0 1 2 3 4 8 13 17, then p11 is undecided (stop at 19).
p9 is aborted by a marker (and a .txnindex entry) in a later segment than its records; p11 is
still open at the end of remote data. Each record's timestamp is BASE_TIMESTAMP + its offset.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

from tests.support.batches import Rec, build_control, build_v2
from tiered_kafka.format import txn_index
from tiered_kafka_dev.kafka_log.log_config import LogConfig
from tiered_kafka_dev.kafka_log.log_writer import PartitionLog
from tiered_kafka.format.record_batch import ControlRecordType
from tiered_kafka.format.txn_index import AbortedTxn
from tiered_kafka_agent.config import AgentSettings

COMMITTED_OFFSETS = [0, 1, 2, 3, 4, 8, 13, 17]
UNCOMMITTED_OFFSETS = [0, 1, 2, 3, 4, 5, 6, 7, 8, 11, 12, 13, 15, 16, 17, 19, 20, 21]


BASE_TIMESTAMP = 1_700_000_000_000


def recs(tag: str, n: int, headers: bool = False, at: int = 0) -> list[Rec]:
    """``n`` records; the i-th has timestamp BASE_TIMESTAMP + at + i (the log passes its offset as ``at``)."""
    return [Rec(f"{tag}-k{i}".encode(), f"{tag}-v{i}".encode(), BASE_TIMESTAMP + at + i, [("h", f"{tag}{i}".encode())] if headers else []) for i in range(n)]


def txn_entry(producer_id: int, first: int, last: int, lso: int) -> bytes:
    """One .txnindex entry (``format.txn_index``'s layout)."""
    return AbortedTxn(producer_id, first, last, lso).to_bytes()


#: the .txnindex entries Kafka writes for the log (TransactionIndex/AbortedTxn): the LSO of an entry
#: is the first offset of the earliest *other* transaction still open at the abort, else marker + 1;
#: no other transaction is open at 10, 14 or 18 (p7 committed at 9, p11 starts at 19)
ABORTED_TXNS = {
    0: [AbortedTxn(8, 5, 10, 11)],
    14: [AbortedTxn(9, 11, 14, 15), AbortedTxn(10, 15, 18, 19)],
}


def write_transactional_log(directory: Path) -> PartitionLog:
    """The log above in ``directory`` (named like ``topic-0``); the caller closes it."""
    plog = PartitionLog.create(directory, LogConfig(retention_ms=-1))
    # segment 0
    plog.append(build_v2(recs("plain", 2, headers=True, at=0)))  # 0-1
    plog.append(build_v2(recs("p7", 3, at=2), producer_id=7, transactional=True))  # 2-4, committed at 9
    plog.append(build_v2(recs("p8", 3, at=5), producer_id=8, transactional=True))  # 5-7, aborted at 10
    plog.append(build_v2(recs("p7b", 1, at=8), producer_id=7, transactional=True))  # 8, committed at 9
    plog.append(build_control(ControlRecordType.COMMIT, base_offset=0, producer_id=7))  # 9
    plog.append(build_control(ControlRecordType.ABORT, base_offset=0, producer_id=8))  # 10
    plog.append(build_v2(recs("p9", 2, at=11), producer_id=9, transactional=True))  # 11-12, aborted at 14 (next segment)
    plog.append(build_v2(recs("tail", 1, at=13)))  # 13
    plog.roll()
    # segment 14
    plog.append(build_control(ControlRecordType.ABORT, base_offset=0, producer_id=9))  # 14
    plog.append(build_v2(recs("p10", 2, at=15), producer_id=10, transactional=True))  # 15-16, aborted at 18
    plog.append(build_v2(recs("mid", 1, at=17)))  # 17
    plog.append(build_control(ControlRecordType.ABORT, base_offset=0, producer_id=10))  # 18
    plog.append(build_v2(recs("p11", 2, at=19), producer_id=11, transactional=True))  # 19-20, marker not uploaded yet
    plog.append(build_v2(recs("after", 1, at=21)))  # 21
    plog.roll()
    plog.append(build_control(ControlRecordType.COMMIT, base_offset=0, producer_id=11))  # 22, active: stays local
    # Kafka writes a .txnindex for each segment holding ABORT markers (producer, first, last, LSO)
    for base, entries in ABORTED_TXNS.items():
        (directory / f"{base:020d}.txnindex").write_bytes(txn_index.serialize(entries))
    return plog


def uploaded_transactional_log(tmp_path: Path, redis_server: Any, s3_server: Any, bucket: str) -> AgentSettings:
    """The log above as topic ``txn`` partition 0, uploaded and registered by the agent (segments 0
    and 14; the active segment stays local); the agent's settings, for a gateway over it."""
    from tests.support.agent_env import agent_settings, checkpoint_high_watermarks, registry_for, wait_for
    from tiered_kafka_agent.agent import Agent

    plog = write_transactional_log(tmp_path / "logs" / "txn-0")
    checkpoint_high_watermarks(tmp_path / "logs")  # no broker: everything written is committed
    settings = agent_settings(tmp_path / "logs", redis_server, s3_server, bucket)
    registry = registry_for(settings)
    with Agent(settings):
        wait_for(lambda: [s.base_offset for s in registry.segments("txn", 0)] == [0, 14], what="transactional segments uploaded")
    plog.close()
    return settings


class RealTransactionalLog:
    """One partition written by real producers to a real broker: transactions committed and aborted,
    interleaved with each other and with plain records, an abort whose marker lands segments after
    its records, and last a transaction whose records are in rotated (uploadable) segments but whose
    COMMIT marker is the last batch of the active segment (Kafka only).

    Offsets are not fixed in advance (Kafka assigns them, and the markers take offsets too): the
    attributes record the first offsets that matter, and what is visible to read_committed is read
    back from the broker by a plain confluent-kafka consumer (the reference), never computed here.

    ``write_until_open(bootstrap)`` writes all but the last COMMIT and returns once the last
    transaction is open with rotated segments after its first offset; the caller waits for the
    uploads, then ``commit_last()`` (which returns once the COMMIT marker is in the log);
    ``close()`` aborts it if it is still open.
    """

    HEAD = 2  # plain records first
    FILLER = 160  # plain records of 300 bytes: several 16 000-byte segments

    def __init__(self, topic: str, partition: int = 0) -> None:
        self.topic = topic
        self.partition = partition
        self.last_first_offset = -1  # the first offset of the transaction committed by commit_last()
        self._open: Any = None
        self._bootstrap = ""

    def write_until_open(self, bootstrap: str) -> None:
        from confluent_kafka import Producer

        self._bootstrap = bootstrap
        plain = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "batch.size": 8000})
        produced: list[int] = []

        def send(producer: Any, tag: str, count: int) -> None:
            """``count`` records, flushed: each call's records follow the previous call's in the log."""
            for i in range(count):
                producer.produce(self.topic, key=f"{tag}-{i}".encode(), value=(f"{tag}-{i:06d}|".encode() + b"x" * 300)[:300], partition=self.partition,
                                 on_delivery=lambda err, m: produced.append(m.offset()) if err is None else produced.append(-1))  # fmt: skip
            assert producer.flush(30) == 0
            assert -1 not in produced, f"{tag}: a record was not delivered"

        def transactional(name: str) -> Any:
            producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"{self.topic}-{name}-{uuid.uuid4().hex[:6]}", "linger.ms": 0, "transaction.timeout.ms": 600_000})
            producer.init_transactions(30)
            producer.begin_transaction()
            return producer

        send(plain, "head", self.HEAD)
        committed, aborted = transactional("a"), transactional("b")  # open at the same time, batches interleaved
        send(committed, "a1", 3)
        send(aborted, "b1", 3)
        send(plain, "mid", 1)
        send(committed, "a2", 1)
        committed.commit_transaction(30)
        aborted.abort_transaction(30)
        late = transactional("c")  # aborted by a marker some segments after its records
        send(late, "c", 2)
        send(plain, "fill1", self.FILLER)
        late.abort_transaction(30)
        send(plain, "between", 1)
        self._open = transactional("d")  # its records rotate out of the active segment while it is open
        produced.clear()
        send(self._open, "d", 2)
        self.last_first_offset = produced[0]
        send(plain, "fill2", self.FILLER)
        del plain, committed, aborted, late

    def commit_last(self) -> None:
        """Commit the last transaction and wait until its COMMIT marker is written: Kafka's
        coordinator writes markers after EndTxn has answered, so until then the last stable offset
        (the end a read_committed reader sees, librdkafka's default) stays at its first offset."""
        from confluent_kafka import Consumer, TopicPartition

        from tests.support.agent_env import wait_for

        self._open.commit_transaction(30)
        self._open = None
        consumer = Consumer({"bootstrap.servers": self._bootstrap, "group.id": "lso", "isolation.level": "read_committed"})
        try:
            tp = TopicPartition(self.topic, self.partition)
            wait_for(lambda: consumer.get_watermark_offsets(tp, timeout=10, cached=False)[1] > self.last_first_offset, what=f"the last stable offset of {self.topic} past {self.last_first_offset}")
        finally:
            consumer.close()

    def close(self) -> None:
        if self._open is not None:
            self._open.abort_transaction(10)
            self._open = None
