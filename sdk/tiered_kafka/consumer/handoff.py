"""One partition's handoff between remote storage and Kafka: a state machine without I/O.

``TieredConsumer`` keeps one ``Handoff`` per assigned partition. It feeds it what happened
(events) and does what it answers (decisions); the rules come from ``tiered_kafka.modes``. The
machine owns the partition's *position*, the next offset the application gets, and its *source*.
Because it does no I/O, it is tested against a model with property-based tests
(tests/unit/sdk/test_handoff.py).

Events (methods)                                      Decisions (return values)
    start(offset, remote_holds)  assign, seek, reset      ReadFrom(source, offset)  read that tier from there
    set_mode(mode, remote_holds)                          Wait(offset)              remote's end: wait for uploads
    delivered(source, next_offset)  records taken, or     Skip(start, end, reason, read)  a logged skip past
                                    control/aborted ones                            offsets no tier holds
                                    passed                GapError(start, end, reason)  tiered.remote.gap.policy=error
    remote_end(held)             remote storage ends      Reset(offset)             auto.offset.reset from there
    remote_below_start(held)     remote retention         AuthorizationFailed(offset)  TOPIC_AUTHORIZATION_FAILED
    gap(start, end, reason, held)  a recorded gap
    kafka_out_of_range(fetched, log_start, remote)
    authorization_failed()
    revoke()

``held`` is read_committed's handoff point: the first offset the remote reader holds behind a
transaction whose marker remote storage does not have yet (``CommittedFilter.first_held_offset``).
Every offset before it is decided, so the reader hands over at ``max(position, held)``: Kafka's own
read_committed (its last stable offset) takes over there. It is never below the position, so a
consumer that resumes inside an open transaction delivers nothing below its committed offset.

A GapError leaves the state as it was: the consumer delivers it as the partition's error message
(OFFSET_OUT_OF_RANGE), and the next poll meets the same
gap again (until the application seeks past it), as a failed remote read is retried.

Kafka's OFFSET_OUT_OF_RANGE names the offset librdkafka fetched. librdkafka may have queued more
than one before the consumer's seek reached it: an event about any offset but the position, or met
while the source is not Kafka, is stale and decides nothing (``out_of_range_is_current``).

Invariants (the property tests check them): the position only moves forward except on ``start``
(a seek); a ReadFrom is always at the position; ``delivered`` is accepted only from the current
source at the position; after AuthorizationFailed nothing is read until the next ``start``; a
stale OFFSET_OUT_OF_RANGE changes nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from tiered_kafka import modes
from tiered_kafka.modes import Action, Mode, Source


@dataclass(frozen=True, slots=True)
class ReadFrom:
    source: Source
    offset: int


@dataclass(frozen=True, slots=True)
class Wait:
    offset: int


@dataclass(frozen=True, slots=True)
class Skip:
    """Offsets ``start..end`` are in no tier the mode reads; logged and passed. ``read`` is where
    reading goes on (None: the current remote reader, which already continues after the gap)."""

    start: int
    end: int
    reason: str
    read: ReadFrom | None


@dataclass(frozen=True, slots=True)
class GapError:
    start: int
    end: int
    reason: str


@dataclass(frozen=True, slots=True)
class Reset:
    offset: int


@dataclass(frozen=True, slots=True)
class AuthorizationFailed:
    offset: int


Decision = ReadFrom | Wait | Skip | GapError | Reset | AuthorizationFailed


class Handoff:
    """The handoff state of one partition (module docstring)."""

    __slots__ = ("mode", "kafka_configured", "gap_skip", "position", "source", "failed", "switch_back_at", "kafka_log_start")

    def __init__(self, mode: Mode, *, kafka_configured: bool, gap_skip: bool) -> None:
        self.mode = mode
        self.kafka_configured = kafka_configured
        self.gap_skip = gap_skip
        self.position: int | None = None
        self.source: Source | None = None  # None: not reading (revoked, waiting for a reset, failed)
        self.failed = False  # TOPIC_AUTHORIZATION_FAILED: no progress until the next start
        self.switch_back_at: int | None = None  # KAFKA_PREFERRED on remote: Kafka's log start when it refused
        self.kafka_log_start: int | None = None  # Kafka's log start the last time it answered OFFSET_OUT_OF_RANGE

    # -- where reading starts ----------------------------------------------------------------------
    def start(self, offset: int, remote_holds: Callable[[], bool]) -> ReadFrom:
        """Assign, seek or reset to ``offset``: the source the mode picks there. The previous read
        ends first, so when ``remote_holds`` (which may do I/O) raises, the partition is at
        ``offset`` reading nothing, and a failure reported then is a new event."""
        if offset < 0:
            raise ValueError(f"cannot start at offset {offset}")
        self.position, self.source, self.switch_back_at, self.failed = offset, None, None, False
        return self._read(modes.decide(self.mode, remote_holds=remote_holds, kafka_configured=self.kafka_configured), offset)

    def set_mode(self, mode: Mode, remote_holds: Callable[[], bool]) -> ReadFrom | None:
        """Change the mode; reading goes on at the exact position (None: nothing to restart)."""
        self.mode = mode
        if self.position is None:
            return None
        return self.start(self.position, remote_holds)

    def revoke(self) -> None:
        self.position, self.source, self.switch_back_at = None, None, None

    # -- data --------------------------------------------------------------------------------------
    def accepts(self, source: Source, offset: int) -> bool:
        """Whether a record of ``source`` at ``offset`` is the application's next (else it was
        fetched before a switch or a seek, or is already delivered)."""
        return self.source is source and self.position is not None and offset >= self.position

    def delivered(self, source: Source, next_offset: int) -> ReadFrom | None:
        """Records of ``source`` before ``next_offset`` were taken by the application, or passed
        (control records, aborted records). KAFKA_PREFERRED on remote storage returns to Kafka
        once the position reaches the log start Kafka reported."""
        if self.source is not source or self.position is None:
            raise ValueError(f"delivery from {source.value} while reading {self.source}")
        if next_offset < self.position:
            raise ValueError(f"delivery moves the position back from {self.position} to {next_offset}")
        self.position = next_offset
        if source is Source.REMOTE and self.switch_back_at is not None and next_offset >= self.switch_back_at:
            return self._read(Source.KAFKA, next_offset)
        return None

    # -- remote storage cannot go on -----------------------------------------------------------------
    def remote_end(self, held: int | None = None) -> Decision:
        """Remote storage holds nothing at or after the position (yet)."""
        at = self._handoff_offset(held)
        if modes.at_remote_end(self.mode) is Action.WAIT:
            self.position = at
            return Wait(at)
        return self._read(Source.KAFKA, at)

    def remote_below_start(self, held: int | None = None) -> Decision:
        at = self._handoff_offset(held)
        if modes.below_remote_start(self.mode, at, self.kafka_log_start) is Action.READ_KAFKA:
            return self._read(Source.KAFKA, at)
        return self._reset(at)

    def gap(self, start: int, end: int, reason: str, held: int | None = None) -> Decision | None:
        """Remote storage lacks ``start..end`` (the agent recorded why); None when the position is past it."""
        at = self._handoff_offset(held)
        if at > end:
            return None
        if modes.at_gap(self.mode, at, start, end, self.kafka_log_start) is Action.READ_KAFKA:
            return self._read(Source.KAFKA, at)
        first, last = max(at, start), end
        read = None
        rest = modes.gap_kafka_rest(self.mode, at, end, self.kafka_log_start)
        if rest is not None:  # Kafka holds the rest of the gap
            last = rest - 1
            read = ReadFrom(Source.KAFKA, rest)
        if not self.gap_skip:
            self.position = at
            return GapError(first, last, reason)
        self.position = last + 1
        if read is not None or (self.switch_back_at is not None and self.position >= self.switch_back_at):
            read = self._read(Source.KAFKA, self.position)
        return Skip(first, last, reason, read)

    # -- Kafka cannot go on ----------------------------------------------------------------------
    def out_of_range_is_current(self, fetched: int) -> bool:
        """Whether Kafka's OFFSET_OUT_OF_RANGE for a fetch at ``fetched`` is about where this
        partition reads now: from Kafka, at the position (a negative ``fetched``, an offset
        librdkafka did not name, is taken as the position)."""
        if self.source is not Source.KAFKA or self.position is None:
            return False
        return fetched < 0 or fetched == self.position

    def kafka_out_of_range(self, fetched: int, log_start: int, remote: tuple[int, int] | None) -> Decision | None:
        """Kafka answered OFFSET_OUT_OF_RANGE for a fetch at ``fetched`` with its log start
        ``log_start``; ``remote`` is remote storage's (earliest, latest), None when it holds
        nothing. None: the event is stale (``out_of_range_is_current``)."""
        if not self.out_of_range_is_current(fetched):
            return None
        at = self._require_position()
        if at < log_start:
            self.kafka_log_start = log_start
        action = modes.kafka_out_of_range(self.mode, at, log_start, remote)
        if action is Action.READ_REMOTE:
            decision = self._read(Source.REMOTE, at)
            self.switch_back_at = modes.switch_back_at(self.mode, log_start)
            return decision
        if action is Action.GAP:
            if not self.gap_skip:
                return GapError(at, log_start - 1, "between tiers")
            self.position = log_start
            return Skip(at, log_start - 1, "between tiers", self._read(Source.KAFKA, log_start))
        return self._reset(at)

    # -- failures -----------------------------------------------------------------------------------
    def authorization_failed(self, at: int | None = None) -> AuthorizationFailed | None:
        """The gateway answered TOPIC_AUTHORIZATION_FAILED (``at``: the offset asked, when the
        partition has no position yet). ``modes.on_authorization_failed``: the same in every mode,
        the partition stops. Once per event: None if the partition already failed."""
        if self.failed:
            return None
        action = modes.on_authorization_failed(self.mode)
        if action is not Action.FAIL:  # the only answer the contract gives: no tier is read past data the caller may not see
            raise ValueError(f"modes.on_authorization_failed answered {action}, which the handoff cannot follow")
        if self.position is None:
            self.position = at
        self.failed = True
        self.source, self.switch_back_at = None, None
        return AuthorizationFailed(self.position if self.position is not None else -1)

    # -- helpers ------------------------------------------------------------------------------------
    def _handoff_offset(self, held: int | None) -> int:
        position = self._require_position()
        return position if held is None else max(position, held)

    def _require_position(self) -> int:
        if self.position is None:
            raise ValueError("the partition has no position")
        return self.position

    def _read(self, source: Source, offset: int) -> ReadFrom:
        self.position, self.source = offset, source
        if source is Source.KAFKA:
            self.switch_back_at = None
        return ReadFrom(source, offset)

    def _reset(self, offset: int) -> Reset:
        self.position, self.source, self.switch_back_at = offset, None, None
        return Reset(offset)
