"""TieredConsumer's position handling, driven end to end through its collaborators (issue 33).

``test_handoff.py`` checks the handoff state machine alone. This test drives the seam where the
KAFKA_ONLY skip hid: librdkafka's OFFSET_OUT_OF_RANGE events, fresh or stale, for several
partitions at once, in any order, with seeks, assigns at logical offsets and retention between
them, through the real ``KafkaDelivery`` → ``Positions`` → ``Handoff`` → ``Tiers`` →
``Assignment`` path, for every mode and every ``auto.offset.reset``. Only the edges are fakes
(pure logic, no I/O): the inner confluent-kafka consumer (it records where librdkafka fetches and
queues the events librdkafka would), the gateway's partition extent, and the remote reader.

The model each step is checked against:
- a stale event (about an offset that is not the partition's position, librdkafka having queued
  it before our seek reached it) changes nothing, for any partition;
- KAFKA_ONLY behaves as a plain consumer: below the log start or past the end, earliest goes to
  the log start, latest to the high watermark, error stops with _AUTO_OFFSET_RESET;
- the other modes follow the modes contract (``tiered_kafka.modes``'s docstring): remote storage
  when it holds the offset, a gap between the tiers (skip, or an error under gap policy error),
  else auto.offset.reset forward to the first offset a tier the mode reads holds;
- never silently past data: every move forward over offsets that some tier holds (read by the
  mode or not) comes with the partition's OFFSET_OUT_OF_RANGE error message.
"""

from __future__ import annotations

import threading
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import pytest
from confluent_kafka import OFFSET_BEGINNING, OFFSET_END, OFFSET_STORED, KafkaError, KafkaException, Message, TopicPartition
from hypothesis import HealthCheck, example, given, note, settings
from hypothesis import strategies as st

from tiered_kafka import modes
from tiered_kafka.client.gateway import PartitionExtent, RemoteExtent
from tiered_kafka.consumer import positions as positions_module
from tiered_kafka.consumer.assignment import Assignment
from tiered_kafka.consumer.channel import ErrorChannel
from tiered_kafka.consumer.config import parse_config
from tiered_kafka.consumer.kafka_delivery import KafkaDelivery
from tiered_kafka.consumer.membership import Membership
from tiered_kafka.consumer.offsets import Offsets
from tiered_kafka.consumer.positions import Positions, RemoteResources
from tiered_kafka.consumer.prefetch import ByteBudget
from tiered_kafka.consumer.tallies import SourceCounts
from tiered_kafka.consumer.tiers import Tiers
from tiered_kafka.modes import Mode, Source

TOPIC = "t"
TP = tuple[str, int]


# -- the world the consumer sees -------------------------------------------------------------------
@dataclass
class PartitionWorld:
    kafka_low: int
    kafka_high: int
    remote: tuple[int, int] | None  # (earliest, latest), None: remote storage holds nothing

    def kafka_holds(self, offset: int) -> bool:
        return self.kafka_low <= offset < self.kafka_high

    def remote_holds(self, offset: int) -> bool:
        return self.remote is not None and self.remote[0] <= offset <= self.remote[1]

    def any_tier_holds(self, first: int, last: int) -> bool:
        kafka = self.kafka_low <= last and first < self.kafka_high
        remote = self.remote is not None and self.remote[0] <= last and first <= self.remote[1]
        return kafka or remote


