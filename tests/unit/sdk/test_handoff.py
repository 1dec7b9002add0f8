"""The per-partition handoff (``tiered_kafka.consumer.handoff``) against a model, with hypothesis.

The model is the simplest statement of the modes contract: a partition's offsets ``0..end-1`` are
*readable* under a mode when a tier the mode reads holds them (remote storage: its range minus
recorded gaps; Kafka: from its log start). From a position ``p`` the application's next record is
the first readable offset at or after ``p``. Offsets that are *decided* under read_committed
(control records and aborted records) are readable in no tier: the readers pass them. When the
rest of remote storage from the position is decided, the remote reader reports the first offset it
cannot decide as ``held`` (``remote_end(held)``, held > position) and the model hands over there,
at max(position, held). Other offsets skipped on the way are a hole that is either
below every readable offset (auto.offset.reset moves forward past it, as Kafka does) or, with
readable data before it, a gap: ``tiered.remote.gap.policy=error`` stops there with GapError.

A driver plays the I/O the consumer does (remote reads, Kafka fetches, OFFSET_OUT_OF_RANGE, the
gateway's 403, auto.offset.reset=earliest) in a random world, interleaved with random seeks, mode
changes, revokes and retention, and checks after every step: delivered offsets strictly increase
(between seeks), each is the model's next offset, the sources are the mode's, and at the end every
readable offset after the last seek was delivered.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tiered_kafka.consumer.handoff import AuthorizationFailed, GapError, Handoff, ReadFrom, Reset, Skip, Wait
from tiered_kafka.modes import Mode, Source


class Forbidden(Exception):
    """The gateway's 403 in the driver."""


@dataclass
class World:
    end: int  # offsets 0..end-1 were produced
    kafka_start: int  # Kafka holds kafka_start..end-1
    remote: tuple[int, int] | None  # remote storage's (earliest, latest), gaps included
    gaps: list[tuple[int, int]]  # recorded gaps inside the remote range (never adjacent)
    authorized: bool = True
    decided: frozenset[int] = frozenset()  # control and aborted records: read_committed delivers none

    def first_hole(self, mode: Mode, first: int, last: int) -> int | None:
        """The first of ``first..last`` no tier the mode reads holds (decided offsets are held)."""
        return next((o for o in range(first, last + 1) if not self.present(mode, o)), None)

    def in_remote(self, offset: int) -> bool:
        return self.remote is not None and self.remote[0] <= offset <= self.remote[1] and self.gap_at(offset) is None

    def gap_at(self, offset: int) -> tuple[int, int] | None:
        return next((g for g in self.gaps if g[0] <= offset <= g[1]), None)

    def readable(self, mode: Mode, offset: int) -> bool:
        return self.present(mode, offset) and offset not in self.decided

    def present(self, mode: Mode, offset: int) -> bool:
        """A tier the mode reads holds the offset (a record, or a decided one)."""
        if not 0 <= offset < self.end:
            return False
        remote = mode is not Mode.KAFKA_ONLY and self.in_remote(offset)
        kafka = mode is not Mode.REMOTE_ONLY and offset >= self.kafka_start
        return remote or kafka

    def next_readable(self, mode: Mode, offset: int) -> int | None:
        return next((o for o in range(offset, self.end) if self.readable(mode, o)), None)

    def any_present_below(self, mode: Mode, offset: int) -> bool:
        return any(self.present(mode, o) for o in range(0, min(offset, self.end)))

    def decided_run(self, offset: int, last: int) -> int:
        """The first offset at or after ``offset`` (up to ``last + 1``) that is not decided."""
        while offset <= last and offset in self.decided:
            offset += 1
        return offset


