"""``TieredConsumer``: confluent_kafka.Consumer's interface over Kafka *and* remote storage.

How it works
------------
A confluent-kafka ``Consumer`` (the "inner" consumer) does everything Kafka does for us: group
membership and rebalances, committed offsets, watermarks, and the fetching of partitions whose
source is Kafka. Partitions whose source is remote storage are *not* in the inner consumer's
assignment, so librdkafka never fetches them (REMOTE_ONLY never fetches data from the brokers);
a ``RemoteReader`` reads them through the gateway's read plans and presigned URLs instead.

Each assigned partition has one position (the next offset the application gets) and one source.
The source is chosen by ``tiered_kafka.modes`` rules at that position, and changes only at the
position, so the handoff is exact: no gap, no duplicate, order kept within the partition.

    REMOTE_ONLY       remote storage; at its end, wait for new uploads (tiered.remote.poll.interval.ms)
    KAFKA_ONLY        Kafka
    REMOTE_PREFERRED  remote while remote storage holds the position, then Kafka
    KAFKA_PREFERRED   Kafka; when Kafka answers OFFSET_OUT_OF_RANGE below its log start and remote
                      storage holds the position, remote until the position reaches the log start
                      Kafka reported (or remote storage ends), then Kafka again

Offsets: librdkafka runs with ``auto.offset.reset=error`` and ``enable.auto.offset.store=false``;
this class applies the application's ``auto.offset.reset`` (earliest: the earliest offset of the
tiers the mode reads; latest: the end), stores offsets as records are delivered, and commits them
itself (``enable.auto.commit`` every ``auto.commit.interval.ms``, on revoke and on close), for
partitions of either source. Committed offsets are ordinary Kafka group offsets: a plain
confluent-kafka consumer of the same group continues where a TieredConsumer stopped.

Failures: a gateway or S3 failure that outlives the retries is raised by ``poll``/``consume``
(``RemoteReadError``); the position does not move, so the next call retries. Nothing is skipped
unless ``tiered.remote.gap.policy=skip`` says a recorded gap may be.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import (
    OFFSET_BEGINNING,
    OFFSET_END,
    OFFSET_INVALID,
    TIMESTAMP_CREATE_TIME,
    TIMESTAMP_LOG_APPEND_TIME,
    TIMESTAMP_NOT_AVAILABLE,
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    TopicPartition,
)

from tiered_kafka.consumer.config import TieredConfig, parse_config
from tiered_kafka.consumer.prefetch import ByteBudget, Chunk, ChunkKind, RemoteReader, data_budget
from tiered_kafka.errors import ConfigError, GatewayRequestError, OffsetNotRemoteError, RemoteGapError
from tiered_kafka.gateway_client import GatewayClient, PartitionExtent
from tiered_kafka.modes import Mode, Source
from tiered_kafka.remote_read import DecodedBatch
from tiered_kafka.transactions import CommittedFilter

log = logging.getLogger(__name__)
TP = tuple[str, int]
Callback = Callable[[Any, list[TopicPartition]], None]
_KAFKA_SERVICE_INTERVAL_S = 0.05  # serve the inner consumer (callbacks, heartbeats) at least this often
KAFKA_BATCH = 500  # messages taken from librdkafka per call, whatever the caller asked
_REMOTE_TS_TYPES = {0: TIMESTAMP_CREATE_TIME, 1: TIMESTAMP_LOG_APPEND_TIME}
_NO_TIMESTAMP = (TIMESTAMP_NOT_AVAILABLE, -1)
#: bytes a delivered Message costs beyond its key and value (the object, two bytes headers, the
#: timestamp tuple, a list slot: measured with tracemalloc, rounded up)
MESSAGE_OVERHEAD = 240


@dataclass
class _Partition:
    topic: str
    partition: int
    position: int | None = None
    source: Source = Source.KAFKA
    reader: RemoteReader | None = None
    ready: deque[Message] = field(default_factory=deque)
    committed_filter: CommittedFilter[Message] | None = None
    paused: bool = False
    switch_back_at: int | None = None  # KAFKA_PREFERRED on remote: Kafka's log start when it refused
    kafka_refused_below: int = -1  # Kafka's log start the last time it answered OFFSET_OUT_OF_RANGE
    pending: bool = False  # assigned, but its start failed (retried by the next poll)
    skip_to: int = -1  # past control/aborted records decided in remote data: the position once ready is empty
    held: Chunk | None = None  # the chunk whose records are in ``ready`` (its budget returns when they are taken)

    @property
    def tp(self) -> TP:
        return (self.topic, self.partition)


class TieredConsumer:
    """A drop-in for ``confluent_kafka.Consumer`` reading Kafka and remote storage (module docstring).

    ``TieredConsumer({"bootstrap.servers": ..., "group.id": ..., "tiered.mode": "REMOTE_PREFERRED",
    "tiered.gateway.url": ..., "tiered.cluster": ...})``; see ``tiered_kafka.consumer.config``.
    """

    def __init__(self, config: dict[str, Any], **kwargs: Any) -> None:
        self._config: TieredConfig = parse_config({**config, **kwargs})
        self._mode = self._config.mode
        self._auto_commit = self._config.auto_commit
        self._auto_commit_interval_s = self._config.auto_commit_interval_s
        self._cooperative = self._config.cooperative
        self._inner: Consumer | None = Consumer(dict(self._config.kafka)) if self._config.has_kafka else None
        self._gateway: GatewayClient | None = None
        if self._config.gateway_url and self._config.cluster:
            self._gateway = GatewayClient(
                self._config.gateway_url,
                self._config.cluster,
                token=self._config.gateway_token,
                timeout_s=self._config.gateway_timeout_s,
                retries=self._config.remote_retries,
                backoff_s=self._config.remote_retry_backoff_s,
                max_connections=self._config.prefetch_parallelism + 4,
            )
        self._budget = ByteBudget(data_budget(self._config.prefetch_max_bytes, self._config.prefetch_parallelism))
        self._pool = ThreadPoolExecutor(self._config.prefetch_parallelism, thread_name_prefix="tiered-fetch")
        self._wake = threading.Event()
        self._partitions: dict[TP, _Partition] = {}
        self._kafka_ready: deque[Message] = deque()
        self._errors: deque[Message] = deque()
        self._stored: dict[TP, int] = {}
        self._committed_stored: dict[TP, int] = {}
        self._next_auto_commit = time.monotonic() + self._auto_commit_interval_s
        self._last_kafka_service = 0.0
        self._user_callbacks: dict[str, Callback | None] = {}
        self._in_rebalance = False
        self._assigned_in_callback = False
        self._assignment_calls = 0  # assignment calls made on the inner consumer
        self._rr = 0
        self._deferred: Exception | None = None
        self._by_source: dict[TP, dict[str, int]] = {}
        self._closed = False

    # -- mode -----------------------------------------------------------------------------------
    @property
    def mode(self) -> Mode:
        return self._mode

    def set_mode(self, mode: Mode | str) -> None:
        """Change the consumption mode now; each partition continues at its exact position."""
        try:
            mode = Mode(mode.value if isinstance(mode, Mode) else str(mode).upper())
        except ValueError:
            raise ConfigError(f"mode {mode!r} is not one of {', '.join(m.value for m in Mode)}") from None
        if mode is not Mode.KAFKA_ONLY and self._gateway is None:
            raise ConfigError(f"mode {mode.value} reads remote storage: this consumer has no tiered.gateway.url/tiered.cluster")
        if mode is not Mode.REMOTE_ONLY and self._inner is None:
            raise ConfigError(f"mode {mode.value} reads from Kafka: this consumer has no bootstrap.servers")
        self._mode = mode
        for state in list(self._partitions.values()):
            if state.position is not None:
                self._restart(state, state.position)

    # -- subscription and assignment --------------------------------------------------------------
    def subscribe(self, topics: list[str], on_assign: Callback | None = None, on_revoke: Callback | None = None, on_lost: Callback | None = None) -> None:
        inner = self._require_kafka("subscribe")
        self._user_callbacks = {"assign": on_assign, "revoke": on_revoke, "lost": on_lost}
        inner.subscribe(topics, on_assign=self._on_assign, on_revoke=self._on_revoke, on_lost=self._on_lost)

    def unsubscribe(self) -> None:
        inner = self._require_kafka("unsubscribe")
        self._drop(list(self._partitions))
        inner.unsubscribe()

    def assign(self, partitions: list[TopicPartition]) -> None:
        """Replace the assignment; offsets may be absolute or logical (OFFSET_BEGINNING/END/STORED)."""
        if self._in_rebalance:
            self._assigned_in_callback = True
        self._drop(list(self._partitions), kafka=False)
        self._add(partitions)

    def incremental_assign(self, partitions: list[TopicPartition]) -> None:
        if self._in_rebalance:
            self._assigned_in_callback = True
        self._add(partitions)

    def incremental_unassign(self, partitions: list[TopicPartition]) -> None:
        if self._in_rebalance:
            self._assigned_in_callback = True
        self._drop([(p.topic, p.partition) for p in partitions])

    def unassign(self) -> None:
        if self._in_rebalance:
            self._assigned_in_callback = True
        self._drop(list(self._partitions))

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
                    self._partitions.setdefault((p.topic, p.partition), _Partition(p.topic, p.partition, pending=True))
                self._deferred = err
        self._complete_rebalance(inner, calls, assign=True)

    def _on_revoke(self, inner: Consumer, partitions: list[TopicPartition]) -> None:
        calls = self._assignment_calls
        self._callback("revoke", partitions)
        if self._assigned_in_callback:
            self._assigned_in_callback = False
        else:
            self._drop([(p.topic, p.partition) for p in partitions])
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
            inner.assign(self._kafka_side())
        else:
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

    def _add(self, partitions: list[TopicPartition]) -> None:
        """Resolve start offsets, pick each partition's source, and update the inner assignment."""
        starts = self._resolve_starts(partitions)
        fetching = {(p.topic, p.partition) for p in self._inner.assignment()} if self._inner is not None else set()
        started = []
        for tp, offset in starts.items():
            state = self._partitions.get(tp) or _Partition(tp[0], tp[1])
            state.pending = False
            self._partitions[tp] = state
            self._purge_kafka_ready(tp)
            if offset is not None:
                self._start(state, offset, update_assignment=False)
                started.append(state)
        self._sync_kafka_assignment()
        for state in started:  # already fetching in librdkafka: move it to the new position
            if state.source is Source.KAFKA and state.tp in fetching and self._inner is not None:
                self._seek_kafka(self._inner, state)

    def _start_pending(self) -> None:
        """Partitions whose start failed in a rebalance callback: start them now (from the committed offsets)."""
        pending = [TopicPartition(t, p) for (t, p), s in self._partitions.items() if s.pending]
        if pending:
            self._add(pending)

    def _drop(self, tps: Sequence[TP], kafka: bool = True, commit: bool = True) -> None:
        """Forget partitions (committing their stored offsets first, with enable.auto.commit)."""
        if commit and self._auto_commit and self._inner is not None:
            self._commit_stored(asynchronous=False, only=list(tps))
        for tp in tps:
            state = self._partitions.pop(tp, None)
            if state is not None:
                self._stop_remote(state)
            self._stored.pop(tp, None)
            self._committed_stored.pop(tp, None)
        self._kafka_ready = deque(m for m in self._kafka_ready if (m.topic(), m.partition()) in self._partitions)
        if kafka:
            self._sync_kafka_assignment(revoking=True)

    def _kafka_side(self) -> list[TopicPartition]:
        return [TopicPartition(t, p, s.position) for (t, p), s in self._partitions.items() if s.source is Source.KAFKA and s.position is not None]

    def _sync_kafka_assignment(self, revoking: bool = False) -> None:
        """The inner consumer is assigned exactly the partitions whose source is Kafka."""
        if self._inner is None:
            return
        wanted = {(p.topic, p.partition): p for p in self._kafka_side()}
        current = {(p.topic, p.partition) for p in self._inner.assignment()}
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

    def _purge_kafka_ready(self, tp: TP) -> None:
        """Forget Kafka messages of ``tp`` fetched before its position, source or pause changed
        (librdkafka fetches them again from the position)."""
        if any((m.topic(), m.partition()) == tp for m in self._kafka_ready):
            self._kafka_ready = deque(m for m in self._kafka_ready if (m.topic(), m.partition()) != tp)

    # -- where a partition starts -------------------------------------------------------------------
    def _resolve_starts(self, partitions: list[TopicPartition]) -> dict[TP, int | None]:
        starts: dict[TP, int | None] = {}
        stored = [p for p in partitions if p.offset < 0 and p.offset not in (OFFSET_BEGINNING, OFFSET_END)]
        committed: dict[TP, int] = {}
        if stored and self._inner is not None:
            for c in self._inner.committed([TopicPartition(p.topic, p.partition) for p in stored], timeout=30):
                if c.offset >= 0:
                    committed[(c.topic, c.partition)] = c.offset
        for p in partitions:
            tp = (p.topic, p.partition)
            if p.offset >= 0:
                starts[tp] = p.offset
            elif p.offset == OFFSET_BEGINNING:
                starts[tp] = self._earliest(tp)
            elif p.offset == OFFSET_END:
                starts[tp] = self._latest(tp)
            elif tp in committed:
                starts[tp] = committed[tp]
            else:
                starts[tp] = self._reset(tp, None)
        return starts

    def _reset(self, tp: TP, offset: int | None) -> int | None:
        """auto.offset.reset for a partition without a valid position (None: 'error', reported).

        earliest: with no position, the earliest offset of the tiers the mode reads; from a position
        neither tier holds (remote retention, or data lost between the tiers), the first offset after
        it that a tier holds — forward, as Kafka resets to its log start, never back to re-read.
        """
        if self._config.auto_offset_reset == "earliest":
            if offset is None or offset >= self._latest(tp):  # past the end: from the start, as Kafka does
                return self._earliest(tp)
            ahead = [o for o in self._first_offsets(tp) if o > offset]
            target = min(ahead) if ahead else self._latest(tp)
            log.warning("%s-%d: offsets %d..%d are in no tier; continuing at %d", tp[0], tp[1], offset, target - 1, target)
            return target
        if self._config.auto_offset_reset == "latest":
            return self._latest(tp)
        what = "no committed offset" if offset is None else f"offset {offset} is out of range"
        self._errors.append(Message(topic=tp[0], partition=tp[1], offset=OFFSET_INVALID if offset is None else offset, error=KafkaError(KafkaError._AUTO_OFFSET_RESET, f"{tp[0]}-{tp[1]}: {what} and auto.offset.reset is error")))
        return None

    def _earliest(self, tp: TP) -> int:
        """The first offset of the tiers the mode reads."""
        return min(self._first_offsets(tp), default=0)

    def _first_offsets(self, tp: TP) -> list[int]:
        """The first offset of each tier the mode reads (Kafka's log start, remote storage's earliest)."""
        firsts = []
        if self._mode is not Mode.REMOTE_ONLY:
            firsts.append(self._watermarks(tp)[0])
        if self._mode is not Mode.KAFKA_ONLY:
            remote = self._extent(tp).remote
            if remote is not None:
                firsts.append(remote.earliest_offset)
        return firsts

    def _latest(self, tp: TP) -> int:
        if self._mode is Mode.REMOTE_ONLY:
            remote = self._extent(tp).remote
            return 0 if remote is None else remote.latest_offset + 1
        return self._watermarks(tp)[1]

    def _watermarks(self, tp: TP, timeout: float = 30) -> tuple[int, int]:
        low, high = self._require_kafka("watermarks").get_watermark_offsets(TopicPartition(*tp), timeout=timeout, cached=False)
        return low, high

    def _extent(self, tp: TP) -> PartitionExtent:
        assert self._gateway is not None
        try:
            return self._gateway.partition(*tp)
        except GatewayRequestError as err:  # an unknown partition remotely is "nothing remote"
            if err.code == "unknown_topic_or_partition":
                return PartitionExtent(None, None, None)
            raise

    # -- choosing and switching sources ---------------------------------------------------------------
    def _start(self, state: _Partition, offset: int, update_assignment: bool = True) -> None:
        """Read ``state`` from ``offset`` with the source the mode picks there."""
        state.position = offset
        source = Source.KAFKA
        if self._mode is Mode.REMOTE_ONLY:
            source = Source.REMOTE
        elif self._mode is Mode.REMOTE_PREFERRED:
            remote = self._extent(state.tp).remote
            source = Source.REMOTE if remote is not None and remote.holds(offset) else Source.KAFKA
        if source is Source.REMOTE:
            self._to_remote(state, offset, update_assignment)
        else:
            self._to_kafka(state, offset, update_assignment)

    def _restart(self, state: _Partition, offset: int) -> None:
        self._stop_remote(state)
        self._purge_kafka_ready(state.tp)
        state.switch_back_at = None
        self._start(state, offset)

    def _to_remote(self, state: _Partition, offset: int, update_assignment: bool = True) -> None:
        assert self._gateway is not None
        self._stop_remote(state)
        self._purge_kafka_ready(state.tp)
        state.position, state.source, state.skip_to = offset, Source.REMOTE, -1
        state.committed_filter = CommittedFilter() if self._config.read_committed else None
        state.reader = RemoteReader(
            self._gateway,
            state.topic,
            state.partition,
            offset,
            budget=self._budget,
            pool=self._pool,
            convert=_to_messages,
            plan_max_bytes=self._config.plan_max_bytes,
            tail=self._mode is Mode.REMOTE_ONLY,
            poll_interval_s=self._config.remote_poll_interval_s,
            wake=self._wake,
        )
        log.debug("%s-%d: reading remote storage from offset %d", state.topic, state.partition, offset)
        if update_assignment:
            self._sync_kafka_assignment()

    def _to_kafka(self, state: _Partition, offset: int, update_assignment: bool = True) -> None:
        self._stop_remote(state)
        self._purge_kafka_ready(state.tp)
        state.position, state.source, state.switch_back_at = offset, Source.KAFKA, None
        log.debug("%s-%d: reading Kafka from offset %d", state.topic, state.partition, offset)
        if update_assignment:
            inner = self._require_kafka("reading Kafka")
            if any((p.topic, p.partition) == state.tp for p in inner.assignment()):
                self._seek_kafka(inner, state)
            else:
                self._sync_kafka_assignment()  # assigned at the position

    def _seek_kafka(self, inner: Consumer, state: _Partition) -> None:
        """Move librdkafka's fetch position; a partition that is not fetching yet (librdkafka's
        _STATE error, e.g. still looking up its offset) is assigned again at the position instead."""
        target = TopicPartition(state.topic, state.partition, state.position)
        try:
            inner.seek(target)
        except KafkaException as err:
            if err.args[0].code() != KafkaError._STATE:
                raise
            self._assignment_calls += 1
            if self._cooperative:
                inner.incremental_unassign([TopicPartition(state.topic, state.partition)])
                inner.incremental_assign([target])
            else:
                inner.assign(self._kafka_side())

    def _stop_remote(self, state: _Partition) -> None:
        if state.reader is not None:
            self._release_held(state)
            state.reader.stop()
            state.reader = None
        state.ready.clear()
        state.committed_filter = None

    def _kafka_out_of_range(self, state: _Partition, failed_offset: int, error: Message) -> None:
        """OFFSET_OUT_OF_RANGE from Kafka at ``state.position``: remote storage, or auto.offset.reset.

        In the modes that read both tiers, an offset below Kafka's log start that remote storage
        does not hold either, with data after it, is a gap between the tiers: handled by
        tiered.remote.gap.policy (RemoteGapError, or a logged skip to the next offset a tier holds),
        never by a silent reset to the end.
        """
        offset = state.position if state.position is not None else failed_offset
        low, high = self._watermarks(state.tp)
        if offset < low and self._mode in (Mode.KAFKA_PREFERRED, Mode.REMOTE_PREFERRED):
            state.kafka_refused_below = low
            remote = self._extent(state.tp).remote
            if remote is not None and remote.holds(offset):
                self._to_remote(state, offset)
                state.switch_back_at = low if self._mode is Mode.KAFKA_PREFERRED else None
                return
            if remote is not None and remote.earliest_offset <= offset:  # remote ended below Kafka's log start
                gap_end = low - 1
                if not self._config.gap_skip:
                    raise RemoteGapError(
                        f"{state.topic}-{state.partition}: offsets {offset}..{gap_end} are in neither remote storage "
                        f"(which ends at {remote.latest_offset}) nor Kafka (whose log starts at {low}); "
                        "seek past them or set tiered.remote.gap.policy=skip",
                        topic=state.topic, partition=state.partition, start_offset=offset, end_offset=gap_end, reason="between tiers",
                    )
                log.warning("%s-%d: skipping offsets %d..%d, in neither tier", state.topic, state.partition, offset, gap_end)
                self._restart(state, low)
                return
        if self._config.auto_offset_reset == "error":
            self._errors.append(error)
            return
        target = self._reset(state.tp, offset)
        if target is not None:
            self._restart(state, target)

    # -- poll and consume ----------------------------------------------------------------------------
    def poll(self, timeout: float | None = None) -> Message | None:
        messages = self._consume(1, timeout)
        return messages[0] if messages else None

    def consume(self, num_messages: int = 1, timeout: float = -1) -> list[Message]:
        if num_messages < 1:
            raise ValueError("num_messages must be at least 1")
        return self._consume(num_messages, timeout)

    def _consume(self, limit: int, timeout: float | None) -> list[Message]:
        self._check_open()
        if self._deferred is not None:
            error, self._deferred = self._deferred, None
            raise error
        deadline = math.inf if timeout is None or timeout < 0 else time.monotonic() + timeout
        self._start_pending()
        out: list[Message] = []
        while True:
            now = time.monotonic()
            remote = any(s.reader is not None for s in self._partitions.values())
            if not remote or now - self._last_kafka_service > _KAFKA_SERVICE_INTERVAL_S:
                self._serve_kafka(limit, 0)
            try:
                self._collect(out, limit)
            except Exception as err:
                if not out:
                    raise
                self._deferred = err  # raised by the next call: these messages are delivered first
                return out
            if self._auto_commit and now >= self._next_auto_commit:
                self._next_auto_commit = now + self._auto_commit_interval_s
                self._commit_stored(asynchronous=True)
            remaining = deadline - time.monotonic()
            if out or remaining <= 0:
                return out
            if any(s.reader is not None for s in self._partitions.values()):
                self._wake.wait(min(remaining, _KAFKA_SERVICE_INTERVAL_S))
                self._wake.clear()
            else:
                self._serve_kafka(limit, min(remaining, 0.2))

    def _serve_kafka(self, limit: int, timeout: float) -> None:
        """Poll the inner consumer: rebalance callbacks, and messages of Kafka-source partitions."""
        if self._inner is None:
            return
        self._last_kafka_service = time.monotonic()
        out_of_range = []
        for message in self._inner.consume(max(limit, KAFKA_BATCH), timeout):  # every message is queued first
            error = message.error()
            if error is None or error.code() == KafkaError._PARTITION_EOF:
                self._kafka_ready.append(message)
            elif error.code() == KafkaError._AUTO_OFFSET_RESET and message.topic():
                out_of_range.append(message)
            else:
                self._errors.append(message)
        for message in out_of_range:  # may call the gateway and raise: nothing fetched is lost by that
            state = self._partitions.get((message.topic(), message.partition()))
            if state is not None and state.source is Source.KAFKA:
                self._kafka_out_of_range(state, message.offset(), message)

    def _collect(self, out: list[Message], limit: int) -> None:
        """Ready messages into ``out``: errors first, then Kafka's, then remote ones round-robin."""
        while self._errors and len(out) < limit:
            out.append(self._errors.popleft())
        while self._kafka_ready and len(out) < limit:
            message = self._kafka_ready.popleft()
            state = self._partitions.get((message.topic(), message.partition()))
            if state is None or state.source is not Source.KAFKA or state.position is None or state.paused:
                continue  # fetched before a switch, a pause or a revoke: it will be fetched again at the position
            if message.error() is not None:  # _PARTITION_EOF (enable.partition.eof)
                if message.offset() >= state.position:
                    out.append(message)
                continue
            offset = message.offset()
            if offset < state.position:
                continue  # already delivered (from remote storage, before the handoff)
            state.position = offset + 1
            self._delivered(state)
            self._count(state, Source.KAFKA, 1)
            out.append(message)
        states = [s for s in self._partitions.values() if s.source is Source.REMOTE and not s.paused]
        for i in range(len(states)):
            if len(out) >= limit:
                break
            state = states[(self._rr + i) % len(states)]
            self._collect_remote(state, out, limit)
        self._rr += 1

    def _collect_remote(self, state: _Partition, out: list[Message], limit: int) -> None:
        start = len(out)
        try:
            self._take_remote(state, out, limit)
        finally:
            if len(out) > start:
                self._delivered(state)

    def _take_remote(self, state: _Partition, out: list[Message], limit: int) -> None:
        while len(out) < limit and state.source is Source.REMOTE:
            if not state.ready and state.position is not None and state.skip_to > state.position:
                state.position = state.skip_to  # past trailing control or aborted records, as Kafka's position
            if not state.ready and not self._advance(state):
                break
            take = min(len(state.ready), limit - len(out))
            if take:
                ready = state.ready
                out.extend(ready.popleft() for _ in range(take))
                state.position = out[-1].offset() + 1
                self._count(state, Source.REMOTE, take)
            if not state.ready:
                self._release_held(state)
            if state.switch_back_at is not None and state.position is not None and state.position >= state.switch_back_at:
                self._to_kafka(state, state.position)  # KAFKA_PREFERRED: caught up with Kafka's log start

    def _advance(self, state: _Partition) -> bool:
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
        if chunk.kind is ChunkKind.DATA:
            self._take_data(state, reader, chunk)
            return True
        reader.release(chunk)
        self._end_of_remote(state, chunk)
        return state.source is Source.REMOTE

    def _release_held(self, state: _Partition) -> None:
        if state.held is not None and state.reader is not None:
            state.reader.release(state.held)
        state.held = None

    def _take_data(self, state: _Partition, reader: RemoteReader, chunk: Chunk) -> None:
        """The chunk's wanted records into ``state.ready``; its budget is held until they are taken."""
        assert chunk.future is not None and state.position is not None
        self._release_held(state)
        try:
            batches = chunk.future.result()
        except OffsetNotRemoteError as err:  # the segment left remote storage after it was planned
            reader.release(chunk)
            self._end_of_remote(state, Chunk(ChunkKind.END if err.past_the_end else ChunkKind.BELOW_START, state.position))
            return
        except BaseException:
            reader.release(chunk)
            self._stop_remote(state)
            raise
        position = state.position
        ready = state.ready
        for batch in batches:
            if batch.last_offset < position:
                continue
            records = batch.records if state.committed_filter is None else state.committed_filter.push(batch)
            if batch.base_offset >= position and state.committed_filter is None:
                ready.extend(records)  # the common case: the whole batch is wanted
            else:
                ready.extend(m for m in records if m.offset() >= position)
            if state.committed_filter is None or state.committed_filter.first_held_offset is None:
                state.skip_to = max(state.skip_to, batch.last_offset + 1)
        state.held = chunk

    def _end_of_remote(self, state: _Partition, chunk: Chunk) -> None:
        assert state.position is not None
        held = state.committed_filter.first_held_offset if state.committed_filter is not None else None
        handoff = held if held is not None else state.position
        if chunk.kind is ChunkKind.END:
            self._to_kafka(state, handoff)
        elif chunk.kind is ChunkKind.BELOW_START:
            if self._mode is Mode.REMOTE_ONLY or handoff < state.kafka_refused_below:
                target = self._reset(state.tp, handoff)
                if target is None:
                    self._stop_remote(state)
                    state.position = None
                else:
                    self._restart(state, target)
            else:
                self._to_kafka(state, handoff)
        elif chunk.kind is ChunkKind.GAP:
            assert chunk.gap is not None
            gap = chunk.gap
            if self._mode is not Mode.REMOTE_ONLY and gap.start_offset >= state.kafka_refused_below and handoff <= gap.end_offset:
                self._to_kafka(state, handoff)  # Kafka may still hold what remote storage lacks
            elif self._config.gap_skip:
                log.warning("%s-%d: skipping offsets %d..%d missing from remote storage (%s)", state.topic, state.partition, gap.start_offset, gap.end_offset, gap.reason)
                state.position = max(state.position, gap.end_offset + 1)
            else:
                self._stop_remote(state)
                raise RemoteGapError(
                    f"{state.topic}-{state.partition}: offsets {gap.start_offset}..{gap.end_offset} are missing from remote storage "
                    f"({gap.reason}); seek past them or set tiered.remote.gap.policy=skip",
                    topic=state.topic, partition=state.partition, start_offset=gap.start_offset, end_offset=gap.end_offset, reason=gap.reason,
                )
        else:  # ERROR: surfaces now; the next poll restarts the reader at the same position
            self._stop_remote(state)
            assert chunk.error is not None
            raise chunk.error

    def _count(self, state: _Partition, source: Source, records: int) -> None:
        counts = self._by_source.setdefault(state.tp, {Source.REMOTE.value: 0, Source.KAFKA.value: 0})
        counts[source.value] += records

    def delivered_by_source(self) -> dict[TP, dict[str, int]]:
        """Records delivered so far per (topic, partition), by source: {"remote": n, "kafka": m}."""
        return {tp: dict(counts) for tp, counts in self._by_source.items()}

    def _delivered(self, state: _Partition) -> None:
        if self._config.auto_offset_store and state.position is not None:
            self._stored[state.tp] = state.position

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

    def _commit_stored(self, asynchronous: bool, only: list[TP] | None = None) -> None:
        pending = {tp: o for tp, o in self._stored.items() if self._committed_stored.get(tp) != o and (only is None or tp in only)}
        if not pending or self._inner is None:
            return
        try:
            self._inner.commit(offsets=[TopicPartition(t, p, o) for (t, p), o in pending.items()], asynchronous=asynchronous)
            if not asynchronous:
                self._committed_stored.update(pending)
        except KafkaException as err:
            log.warning("auto-commit failed: %s", err)

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
            offset = self._earliest(tp)
        elif offset == OFFSET_END:
            offset = self._latest(tp)
        elif offset < 0:
            raise KafkaException(KafkaError(KafkaError._INVALID_ARG, f"cannot seek to offset {offset}"))
        self._restart(state, offset)

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
            if state.source is Source.KAFKA:
                kafka.append(TopicPartition(p.topic, p.partition))
        if kafka and self._inner is not None:
            (self._inner.pause if paused else self._inner.resume)(kafka)
            if not paused:  # messages dropped while paused are fetched again from the position
                for p in kafka:
                    state = self._partitions[(p.topic, p.partition)]
                    if state.position is not None:
                        self._seek_kafka(self._inner, state)

    def get_watermark_offsets(self, partition: TopicPartition, timeout: float | None = None, cached: bool = False) -> tuple[int, int]:
        """(low, high): KAFKA_ONLY Kafka's; REMOTE_ONLY remote storage's (high = last + 1); else low
        is the earliest offset of either tier and high Kafka's high watermark."""
        tp = (partition.topic, partition.partition)
        if self._mode is Mode.KAFKA_ONLY:
            return self._require_kafka("watermarks").get_watermark_offsets(partition, timeout=-1 if timeout is None else timeout, cached=cached)
        remote = self._extent(tp).remote
        if self._mode is Mode.REMOTE_ONLY:
            return (0, 0) if remote is None else (remote.earliest_offset, remote.latest_offset + 1)
        low, high = self._watermarks(tp, 30 if timeout is None else timeout)
        return (low if remote is None else min(low, remote.earliest_offset), high)

    def offsets_for_times(self, partitions: list[TopicPartition], timeout: float | None = None) -> list[TopicPartition]:
        """The first offset whose timestamp is >= each partition's ``offset`` field (ms), over the
        tiers the mode reads; -1 (OFFSET_END) when there is none, as in Kafka."""
        kafka_answers: dict[TP, int] = {}
        if self._mode is not Mode.REMOTE_ONLY:
            for p in self._require_kafka("offsets_for_times").offsets_for_times(partitions, timeout=-1 if timeout is None else timeout):
                kafka_answers[(p.topic, p.partition)] = p.offset
        out = []
        for p in partitions:
            tp = (p.topic, p.partition)
            answers = [kafka_answers[tp]] if tp in kafka_answers and kafka_answers[tp] >= 0 else []
            if self._mode is not Mode.KAFKA_ONLY and self._gateway is not None and self._extent(tp).remote is not None:
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

    def close(self) -> None:
        """Commit stored offsets (with enable.auto.commit), leave the group, stop every thread."""
        if self._closed:
            return
        try:
            if self._inner is not None and self._auto_commit:
                self._commit_stored(asynchronous=False)
        finally:
            readers = [s.reader for s in self._partitions.values() if s.reader is not None]
            for state in self._partitions.values():
                self._stop_remote(state)
            try:
                if self._inner is not None:
                    self._inner.close()  # runs on_revoke, in which the application may still commit
            finally:
                self._closed = True
                for reader in readers:
                    reader.join(self._config.gateway_timeout_s)
                self._pool.shutdown(wait=True, cancel_futures=True)
                if self._gateway is not None:
                    self._gateway.close()

    def __enter__(self) -> TieredConsumer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _require_kafka(self, what: str) -> Consumer:
        self._check_open()
        if self._inner is None:
            raise ConfigError(f"{what} needs Kafka: set bootstrap.servers")
        return self._inner

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("Consumer closed")


def _to_messages(topic: str, partition: int, batch: DecodedBatch) -> int:
    """Replace ``batch.records`` with confluent_kafka Messages; return their approximate size in memory.

    Messages are built with Message's positional constructor (topic, partition, offset, key, value,
    headers, error, timestamp): 4x cheaper than keywords, which matters at 100k+ records/s. They
    are only ever returned to the application; this class never hands them back to librdkafka
    (commit and store_offsets take their topic, partition and offset), which is what the
    constructor's "testing only" warning is about.
    """
    messages = []
    append = messages.append
    size = 0
    for r in batch.records:
        ts = r.timestamp
        key, value = r.key, r.value
        timestamp = _NO_TIMESTAMP if ts is None else (_REMOTE_TS_TYPES.get(r.timestamp_type, TIMESTAMP_CREATE_TIME), ts)
        append(Message(topic, partition, r.offset, key, value, r.headers or None, None, timestamp))
        size += MESSAGE_OVERHEAD + (len(key) if key else 0) + (len(value) if value else 0)
    batch.records = messages
    return size
