"""TieredConsumer's group membership: subscribe, (incremental) assign and unassign, the rebalance
callbacks, pause and resume.

``Membership`` is the top of TieredConsumer's collaborators (``tiered_kafka.consumer.consumer``
wires them): a partition that joins is added to the ``Assignment`` and started by ``Positions``
(where it starts: an absolute offset, OFFSET_BEGINNING/END, the committed offset or
``auto.offset.reset``); one that leaves has its stored offset committed by ``Offsets`` first (with
``enable.auto.commit``) and its fetched Kafka messages and events forgotten by ``KafkaDelivery``.
Nothing below refers back to it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from confluent_kafka import Consumer, KafkaException, TopicPartition

from tiered_kafka.consumer.assignment import Assignment
from tiered_kafka.consumer.channel import ErrorChannel
from tiered_kafka.consumer.kafka_delivery import KafkaDelivery
from tiered_kafka.consumer.offsets import Offsets
from tiered_kafka.consumer.positions import Positions
from tiered_kafka.consumer.tiers import is_authorization_failure
from tiered_kafka.modes import Mode, Source

TP = tuple[str, int]
Callback = Callable[[Any, list[TopicPartition]], None]


class Membership:
    """Owns the application's rebalance callbacks and the rebalance in progress (whether the
    application made an assignment call inside its callback). ``consumer``: the TieredConsumer
    handed to the application's callbacks."""

    def __init__(
        self,
        consumer: object,
        inner: Consumer | None,
        mode: Callable[[], Mode],
        assignment: Assignment,
        positions: Positions,
        kafka: KafkaDelivery,
        offsets: Offsets,
        errors: ErrorChannel,
    ) -> None:
        self._consumer = consumer
        self._inner = inner
        self._mode = mode
        self._assignment = assignment
        self._positions = positions
        self._kafka = kafka
        self._offsets = offsets
        self._errors = errors
        self._callbacks: dict[str, Callback | None] = {}
        self._in_rebalance = False
        self._assigned_in_callback = False

    # -- subscription and assignment --------------------------------------------------------------
    def subscribe(self, inner: Consumer, topics: list[str], on_assign: Callback | None, on_revoke: Callback | None, on_lost: Callback | None) -> None:
        self._callbacks = {"assign": on_assign, "revoke": on_revoke, "lost": on_lost}
        inner.subscribe(topics, on_assign=self._on_assign, on_revoke=self._on_revoke, on_lost=self._on_lost)

    def unsubscribe(self, inner: Consumer) -> None:
        error = self._drop(self._assignment.tps())
        inner.unsubscribe()
        raise_if(error)

    def assign(self, partitions: list[TopicPartition]) -> None:
        """Replace the assignment; offsets may be absolute or logical (OFFSET_BEGINNING/END/STORED)."""
        self._note_call()
        error = self._drop(self._assignment.tps(), kafka=False)
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
        raise_if(self._drop(self._assignment.tps()))

    def _note_call(self) -> None:
        if self._in_rebalance:
            self._assigned_in_callback = True

    # -- rebalance callbacks ------------------------------------------------------------------------
    def _on_assign(self, inner: Consumer, partitions: list[TopicPartition]) -> None:
        calls = self._assignment.calls
        self._callback("assign", partitions)
        if self._assigned_in_callback:
            self._assigned_in_callback = False
        else:
            try:
                self._add(partitions)
            except Exception as err:  # e.g. the gateway is down: they stay pending, started by a later poll
                self._failed_to_start(err)
        self._assignment.complete_rebalance(inner, calls, assign=True)

    def _on_revoke(self, inner: Consumer, partitions: list[TopicPartition]) -> None:
        calls = self._assignment.calls
        self._callback("revoke", partitions)
        if self._assigned_in_callback:
            self._assigned_in_callback = False
        else:
            self._errors.defer(self._drop([(p.topic, p.partition) for p in partitions]))
        self._assignment.complete_rebalance(inner, calls, assign=False)

    def _on_lost(self, inner: Consumer, partitions: list[TopicPartition]) -> None:
        calls = self._assignment.calls
        self._callback("lost" if self._callbacks.get("lost") else "revoke", partitions)
        self._drop([(p.topic, p.partition) for p in partitions], commit=False)  # lost: no longer ours to commit
        self._assignment.complete_rebalance(inner, calls, assign=False)

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
    def _add(self, partitions: list[TopicPartition]) -> None:
        """Resolve start offsets, pick each partition's source, and update the inner assignment.
        A partition is *pending* until it has started: one whose start failed (and those after it)
        is started again by the next poll (``start_pending``)."""
        positions, assignment = self._positions, self._assignment
        states = []
        for p in partitions:
            state = assignment.add(p.topic, p.partition)
            state.pending, state.pending_offset = True, p.offset
            state.handoff.mode = self._mode()
            self._kafka.purge(state)
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
        assignment.sync_kafka()
        for state in started:  # already fetching in librdkafka: move it to the new position
            if state.handoff.source is Source.KAFKA and state.tp in fetching:
                assignment.seek_kafka(state)

    def start_pending(self) -> None:
        """Partitions whose start failed (``assign``, a rebalance callback, the previous
        ``start_pending``): start them now, where they were asked to start."""
        pending = [TopicPartition(s.topic, s.partition, s.pending_offset) for s in self._assignment.states() if s.pending]
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
        for state in self._assignment.states():
            if state.pending and not self._errors.partition_failed(state.topic, state.partition, None, error):
                self._errors.defer(error)
                return

    def _drop(self, tps: Sequence[TP], kafka: bool = True, commit: bool = True) -> KafkaException | None:
        """Forget partitions, committing their stored offsets first (with enable.auto.commit).
        The drop always completes; a failed commit is returned for the caller to surface."""
        error = self._offsets.commit_on_revoke(tps) if commit else None
        for tp in tps:
            self._assignment.remove(tp)
            self._offsets.forget(tp)
        self._kafka.keep_only(self._assignment)
        if kafka:
            self._assignment.sync_kafka(revoking=True)
        return error

    # -- pause and resume -----------------------------------------------------------------------------
    def set_paused(self, partitions: list[TopicPartition], paused: bool) -> None:
        """pause/resume: a paused partition hands out nothing (either source) and librdkafka stops
        fetching it; resumed, librdkafka fetches again from the position."""
        kafka = []
        for p in partitions:
            state = self._assignment.get((p.topic, p.partition))
            if state is None:
                continue
            state.paused = paused
            self._kafka.purge(state)
            if state.handoff.source is Source.KAFKA:
                kafka.append(TopicPartition(p.topic, p.partition))
        self._assignment.pause_in_kafka(kafka, paused)


def raise_if(error: Exception | None) -> None:
    if error is not None:
        raise error
