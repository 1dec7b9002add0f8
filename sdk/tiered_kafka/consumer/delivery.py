"""TieredConsumer's delivery of remote records: a partition's ready records into the caller's list
(``consume``) or one at a time (``poll``'s shortcut), the next chunk of its remote reader into its
ready records, and the handoff's events on the way.

Per record nothing is done in Python: ready records are the range's own list and an index
(``PartitionState.take_ready``), and the handoff, the stored offset and the counters move once per
slice handed out. A partition's failure (a failed read, a gap under
``tiered.remote.gap.policy=error``) is its error message (``channel``); its reader restarts at the
position on the next poll.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from confluent_kafka import Message

from tiered_kafka.consumer.assignment import Assignment
from tiered_kafka.consumer.channel import ErrorChannel
from tiered_kafka.consumer.kafka_delivery import KafkaDelivery
from tiered_kafka.consumer.offsets import Offsets
from tiered_kafka.consumer.partition import PartitionState
from tiered_kafka.consumer.positions import Positions
from tiered_kafka.consumer.prefetch import ChunkKind
from tiered_kafka.consumer.tallies import SourceCounts
from tiered_kafka.consumer.tiers import is_authorization_failure
from tiered_kafka.modes import Source

#: poll(): records of one remote partition delivered in a row by the shortcut (``poll_fast``)
FAST_RUN = 500


class RemoteDelivery:
    """Owns the round robin over remote-source partitions and ``poll``'s shortcut (the remote
    partition served last and how many more records it may hand out in a row).
    ``check_open()``: raises once the consumer is closed."""

    def __init__(
        self,
        assignment: Assignment,
        positions: Positions,
        kafka: KafkaDelivery,
        offsets: Offsets,
        errors: ErrorChannel,
        counts: SourceCounts,
        check_open: Callable[[], None],
    ) -> None:
        self._assignment = assignment
        self._positions = positions
        self._kafka = kafka
        self._offsets = offsets
        self._errors = errors
        self._counts = counts
        self._check_open = check_open
        self._rr = 0
        self._fast: PartitionState | None = None
        self._fast_left = 0

    def poll_fast(self) -> Message | None:
        """``poll()``'s shortcut: the next ready record of the remote partition served last, when
        nothing else is due (no error, Kafka message, out-of-range event, Kafka service or
        auto-commit); None otherwise, and the full path runs. Up to ``FAST_RUN`` records in a row,
        then the full path's round robin serves the other partitions (as librdkafka hands out a
        fetched batch of one partition before the next)."""
        state = self._fast
        if (
            state is None
            or self._fast_left <= 0
            or not state.ready_count
            or state.paused
            or self._errors
            or self._kafka
            or self._positions.pending_out_of_range()
            or self._assignment.get(state.tp) is not state
            or state.handoff.source is not Source.REMOTE
        ):
            return None
        now = time.monotonic()
        if self._kafka.service_due(now) or self._offsets.auto_commit_due(now):
            return None
        self._check_open()
        self._fast_left -= 1
        message: Message = state.ready[state.ready_pos]
        state.take_ready_one()
        decision = state.handoff.delivered(Source.REMOTE, message.offset() + 1)
        self._counts.add(state.tp, Source.REMOTE, 1)
        self._offsets.delivered(state)
        if not state.ready_count:
            state.release_held()
        if decision is not None:
            try:
                self._positions.apply(state, decision)
            except Exception as err:  # this message is delivered first
                if not self._errors.partition_failed(state.topic, state.partition, state.position, err):
                    self._errors.defer(err)
        return message

    def collect(self, out: list[Message], limit: int) -> None:
        """Ready remote records into ``out`` (up to ``limit`` in all), partitions in turn."""
        states = [s for s in self._assignment.states() if s.handoff.source is Source.REMOTE and not s.paused]
        for i in range(len(states)):
            if len(out) >= limit:
                break
            state = states[(self._rr + i) % len(states)]
            start = len(out)
            try:
                self._take(state, out, limit)
            except Exception as err:
                self._failed(state, err)
            finally:
                if len(out) > start:
                    self._offsets.delivered(state)
        self._rr += 1

    def _failed(self, state: PartitionState, error: Exception) -> None:
        """A partition's failure: its error message; anything else raised (``channel``)."""
        if not self._errors.partition_failed(state.topic, state.partition, state.position, error):
            raise error

    def _take(self, state: PartitionState, out: list[Message], limit: int) -> None:
        handoff = state.handoff
        positions = self._positions
        while len(out) < limit and handoff.source is Source.REMOTE:
            position = handoff.position
            if not state.ready_count and position is not None and state.skip_to > position:
                # past trailing control or aborted records, as Kafka's position
                positions.apply(state, handoff.delivered(Source.REMOTE, state.skip_to))
                continue
            if not state.ready_count and not self._advance(state):
                break
            take = min(state.ready_count, limit - len(out))
            decision = None
            if take:
                decision = handoff.delivered(Source.REMOTE, state.take_ready(out, take))
                self._counts.add(state.tp, Source.REMOTE, take)
                self._fast, self._fast_left = state, FAST_RUN
            if not state.ready_count:
                state.release_held()
            positions.apply(state, decision)  # KAFKA_PREFERRED: caught up with Kafka's log start

    def _advance(self, state: PartitionState) -> bool:
        """Move the partition's next ready chunk into ``state.ready``; False when none is ready."""
        reader = state.reader
        if reader is None:
            if state.position is None:
                return False
            self._positions.to_remote(state, state.position)  # restarted after a surfaced error
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
        except Exception as err:
            if not is_authorization_failure(err):
                raise
            self._positions.authorization_failed(state, err)
            return False
        self._positions.apply(state, decision)
        return state.handoff.source is Source.REMOTE
