"""TieredConsumer's delivery of Kafka's records: the inner confluent-kafka consumer is polled (its
rebalance callbacks run there), the messages of Kafka-source partitions are handed out in order,
and a partition whose fetch ended on control batches moves past them as librdkafka's position does.

Messages fetched before a partition's position, source or pause changed are dropped: librdkafka
fetches them again from the position (``purge``). librdkafka's OFFSET_OUT_OF_RANGE events
(``_AUTO_OFFSET_RESET``: the inner consumer runs with ``auto.offset.reset=error``) are kept here,
one per partition and fetched offset in the order they came, until ``Positions`` takes them
(``take_out_of_range``); none is dropped for a later one, since only the taker can tell a current
event from a stale one. ``purge`` drops a partition's events with its messages, since they were
about fetches from before the change.

Dependencies point one way: this module reads the ``Assignment`` (which partitions are assigned and
their handoffs) and knows nothing of ``Positions``, which reads it.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Container

from confluent_kafka import Consumer, KafkaError, Message, TopicPartition

from tiered_kafka.consumer.assignment import Assignment
from tiered_kafka.consumer.channel import ErrorChannel
from tiered_kafka.consumer.offsets import Offsets
from tiered_kafka.consumer.partition import PartitionState
from tiered_kafka.consumer.tallies import SourceCounts
from tiered_kafka.modes import Source

TP = tuple[str, int]
KAFKA_BATCH = 500  # messages taken from librdkafka per call, whatever the caller asked
#: serve the inner consumer (callbacks, heartbeats) at least this often
KAFKA_SERVICE_INTERVAL_S = 0.05


class KafkaDelivery:
    """Owns the Kafka messages fetched and not yet handed out (in librdkafka's order), the
    OFFSET_OUT_OF_RANGE events not yet taken (by partition, then fetched offset), and when the inner
    consumer was last served. librdkafka's other errors go to ``errors``."""

    def __init__(self, inner: Consumer | None, assignment: Assignment, offsets: Offsets, errors: ErrorChannel, counts: SourceCounts) -> None:
        self._inner = inner
        self._assignment = assignment
        self._offsets = offsets
        self._errors = errors
        self._counts = counts
        self._ready: deque[Message] = deque()
        self._out_of_range: dict[TP, dict[int, Message]] = {}
        self._last_service = 0.0

    def __bool__(self) -> bool:
        """Messages are waiting to be handed out."""
        return bool(self._ready)

    def service_due(self, now: float) -> bool:
        """The inner consumer was not served for KAFKA_SERVICE_INTERVAL_S (callbacks, heartbeats)."""
        return self._inner is not None and now - self._last_service > KAFKA_SERVICE_INTERVAL_S

    def serve(self, limit: int, timeout: float) -> None:
        """Poll the inner consumer: rebalance callbacks, and messages of Kafka-source partitions.
        OFFSET_OUT_OF_RANGE events are kept for ``take_out_of_range`` (never lost)."""
        if self._inner is None:
            return
        self._last_service = time.monotonic()
        want = max(limit, KAFKA_BATCH)
        messages = self._inner.consume(want, timeout)
        for message in messages:
            error = message.error()
            if error is None or error.code() == KafkaError._PARTITION_EOF:
                self._ready.append(message)
            elif error.code() == KafkaError._AUTO_OFFSET_RESET and message.topic():
                self._out_of_range.setdefault((message.topic(), message.partition()), {})[message.offset()] = message
            else:
                self._errors.add(message)
        if len(messages) < want:
            self._pass_markers()

    def _pass_markers(self) -> None:
        """Caught up with Kafka: a partition whose fetch ended with control batches (transaction
        markers) or aborted records moves its position past them, as librdkafka's own position
        does, so the committed offset reaches the end (lag 0). Only partitions librdkafka delivered
        at our position since their last seek, with nothing of theirs left to hand out."""
        synced = [s for s in self._assignment.states() if s.kafka_synced and s.handoff.source is Source.KAFKA and not s.paused]
        if not synced or self._inner is None:
            return
        queued = {(m.topic(), m.partition()) for m in self._ready}
        synced = [s for s in synced if s.tp not in queued]
        if not synced:
            return
        for p in self._inner.position([TopicPartition(s.topic, s.partition) for s in synced]):
            state = self._assignment.get((p.topic, p.partition))
            if state is not None and state.position is not None and p.offset > state.position and state.handoff.source is Source.KAFKA:
                state.handoff.delivered(Source.KAFKA, p.offset)
                self._offsets.delivered(state)

    def collect(self, out: list[Message], limit: int) -> None:
        """Ready Kafka messages into ``out``, up to ``limit`` in all."""
        assignment = self._assignment
        while self._ready and len(out) < limit:
            message = self._ready.popleft()
            state = assignment.get((message.topic(), message.partition()))
            if state is None or state.paused:
                continue  # fetched before a revoke or a pause: it will be fetched again at the position
            handoff = state.handoff
            offset = message.offset()
            if message.error() is not None:  # _PARTITION_EOF (enable.partition.eof)
                if handoff.accepts(Source.KAFKA, offset):
                    out.append(message)
                continue
            if not handoff.accepts(Source.KAFKA, offset):
                continue  # fetched before a switch or a seek, or already delivered from remote storage
            handoff.delivered(Source.KAFKA, offset + 1)
            state.kafka_synced = True
            self._offsets.delivered(state)
            self._counts.add(state.tp, Source.KAFKA, 1)
            out.append(message)

    # -- OFFSET_OUT_OF_RANGE events ----------------------------------------------------------------
    def pending_out_of_range(self) -> bool:
        return bool(self._out_of_range)

    def take_out_of_range(self) -> list[Message]:
        """The OFFSET_OUT_OF_RANGE events not yet taken, in the order they came per partition; the
        taker gives back with ``keep_out_of_range`` those it could not handle yet."""
        events = [event for by_offset in self._out_of_range.values() for event in by_offset.values()]
        self._out_of_range.clear()
        return events

    def keep_out_of_range(self, event: Message) -> None:
        """An event whose handling failed: taken again by the next ``take_out_of_range``."""
        self._out_of_range.setdefault((event.topic(), event.partition()), {}).setdefault(event.offset(), event)

    # -- forgetting what is stale -------------------------------------------------------------------
    def purge(self, state: PartitionState) -> None:
        """Forget Kafka messages and the OFFSET_OUT_OF_RANGE event of ``state`` fetched before its
        position, source or pause changed (librdkafka fetches again from the position)."""
        state.kafka_synced = False
        tp = state.tp
        self._out_of_range.pop(tp, None)
        if any((m.topic(), m.partition()) == tp for m in self._ready):
            self._ready = deque(m for m in self._ready if (m.topic(), m.partition()) != tp)

    def keep_only(self, assigned: Container[TP]) -> None:
        """Forget the messages and events of partitions no longer assigned."""
        self._ready = deque(m for m in self._ready if (m.topic(), m.partition()) in assigned)
        for tp in [tp for tp in self._out_of_range if tp not in assigned]:
            del self._out_of_range[tp]
