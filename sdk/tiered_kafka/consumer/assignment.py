"""TieredConsumer's group membership and assignment: subscribe, (incremental) assign and unassign,
the rebalance callbacks, pause and resume, and which partitions the inner confluent-kafka consumer
fetches (exactly those whose source is Kafka).

``Assignment`` is one of TieredConsumer's collaborators (``tiered_kafka.consumer.consumer``, which
wires them): where an assigned partition starts is ``Positions``' (``positions``), its offsets
commit through ``Offsets`` (``offsets``), its fetched Kafka messages are ``KafkaDelivery``'s
(``kafka_delivery``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from tiered_kafka.consumer.channel import ErrorChannel
from tiered_kafka.consumer.config import TieredConfig
from tiered_kafka.consumer.handoff import Handoff
from tiered_kafka.consumer.offsets import Offsets
from tiered_kafka.consumer.partition import PartitionState
from tiered_kafka.consumer.prefetch import RemoteReader
from tiered_kafka.consumer.tiers import is_authorization_failure
from tiered_kafka.modes import Mode, Source

if TYPE_CHECKING:
    from tiered_kafka.consumer.kafka_delivery import KafkaDelivery
    from tiered_kafka.consumer.positions import Positions

TP = tuple[str, int]
Callback = Callable[[Any, list[TopicPartition]], None]


class Assignment:
    """Owns the assigned partitions (``PartitionState`` by (topic, partition), each with its handoff,
    remote reader and ready records), the application's rebalance callbacks and the rebalance in
    progress, and the inner consumer's assignment: its assignment calls and the partitions this
    consumer paused in librdkafka.

    ``consumer``: the TieredConsumer handed to the application's callbacks; ``positions`` and
    ``kafka`` are attached by the consumer once they exist (they refer to this object too)."""

    positions: Positions
    kafka: KafkaDelivery

    def __init__(self, consumer: object, config: TieredConfig, inner: Consumer | None, mode: Callable[[], Mode], offsets: Offsets, errors: ErrorChannel) -> None:
        self._consumer = consumer
        self._config = config
        self._inner = inner
        self._mode = mode
        self._offsets = offsets
        self._errors = errors
        self._partitions: dict[TP, PartitionState] = {}
        self._callbacks: dict[str, Callback | None] = {}
        self._in_rebalance = False
        self._assigned_in_callback = False
        self._assignment_calls = 0  # assignment calls made on the inner consumer
        self._inner_paused: set[TP] = set()  # partitions paused in librdkafka by this consumer

    # -- the assigned partitions --------------------------------------------------------------------
    def get(self, tp: TP) -> PartitionState | None:
        return self._partitions.get(tp)

    def __contains__(self, tp: object) -> bool:
        return tp in self._partitions

    def states(self) -> list[PartitionState]:
        return list(self._partitions.values())

    def reading_remote(self) -> bool:
        """Some partition has a remote reader."""
        return any(s.reader is not None for s in self._partitions.values())

    def stop_remote(self) -> list[RemoteReader]:
        """Stop every remote reader (close); the readers, to join."""
        readers = [s.reader for s in self._partitions.values() if s.reader is not None]
        for state in self._partitions.values():
            state.stop_remote()
        return readers

    # -- subscription and assignment --------------------------------------------------------------
    def subscribe(self, inner: Consumer, topics: list[str], on_assign: Callback | None, on_revoke: Callback | None, on_lost: Callback | None) -> None:
        self._callbacks = {"assign": on_assign, "revoke": on_revoke, "lost": on_lost}
        inner.subscribe(topics, on_assign=self._on_assign, on_revoke=self._on_revoke, on_lost=self._on_lost)

    def unsubscribe(self, inner: Consumer) -> None:
        error = self._drop(list(self._partitions))
        inner.unsubscribe()
        raise_if(error)

    def assign(self, partitions: list[TopicPartition]) -> None:
        """Replace the assignment; offsets may be absolute or logical (OFFSET_BEGINNING/END/STORED)."""
        self._note_call()
        error = self._drop(list(self._partitions), kafka=False)
        self._add(partitions)
        raise_if(error)

    def incremental_assign(self, partitions: list[TopicPartition]) -> None:
        self._note_call()
        self._add(partitions)

    def incremental_unassign(self, partitions: list[TopicPartition]) -> None:
        self._note_call()
        raise_if(self._drop([(p.topic, p.partition) for p in partitions]))

    def unassign(self) -> None:
        self._note_call()
        raise_if(self._drop(list(self._partitions)))

    def assignment(self) -> list[TopicPartition]:
        return [TopicPartition(t, p) for t, p in self._partitions]

    def _note_call(self) -> None:
        if self._in_rebalance:
            self._assigned_in_callback = True

    # -- rebalance callbacks ------------------------------------------------------------------------
    def _on_assign(self, inner: Consumer, partitions: list[TopicPartition]) -> None:
        calls = self._assignment_calls
        self._callback("assign", partitions)
        if self._assigned_in_callback:
            self._assigned_in_callback = False
        else:
            try:
                self._add(partitions)
            except Exception as err:  # e.g. the gateway is down: they stay pending, started by a later poll
                self._failed_to_start(err)
        self._complete_rebalance(inner, calls, assign=True)

    def _on_revoke(self, inner: Consumer, partitions: list[TopicPartition]) -> None:
        calls = self._assignment_calls
        self._callback("revoke", partitions)
        if self._assigned_in_callback:
            self._assigned_in_callback = False
        else:
            self._errors.defer(self._drop([(p.topic, p.partition) for p in partitions]))
        self._complete_rebalance(inner, calls, assign=False)

    def _on_lost(self, inner: Consumer, partitions: list[TopicPartition]) -> None:
        calls = self._assignment_calls
        self._callback("lost" if self._callbacks.get("lost") else "revoke", partitions)
        self._drop([(p.topic, p.partition) for p in partitions], commit=False)  # lost: no longer ours to commit
        self._complete_rebalance(inner, calls, assign=False)

    def _complete_rebalance(self, inner: Consumer, calls_before: int, assign: bool) -> None:
        """A rebalance callback must end with one assignment call on the inner consumer, or the
        binding makes its own with the whole list (which would fetch remote-read partitions)."""
        if self._assignment_calls != calls_before:
            return
        self._assignment_calls += 1
        if self._config.cooperative:
            (inner.incremental_assign if assign else inner.incremental_unassign)([])
        elif assign:
            self._resume_inner({(p.topic, p.partition) for p in inner.assignment()} - {(p.topic, p.partition) for p in self._kafka_side()})
            inner.assign(self._kafka_side())
        else:
            self._resume_inner({(p.topic, p.partition) for p in inner.assignment()})
            inner.unassign()

    def _callback(self, kind: str, partitions: list[TopicPartition]) -> None:
        callback = self._callbacks.get(kind)
        if callback is None:
            return
        self._in_rebalance, self._assigned_in_callback = True, False
        try:
            callback(self._consumer, partitions)
        finally:
            self._in_rebalance = False

    # -- partitions in and out ----------------------------------------------------------------------
    def _new_state(self, topic: str, partition: int) -> PartitionState:
        handoff = Handoff(self._mode(), kafka_configured=self._inner is not None, gap_skip=self._config.gap_skip)
        return PartitionState(topic, partition, handoff)

    def _add(self, partitions: list[TopicPartition]) -> None:
        """Resolve start offsets, pick each partition's source, and update the inner assignment.
        A partition is *pending* until it has started: one whose start failed (and those after it)
        is started again by the next poll (``start_pending``)."""
        positions = self.positions
        states = []
        for p in partitions:
            tp = (p.topic, p.partition)
            state = self._partitions.get(tp) or self._new_state(*tp)
            state.pending, state.pending_offset = True, p.offset
            state.handoff.mode = self._mode()
            self._partitions[tp] = state
            self.kafka.purge(state)
            positions.forget(tp)
            states.append(state)
        committed = positions.committed_offsets(partitions)
        fetching = {(p.topic, p.partition) for p in self._inner.assignment()} if self._inner is not None else set()
        started = []
        for p, state in zip(partitions, states, strict=True):
            try:
                offset = positions.start_offset(p, committed)
            except Exception as err:
                if not is_authorization_failure(err):
                    raise
                state.pending = False
                positions.authorization_failed(state, err, at=committed.get(state.tp, p.offset if p.offset >= 0 else None))
                continue
            if offset is not None:
                positions.begin(state, offset, update_assignment=False)
                started.append(state)
            state.pending = False
        self.sync_kafka()
        for state in started:  # already fetching in librdkafka: move it to the new position
            if state.handoff.source is Source.KAFKA and state.tp in fetching:
                self.seek_kafka(state)

    def start_pending(self) -> None:
        """Partitions whose start failed (``assign``, a rebalance callback, the previous
        ``start_pending``): start them now, where they were asked to start."""
        pending = [TopicPartition(t, p, s.pending_offset) for (t, p), s in self._partitions.items() if s.pending]
        if not pending:
            return
        try:
            self._add(pending)
        except Exception as err:
            self._failed_to_start(err)

    def _failed_to_start(self, error: Exception) -> None:
        """A start that failed inside poll: an error message for each partition still pending (they
        start again on the next poll), or, not a partition's error (``channel``), the error raised
        by the next poll."""
        for state in self._partitions.values():
            if state.pending and not self._errors.partition_failed(state.topic, state.partition, None, error):
                self._errors.defer(error)
                return

    def _drop(self, tps: Sequence[TP], kafka: bool = True, commit: bool = True) -> KafkaException | None:
        """Forget partitions, committing their stored offsets first (with enable.auto.commit).
        The drop always completes; a failed commit is returned for the caller to surface."""
        error = self._offsets.commit_on_revoke(tps) if commit else None
        for tp in tps:
            state = self._partitions.pop(tp, None)
            if state is not None:
                state.stop_remote()
                state.handoff.revoke()
            self._offsets.forget(tp)
            self.positions.forget(tp)
        self.kafka.keep_only(self._partitions)
        if kafka:
            self.sync_kafka(revoking=True)
        return error

    # -- the inner consumer's assignment ------------------------------------------------------------
    def _kafka_side(self) -> list[TopicPartition]:
        return [TopicPartition(t, p, s.position) for (t, p), s in self._partitions.items() if s.handoff.source is Source.KAFKA and s.position is not None]

    def fetching(self, tp: TP) -> bool:
        """Whether librdkafka has ``tp`` in its assignment."""
        return self._inner is not None and any((p.topic, p.partition) == tp for p in self._inner.assignment())

    def sync_kafka(self, revoking: bool = False) -> None:
        """The inner consumer is assigned exactly the partitions whose source is Kafka."""
        inner = self._inner
        if inner is None:
            return
        wanted = {(p.topic, p.partition): p for p in self._kafka_side()}
        current = {(p.topic, p.partition) for p in inner.assignment()}
        self._resume_inner(current - wanted.keys())
        if self._config.cooperative:
            gone = [TopicPartition(t, p) for t, p in current - wanted.keys()]
            new = [wanted[tp] for tp in wanted.keys() - current]
            if gone:
                self._assignment_calls += 1
                inner.incremental_unassign(gone)
            if new:
                self._assignment_calls += 1
                inner.incremental_assign(new)
        elif not wanted and revoking:
            self._assignment_calls += 1
            inner.unassign()  # an eager revoke completes with unassign(), not an empty assign()
        elif current != wanted.keys() or not current:
            self._assignment_calls += 1
            inner.assign(list(wanted.values()))
        paused = [TopicPartition(t, p) for t, p in wanted if self._partitions[(t, p)].paused]
        if paused:
            inner.pause(paused)
            self._inner_paused.update((p.topic, p.partition) for p in paused)

    def seek_kafka(self, state: PartitionState) -> None:
        """Move librdkafka's fetch position; a partition that is not fetching yet (librdkafka's
        _STATE error, e.g. still looking up its offset) is assigned again at the position instead."""
        inner = self._inner
        if inner is None:
            return
        target = TopicPartition(state.topic, state.partition, state.position)
        state.kafka_synced = False
        try:
            inner.seek(target)
        except KafkaException as err:
            if err.args[0].code() != KafkaError._STATE:
                raise
            self._assignment_calls += 1
            if self._config.cooperative:
                inner.incremental_unassign([TopicPartition(state.topic, state.partition)])
                inner.incremental_assign([target])
            else:
                inner.assign(self._kafka_side())

    def _resume_inner(self, leaving: set[TP]) -> None:
        """Resume in librdkafka the partitions about to leave the inner assignment that it holds
        paused. librdkafka keeps a partition's pause across an unassign and a later assign (its
        per-partition state outlives the assignment), whereas a pause here, as in Kafka's Java
        consumer, is forgotten when the partition is revoked and does not follow a partition
        handed over to remote storage: without this, a partition paused once, revoked and assigned
        again (or read from Kafka again) would never be fetched."""
        resumed = [TopicPartition(t, p) for t, p in leaving & self._inner_paused]
        if resumed and self._inner is not None:
            self._inner.resume(resumed)
            self._inner_paused.difference_update(leaving)

    def set_paused(self, partitions: list[TopicPartition], paused: bool) -> None:
        """pause/resume: a paused partition hands out nothing (either source) and librdkafka stops
        fetching it; resumed, librdkafka fetches again from the position."""
        kafka = []
        for p in partitions:
            state = self._partitions.get((p.topic, p.partition))
            if state is None:
                continue
            state.paused = paused
            self.kafka.purge(state)
            if state.handoff.source is Source.KAFKA:
                kafka.append(TopicPartition(p.topic, p.partition))
        if kafka and self._inner is not None:
            (self._inner.pause if paused else self._inner.resume)(kafka)
            (self._inner_paused.update if paused else self._inner_paused.difference_update)((p.topic, p.partition) for p in kafka)
            if not paused:  # messages dropped while paused are fetched again from the position
                for p in kafka:
                    state = self._partitions[(p.topic, p.partition)]
                    if state.position is not None:
                        self.seek_kafka(state)


def raise_if(error: Exception | None) -> None:
    if error is not None:
        raise error
