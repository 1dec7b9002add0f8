"""TieredConsumer with Kafka's own group coordinator (issue 24, "Clients for real"), under both group
protocols confluent-kafka speaks: ``group.protocol=classic`` (JoinGroup/SyncGroup, an eager
rebalance with librdkafka's default assignors) and KIP-848's ``group.protocol=consumer`` (the
broker assigns; revocations are incremental, and a partition moves only once its owner
acknowledged the revoke).

The topic: PARTITIONS partitions whose oldest segments the broker's size-based retention deleted
once the agent had uploaded them, so each partition has offsets only in remote storage, offsets in
both tiers, and an active segment only Kafka has. In each of the four modes one group reads it:

1. member A subscribes alone and reads a tenth of each partition (then pauses them);
2. member B joins: the rebalance moves partitions from A to B, which starts each at the offset A
   committed on revoke (``enable.auto.commit``: stored offsets are committed on revoke and close);
3. B leaves (close commits and sends LeaveGroup, or the KIP-848 leave heartbeat): A takes its
   partitions back at the offsets B committed, and reads to the end.

Every offset of every partition is delivered exactly once across the members, in order, with the
value produced; each tier served exactly the offsets the mode gives it (``tiered_kafka.modes``:
REMOTE_PREFERRED reads remote storage to its end, then Kafka; KAFKA_PREFERRED reads remote storage
only below Kafka's log start), so the handoff happened at the exact offset whichever member made
it; REMOTE_ONLY members send no Fetch request to the broker; the group's committed offsets, as a
plain confluent-kafka consumer of the same group sees them, are the end of what the mode reads.

Transactions from real transactional producers, read by a group member under each protocol with
read_committed, equal a plain confluent-kafka read_committed consumer of the broker (the gateway's
records, Spark and the CLI against the same reference: tests/integration/test_transactions_e2e.py).
"""

from __future__ import annotations

import time
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition

from tests.support.kafka_clients import FetchRequests, drain, value_for
from tests.support.stack_env import TieredStack, create_tiered_topic, own_tiered_stack
from tests.support.transactions import RealTransactionalLog
from tiered_kafka.consumer import TieredConsumer

pytestmark = pytest.mark.integration

TOPIC = "groups"
PARTITIONS = 4
COUNT = 4000  # 1 KiB records round-robin: 1000 a partition, about ten 100 kB segments each
PROTOCOLS = ["classic", "consumer"]
MODES = ["REMOTE_ONLY", "REMOTE_PREFERRED", "KAFKA_PREFERRED", "KAFKA_ONLY"]
PER_PARTITION = COUNT // PARTITIONS


@dataclass
class Tiered:
    """The topic as the broker and the registry have it, per partition."""

    stack: TieredStack
    log_start: dict[int, int]  # Kafka's log start (retention deleted what is below)
    remote_end: dict[int, int]  # one past the last offset remote storage holds

    def expected(self, mode: str, partition: int) -> list[int]:
        """The offsets a reader in ``mode`` from auto.offset.reset=earliest delivers."""
        if mode == "REMOTE_ONLY":
            return list(range(self.remote_end[partition]))
        if mode == "KAFKA_ONLY":
            return list(range(self.log_start[partition], PER_PARTITION))
        return list(range(PER_PARTITION))

    def by_source(self, mode: str, partition: int) -> dict[str, int]:
        """How many of those records each tier serves (the modes' rules)."""
        if mode == "REMOTE_ONLY":
            return {"remote": self.remote_end[partition], "kafka": 0}
        if mode == "KAFKA_ONLY":
            return {"remote": 0, "kafka": PER_PARTITION - self.log_start[partition]}
        remote = self.remote_end[partition] if mode == "REMOTE_PREFERRED" else self.log_start[partition]
        return {"remote": remote, "kafka": PER_PARTITION - remote}


@pytest.fixture(scope="module")
def tiered(tmp_path_factory: pytest.TempPathFactory, redis_server: Any, s3_server: Any) -> Iterator[Tiered]:
    with own_tiered_stack(tmp_path_factory.mktemp("real-clients"), redis_server, s3_server, "groups") as stack:
        create_tiered_topic(stack, TOPIC, PARTITIONS, retention_bytes=250_000)
        stack.produce(TOPIC, COUNT, PARTITIONS)
        stack.wait_uploaded(TOPIC, PARTITIONS)
        log_start = stack.wait_retention(TOPIC, PARTITIONS)
        remote_end = {p: stack.registry.partition_info(TOPIC, p).latest_offset + 1 for p in range(PARTITIONS)}
        for p in range(PARTITIONS):  # three regions: remote only, both tiers, Kafka only (the active segment)
            assert 0 < log_start[p] < remote_end[p] < PER_PARTITION, (p, log_start[p], remote_end[p])
        yield Tiered(stack, log_start, remote_end)