class FakeInner:
    """The inner confluent-kafka Consumer as the collaborators use it: assignment calls, seeks,
    watermarks, committed offsets (none), and ``consume`` handing out queued events. It remembers
    every offset librdkafka was told to fetch from per partition (what stale events are about)."""

    def __init__(self, world: dict[TP, PartitionWorld]) -> None:
        self.world = world
        self.fetching: dict[TP, int] = {}
        self.fetched_from: dict[TP, list[int]] = {}
        self.queue: deque[Message] = deque()

    def _fetch_from(self, partitions: list[TopicPartition]) -> None:
        for p in partitions:
            tp = (p.topic, p.partition)
            self.fetching[tp] = p.offset
            self.fetched_from.setdefault(tp, []).append(p.offset)

    def assignment(self) -> list[TopicPartition]:
        return [TopicPartition(t, p, o) for (t, p), o in self.fetching.items()]

    def assign(self, partitions: list[TopicPartition]) -> None:
        self.fetching = {}
        self._fetch_from(partitions)

    def incremental_assign(self, partitions: list[TopicPartition]) -> None:
        self._fetch_from(partitions)

    def incremental_unassign(self, partitions: list[TopicPartition]) -> None:
        for p in partitions:
            self.fetching.pop((p.topic, p.partition), None)

    def unassign(self) -> None:
        self.fetching = {}

    def seek(self, partition: TopicPartition) -> None:
        if (partition.topic, partition.partition) not in self.fetching:
            raise KafkaException(KafkaError(KafkaError._STATE, "not assigned"))
        self._fetch_from([partition])

    def pause(self, partitions: list[TopicPartition]) -> None:
        pass

    def resume(self, partitions: list[TopicPartition]) -> None:
        pass

    def position(self, partitions: list[TopicPartition]) -> list[TopicPartition]:
        return [TopicPartition(p.topic, p.partition, self.fetching.get((p.topic, p.partition), -1001)) for p in partitions]

    def committed(self, partitions: list[TopicPartition], timeout: float = -1) -> list[TopicPartition]:
        return [TopicPartition(p.topic, p.partition, -1001) for p in partitions]

    def get_watermark_offsets(self, partition: TopicPartition, timeout: float = -1, cached: bool = False) -> tuple[int, int]:
        w = self.world[(partition.topic, partition.partition)]
        return w.kafka_low, w.kafka_high

    def consume(self, num_messages: int, timeout: float) -> list[Message]:
        out = []
        while self.queue and len(out) < num_messages:
            out.append(self.queue.popleft())
        return out

    def out_of_range(self, tp: TP, offset: int) -> None:
        """librdkafka's _AUTO_OFFSET_RESET for a fetch of ``tp`` at ``offset`` (auto.offset.reset=error)."""
        self.queue.append(Message(topic=tp[0], partition=tp[1], offset=offset, error=KafkaError(KafkaError._AUTO_OFFSET_RESET, f"fetch at {offset} out of range")))


class FakeGateway:
    def __init__(self, world: dict[TP, PartitionWorld]) -> None:
        self.world = world

    def partition(self, topic: str, partition: int) -> PartitionExtent:
        w = self.world[(topic, partition)]
        remote = None if w.remote is None else RemoteExtent(w.remote[0], w.remote[1], 1, 1)
        return PartitionExtent(remote, w.kafka_low, w.kafka_high)


class FakeReader:
    """The remote reader: the test only needs to know where it was started."""

    def __init__(self, client: Any, topic: str, partition: int, offset: int, **_: Any) -> None:
        self.offset = offset

    def stop(self) -> None:
        pass

    def release(self, chunk: Any) -> None:
        pass


@dataclass
class Harness:
    mode: Mode
    policy: str
    gap_skip: bool
    world: dict[TP, PartitionWorld]
    inner: FakeInner = field(init=False)
    errors: ErrorChannel = field(init=False)

    def __post_init__(self) -> None:
        config = parse_config({
            "bootstrap.servers": "127.0.0.1:1", "group.id": "g", "tiered.mode": self.mode.value,
            "tiered.gateway.url": "http://127.0.0.1:1", "tiered.cluster": "c", "auto.offset.reset": self.policy,
            "tiered.remote.gap.policy": "skip" if self.gap_skip else "error",
        })
        self.inner = FakeInner(self.world)
        gateway = FakeGateway(self.world)
        mode = lambda: self.mode  # noqa: E731
        self.errors = ErrorChannel()
        offsets = Offsets(config, self.inner)  # type: ignore[arg-type]
        self.assignment = Assignment(config, self.inner, mode)  # type: ignore[arg-type]
        self.kafka = KafkaDelivery(self.inner, self.assignment, offsets, self.errors, SourceCounts())  # type: ignore[arg-type]
        remote = RemoteResources(gateway, ByteBudget(1 << 20), ThreadPoolExecutor(1), threading.Event())  # type: ignore[arg-type]
        self.positions = Positions(config, mode, Tiers(self.inner, gateway), remote, self.assignment, self.kafka, self.errors, lambda what: self.inner)  # type: ignore[arg-type]
        self.membership = Membership(object(), self.inner, mode, self.assignment, self.positions, self.kafka, offsets, self.errors)  # type: ignore[arg-type]

    def state(self, tp: TP) -> tuple[int | None, Source | None]:
        s = self.assignment.get(tp)
        assert s is not None
        return s.position, s.handoff.source

    def take_errors(self) -> list[Message]:
        out: list[Message] = []
        self.errors.take(out, 10_000)
        return out

    def deliver_events(self) -> None:
        """One poll's worth: librdkafka's queued events in, then handled."""
        self.kafka.serve(500, 0)
        self.positions.handle_out_of_range()


