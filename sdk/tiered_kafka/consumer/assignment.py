"""TieredConsumer's group membership and assignment: subscribe, (incremental) assign and unassign,
the rebalance callbacks, where a newly assigned partition starts, and which partitions the inner
confluent-kafka consumer fetches (exactly those whose source is Kafka).

A mixin of ``tiered_kafka.consumer.consumer.TieredConsumer`` (split out to keep modules small);
it uses the consumer's state and its ``_begin``/``_authorization_failed``/``_require_kafka``.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, OFFSET_END, Consumer, KafkaError, KafkaException, Message, TopicPartition

from tiered_kafka.consumer.config import TieredConfig
from tiered_kafka.consumer.handoff import Handoff
from tiered_kafka.consumer.messages import error_message
from tiered_kafka.consumer.partition import PartitionState
from tiered_kafka.consumer.tiers import Tiers, is_authorization_failure
from tiered_kafka.gateway_client import GatewayClient
from tiered_kafka.modes import Mode, Source

TP = tuple[str, int]
Callback = Callable[[Any, list[TopicPartition]], None]


class AssignmentMixin:
    # set by TieredConsumer.__init__
    _config: TieredConfig
    _mode: Mode
    _inner: Consumer | None
    _gateway: GatewayClient | None
    _tiers: Tiers
    _partitions: dict[TP, PartitionState]
    _kafka_ready: deque[Message]
    _errors: deque[Message]
    _out_of_range: dict[TP, Message]
    _stored: dict[TP, int]
    _committed_stored: dict[TP, int]
    _auto_commit: bool
    _cooperative: bool
    _user_callbacks: dict[str, Callback | None]
    _in_rebalance: bool
    _assigned_in_callback: bool
    _assignment_calls: int
    _deferred: Exception | None
    _inner_paused: set[TP]  # partitions paused in librdkafka by this consumer

    # -- subscription and assignment --------------------------------------------------------------
    def subscribe(self, topics: list[str], on_assign: Callback | None = None, on_revoke: Callback | None = None, on_lost: Callback | None = None) -> None:
        inner = self._require_kafka("subscribe")
        self._user_callbacks = {"assign": on_assign, "revoke": on_revoke, "lost": on_lost}
        inner.subscribe(topics, on_assign=self._on_assign, on_revoke=self._on_revoke, on_lost=self._on_lost)

    def unsubscribe(self) -> None:
        inner = self._require_kafka("unsubscribe")
        error = self._drop(list(self._partitions))
        inner.unsubscribe()
        raise_if(error)

    def assign(self, partitions: list[TopicPartition]) -> None:
        """Replace the assignment; offsets may be absolute or logical (OFFSET_BEGINNING/END/STORED)."""
        if self._in_rebalance:
            self._assigned_in_callback = True
        error = self._drop(list(self._partitions), kafka=False)
        self._add(partitions)
        raise_if(error)

    def incremental_assign(self, partitions: list[TopicPartition]) -> None:
        if self._in_rebalance:
            self._assigned_in_callback = True
        self._add(partitions)

    def incremental_unassign(self, partitions: list[TopicPartition]) -> None:
        if self._in_rebalance:
            self._assigned_in_callback = True
        raise_if(self._drop([(p.topic, p.partition) for p in partitions]))

    def unassign(self) -> None:
        if self._in_rebalance:
            self._assigned_in_callback = True
        raise_if(self._drop(list(self._partitions)))

    def assignment(self) -> list[TopicPartition]:
        return [TopicPartition(t, p) for t, p in self._partitions]

    def _on_assign(self, inner: Consumer, partitions: list[TopicPartition]) -> None:
        calls = self._assignment_calls
        self._callback("assign", partitions)
        if self._assigned_in_callback:
            self._assigned_in_callback = False
        else:
            try:
                self._add(partitions)
            except Exception as err:  # e.g. the gateway is down: start these partitions on a later poll
                for p in partitions:
                    self._partitions.setdefault((p.topic, p.partition), self._new_state(p.topic, p.partition, pending=True))
                self._defer(err)
        self._complete_rebalance(inner, calls, assign=True)

    def _on_revoke(self, inner: Consumer, partitions: list[TopicPartition]) -> None:
        calls = self._assignment_calls
        self._callback("revoke", partitions)
        if self._assigned_in_callback:
            self._assigned_in_callback = False
        else:
            self._defer(self._drop([(p.topic, p.partition) for p in partitions]))
        self._complete_rebalance(inner, calls, assign=False)

    def _on_lost(self, inner: Consumer, partitions: list[TopicPartition]) -> None:
        calls = self._assignment_calls
        self._callback("lost" if self._user_callbacks.get("lost") else "revoke", partitions)
        self._drop([(p.topic, p.partition) for p in partitions], commit=False)  # lost: no longer ours to commit
        self._complete_rebalance(inner, calls, assign=False)

    def _complete_rebalance(self, inner: Consumer, calls_before: int, assign: bool) -> None:
        """A rebalance callback must end with one assignment call on the inner consumer, or the
        binding makes its own with the whole list (which would fetch remote-read partitions)."""
        if self._assignment_calls != calls_before:
            return
        self._assignment_calls += 1
        if self._cooperative:
            (inner.incremental_assign if assign else inner.incremental_unassign)([])
        elif assign:
            self._resume_inner({(p.topic, p.partition) for p in inner.assignment()} - {(p.topic, p.partition) for p in self._kafka_side()})
            inner.assign(self._kafka_side())
        else:
            self._resume_inner({(p.topic, p.partition) for p in inner.assignment()})
            inner.unassign()

    def _callback(self, kind: str, partitions: list[TopicPartition]) -> None:
        callback = self._user_callbacks.get(kind)
        if callback is None:
            return
        self._in_rebalance, self._assigned_in_callback = True, False
        try:
            callback(self, partitions)
        finally:
            self._in_rebalance = False

    def _defer(self, error: Exception | None) -> None:
        """An error met inside a rebalance callback: raised by poll/consume (the first one kept)."""
        if error is not None and self._deferred is None:
            self._deferred = error

    def _new_state(self, topic: str, partition: int, pending: bool = False) -> PartitionState:
        handoff = Handoff(self._mode, kafka_configured=self._inner is not None, gap_skip=self._config.gap_skip)
        return PartitionState(topic, partition, handoff, pending=pending)

    def _add(self, partitions: list[TopicPartition]) -> None:
        """Resolve start offsets, pick each partition's source, and update the inner assignment."""
        committed = self._committed_offsets(partitions)
        fetching = {(p.topic, p.partition) for p in self._inner.assignment()} if self._inner is not None else set()
        started = []
        for p in partitions:
            tp = (p.topic, p.partition)
            state = self._partitions.get(tp) or self._new_state(*tp)
            state.pending = False
            state.handoff.mode = self._mode
            self._partitions[tp] = state
            self._purge_kafka_ready(tp)
            self._out_of_range.pop(tp, None)
            try:
                offset = self._start_offset(p, committed)
            except Exception as err:
                if not is_authorization_failure(err):
                    raise
                self._authorization_failed(state, err, at=committed.get(tp, p.offset if p.offset >= 0 else None))
                continue
            if offset is not None:
                self._begin(state, offset, update_assignment=False)
                started.append(state)
        self._sync_kafka_assignment()
        for state in started:  # already fetching in librdkafka: move it to the new position
            if state.handoff.source is Source.KAFKA and state.tp in fetching and self._inner is not None:
                self._seek_kafka(self._inner, state)

    def _start_pending(self) -> None:
        """Partitions whose start failed in a rebalance callback: start them now (from the committed offsets)."""
        pending = [TopicPartition(t, p) for (t, p), s in self._partitions.items() if s.pending]
        if pending:
            self._add(pending)

    def _drop(self, tps: Sequence[TP], kafka: bool = True, commit: bool = True) -> KafkaException | None:
        """Forget partitions, committing their stored offsets first (with enable.auto.commit).
        The drop always completes; a failed commit is returned for the caller to surface."""
        error = None
        if commit and self._auto_commit and self._inner is not None:
            try:
                self._commit_stored(only=list(tps))
            except KafkaException as err:
                error = err
        for tp in tps:
            state = self._partitions.pop(tp, None)
            if state is not None:
                state.stop_remote()
                state.handoff.revoke()
            self._stored.pop(tp, None)
            self._committed_stored.pop(tp, None)
            self._out_of_range.pop(tp, None)
        self._kafka_ready = deque(m for m in self._kafka_ready if (m.topic(), m.partition()) in self._partitions)
        if kafka:
            self._sync_kafka_assignment(revoking=True)
        return error

    def _kafka_side(self) -> list[TopicPartition]:
        return [TopicPartition(t, p, s.position) for (t, p), s in self._partitions.items() if s.handoff.source is Source.KAFKA and s.position is not None]

    def _sync_kafka_assignment(self, revoking: bool = False) -> None:
        """The inner consumer is assigned exactly the partitions whose source is Kafka."""
        if self._inner is None:
            return
        wanted = {(p.topic, p.partition): p for p in self._kafka_side()}
        current = {(p.topic, p.partition) for p in self._inner.assignment()}
        self._resume_inner(current - wanted.keys())
        if self._cooperative:
            gone = [TopicPartition(t, p) for t, p in current - wanted.keys()]
            new = [wanted[tp] for tp in wanted.keys() - current]
            if gone:
                self._assignment_calls += 1
                self._inner.incremental_unassign(gone)
            if new:
                self._assignment_calls += 1
                self._inner.incremental_assign(new)
        elif not wanted and revoking:
            self._assignment_calls += 1
            self._inner.unassign()  # an eager revoke completes with unassign(), not an empty assign()
        elif current != wanted.keys() or not current:
            self._assignment_calls += 1
            self._inner.assign(list(wanted.values()))
        paused = [TopicPartition(t, p) for t, p in wanted if self._partitions[(t, p)].paused]
        if paused:
            self._inner.pause(paused)
            self._inner_paused.update((p.topic, p.partition) for p in paused)

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

    def _purge_kafka_ready(self, tp: TP) -> None:
        """Forget Kafka messages of ``tp`` fetched before its position, source or pause changed
        (librdkafka fetches them again from the position)."""
        state = self._partitions.get(tp)
        if state is not None:
            state.kafka_synced = False
        if any((m.topic(), m.partition()) == tp for m in self._kafka_ready):
            self._kafka_ready = deque(m for m in self._kafka_ready if (m.topic(), m.partition()) != tp)

    # -- where a partition starts -------------------------------------------------------------------
    def _committed_offsets(self, partitions: list[TopicPartition]) -> dict[TP, int]:
        stored = [p for p in partitions if p.offset < 0 and p.offset not in (OFFSET_BEGINNING, OFFSET_END)]
        committed: dict[TP, int] = {}
        if stored and self._inner is not None:
            for c in self._inner.committed([TopicPartition(p.topic, p.partition) for p in stored], timeout=30):
                if c.offset >= 0:
                    committed[(c.topic, c.partition)] = c.offset
        return committed

    def _start_offset(self, p: TopicPartition, committed: dict[TP, int]) -> int | None:
        tp = (p.topic, p.partition)
        if p.offset >= 0:
            return p.offset
        if p.offset == OFFSET_BEGINNING:
            return self._tiers.earliest(self._mode, tp)
        if p.offset == OFFSET_END:
            return self._tiers.latest(self._mode, tp)
        if tp in committed:
            return committed[tp]
        return self._reset_target(tp, None)

    def _reset_target(self, tp: TP, offset: int | None) -> int | None:
        """auto.offset.reset (``Tiers.reset_target``); with 'error', the partition's error message."""
        target = self._tiers.reset_target(self._mode, tp, self._config.auto_offset_reset, offset)
        if target is None:
            what = "no committed offset" if offset is None else f"offset {offset} is out of range"
            self._errors.append(error_message(tp[0], tp[1], offset, KafkaError._AUTO_OFFSET_RESET, f"{tp[0]}-{tp[1]}: {what} and auto.offset.reset is error"))
        return target


def raise_if(error: Exception | None) -> None:
    if error is not None:
        raise error
