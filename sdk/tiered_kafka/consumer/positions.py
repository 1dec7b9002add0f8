"""TieredConsumer's positions: where each assigned partition reads from, and the calls about offsets
that do not commit (``seek``, ``position``, ``get_watermark_offsets``, ``offsets_for_times``).

Each partition's ``Handoff`` (``tiered_kafka.consumer.handoff``) owns its position and source and
decides; ``Positions`` feeds it the events of the consumer's I/O (assign, seek, reset, Kafka's
OFFSET_OUT_OF_RANGE) and does what it decides: start a ``RemoteReader`` (remote storage), assign or
seek the inner consumer (Kafka), apply ``auto.offset.reset`` (earliest: from no position, the
earliest offset of the tiers the mode reads, and from a position no tier the mode reads holds, the
first offset after it that one holds; latest: the end; error: the partition's _AUTO_OFFSET_RESET
message), skip or stop at a gap. A per-partition failure goes to the error channel (``channel``).

Kafka's OFFSET_OUT_OF_RANGE events come from ``KafkaDelivery`` and each names the offset librdkafka
fetched. One about an offset that is no longer the partition's position is stale (librdkafka
queued it before our seek reached it) and changes nothing: without this rule a second event, met
once a first reset had moved the position to Kafka's log start, reset the partition again from
there, to the high watermark (issue 33).

Never silently past data: a reset that moves a position forward over offsets that some tier
holds (one the mode does not read, say remote storage under KAFKA_ONLY, or either tier while the
other holds data ahead) delivers the partition's OFFSET_OUT_OF_RANGE error message, naming the
offsets and who holds them, and then goes on at the target. Only offsets no tier holds (retention
took them from both) are passed with a log line, as Kafka's own reset passes them.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from confluent_kafka import OFFSET_BEGINNING, OFFSET_END, OFFSET_INVALID, Consumer, KafkaError, KafkaException, TopicPartition

from tiered_kafka import modes
from tiered_kafka.consumer.assignment import Assignment
from tiered_kafka.consumer.channel import ErrorChannel, error_message
from tiered_kafka.consumer.config import TieredConfig
from tiered_kafka.consumer.handoff import AuthorizationFailed, Decision, GapError, ReadFrom, Reset, Skip, Wait
from tiered_kafka.consumer.kafka_delivery import KafkaDelivery
from tiered_kafka.consumer.messages import range_messages
from tiered_kafka.consumer.partition import PartitionState
from tiered_kafka.consumer.prefetch import ByteBudget, RemoteReader
from tiered_kafka.consumer.tiers import Tiers, TierRange, is_authorization_failure
from tiered_kafka.errors import ConfigError, RemoteGapError
from tiered_kafka.client.gateway import GatewayClient
from tiered_kafka.modes import Mode, Source
from tiered_kafka.transactions import CommittedFilter

log = logging.getLogger(__name__)
TP = tuple[str, int]


class RemoteResources:
    """What every remote reader of one consumer shares: the gateway client, the prefetch data
    budget and thread pool, and the event that wakes ``poll`` when a chunk is ready."""

    def __init__(self, gateway: GatewayClient | None, budget: ByteBudget, pool: ThreadPoolExecutor, wake: threading.Event) -> None:
        self.gateway = gateway
        self.budget = budget
        self.pool = pool
        self.wake = wake


class Positions:
    """Drives each partition's handoff (module doc); owns no state of its own beyond its
    collaborators. ``require_kafka(what)``: the inner consumer, or the error saying ``what`` needs Kafka."""

    def __init__(
        self,
        config: TieredConfig,
        mode: Callable[[], Mode],
        tiers: Tiers,
        remote: RemoteResources,
        assignment: Assignment,
        kafka: KafkaDelivery,
        errors: ErrorChannel,
        require_kafka: Callable[[str], Consumer],
    ) -> None:
        self._config = config
        self._mode = mode
        self._tiers = tiers
        self._remote = remote
        self._assignment = assignment
        self._kafka = kafka
        self._errors = errors
        self._require_kafka = require_kafka

    # -- the handoff's decisions ------------------------------------------------------------------------
    def begin(self, state: PartitionState, offset: int, update_assignment: bool = True) -> None:
        """Assign, seek, reset or mode change: read ``state`` from ``offset`` with the source the mode picks there."""
        state.stop_remote()
        self._kafka.purge(state)
        try:
            decision: Decision | None = state.handoff.start(offset, lambda: self._tiers.remote_holds(state.tp, offset))
        except Exception as err:
            if not is_authorization_failure(err):
                raise
            self.authorization_failed(state, err, at=offset)
            decision = None
        self.apply(state, decision, update_assignment)

    def apply(self, state: PartitionState, decision: Decision | None, update_assignment: bool = True) -> None:
        """Do what the handoff decided (module ``tiered_kafka.consumer.handoff``)."""
        if decision is None or isinstance(decision, Wait):
            return
        if isinstance(decision, ReadFrom):
            if decision.source is Source.REMOTE:
                self.to_remote(state, decision.offset, update_assignment)
            else:
                self._to_kafka(state, decision.offset, update_assignment)
        elif isinstance(decision, Skip):
            log.warning("%s-%d: skipping offsets %d..%d, in no tier this consumer reads (%s)", state.topic, state.partition, decision.start, decision.end, decision.reason)
            self.apply(state, decision.read, update_assignment)
        elif isinstance(decision, Reset):
            state.stop_remote()
            try:
                target = self.reset_target(state.tp, decision.offset)
            except Exception as err:
                if not is_authorization_failure(err):
                    raise
                self.authorization_failed(state, err)
                return
            if target is not None:
                self.begin(state, target, update_assignment)
            elif update_assignment:
                self._assignment.sync_kafka()
        elif isinstance(decision, GapError):
            state.stop_remote()
            raise RemoteGapError(
                f"{state.topic}-{state.partition}: offsets {decision.start}..{decision.end} are in no tier this consumer reads "
                f"({decision.reason}); seek past them or set tiered.remote.gap.policy=skip",
                topic=state.topic, partition=state.partition, start_offset=decision.start, end_offset=decision.end, reason=decision.reason,
            )
        else:  # AuthorizationFailed: reported by authorization_failed, which made it
            raise RuntimeError(f"unexpected decision {decision!r}")

    def authorization_failed(self, state: PartitionState, error: BaseException, at: int | None = None) -> None:
        """TOPIC_AUTHORIZATION_FAILED for ``state``: its error message (once per event), and it stops."""
        failed = state.handoff.authorization_failed(at)
        state.stop_remote()
        self._kafka.purge(state)
        self._assignment.sync_kafka()
        if isinstance(failed, AuthorizationFailed):
            log.warning("%s-%d: not authorized to read the topic: %s", state.topic, state.partition, error)
            self._errors.add(error_message(state.topic, state.partition, failed.offset if failed.offset >= 0 else None, KafkaError.TOPIC_AUTHORIZATION_FAILED, f"{state.topic}-{state.partition}: {error}"))

    def to_remote(self, state: PartitionState, offset: int, update_assignment: bool = True) -> None:
        remote = self._remote
        if remote.gateway is None:
            raise ConfigError("remote storage needs tiered.gateway.url and tiered.cluster")
        state.stop_remote()
        self._kafka.purge(state)
        state.skip_to = -1
        state.committed_filter = CommittedFilter() if self._config.read_committed else None
        state.reader = RemoteReader(
            remote.gateway,
            state.topic,
            state.partition,
            offset,
            budget=remote.budget,
            pool=remote.pool,
            convert=range_messages,
            plan_max_bytes=self._config.plan_max_bytes,
            tail=modes.tails_remote(self._mode()), read_committed=self._config.read_committed,
            poll_interval_s=self._config.remote_poll_interval_s,
            wake=remote.wake,
        )
        log.debug("%s-%d: reading remote storage from offset %d", state.topic, state.partition, offset)
        if update_assignment:
            self._assignment.sync_kafka()

    def _to_kafka(self, state: PartitionState, offset: int, update_assignment: bool = True) -> None:
        state.stop_remote()
        self._kafka.purge(state)
        log.debug("%s-%d: reading Kafka from offset %d", state.topic, state.partition, offset)
        if update_assignment:
            self._require_kafka("reading Kafka")
            if self._assignment.fetching(state.tp):
                self._assignment.seek_kafka(state)
            else:
                self._assignment.sync_kafka()  # assigned at the position

    # -- Kafka's OFFSET_OUT_OF_RANGE ------------------------------------------------------------------
    def pending_out_of_range(self) -> bool:
        return self._kafka.pending_out_of_range()

    def handle_out_of_range(self) -> None:
        """OFFSET_OUT_OF_RANGE events, every partition's: one that fails (the gateway is down, a gap
        between the tiers) is kept and retried by the next poll, with its error message
        (``channel``), and the others are handled all the same; an error that is not a
        partition's is raised once all were tried."""
        first_error: Exception | None = None
        for event in self._kafka.take_out_of_range():
            state = self._assignment.get((event.topic(), event.partition()))
            if state is None or state.handoff.source is not Source.KAFKA or state.position is None:
                continue
            try:
                self._kafka_out_of_range(state, event.offset())
            except Exception as err:
                self._kafka.keep_out_of_range(event)
                if not self._errors.partition_failed(state.topic, state.partition, state.position, err):
                    first_error = first_error or err
        if first_error is not None:
            raise first_error

    def _kafka_out_of_range(self, state: PartitionState, fetched: int) -> None:
        """OFFSET_OUT_OF_RANGE from Kafka for a fetch at ``fetched``: nothing when it is stale
        (``Handoff.kafka_out_of_range``), else remote storage, a gap, or auto.offset.reset."""
        if not state.handoff.out_of_range_is_current(fetched):
            log.debug("%s-%d: OFFSET_OUT_OF_RANGE for offset %d is stale (position %s): ignored", state.topic, state.partition, fetched, state.position)
            return
        position = state.position
        if position is None:
            return
        low, _high = self._tiers.watermarks(state.tp)
        remote = None
        if position < low and modes.reads_remote(self._mode()):
            try:
                remote = self._tiers.remote_range(state.tp)
            except Exception as err:
                if not is_authorization_failure(err):
                    raise
                self.authorization_failed(state, err)
                return
        self.apply(state, state.handoff.kafka_out_of_range(fetched, low, remote))

    # -- where a partition starts -------------------------------------------------------------------
    def committed_offsets(self, partitions: list[TopicPartition]) -> dict[TP, int]:
        stored = [p for p in partitions if p.offset < 0 and p.offset not in (OFFSET_BEGINNING, OFFSET_END)]
        committed: dict[TP, int] = {}
        inner = self._tiers.inner
        if stored and inner is not None:
            for c in inner.committed([TopicPartition(p.topic, p.partition) for p in stored], timeout=30):
                if c.offset >= 0:
                    committed[(c.topic, c.partition)] = c.offset
        return committed

    def start_offset(self, p: TopicPartition, committed: dict[TP, int]) -> int | None:
        tp = (p.topic, p.partition)
        if p.offset >= 0:
            return p.offset
        if p.offset == OFFSET_BEGINNING:
            return self._tiers.earliest(self._mode(), tp)
        if p.offset == OFFSET_END:
            return self._tiers.latest(self._mode(), tp)
        if tp in committed:
            return committed[tp]
        return self.reset_target(tp, None)

    def reset_target(self, tp: TP, offset: int | None) -> int | None:
        """auto.offset.reset (``Tiers.reset_target``); with 'error', the partition's error message;
        a move forward over offsets some tier holds, the partition's OFFSET_OUT_OF_RANGE message
        (module docstring)."""
        mode = self._mode()
        policy = self._config.auto_offset_reset
        target = self._tiers.reset_target(mode, tp, policy, offset)
        if target is None:
            what = "no committed offset" if offset is None else f"offset {offset} is out of range"
            self._errors.add(error_message(tp[0], tp[1], offset, KafkaError._AUTO_OFFSET_RESET, f"{tp[0]}-{tp[1]}: {what} and auto.offset.reset is error"))
        elif offset is not None and target > offset:
            self._report_skip(tp, offset, target, f"mode {mode.value}, auto.offset.reset={policy}")
        return target

    def _report_skip(self, tp: TP, start: int, target: int, why: str) -> None:
        """A reset moves ``tp`` from ``start`` forward to ``target``: an error message when some tier
        (read by the mode or not) holds offsets in between, a log line when none does."""
        last = target - 1
        try:
            held: list[TierRange] = [r.clip(start, last) for r in self._tiers.held_ranges(tp) if r.overlaps(start, last)]
            unknown = ""
        except Exception as err:  # a tier that cannot be asked may hold them: never passed silently
            held, unknown = [], f"; whether a tier holds them is unknown ({type(err).__name__}: {err})"
        if not held and not unknown:
            log.warning("%s-%d: offsets %d..%d are in no tier (%s); continuing at %d", tp[0], tp[1], start, last, why, target)
            return
        holders = ", ".join(f"{r.tier} holds {r.first}..{r.last}" for r in held)
        reason = f"{tp[0]}-{tp[1]}: offsets {start}..{last} are skipped ({why}): {holders or 'not read'}{unknown}; continuing at {target}"
        log.warning("%s", reason)
        self._errors.add(error_message(tp[0], tp[1], start, KafkaError.OFFSET_OUT_OF_RANGE, reason))

    # -- the calls ----------------------------------------------------------------------------------
    def set_mode(self, mode: Mode) -> None:
        """Every partition goes on at its exact position with the source ``mode`` picks there."""
        for state in self._assignment.states():
            state.handoff.mode = mode
            if state.position is not None:
                self.begin(state, state.position)

    def position(self, partitions: list[TopicPartition]) -> list[TopicPartition]:
        out = []
        for p in partitions:
            state = self._assignment.get((p.topic, p.partition))
            position = state.position if state is not None and state.position is not None else OFFSET_INVALID
            out.append(TopicPartition(p.topic, p.partition, position))
        return out

    def seek(self, partition: TopicPartition) -> None:
        tp = (partition.topic, partition.partition)
        state = self._assignment.get(tp)
        if state is None:
            raise KafkaException(KafkaError(KafkaError._STATE, f"{tp[0]}-{tp[1]} is not assigned"))
        offset = partition.offset
        if offset == OFFSET_BEGINNING:
            offset = self._tiers.earliest(self._mode(), tp)
        elif offset == OFFSET_END:
            offset = self._tiers.latest(self._mode(), tp)
        elif offset < 0:
            raise KafkaException(KafkaError(KafkaError._INVALID_ARG, f"cannot seek to offset {offset}"))
        self.begin(state, offset)

    def get_watermark_offsets(self, partition: TopicPartition, timeout: float | None = None, cached: bool = False) -> tuple[int, int]:
        """(low, high): KAFKA_ONLY Kafka's; REMOTE_ONLY remote storage's (high = last + 1); else low
        is the earliest offset of either tier and high Kafka's high watermark."""
        tp = (partition.topic, partition.partition)
        mode = self._mode()
        if not modes.reads_remote(mode):
            return self._require_kafka("watermarks").get_watermark_offsets(partition, timeout=-1 if timeout is None else timeout, cached=cached)
        remote = self._tiers.remote_range(tp)
        if not modes.reads_kafka(mode):
            return (0, 0) if remote is None else (remote[0], remote[1] + 1)
        low, high = self._tiers.watermarks(tp, 30 if timeout is None else timeout)
        return (low if remote is None else min(low, remote[0]), high)

    def offsets_for_times(self, partitions: list[TopicPartition], timeout: float | None = None) -> list[TopicPartition]:
        """The first offset whose timestamp is >= each partition's ``offset`` field (ms), over the
        tiers the mode reads; -1 (OFFSET_END) when there is none, as in Kafka."""
        mode = self._mode()
        gateway = self._remote.gateway
        kafka_answers: dict[TP, int] = {}
        if modes.reads_kafka(mode):
            for p in self._require_kafka("offsets_for_times").offsets_for_times(partitions, timeout=-1 if timeout is None else timeout):
                kafka_answers[(p.topic, p.partition)] = p.offset
        out = []
        for p in partitions:
            tp = (p.topic, p.partition)
            answers = [kafka_answers[tp]] if tp in kafka_answers and kafka_answers[tp] >= 0 else []
            if modes.reads_remote(mode) and gateway is not None and self._tiers.remote_range(tp) is not None:
                remote = gateway.offset_for_timestamp(p.topic, p.partition, p.offset)
                if remote is not None:
                    answers.append(remote)
            out.append(TopicPartition(p.topic, p.partition, min(answers) if answers else OFFSET_END))
        return out
