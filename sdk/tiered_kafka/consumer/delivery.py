"""TieredConsumer's delivery of remote records: a partition's ready records into the caller's list
(``consume``) or one at a time (``poll``'s shortcut), the next chunk of its remote reader into its
ready records, and the handoff's events on the way.

A mixin of ``tiered_kafka.consumer.consumer.TieredConsumer`` (split out to keep modules small); it
uses the consumer's state and its ``_apply``/``_authorization_failed``/``_to_remote``/``_count``/
``_delivered``. Per record nothing is done in Python: ready records are the range's own list and an
index (``PartitionState.take_ready``), and the handoff, the stored offset and the counters move once
per slice handed out.
"""

from __future__ import annotations

import time
from collections import deque

from confluent_kafka import Consumer, Message

from tiered_kafka.consumer.partition import AuthorizationFailure, PartitionState
from tiered_kafka.consumer.prefetch import ChunkKind
from tiered_kafka.modes import Source

TP = tuple[str, int]
#: serve the inner consumer (callbacks, heartbeats) at least this often
KAFKA_SERVICE_INTERVAL_S = 0.05
#: poll(): records of one remote partition delivered in a row by the shortcut (``_poll_fast``)
FAST_RUN = 500


class RemoteDeliveryMixin:
    # set by TieredConsumer.__init__
    _inner: Consumer | None
    _partitions: dict[TP, PartitionState]
    _kafka_ready: deque[Message]
    _errors: deque[Message]
    _out_of_range: dict[TP, Message]
    _deferred: Exception | None
    _auto_commit: bool
    _next_auto_commit: float
    _last_kafka_service: float
    _by_source: dict[TP, dict[str, int]]
    _fast: PartitionState | None  # poll()'s shortcut: the remote partition served last
    _fast_left: int

    def _poll_fast(self, state: PartitionState) -> Message | None:
        """``poll()``'s shortcut: the next ready record of the remote partition served last, when
        nothing else is due (no error, Kafka message, deferred error, out-of-range event, Kafka
        service or auto-commit); None otherwise, and the full path runs. Up to ``FAST_RUN``
        records in a row, then the full path's round robin serves the other partitions (as
        librdkafka hands out a fetched batch of one partition before the next)."""
        if (
            not state.ready_count
            or state.paused
            or self._errors
            or self._kafka_ready
            or self._out_of_range
            or self._deferred is not None
            or self._partitions.get(state.tp) is not state
            or state.handoff.source is not Source.REMOTE
        ):
            return None
        now = time.monotonic()
        if (self._inner is not None and now - self._last_kafka_service > KAFKA_SERVICE_INTERVAL_S) or (self._auto_commit and now >= self._next_auto_commit):
            return None
        self._check_open()
        self._fast_left -= 1
        message: Message = state.ready[state.ready_pos]
        state.take_ready_one()
        decision = state.handoff.delivered(Source.REMOTE, message.offset() + 1)
        self._by_source[state.tp][Source.REMOTE.value] += 1
        self._delivered(state)
        if not state.ready_count:
            state.release_held()
        if decision is not None:
            try:
                self._apply(state, decision)
            except Exception as err:
                self._deferred = err  # raised by the next call: this message is delivered first
        return message

    def _collect_remote(self, state: PartitionState, out: list[Message], limit: int) -> None:
        start = len(out)
        try:
            self._take_remote(state, out, limit)
        finally:
            if len(out) > start:
                self._delivered(state)

    def _take_remote(self, state: PartitionState, out: list[Message], limit: int) -> None:
        handoff = state.handoff
        while len(out) < limit and handoff.source is Source.REMOTE:
            position = handoff.position
            if not state.ready_count and position is not None and state.skip_to > position:
                # past trailing control or aborted records, as Kafka's position
                self._apply(state, handoff.delivered(Source.REMOTE, state.skip_to))
                continue
            if not state.ready_count and not self._advance(state):
                break
            take = min(state.ready_count, limit - len(out))
            decision = None
            if take:
                decision = handoff.delivered(Source.REMOTE, state.take_ready(out, take))
                self._count(state, Source.REMOTE, take)
                self._fast, self._fast_left = state, FAST_RUN
            if not state.ready_count:
                state.release_held()
            self._apply(state, decision)  # KAFKA_PREFERRED: caught up with Kafka's log start

    def _advance(self, state: PartitionState) -> bool:
        """Move the partition's next ready chunk into ``state.ready``; False when none is ready."""
        reader = state.reader
        if reader is None:
            if state.position is None:
                return False
            self._to_remote(state, state.position)  # restarted after a surfaced error
            return False
        chunk = reader.head()
        if chunk is None:
            return False
        reader.pop()
        try:
            if chunk.kind is ChunkKind.DATA:
                decision = state.take_data(reader, chunk)
                if decision is None:
                    return True
            else:
                reader.release(chunk)
                decision = state.end_of_remote(chunk)
        except AuthorizationFailure as failure:
            self._authorization_failed(state, failure.error)
            return False
        self._apply(state, decision)
        return state.handoff.source is Source.REMOTE
