"""TieredConsumer's offsets and the rest of confluent-kafka's Consumer interface: store_offsets,
commit (and the commits it makes itself), committed, position, seek, pause/resume, watermarks,
offsets_for_times, and the calls passed to the inner consumer.

A mixin of ``tiered_kafka.consumer.consumer.TieredConsumer`` (split out to keep modules small).
"""

from __future__ import annotations

import logging
from collections import deque
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, OFFSET_END, OFFSET_INVALID, Consumer, KafkaError, KafkaException, Message, TopicPartition

from tiered_kafka import modes
from tiered_kafka.consumer.config import TieredConfig
from tiered_kafka.consumer.partition import PartitionState
from tiered_kafka.consumer.tiers import Tiers
from tiered_kafka.gateway_client import GatewayClient
from tiered_kafka.modes import Mode, Source

log = logging.getLogger(__name__)
TP = tuple[str, int]


class OffsetsMixin:
    # set by TieredConsumer.__init__
    _config: TieredConfig
    _mode: Mode
    _inner: Consumer | None
    _gateway: GatewayClient | None
    _tiers: Tiers
    _partitions: dict[TP, PartitionState]
    _kafka_ready: deque[Message]
    _stored: dict[TP, int]
    _committed_stored: dict[TP, int]
    _inner_paused: set[TP]

    # -- offsets --------------------------------------------------------------------------------------
    def store_offsets(self, message: Message | None = None, offsets: list[TopicPartition] | None = None) -> None:
        """As librdkafka: only with enable.auto.offset.store=false, only for assigned partitions."""
        if self._config.auto_offset_store:
            raise KafkaException(KafkaError(KafkaError._INVALID_ARG, "store_offsets() requires enable.auto.offset.store=false"))
        wanted = [] if message is None else [TopicPartition(message.topic(), message.partition(), message.offset() + 1)]
        wanted += offsets or []
        for p in wanted:
            if (p.topic, p.partition) not in self._partitions:
                raise KafkaException(KafkaError(KafkaError._STATE, f"{p.topic}-{p.partition} is not assigned: its offset cannot be stored"))
        for p in wanted:
            self._stored[(p.topic, p.partition)] = p.offset

    def commit(self, message: Message | None = None, offsets: list[TopicPartition] | None = None, asynchronous: bool = True) -> list[TopicPartition] | None:
        """Commit a message's offset + 1, the given offsets, or (neither) the stored offsets of every partition."""
        inner = self._require_kafka("commit")
        if message is not None:
            offsets = [TopicPartition(message.topic(), message.partition(), message.offset() + 1)]
        if offsets is None:
            offsets = [TopicPartition(t, p, o) for (t, p), o in self._stored.items()]
            if not offsets:
                raise KafkaException(KafkaError(KafkaError._NO_OFFSET, "no offsets stored to commit"))
        result = inner.commit(offsets=offsets, asynchronous=asynchronous)
        if not asynchronous:  # an async commit may still fail: auto-commit sends those offsets again
            for p in offsets:
                self._committed_stored[(p.topic, p.partition)] = p.offset
        return result

    def _commit_stored(self, asynchronous: bool = False, only: list[TP] | None = None) -> None:
        """Commit stored offsets not committed yet. Asynchronous (the periodic auto-commit): the
        result goes to on_commit, a failure is sent again next time. Synchronous (revoke, close):
        a failure raises KafkaException, including one partition's error in the result."""
        pending = {tp: o for tp, o in self._stored.items() if self._committed_stored.get(tp) != o and (only is None or tp in only)}
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
                self._committed_stored[(p.topic, p.partition)] = pending[(p.topic, p.partition)]
        if failed:
            first = failed[0]
            raise KafkaException(KafkaError(first.error.code(), f"commit of {', '.join(f'{p.topic}-{p.partition}@{p.offset}' for p in failed)} failed: {first.error.str()}"))
        if not result:
            self._committed_stored.update(pending)

    def committed(self, partitions: list[TopicPartition], timeout: float | None = None) -> list[TopicPartition]:
        return self._require_kafka("committed").committed(partitions, timeout=-1 if timeout is None else timeout)

    def position(self, partitions: list[TopicPartition]) -> list[TopicPartition]:
        out = []
        for p in partitions:
            state = self._partitions.get((p.topic, p.partition))
            position = state.position if state is not None and state.position is not None else OFFSET_INVALID
            out.append(TopicPartition(p.topic, p.partition, position))
        return out

    def seek(self, partition: TopicPartition) -> None:
        tp = (partition.topic, partition.partition)
        state = self._partitions.get(tp)
        if state is None:
            raise KafkaException(KafkaError(KafkaError._STATE, f"{tp[0]}-{tp[1]} is not assigned"))
        offset = partition.offset
        if offset == OFFSET_BEGINNING:
            offset = self._tiers.earliest(self._mode, tp)
        elif offset == OFFSET_END:
            offset = self._tiers.latest(self._mode, tp)
        elif offset < 0:
            raise KafkaException(KafkaError(KafkaError._INVALID_ARG, f"cannot seek to offset {offset}"))
        self._begin(state, offset)

    def pause(self, partitions: list[TopicPartition]) -> None:
        self._set_paused(partitions, True)

    def resume(self, partitions: list[TopicPartition]) -> None:
        self._set_paused(partitions, False)

    def _set_paused(self, partitions: list[TopicPartition], paused: bool) -> None:
        kafka = []
        for p in partitions:
            state = self._partitions.get((p.topic, p.partition))
            if state is None:
                continue
            state.paused = paused
            self._purge_kafka_ready(state.tp)
            if state.handoff.source is Source.KAFKA:
                kafka.append(TopicPartition(p.topic, p.partition))
        if kafka and self._inner is not None:
            (self._inner.pause if paused else self._inner.resume)(kafka)
            (self._inner_paused.update if paused else self._inner_paused.difference_update)((p.topic, p.partition) for p in kafka)
            if not paused:  # messages dropped while paused are fetched again from the position
                for p in kafka:
                    state = self._partitions[(p.topic, p.partition)]
                    if state.position is not None:
                        self._seek_kafka(self._inner, state)

    def get_watermark_offsets(self, partition: TopicPartition, timeout: float | None = None, cached: bool = False) -> tuple[int, int]:
        """(low, high): KAFKA_ONLY Kafka's; REMOTE_ONLY remote storage's (high = last + 1); else low
        is the earliest offset of either tier and high Kafka's high watermark."""
        tp = (partition.topic, partition.partition)
        if not modes.reads_remote(self._mode):
            return self._require_kafka("watermarks").get_watermark_offsets(partition, timeout=-1 if timeout is None else timeout, cached=cached)
        remote = self._tiers.remote_range(tp)
        if not modes.reads_kafka(self._mode):
            return (0, 0) if remote is None else (remote[0], remote[1] + 1)
        low, high = self._tiers.watermarks(tp, 30 if timeout is None else timeout)
        return (low if remote is None else min(low, remote[0]), high)

    def offsets_for_times(self, partitions: list[TopicPartition], timeout: float | None = None) -> list[TopicPartition]:
        """The first offset whose timestamp is >= each partition's ``offset`` field (ms), over the
        tiers the mode reads; -1 (OFFSET_END) when there is none, as in Kafka."""
        kafka_answers: dict[TP, int] = {}
        if modes.reads_kafka(self._mode):
            for p in self._require_kafka("offsets_for_times").offsets_for_times(partitions, timeout=-1 if timeout is None else timeout):
                kafka_answers[(p.topic, p.partition)] = p.offset
        out = []
        for p in partitions:
            tp = (p.topic, p.partition)
            answers = [kafka_answers[tp]] if tp in kafka_answers and kafka_answers[tp] >= 0 else []
            if modes.reads_remote(self._mode) and self._gateway is not None and self._tiers.remote_range(tp) is not None:
                remote = self._gateway.offset_for_timestamp(p.topic, p.partition, p.offset)
                if remote is not None:
                    answers.append(remote)
            out.append(TopicPartition(p.topic, p.partition, min(answers) if answers else OFFSET_END))
        return out

    # -- the rest of Consumer's interface ---------------------------------------------------------------
    def list_topics(self, topic: str | None = None, timeout: float = -1) -> Any:
        return self._require_kafka("list_topics").list_topics(topic, timeout=timeout)

    def cluster_id(self, timeout: float = -1) -> str | None:
        return self._require_kafka("cluster_id").cluster_id(timeout)

    def set_sasl_credentials(self, username: str, password: str) -> None:
        self._require_kafka("set_sasl_credentials").set_sasl_credentials(username, password)

    def memberid(self) -> str | None:
        return self._require_kafka("memberid").memberid()

    def consumer_group_metadata(self) -> Any:
        return self._require_kafka("consumer_group_metadata").consumer_group_metadata()