# -- the model ---------------------------------------------------------------------------------------
def firsts(mode: Mode, w: PartitionWorld) -> list[int]:
    out = []
    if modes.reads_kafka(mode):
        out.append(w.kafka_low)
    if modes.reads_remote(mode) and w.remote is not None:
        out.append(w.remote[0])
    return out


def latest(mode: Mode, w: PartitionWorld) -> int:
    if modes.reads_kafka(mode):
        return w.kafka_high
    return 0 if w.remote is None else w.remote[1] + 1


def source_at(mode: Mode, w: PartitionWorld, offset: int) -> Source:
    if mode in (Mode.KAFKA_ONLY, Mode.KAFKA_PREFERRED):
        return Source.KAFKA
    if mode is Mode.REMOTE_ONLY:
        return Source.REMOTE
    return Source.REMOTE if w.remote_holds(offset) else Source.KAFKA


def expected_reset(mode: Mode, policy: str, w: PartitionWorld, offset: int | None) -> int | None:
    """auto.offset.reset from ``offset`` (None: no position): Kafka's rule, forward-only within the data."""
    if policy == "latest":
        return latest(mode, w)
    if policy == "error":
        return None
    if offset is None or offset >= latest(mode, w):
        return min(firsts(mode, w), default=0)
    read_holds = (modes.reads_kafka(mode) and w.kafka_holds(offset)) or (modes.reads_remote(mode) and w.remote_holds(offset))
    if read_holds:
        return offset
    ahead = [f for f in firsts(mode, w) if f > offset]
    return min(ahead) if ahead else latest(mode, w)


@dataclass
class Expected:
    position: int | None
    source: Source | None
    codes: list[int]  # the error codes the partition's messages must have, in this step
    at_gap: bool = False  # stopped at a gap between the tiers: the error is met again by every poll until a seek


def expected_out_of_range(mode: Mode, policy: str, gap_skip: bool, w: PartitionWorld, p: int) -> Expected:
    """A current OFFSET_OUT_OF_RANGE at ``p`` (Kafka does not hold it) under the modes contract."""
    if p < w.kafka_low and mode in (Mode.KAFKA_PREFERRED, Mode.REMOTE_PREFERRED) and w.remote is not None:
        if w.remote_holds(p):
            return Expected(p, Source.REMOTE, [])
        if w.remote[0] <= p:  # remote storage ends below Kafka's log start: a gap between the tiers
            if not gap_skip:
                return Expected(p, Source.KAFKA, [KafkaError.OFFSET_OUT_OF_RANGE], at_gap=True)
            return Expected(w.kafka_low, Source.KAFKA, [])  # offsets no tier holds: logged
    target = expected_reset(mode, policy, w, p)
    if target is None:
        return Expected(p, None, [KafkaError._AUTO_OFFSET_RESET])
    codes = [KafkaError.OFFSET_OUT_OF_RANGE] if target > p and w.any_tier_holds(p, target - 1) else []
    return Expected(target, source_at(mode, w, target), codes)


def expected_start(mode: Mode, policy: str, w: PartitionWorld, offset: int) -> Expected:
    if offset >= 0:
        return Expected(offset, source_at(mode, w, offset), [])
    if offset == OFFSET_BEGINNING:
        target: int | None = min(firsts(mode, w), default=0)
    elif offset == OFFSET_END:
        target = latest(mode, w)
    else:  # OFFSET_STORED with nothing committed: auto.offset.reset from no position
        target = expected_reset(mode, policy, w, None)
        if target is None:
            return Expected(None, None, [KafkaError._AUTO_OFFSET_RESET])
    return Expected(target, source_at(mode, w, target), [])