@dataclass
class Member:
    """One TieredConsumer of the group; what it delivered goes to the shared ``delivered`` log."""

    name: str
    consumer: TieredConsumer
    delivered: list[tuple[str, int, int]]  # (member, partition, offset) in delivery order, all members
    events: list[tuple[str, str, list[int]]] = field(default_factory=list)  # (member, assign|revoke, partitions)
    sources: dict[int, dict[str, int]] = field(default_factory=dict)
    closed: bool = False

    def subscribe(self) -> None:
        self.consumer.subscribe(
            [TOPIC],
            on_assign=lambda _c, ps: self.events.append((self.name, "assign", sorted(p.partition for p in ps))),
            on_revoke=lambda _c, ps: self.events.append((self.name, "revoke", sorted(p.partition for p in ps))),
        )

    def poll(self, timeout: float = 0.1) -> int:
        messages = self.consumer.consume(50, timeout)
        for m in messages:
            assert m.error() is None, f"{self.name}: {m.error()}"
            i = m.offset() * PARTITIONS + m.partition()  # round-robin production: record i went to partition i % PARTITIONS
            assert m.value() == value_for(i) and m.key() == f"k{i}".encode(), (self.name, m.partition(), m.offset())
            self.delivered.append((self.name, m.partition(), m.offset()))
        return len(messages)

    def hold(self, expected: dict[int, list[int]]) -> bool:
        """Pause each partition once this member delivered a tenth of it (the rest is left for the
        rebalances to move); whether every partition is paused."""
        mine = Counter(p for name, p, _o in self.delivered if name == self.name)
        full = [TopicPartition(TOPIC, p) for p, offsets in expected.items() if mine[p] >= max(1, len(offsets) // 10)]
        if full:
            self.consumer.pause(full)
        return len(full) == len(expected)

    def count(self) -> int:
        return sum(1 for name, _p, _o in self.delivered if name == self.name)

    def close(self) -> None:
        """Leave the group (committing on close); what each tier served is kept."""
        self.sources = {p: counts for (_t, p), counts in self.consumer.delivered_by_source().items()}
        self.closed = True
        self.consumer.close()


def _owners(delivered: list[tuple[str, int, int]], partition: int) -> list[str]:
    """The members that delivered the partition's records, in turn (consecutive repeats merged)."""
    owners: list[str] = []
    for name, p, _o in delivered:
        if p == partition and (not owners or owners[-1] != name):
            owners.append(name)
    return owners


def _poll_until(members: list[Member], condition: Any, what: str, timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}; events {members[0].events}")
        for member in members:
            member.poll()


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_member_joins_and_leaves_and_every_offset_is_delivered_once(tiered: Tiered, protocol: str, mode: str) -> None:
    group = f"g-{protocol}-{mode.lower()}-{uuid.uuid4().hex[:6]}"
    fetches = FetchRequests()
    config = tiered.stack.consumer_config(mode, **{"group.id": group, "group.protocol": protocol, "tiered.remote.poll.interval.ms": 200, **fetches.config()})
    expected = {p: tiered.expected(mode, p) for p in range(PARTITIONS)}
    total = sum(len(offsets) for offsets in expected.values())
    delivered: list[tuple[str, int, int]] = []
    a = Member("A", TieredConsumer(config), delivered)
    b = Member("B", TieredConsumer(config), delivered, a.events)
    members = [a, b]
    try:
        a.subscribe()
        _poll_until([a], lambda: a.hold(expected), "A alone to read a tenth of each partition")
        b.subscribe()
        _poll_until(members, lambda: b.consumer.assignment() and 0 < len(a.consumer.assignment()) < PARTITIONS, "B to join")
        a.consumer.resume(a.consumer.assignment())  # (an eager revoke forgot the pause; KIP-848 kept A's partitions paused)
        moved = sorted(p.partition for p in b.consumer.assignment())
        _poll_until(members, lambda: set(moved) <= {p for name, p, _o in delivered if name == "B"}, "B to read each of its partitions")
        b.close()  # B leaves mid-read: its partitions go back to A
        _poll_until([a], lambda: len(delivered) >= total and len(a.consumer.assignment()) == PARTITIONS, "A to read everything")
        quiet = time.monotonic() + 2
        while time.monotonic() < quiet:  # nothing more: no duplicate after the last offset
            a.poll(0.2)
    finally:
        for member in members:
            if not member.closed:
                member.close()

    for p in range(PARTITIONS):
        got = [o for _name, q, o in delivered if q == p]
        assert got == expected[p], f"partition {p}: {len(got)} delivered, {len(expected[p])} expected; first duplicates {[o for o in set(got) if got.count(o) > 1][:5]}"
    # the partitions B had moved A -> B -> A, each time at the offset the last owner committed (no gap, no duplicate above)
    assert {p: _owners(delivered, p) for p in range(PARTITIONS)} == {p: ["A", "B", "A"] if p in moved else ["A"] for p in range(PARTITIONS)}
    for p in range(PARTITIONS):
        served = {source: sum(m.sources.get(p, {}).get(source, 0) for m in members) for source in ("remote", "kafka")}
        assert served == tiered.by_source(mode, p), f"partition {p}: {served}"
    assert fetches.reports > 0
    if mode == "REMOTE_ONLY":
        assert fetches.total == 0, "a REMOTE_ONLY member sent Fetch requests to the broker"
    else:
        assert fetches.total > 0

    plain = Consumer({"bootstrap.servers": tiered.stack.bootstrap, "group.id": group, "group.protocol": protocol})
    try:
        committed = plain.committed([TopicPartition(TOPIC, p) for p in range(PARTITIONS)], timeout=30)
    finally:
        plain.close()
    assert {c.partition: c.offset for c in committed} == {p: expected[p][-1] + 1 for p in range(PARTITIONS)}


TXN_TOPIC = "groups-txn"


@pytest.fixture(scope="module")
def txn_reference(tiered: Tiered) -> Iterator[list[int]]:
    """Topic TXN_TOPIC on the same broker, written by real transactional producers
    (``RealTransactionalLog``: commits and aborts interleaved, the last transaction committed after
    its records were uploaded); the offsets a plain confluent-kafka read_committed consumer returns."""
    stack = tiered.stack
    log = RealTransactionalLog(TXN_TOPIC)
    try:
        create_tiered_topic(stack, TXN_TOPIC, 1, segment_bytes=16_000)
        log.write_until_open(stack.bootstrap)
        stack.wait_uploaded(TXN_TOPIC)
        log.commit_last()
    finally:
        log.close()
    consumer = Consumer({"bootstrap.servers": stack.bootstrap, "group.id": f"ref-{uuid.uuid4().hex[:6]}", "isolation.level": "read_committed", "enable.auto.commit": False})
    consumer.assign([TopicPartition(TXN_TOPIC, 0, 0)])
    try:
        reference = [m.offset() for m in drain(consumer)]
    finally:
        consumer.close()
    assert log.last_first_offset in reference
    yield reference


@pytest.mark.parametrize("mode", ["REMOTE_PREFERRED", "KAFKA_PREFERRED"])
@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_read_committed_group_member_equals_a_plain_read_committed_consumer(tiered: Tiered, txn_reference: list[int], protocol: str, mode: str) -> None:
    """Subscribed under each group protocol, read_committed (the default): exactly the reference's
    offsets; REMOTE_PREFERRED hands over to Kafka at the first offset of the transaction that was
    open when its records were uploaded (the remote last stable offset), KAFKA_PREFERRED reads
    Kafka only (nothing is below its log start); the committed offset is the high watermark, past
    the trailing COMMIT marker."""
    group = f"g-txn-{protocol}-{uuid.uuid4().hex[:6]}"
    consumer = TieredConsumer(tiered.stack.consumer_config(mode, **{"group.id": group, "group.protocol": protocol}))
    consumer.subscribe([TXN_TOPIC])
    tp = TopicPartition(TXN_TOPIC, 0)
    try:
        got: list[int] = []
        deadline = time.monotonic() + 120
        while len(got) < len(txn_reference) and time.monotonic() < deadline:
            got += [m.offset() for m in consumer.consume(500, 0.2) if m.error() is None]
        assert got == txn_reference
        assert consumer.consume(10, 1.0) == []
        sources = consumer.delivered_by_source()[(TXN_TOPIC, 0)]
        high = consumer.get_watermark_offsets(tp, timeout=10)[1]
        assert consumer.position([tp])[0].offset == high
    finally:
        consumer.close()  # commits the position (enable.auto.commit)
    remote_lso = tiered.stack.registry.segments(TXN_TOPIC, 0)[-1].open_txn_first_offset
    expected_remote = sum(1 for o in txn_reference if o < remote_lso) if mode == "REMOTE_PREFERRED" else 0
    assert sources == {"remote": expected_remote, "kafka": len(txn_reference) - expected_remote}, sources
    plain = Consumer({"bootstrap.servers": tiered.stack.bootstrap, "group.id": group, "group.protocol": protocol})
    try:
        assert plain.committed([tp], timeout=30)[0].offset == high
    finally:
        plain.close()
