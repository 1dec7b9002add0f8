"""TieredConsumer's assigned partitions and the inner consumer's assignment.

``Assignment`` owns the table of assigned partitions (``PartitionState`` by (topic, partition), each
with its handoff, remote reader and ready records) and librdkafka's side of it: the inner
confluent-kafka consumer is assigned exactly the partitions whose source is Kafka, at their
positions (``sync_kafka``, ``seek_kafka``), and the partitions this consumer paused there.

It is the bottom of TieredConsumer's collaborators and depends on none of them; the others read it
(one way: ``KafkaDelivery`` → ``Assignment``; ``Positions`` → ``KafkaDelivery``, ``Assignment``;
``Membership`` → ``Positions``, ``KafkaDelivery``, ``Assignment``, ``Offsets``).
"""

from __future__ import annotations

from collections.abc import Callable

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from tiered_kafka.consumer.config import TieredConfig
from tiered_kafka.consumer.handoff import Handoff
from tiered_kafka.consumer.partition import PartitionState
from tiered_kafka.consumer.prefetch import RemoteReader
from tiered_kafka.modes import Mode, Source

TP = tuple[str, int]


class Assignment:
    """Owns the assigned partitions, the inner consumer's assignment calls (counted, so a rebalance
    callback can tell whether one was made) and the partitions paused in librdkafka by this consumer."""

    def __init__(self, config: TieredConfig, inner: Consumer | None, mode: Callable[[], Mode]) -> None:
        self._config = config
        self._inner = inner
        self._mode = mode
        self._partitions: dict[TP, PartitionState] = {}
        self.calls = 0  # assignment calls made on the inner consumer
        self._inner_paused: set[TP] = set()  # partitions paused in librdkafka by this consumer

    # -- the assigned partitions --------------------------------------------------------------------
    def get(self, tp: TP) -> PartitionState | None:
        return self._partitions.get(tp)

    def __contains__(self, tp: object) -> bool:
        return tp in self._partitions

    def states(self) -> list[PartitionState]:
        return list(self._partitions.values())

    def tps(self) -> list[TP]:
        return list(self._partitions)

    def assignment(self) -> list[TopicPartition]:
        return [TopicPartition(t, p) for t, p in self._partitions]

    def add(self, topic: str, partition: int) -> PartitionState:
        """The partition's state, new (no position yet) unless it is assigned already."""
        tp = (topic, partition)
        state = self._partitions.get(tp)
        if state is None:
            handoff = Handoff(self._mode(), kafka_configured=self._inner is not None, gap_skip=self._config.gap_skip)
            state = self._partitions[tp] = PartitionState(topic, partition, handoff)
        return state

    def remove(self, tp: TP) -> None:
        """Forget ``tp``: its remote reader stops, its handoff no longer has a position."""
        state = self._partitions.pop(tp, None)
        if state is not None:
            state.stop_remote()
            state.handoff.revoke()

    def reading_remote(self) -> bool:
        """Some partition has a remote reader."""
        return any(s.reader is not None for s in self._partitions.values())

    def stop_remote(self) -> list[RemoteReader]:
        """Stop every remote reader (close); the readers, to join."""
        readers = [s.reader for s in self._partitions.values() if s.reader is not None]
        for state in self._partitions.values():
            state.stop_remote()
        return readers

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
                self.calls += 1
                inner.incremental_unassign(gone)
            if new:
                self.calls += 1
                inner.incremental_assign(new)
        elif not wanted and revoking:
            self.calls += 1
            inner.unassign()  # an eager revoke completes with unassign(), not an empty assign()
        elif current != wanted.keys() or not current:
            self.calls += 1
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
            self.calls += 1
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

    def complete_rebalance(self, inner: Consumer, calls_before: int, assign: bool) -> None:
        """A rebalance callback must end with one assignment call on the inner consumer, or the
        binding makes its own with the whole list (which would fetch remote-read partitions)."""
        if self.calls != calls_before:
            return
        self.calls += 1
        if self._config.cooperative:
            (inner.incremental_assign if assign else inner.incremental_unassign)([])
        elif assign:
            self._resume_inner({(p.topic, p.partition) for p in inner.assignment()} - {(p.topic, p.partition) for p in self._kafka_side()})
            inner.assign(self._kafka_side())
        else:
            self._resume_inner({(p.topic, p.partition) for p in inner.assignment()})
            inner.unassign()

    def pause_in_kafka(self, partitions: list[TopicPartition], paused: bool) -> None:
        """Pause or resume Kafka-source partitions in librdkafka; resumed, they are fetched again
        from their positions (messages dropped while paused)."""
        if not partitions or self._inner is None:
            return
        (self._inner.pause if paused else self._inner.resume)(partitions)
        (self._inner_paused.update if paused else self._inner_paused.difference_update)((p.topic, p.partition) for p in partitions)
        if not paused:
            for p in partitions:
                state = self._partitions[(p.topic, p.partition)]
                if state.position is not None:
                    self.seek_kafka(state)