# -- the property --------------------------------------------------------------------------------------
def make_world(low: int, size: int, remote: tuple[int, int] | None) -> PartitionWorld:
    """A world that could be: remote storage holds only offsets Kafka once held (below its high watermark)."""
    high = low + size
    if remote is not None:
        remote = None if remote[0] >= high else (remote[0], min(remote[1], high - 1))
    return PartitionWorld(low, high, remote)


worlds = st.builds(
    make_world,
    st.integers(0, 60), st.integers(0, 40),
    st.one_of(st.none(), st.tuples(st.integers(0, 50), st.integers(0, 40)).map(lambda r: (r[0], r[0] + r[1]))),
)
starts = st.one_of(st.integers(0, 120), st.sampled_from([OFFSET_BEGINNING, OFFSET_END, OFFSET_STORED]))
steps = st.lists(
    st.one_of(
        st.tuples(st.just("events"), st.lists(st.tuples(st.integers(0, 2), st.integers(-1, 3)), min_size=1, max_size=4)),
        st.tuples(st.just("seek"), st.tuples(st.integers(0, 2), starts)),
        st.tuples(st.just("retention"), st.tuples(st.integers(0, 2), st.integers(0, 30))),
        st.tuples(st.just("produce"), st.tuples(st.integers(0, 2), st.integers(1, 30))),
    ),
    max_size=12,
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    mode=st.sampled_from(list(Mode)),
    policy=st.sampled_from(["earliest", "latest", "error"]),
    gap_skip=st.booleans(),
    partition_worlds=st.lists(worlds, min_size=1, max_size=3),
    start_offsets=st.lists(starts, min_size=3, max_size=3),
    script=steps,
)
@example(  # CI found it: a gap's error is met again by the next poll, not only with the event that found it
    mode=Mode.REMOTE_PREFERRED, policy="earliest", gap_skip=False,
    partition_worlds=[PartitionWorld(0, 0, None), PartitionWorld(2, 2, (0, 0))], start_offsets=[0, 1, 0],
    script=[("events", [(1, 0)]), ("events", [(0, 0)])],
)
@example(  # an event about an older fetch meets the position a reset in the same poll moved to: it is current
    mode=Mode.KAFKA_PREFERRED, policy="earliest", gap_skip=False,
    partition_worlds=[PartitionWorld(2, 2, (1, 1))], start_offsets=[1, 0, 0],
    script=[("seek", (0, 0)), ("events", [(0, 0), (0, 1)])],
)
def test_positions_follow_the_model(mode: Mode, policy: str, gap_skip: bool, partition_worlds: list[PartitionWorld], start_offsets: list[int], script: list[Any]) -> None:
    note(f"{mode.value} {policy} gap_skip={gap_skip} worlds={partition_worlds} starts={start_offsets} script={script}")
    world = {(TOPIC, i): w for i, w in enumerate(partition_worlds)}
    tps = list(world)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(positions_module, "RemoteReader", FakeReader)
        h = Harness(mode, policy, gap_skip, world)
        h.membership.assign([TopicPartition(t, p, start_offsets[p]) for t, p in tps])
        expect = {tp: expected_start(mode, policy, world[tp], start_offsets[tp[1]]) for tp in tps}
        check(h, expect, "assign")
        at_gap: set[TP] = set()  # partitions stopped at a gap: channel's table, "met again by the next read"
        for kind, arg in script:
            if kind == "events":
                # The consumer takes a partition's events in the order librdkafka queued them, an
                # event kept from the last poll (a gap's) first, one per offset; each is current
                # when it is about the position it meets (``Handoff.out_of_range_is_current``).
                queued: dict[TP, list[int]] = {tp: [h.state(tp)[0]] for tp in at_gap}
                for index, pick in arg:
                    tp = tps[index % len(tps)]
                    current = h.inner.fetching.get(tp)
                    history = h.inner.fetched_from.get(tp, [])
                    if pick < 0 or not history:  # what librdkafka does: an event for the fetch position when Kafka does not hold it
                        if current is None or world[tp].kafka_holds(current) or current == world[tp].kafka_high:
                            continue
                        offset = current
                    else:  # an older fetch position: queued before a seek reached librdkafka
                        offset = history[-1 - pick % len(history)]
                    h.inner.out_of_range(tp, offset)
                    if offset not in queued.setdefault(tp, []):
                        queued[tp].append(offset)
                expect = {tp: Expected(*h.state(tp), []) for tp in tps}
                for tp, offsets in queued.items():
                    for offset in offsets:
                        was = expect[tp]
                        if was.source is Source.KAFKA and (offset < 0 or offset == was.position):
                            now = expected_out_of_range(mode, policy, gap_skip, world[tp], was.position)
                            expect[tp] = Expected(now.position, now.source, was.codes + now.codes, now.at_gap)
                h.deliver_events()
                check(h, expect, f"events {arg}")
                at_gap = {tp for tp in tps if expect[tp].at_gap}
            elif kind == "seek":
                index, offset = arg
                tp = tps[index % len(tps)]
                if offset == OFFSET_STORED:
                    continue
                expect = {t: Expected(*h.state(t), []) for t in tps}
                expect[tp] = expected_start(mode, policy, world[tp], offset)
                h.positions.seek(TopicPartition(*tp, offset))
                check(h, expect, f"seek {tp} {offset}")
                at_gap.discard(tp)
            elif kind == "retention":
                index, by = arg
                w = world[tps[index % len(tps)]]
                w.kafka_low = min(w.kafka_high, w.kafka_low + by)
            else:
                index, count = arg
                world[tps[index % len(tps)]].kafka_high += count


