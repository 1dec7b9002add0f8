"""TieredConsumer's stored and committed offsets: ``store_offsets``, ``commit``, ``committed``, and
the commits it makes itself (``enable.auto.commit``: periodic, on revoke, on close).

librdkafka runs with ``enable.auto.offset.store=false`` and ``enable.auto.commit=false``: the
offsets of partitions of either source are stored here and committed through the inner
confluent-kafka consumer as ordinary Kafka group offsets (a plain confluent-kafka consumer of the
same group continues where a TieredConsumer stopped).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Container, Sequence

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition

from tiered_kafka.consumer.config import TieredConfig
from tiered_kafka.consumer.partition import PartitionState

log = logging.getLogger(__name__)
TP = tuple[str, int]


class Offsets:
    """Owns the stored offsets (the next offset to commit per partition), the offsets known
    committed, and the auto-commit schedule. ``inner``: the confluent-kafka consumer that commits
    (None without bootstrap.servers: nothing is committed)."""

    def __init__(self, config: TieredConfig, inner: Consumer | None) -> None:
        self._config = config
        self._inner = inner
        self._stored: dict[TP, int] = {}
        self._committed: dict[TP, int] = {}
        self._next_auto_commit = time.monotonic() + config.auto_commit_interval_s

    def delivered(self, state: PartitionState) -> None:
        """Records of ``state`` were handed out: its position is the offset to commit (enable.auto.offset.store)."""
        if self._config.auto_offset_store and state.position is not None:
            self._stored[state.tp] = state.position

    def forget(self, tp: TP) -> None:
        """``tp`` was revoked: its offsets are no longer ours to commit."""
        self._stored.pop(tp, None)
        self._committed.pop(tp, None)

    def store_offsets(self, assigned: Container[TP], message: Message | None = None, offsets: list[TopicPartition] | None = None) -> None:
        """As librdkafka: only with enable.auto.offset.store=false, only for assigned partitions."""
        if self._config.auto_offset_store:
            raise KafkaException(KafkaError(KafkaError._INVALID_ARG, "store_offsets() requires enable.auto.offset.store=false"))
        wanted = [] if message is None else [TopicPartition(message.topic(), message.partition(), message.offset() + 1)]
        wanted += offsets or []
        for p in wanted:
            if (p.topic, p.partition) not in assigned:
                raise KafkaException(KafkaError(KafkaError._STATE, f"{p.topic}-{p.partition} is not assigned: its offset cannot be stored"))
        for p in wanted:
            self._stored[(p.topic, p.partition)] = p.offset

    def commit(self, inner: Consumer, message: Message | None, offsets: list[TopicPartition] | None, asynchronous: bool) -> list[TopicPartition] | None:
        """Commit a message's offset + 1, the given offsets, or (neither) the stored offsets of every partition."""
        if message is not None:
            offsets = [TopicPartition(message.topic(), message.partition(), message.offset() + 1)]
        if offsets is None:
            offsets = [TopicPartition(t, p, o) for (t, p), o in self._stored.items()]
            if not offsets:
                raise KafkaException(KafkaError(KafkaError._NO_OFFSET, "no offsets stored to commit"))
        result = inner.commit(offsets=offsets, asynchronous=asynchronous)
        if not asynchronous:  # an async commit may still fail: auto-commit sends those offsets again
            for p in offsets:
                self._committed[(p.topic, p.partition)] = p.offset
        return result

    def auto_commit(self, now: float) -> None:
        """enable.auto.commit: every auto.commit.interval.ms, the stored offsets, asynchronously."""
        if self._config.auto_commit and now >= self._next_auto_commit:
            self._next_auto_commit = now + self._config.auto_commit_interval_s
            self.commit_stored(asynchronous=True)

    def auto_commit_due(self, now: float) -> bool:
        return self._config.auto_commit and now >= self._next_auto_commit

    def commit_stored(self, asynchronous: bool = False, only: Sequence[TP] | None = None) -> None:
        """Commit stored offsets not committed yet. Asynchronous (the periodic auto-commit): the
        result goes to on_commit, a failure is sent again next time. Synchronous (revoke, close):
        a failure raises KafkaException, including one partition's error in the result."""
        pending = {tp: o for tp, o in self._stored.items() if self._committed.get(tp) != o and (only is None or tp in only)}
        if not pending or self._inner is None:
            return
        offsets = [TopicPartition(t, p, o) for (t, p), o in pending.items()]
        if asynchronous:
            try:
                self._inner.commit(offsets=offsets, asynchronous=True)
            except KafkaException as err:
                log.warning("auto-commit failed (sent again at the next interval): %s", err)
            return
        result = self._inner.commit(offsets=offsets, asynchronous=False) or []
        failed = [p for p in result if p.error is not None]
        for p in result:
            if p.error is None:
                self._committed[(p.topic, p.partition)] = pending[(p.topic, p.partition)]
        if failed:
            first = failed[0]
            raise KafkaException(KafkaError(first.error.code(), f"commit of {', '.join(f'{p.topic}-{p.partition}@{p.offset}' for p in failed)} failed: {first.error.str()}"))
        if not result:
            self._committed.update(pending)

    def commit_on_revoke(self, tps: Sequence[TP]) -> KafkaException | None:
        """With enable.auto.commit, the stored offsets of ``tps`` before they are revoked; a failure
        is returned for the caller to surface (the revoke itself always completes)."""
        if not self._config.auto_commit or self._inner is None:
            return None
        try:
            self.commit_stored(only=list(tps))
        except KafkaException as err:
            return err
        return None