@st.composite
def worlds(draw: st.DrawFn) -> World:
    end = draw(st.integers(1, 40))
    kafka_start = draw(st.integers(0, end))
    remote = None
    gaps: list[tuple[int, int]] = []
    if draw(st.booleans()) or kafka_start > 0:
        lo = draw(st.integers(0, end - 1))
        hi = draw(st.integers(lo, end - 1))
        remote = (lo, hi)
        at = lo + 1
        while at < hi and draw(st.booleans()):
            start = draw(st.integers(at, hi))
            stop = draw(st.integers(start, min(hi, start + 4)))
            gaps.append((start, stop))
            at = stop + 2  # never adjacent: a hole is one recorded gap
            if at >= hi:
                break
    decided = set(draw(st.sets(st.integers(0, end - 1), max_size=end // 2)))
    if remote is not None and draw(st.booleans()):  # remote storage ends with decided records (then held)
        decided.update(range(draw(st.integers(remote[0], remote[1])), remote[1] + 1))
    return World(end, kafka_start, remote, gaps, authorized=draw(st.integers(0, 5)) > 0, decided=frozenset(decided))


STEPS = st.one_of(
    st.tuples(st.just("io"), st.integers(1, 4)),
    st.tuples(st.just("seek"), st.integers(0, 45)),
    st.tuples(st.just("mode"), st.sampled_from(list(Mode))),
    st.tuples(st.just("revoke"), st.just(0)),
    st.tuples(st.just("kafka_retention"), st.integers(0, 3)),
)


@dataclass
class Driver:
    world: World
    machine: Handoff
    delivered: list[tuple[int, Source]] = field(default_factory=list)
    expected_next: int | None = None  # where the model says the next record is looked for
    error: GapError | None = None
    failed_at: int | None = None  # AuthorizationFailed since the last start
    failures: int = 0

    @property
    def mode(self) -> Mode:
        return self.machine.mode

    # -- the consumer's side: what it does with decisions -------------------------------------
    def remote_holds(self, offset: int) -> bool:
        if not self.world.authorized:
            raise Forbidden
        return self.world.remote is not None and self.world.remote[0] <= offset <= self.world.remote[1]

    def start(self, offset: int) -> None:
        self.error, self.failed_at = None, None
        try:
            decision = self.machine.start(offset, lambda: self.remote_holds(offset))
        except Forbidden:
            self.expected_next = offset
            self.act(self.machine.authorization_failed(at=offset))
            return
        self.expected_next = offset
        self.act(decision)

    def reset(self, offset: int) -> None:
        """auto.offset.reset=earliest from a position no tier holds: forward to the first offset
        after it of a tier the mode reads (TieredConsumer._reset)."""
        if self.mode is not Mode.KAFKA_ONLY and not self.world.authorized:
            self.act(self.machine.authorization_failed())  # remote storage's earliest: the gateway answers 403
            return
        firsts = []
        if self.mode is not Mode.REMOTE_ONLY:
            firsts.append(self.world.kafka_start)
        if self.mode is not Mode.KAFKA_ONLY and self.world.remote is not None:
            firsts.append(self.world.remote[0])
        latest = self.world.end if self.mode is not Mode.REMOTE_ONLY else (0 if self.world.remote is None else self.world.remote[1] + 1)
        ahead = [o for o in firsts if o > offset]
        target = min(ahead) if ahead else latest
        assert target >= offset, "a reset never moves back"
        self.act(self.machine.start(target, lambda: self.remote_holds(target)))

    def act(self, decision: object) -> None:
        machine = self.machine
        if decision is None:
            return
        if isinstance(decision, ReadFrom):
            assert decision.offset == machine.position, "a source starts exactly at the position"
            assert decision.source is machine.source
        elif isinstance(decision, Skip):
            assert decision.start <= decision.end < machine.position
            if decision.read is not None:
                assert decision.read.offset == machine.position
        elif isinstance(decision, GapError):
            self.error = decision
        elif isinstance(decision, Reset):
            self.reset(decision.offset)
        elif isinstance(decision, AuthorizationFailed):
            assert self.failed_at is None, "one AuthorizationFailed per event"
            self.failed_at = decision.offset
            self.failures += 1
        else:
            assert isinstance(decision, Wait) and self.mode is Mode.REMOTE_ONLY

    # -- one unit of I/O from the current source --------------------------------------------------
    def io(self, size: int) -> bool:
        """One read; False when nothing happened (idle)."""
        machine, world = self.machine, self.world
        if self.error is not None or machine.failed or machine.source is None or machine.position is None:
            return False
        p = machine.position
        if machine.source is Source.REMOTE:
            assert self.mode is not Mode.KAFKA_ONLY
            if not world.authorized:
                self.act(machine.authorization_failed())
                return True
            if world.remote is None or p > world.remote[1]:
                decision = machine.remote_end()
                self.act(decision)
                return not isinstance(decision, Wait)
            if p < world.remote[0]:
                self.act(machine.remote_below_start())
                return True
            gap = world.gap_at(p)
            if gap is not None:
                self.act(machine.gap(gap[0], gap[1], "lost"))
                return True
            undecided = world.decided_run(p, world.remote[1])
            if undecided > world.remote[1]:  # the rest of remote storage is decided: held at its end
                if self.expected_next == p:
                    self.expected_next = undecided
                decision = machine.remote_end(held=undecided)
                assert machine.position == undecided, "read_committed hands over at max(position, held)"
                self.act(decision)
                return not isinstance(decision, Wait)
            last = min(p + size - 1, world.remote[1])
            nxt = next((g[0] for g in world.gaps if p < g[0] <= last), None)
            last = last if nxt is None else nxt - 1
            self.deliver(Source.REMOTE, p, last)
            return True
        assert self.mode is not Mode.REMOTE_ONLY
        if p < world.kafka_start:
            if self.mode in (Mode.KAFKA_PREFERRED, Mode.REMOTE_PREFERRED) and not world.authorized:
                self.act(machine.authorization_failed())  # the consumer asks the gateway for remote's extent
                return True
            self.act(machine.kafka_out_of_range(p, world.kafka_start, world.remote))
            return True
        if p >= world.end:
            return False
        self.deliver(Source.KAFKA, p, min(p + size - 1, world.end - 1))
        return True

    def deliver(self, source: Source, first: int, last: int) -> None:
        machine = self.machine
        other = Source.KAFKA if source is Source.REMOTE else Source.REMOTE
        assert not machine.accepts(other, first) and (first == 0 or not machine.accepts(source, first - 1))
        for offset in range(first, last + 1):
            assert machine.accepts(source, offset)
            if offset in self.world.decided:  # a control or aborted record: passed, not delivered
                if self.expected_next == offset:
                    self.expected_next = offset + 1
            else:
                self.check_next(offset, source)
                self.delivered.append((offset, source))
            self.act(machine.delivered(source, offset + 1))
            if machine.source is not source:
                break

    # -- the model -----------------------------------------------------------------------------
    def check_next(self, offset: int, source: Source) -> None:
        world, mode = self.world, self.mode
        assert self.failed_at is None and self.error is None, "no delivery after an error"
        assert self.expected_next is not None and offset >= self.expected_next, "strictly increasing"
        want = world.next_readable(mode, self.expected_next)
        assert offset == want, f"delivered {offset}, the model's next is {want}"
        hole = world.first_hole(mode, self.expected_next, offset - 1)
        if hole is not None:  # a hole was passed
            assert world.authorized or mode is Mode.KAFKA_ONLY, "a hole passed without asking the gateway"
            if not self.machine.gap_skip:
                assert not world.any_present_below(mode, hole), f"gap {hole}..{offset - 1} skipped under policy error"
        if source is Source.KAFKA:
            assert mode is not Mode.REMOTE_ONLY and offset >= world.kafka_start
        else:
            assert mode is not Mode.KAFKA_ONLY and world.in_remote(offset)
            if mode is Mode.KAFKA_PREFERRED:
                assert offset < world.kafka_start, "KAFKA_PREFERRED reads remote only below Kafka's log start"
        self.expected_next = offset + 1

    def check_done(self) -> None:
        """Nothing left to read: everything readable after the last start was delivered, or the
        partition stopped with an error the model expects."""
        world, mode, machine = self.world, self.mode, self.machine
        if self.expected_next is None:
            return
        want = world.next_readable(mode, self.expected_next)
        if self.failed_at is not None:
            assert mode is not Mode.KAFKA_ONLY and not world.authorized
            return
        if self.error is not None:
            assert not machine.gap_skip
            assert self.expected_next <= self.error.start <= self.error.end < (world.end if want is None else want)
            assert all(o in world.decided for o in range(self.expected_next, self.error.start) if world.present(mode, o)), "only decided offsets passed"
            hole = world.first_hole(mode, self.expected_next, self.error.start - 1)
            assert hole is None or not world.any_present_below(mode, hole), "a hole after data passed under policy error"
            assert world.any_present_below(mode, self.error.start), "a hole below all data is a reset, not a gap"
            return
        assert want is None, f"stopped at {machine.position} ({machine.source}) with {want} still readable"


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(world=worlds(), mode=st.sampled_from(list(Mode)), gap_skip=st.booleans(), start=st.integers(0, 45), steps=st.lists(STEPS, max_size=30))
def test_the_handoff_delivers_what_the_model_says(world: World, mode: Mode, gap_skip: bool, start: int, steps: list[tuple[str, object]]) -> None:
    driver = Driver(world, Handoff(mode, kafka_configured=True, gap_skip=gap_skip))
    driver.start(start)
    for kind, arg in steps:
        if kind == "io":
            driver.io(int(arg))  # type: ignore[arg-type]
        elif kind == "seek":
            driver.start(int(arg))  # type: ignore[arg-type]
        elif kind == "mode":
            driver.machine.mode = arg  # type: ignore[assignment]
            position = driver.machine.position
            driver.start(position if position is not None else start)
        elif kind == "revoke":  # and assigned again at the committed offset (the position)
            position = driver.machine.position
            driver.machine.revoke()
            assert driver.machine.position is None and driver.machine.source is None
            driver.start(position if position is not None else start)
        elif kind == "kafka_retention":
            world.kafka_start = min(world.end, world.kafka_start + int(arg))  # type: ignore[call-overload]
    for _ in range(4 * world.end + 20):  # drain
        if not driver.io(3):
            break
    else:
        pytest.fail("the handoff never settles")
    driver.check_done()
    if driver.error is not None:  # retried, the same error at the same offset
        error, driver.error = driver.error, None
        machine = driver.machine
        assert machine.position == error.start
        driver.io(1)
        # The same gap at the same offset; its end may have grown when Kafka's retention moved after
        # the machine last looked at the log start (the first error reported what it knew then).
        again = driver.error
        assert (again is not None and (again.start, again.reason) == (error.start, error.reason) and again.end >= error.end) or (
            again is None and driver.failed_at is not None
        )


@pytest.mark.parametrize("mode", [pytest.param(m, id=m.value) for m in Mode])
def test_authorization_failure_stops_every_mode_once(mode: Mode) -> None:
    machine = Handoff(mode, kafka_configured=True, gap_skip=True)
    machine.start(5, lambda: True)
    assert machine.authorization_failed() == AuthorizationFailed(5)
    assert machine.authorization_failed() is None  # once per event
    assert machine.source is None and not machine.accepts(Source.KAFKA, 5) and not machine.accepts(Source.REMOTE, 5)
    assert isinstance(machine.start(5, lambda: True), ReadFrom)  # a seek tries again


def test_read_committed_hands_over_at_the_first_held_offset() -> None:
    machine = Handoff(Mode.REMOTE_PREFERRED, kafka_configured=True, gap_skip=False)
    machine.start(0, lambda: True)
    machine.delivered(Source.REMOTE, 11)
    assert machine.remote_end(held=19) == ReadFrom(Source.KAFKA, 19)  # 11..18 decided: aborted or control


def test_resuming_inside_an_open_transaction_never_goes_back() -> None:
    machine = Handoff(Mode.REMOTE_PREFERRED, kafka_configured=True, gap_skip=False)
    machine.start(20, lambda: True)  # committed offset 20; p11's transaction began at 19
    assert machine.remote_end(held=19) == ReadFrom(Source.KAFKA, 20)


def test_kafka_preferred_returns_to_kafka_at_the_reported_log_start() -> None:
    machine = Handoff(Mode.KAFKA_PREFERRED, kafka_configured=True, gap_skip=False)
    assert machine.start(0, lambda: pytest.fail("KAFKA_PREFERRED does not ask remote storage")) == ReadFrom(Source.KAFKA, 0)
    assert machine.kafka_out_of_range(0, 100, (0, 150)) == ReadFrom(Source.REMOTE, 0)
    assert machine.delivered(Source.REMOTE, 60) is None
    assert machine.delivered(Source.REMOTE, 100) == ReadFrom(Source.KAFKA, 100)