def check(h: Harness, expect: dict[TP, Expected], step: str) -> None:
    errors = h.take_errors()
    for tp, want in expect.items():
        got = h.state(tp)
        assert got == (want.position, want.source), f"{step}: {tp} is at {got}, the model says {(want.position, want.source)} ({h.mode.value}, {h.policy}, {h.world[tp]})"
        codes = [m.error().code() for m in errors if (m.topic(), m.partition()) == tp]
        assert sorted(codes) == sorted(want.codes), f"{step}: {tp} got error codes {codes}, the model says {want.codes}: {[m.error().str() for m in errors]}"


# -- the reported case, by hand ------------------------------------------------------------------------
def test_kafka_only_earliest_is_not_reset_again_by_a_stale_event() -> None:
    """Issue 33: log start 1500, high watermark 3000, assigned at 0: the first event resets to 1500;
    librdkafka's second event, about offset 0 and queued before our seek, must not reset again
    (it did, from 1500 to the high watermark, delivering nothing)."""
    world = {(TOPIC, p): PartitionWorld(1500, 3000, None) for p in range(3)}
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(positions_module, "RemoteReader", FakeReader)
        h = Harness(Mode.KAFKA_ONLY, "earliest", True, world)
        h.membership.assign([TopicPartition(TOPIC, p, 0) for p in range(3)])
        for p in range(3):
            h.inner.out_of_range((TOPIC, p), 0)
        h.deliver_events()
        for p in range(3):  # the stale ones
            h.inner.out_of_range((TOPIC, p), 0)
        h.deliver_events()
        assert [h.state((TOPIC, p)) for p in range(3)] == [(1500, Source.KAFKA)] * 3
        assert h.inner.fetching == {(TOPIC, p): 1500 for p in range(3)}
        assert h.take_errors() == []  # no tier holds 0..1499: Kafka's own silent reset


def test_kafka_only_passing_what_remote_storage_holds_is_an_error_message() -> None:
    """KAFKA_ONLY does not read remote storage, but passing offsets it holds is never silent: the
    message says who holds them, and reading goes on at Kafka's log start."""
    world = {(TOPIC, 0): PartitionWorld(1500, 3000, (0, 1499))}
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(positions_module, "RemoteReader", FakeReader)
        h = Harness(Mode.KAFKA_ONLY, "earliest", True, world)
        h.membership.assign([TopicPartition(TOPIC, 0, 0)])
        h.inner.out_of_range((TOPIC, 0), 0)
        h.deliver_events()
        assert h.state((TOPIC, 0)) == (1500, Source.KAFKA)
        [message] = h.take_errors()
        assert message.error().code() == KafkaError.OFFSET_OUT_OF_RANGE and message.offset() == 0
        assert "remote storage holds 0..1499" in message.error().str() and "continuing at 1500" in message.error().str()
