"""``TieredConsumer``: confluent_kafka.Consumer's interface over Kafka *and* remote storage.

How it works
------------
A confluent-kafka ``Consumer`` (the "inner" consumer) does everything Kafka does for us: group
membership and rebalances, committed offsets, watermarks, and the fetching of partitions whose
source is Kafka. Partitions whose source is remote storage are *not* in the inner consumer's
assignment, so librdkafka never fetches them (REMOTE_ONLY never fetches data from the brokers);
a ``RemoteReader`` reads them through the gateway's read plans and presigned URLs instead.

Each assigned partition has a ``Handoff`` (``tiered_kafka.consumer.handoff``): a state machine
without I/O that owns the position (the next offset the application gets) and the source, and
applies the modes' rules (``tiered_kafka.modes``, the one place for them). This class is the facade:
it does the I/O the machine's decisions ask for and feeds it what happened.

Offsets: librdkafka runs with ``auto.offset.reset=error`` and ``enable.auto.offset.store=false``;
this class applies the application's ``auto.offset.reset`` (earliest: the earliest offset of the
tiers the mode reads; latest: the end), stores offsets as records are delivered, and commits them
itself (``enable.auto.commit`` every ``auto.commit.interval.ms``, on revoke and on close), for
partitions of either source. Committed offsets are ordinary Kafka group offsets: a plain
confluent-kafka consumer of the same group continues where a TieredConsumer stopped.

Errors, as confluent-kafka surfaces them:
- TOPIC_AUTHORIZATION_FAILED (the gateway's 403): ``poll``/``consume`` return a Message whose
  ``error()`` is ``KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED)`` for the partition, once per
  event; the partition then makes no further progress (nothing from remote storage, and in
  REMOTE_PREFERRED/KAFKA_PREFERRED nothing from Kafka past the data it could not read) until the
  application seeks it, assigns it again or changes the mode.
- auto.offset.reset=error: a Message with ``_AUTO_OFFSET_RESET``, as librdkafka delivers it.
- A gateway or S3 failure that outlives the retries, and a recorded gap under
  ``tiered.remote.gap.policy=error`` (``RemoteGapError``), are raised by ``poll``/``consume``; the
  position does not move, so the next call retries (and meets the same gap until the application
  seeks past it). Records already collected by that call are returned first; the error is raised
  by the next call.
- Commits. The application's ``commit()`` raises ``KafkaException`` as confluent-kafka's does.
  The commits this class makes by itself: the periodic auto-commit is asynchronous and its result
  goes to the ``on_commit`` callback (librdkafka's offset_commit_cb) when one is configured, and a
  failed one is sent again at the next interval. The synchronous commit on revoke (rebalance,
  ``unassign``, ``incremental_unassign``, ``unsubscribe``) and on ``close`` is the application's
  last chance to save its progress, so a failure is never only logged: it raises
  ``KafkaException``, as ``commit(asynchronous=False)`` would, from the call that made it
  (``close``, ``unassign``...; for a rebalance inside ``poll``, from that ``poll`` or the next).
  The revoke or close itself still completes.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition

from tiered_kafka import modes
from tiered_kafka.consumer.assignment import AssignmentMixin, raise_if
from tiered_kafka.consumer.config import TieredConfig, parse_config
from tiered_kafka.consumer.delivery import KAFKA_SERVICE_INTERVAL_S, RemoteDeliveryMixin
from tiered_kafka.consumer.handoff import AuthorizationFailed, Decision, GapError, ReadFrom, Reset, Skip, Wait
from tiered_kafka.consumer.messages import error_message, range_messages
from tiered_kafka.consumer.offsets import OffsetsMixin
from tiered_kafka.consumer.partition import PartitionState
from tiered_kafka.consumer.prefetch import ByteBudget, RemoteReader, data_budget
from tiered_kafka.consumer.tiers import Tiers, is_authorization_failure
from tiered_kafka.errors import ConfigError, RemoteGapError
from tiered_kafka.gateway_client import GatewayClient
from tiered_kafka.modes import Mode, Source
from tiered_kafka.transactions import CommittedFilter

log = logging.getLogger(__name__)
TP = tuple[str, int]
Callback = Callable[[Any, list[TopicPartition]], None]
KAFKA_BATCH = 500  # messages taken from librdkafka per call, whatever the caller asked


class TieredConsumer(AssignmentMixin, OffsetsMixin, RemoteDeliveryMixin):
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
        self._tiers = Tiers(self._inner, self._gateway)
        self._budget = ByteBudget(data_budget(self._config.prefetch_max_bytes, self._config.prefetch_parallelism), self._config.prefetch_parallelism)
        self._pool = ThreadPoolExecutor(self._config.prefetch_parallelism, thread_name_prefix="tiered-fetch")
        self._wake = threading.Event()
        self._partitions: dict[TP, PartitionState] = {}
        self._kafka_ready: deque[Message] = deque()
        self._errors: deque[Message] = deque()
        self._out_of_range: dict[TP, Message] = {}  # OFFSET_OUT_OF_RANGE from librdkafka, handled in order
        self._stored: dict[TP, int] = {}
        self._committed_stored: dict[TP, int] = {}
        self._next_auto_commit = time.monotonic() + self._auto_commit_interval_s
        self._last_kafka_service = 0.0
        self._user_callbacks: dict[str, Callback | None] = {}
        self._in_rebalance = False
        self._assigned_in_callback = False
        self._assignment_calls = 0  # assignment calls made on the inner consumer
        self._inner_paused: set[TP] = set()  # partitions paused in librdkafka (AssignmentMixin._resume_inner)
        self._rr = 0
        self._deferred: Exception | None = None
        self._by_source: dict[TP, dict[str, int]] = {}
        self._fast: PartitionState | None = None  # poll()'s shortcut: the remote partition served last
        self._fast_left = 0
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
        if modes.reads_remote(mode) and self._gateway is None:
            raise ConfigError(f"mode {mode.value} reads remote storage: this consumer has no tiered.gateway.url/tiered.cluster")
        if modes.reads_kafka(mode) and self._inner is None:
            raise ConfigError(f"mode {mode.value} reads from Kafka: this consumer has no bootstrap.servers")
        self._mode = mode
        for state in list(self._partitions.values()):
            state.handoff.mode = mode
            if state.position is not None:
                self._begin(state, state.position)

    # -- the handoff's decisions ------------------------------------------------------------------------
    def _begin(self, state: PartitionState, offset: int, update_assignment: bool = True) -> None:
        """Assign, seek, reset or mode change: read ``state`` from ``offset`` with the source the mode picks there."""
        state.stop_remote()
        self._purge_kafka_ready(state.tp)
        self._out_of_range.pop(state.tp, None)
        try:
            decision: Decision | None = state.handoff.start(offset, lambda: self._tiers.remote_holds(state.tp, offset))
        except Exception as err:
            if not is_authorization_failure(err):
                raise
            self._authorization_failed(state, err, at=offset)
            decision = None
        self._apply(state, decision, update_assignment)

    def _apply(self, state: PartitionState, decision: Decision | None, update_assignment: bool = True) -> None:
        """Do what the handoff decided (module ``tiered_kafka.consumer.handoff``)."""
        if decision is None or isinstance(decision, Wait):
            return
        if isinstance(decision, ReadFrom):
            if decision.source is Source.REMOTE:
                self._to_remote(state, decision.offset, update_assignment)
            else:
                self._to_kafka(state, decision.offset, update_assignment)
        elif isinstance(decision, Skip):
            log.warning("%s-%d: skipping offsets %d..%d, in no tier this consumer reads (%s)", state.topic, state.partition, decision.start, decision.end, decision.reason)
            self._apply(state, decision.read, update_assignment)
        elif isinstance(decision, Reset):
            state.stop_remote()
            try:
                target = self._reset_target(state.tp, decision.offset)
            except Exception as err:
                if not is_authorization_failure(err):
                    raise
                self._authorization_failed(state, err)
                return
            if target is not None:
                self._begin(state, target, update_assignment)
            elif update_assignment:
                self._sync_kafka_assignment()
        elif isinstance(decision, GapError):
            state.stop_remote()
            raise RemoteGapError(
                f"{state.topic}-{state.partition}: offsets {decision.start}..{decision.end} are in no tier this consumer reads "
                f"({decision.reason}); seek past them or set tiered.remote.gap.policy=skip",
                topic=state.topic, partition=state.partition, start_offset=decision.start, end_offset=decision.end, reason=decision.reason,
            )
        else:  # AuthorizationFailed: reported by _authorization_failed, which made it
            raise RuntimeError(f"unexpected decision {decision!r}")

    def _authorization_failed(self, state: PartitionState, error: BaseException, at: int | None = None) -> None:
        """TOPIC_AUTHORIZATION_FAILED for ``state``: its error message (once per event), and it stops."""
        failed = state.handoff.authorization_failed(at)
        state.stop_remote()
        self._purge_kafka_ready(state.tp)
        self._sync_kafka_assignment()
        if isinstance(failed, AuthorizationFailed):
            log.warning("%s-%d: not authorized to read the topic: %s", state.topic, state.partition, error)
            self._errors.append(error_message(state.topic, state.partition, failed.offset if failed.offset >= 0 else None, KafkaError.TOPIC_AUTHORIZATION_FAILED, f"{state.topic}-{state.partition}: {error}"))

    def _to_remote(self, state: PartitionState, offset: int, update_assignment: bool = True) -> None:
        if self._gateway is None:
            raise ConfigError("remote storage needs tiered.gateway.url and tiered.cluster")
        state.stop_remote()
        self._purge_kafka_ready(state.tp)
        state.skip_to = -1
        state.committed_filter = CommittedFilter() if self._config.read_committed else None
        state.reader = RemoteReader(
            self._gateway,
            state.topic,
            state.partition,
            offset,
            budget=self._budget,
            pool=self._pool,
            convert=range_messages,
            plan_max_bytes=self._config.plan_max_bytes,
            tail=modes.tails_remote(self._mode), read_committed=self._config.read_committed,
            poll_interval_s=self._config.remote_poll_interval_s,
            wake=self._wake,
        )
        log.debug("%s-%d: reading remote storage from offset %d", state.topic, state.partition, offset)
        if update_assignment:
            self._sync_kafka_assignment()

    def _to_kafka(self, state: PartitionState, offset: int, update_assignment: bool = True) -> None:
        state.stop_remote()
        self._purge_kafka_ready(state.tp)
        log.debug("%s-%d: reading Kafka from offset %d", state.topic, state.partition, offset)
        if update_assignment:
            inner = self._require_kafka("reading Kafka")
            if any((p.topic, p.partition) == state.tp for p in inner.assignment()):
                self._seek_kafka(inner, state)
            else:
                self._sync_kafka_assignment()  # assigned at the position

    def _seek_kafka(self, inner: Consumer, state: PartitionState) -> None:
        """Move librdkafka's fetch position; a partition that is not fetching yet (librdkafka's
        _STATE error, e.g. still looking up its offset) is assigned again at the position instead."""
        target = TopicPartition(state.topic, state.partition, state.position)
        state.kafka_synced = False
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

    def _handle_out_of_range(self) -> None:
        """OFFSET_OUT_OF_RANGE events from librdkafka, every partition's: one that fails (the
        gateway is down, a gap between the tiers) stays queued and is retried by the next poll,
        and the others are handled all the same; the first failure is raised."""
        first_error: Exception | None = None
        for tp in list(self._out_of_range):
            message = self._out_of_range.pop(tp)
            state = self._partitions.get(tp)
            if state is None or state.handoff.source is not Source.KAFKA or state.position is None:
                continue
            try:
                self._kafka_out_of_range(state)
            except Exception as err:
                self._out_of_range[tp] = message
                first_error = first_error or err
        if first_error is not None:
            raise first_error

    def _kafka_out_of_range(self, state: PartitionState) -> None:
        """OFFSET_OUT_OF_RANGE from Kafka at the position: remote storage, a gap, or auto.offset.reset."""
        position = state.position
        if position is None:
            return
        low, _high = self._tiers.watermarks(state.tp)
        remote = None
        if position < low and modes.reads_remote(self._mode):
            try:
                remote = self._tiers.remote_range(state.tp)
            except Exception as err:
                if not is_authorization_failure(err):
                    raise
                self._authorization_failed(state, err)
                return
        self._apply(state, state.handoff.kafka_out_of_range(low, remote))

    # -- poll and consume ----------------------------------------------------------------------------
    def poll(self, timeout: float | None = None) -> Message | None:
        state = self._fast
        if state is not None and self._fast_left > 0:
            message = self._poll_fast(state)
            if message is not None:
                return message
        messages = self._consume(1, timeout)
        return messages[0] if messages else None

    def consume(self, num_messages: int = 1, timeout: float = -1) -> list[Message]:
        if num_messages < 1:
            raise ValueError("num_messages must be at least 1")
        return self._consume(num_messages, timeout)

    def _consume(self, limit: int, timeout: float | None) -> list[Message]:
        self._check_open()
        self._raise_deferred()
        deadline = math.inf if timeout is None or timeout < 0 else time.monotonic() + timeout
        self._start_pending()
        out: list[Message] = []
        while True:
            now = time.monotonic()
            remote = any(s.reader is not None for s in self._partitions.values())
            if not remote or now - self._last_kafka_service > KAFKA_SERVICE_INTERVAL_S:
                self._serve_kafka(limit, 0)
            try:
                self._handle_out_of_range()
                self._collect(out, limit)
            except Exception as err:
                if not out:
                    raise
                self._deferred = err  # raised by the next call: these messages are delivered first
                return out
            if self._deferred is not None:  # from a rebalance callback
                if not out:
                    self._raise_deferred()
                return out
            if self._auto_commit and now >= self._next_auto_commit:
                self._next_auto_commit = now + self._auto_commit_interval_s
                self._commit_stored(asynchronous=True)
            remaining = deadline - time.monotonic()
            if out or remaining <= 0:
                return out
            if any(s.reader is not None for s in self._partitions.values()):
                self._wake.wait(min(remaining, KAFKA_SERVICE_INTERVAL_S))
                self._wake.clear()
            else:
                self._serve_kafka(limit, min(remaining, 0.2))

    def _raise_deferred(self) -> None:
        if self._deferred is not None:
            error, self._deferred = self._deferred, None
            raise error

    def _serve_kafka(self, limit: int, timeout: float) -> None:
        """Poll the inner consumer: rebalance callbacks, and messages of Kafka-source partitions.
        OFFSET_OUT_OF_RANGE events are queued for ``_handle_out_of_range`` (never lost)."""
        if self._inner is None:
            return
        self._last_kafka_service = time.monotonic()
        want = max(limit, KAFKA_BATCH)
        messages = self._inner.consume(want, timeout)
        for message in messages:
            error = message.error()
            if error is None or error.code() == KafkaError._PARTITION_EOF:
                self._kafka_ready.append(message)
            elif error.code() == KafkaError._AUTO_OFFSET_RESET and message.topic():
                self._out_of_range[(message.topic(), message.partition())] = message
            else:
                self._errors.append(message)
        if len(messages) < want:
            self._pass_kafka_markers()

    def _pass_kafka_markers(self) -> None:
        """Caught up with Kafka: a partition whose fetch ended with control batches (transaction
        markers) or aborted records moves its position past them, as librdkafka's own position
        does, so the committed offset reaches the end (lag 0). Only partitions librdkafka delivered
        at our position since their last seek, with nothing of theirs left to hand out."""
        synced = [s for s in self._partitions.values() if s.kafka_synced and s.handoff.source is Source.KAFKA and not s.paused]
        if not synced or self._inner is None:
            return
        queued = {(m.topic(), m.partition()) for m in self._kafka_ready}
        synced = [s for s in synced if s.tp not in queued]
        if not synced:
            return
        for p in self._inner.position([TopicPartition(s.topic, s.partition) for s in synced]):
            state = self._partitions.get((p.topic, p.partition))
            if state is not None and state.position is not None and p.offset > state.position and state.handoff.source is Source.KAFKA:
                state.handoff.delivered(Source.KAFKA, p.offset)
                self._delivered(state)

    def _collect(self, out: list[Message], limit: int) -> None:
        """Ready messages into ``out``: errors first, then Kafka's, then remote ones round-robin."""
        while self._errors and len(out) < limit:
            out.append(self._errors.popleft())
        partitions = self._partitions
        while self._kafka_ready and len(out) < limit:
            message = self._kafka_ready.popleft()
            state = partitions.get((message.topic(), message.partition()))
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
            self._delivered(state)
            self._count(state, Source.KAFKA, 1)
            out.append(message)
        states = [s for s in partitions.values() if s.handoff.source is Source.REMOTE and not s.paused]
        for i in range(len(states)):
            if len(out) >= limit:
                break
            state = states[(self._rr + i) % len(states)]
            self._collect_remote(state, out, limit)
        self._rr += 1

    def _count(self, state: PartitionState, source: Source, records: int) -> None:
        counts = self._by_source.setdefault(state.tp, {Source.REMOTE.value: 0, Source.KAFKA.value: 0})
        counts[source.value] += records

    def delivered_by_source(self) -> dict[TP, dict[str, int]]:
        """Records delivered so far per (topic, partition), by source: {"remote": n, "kafka": m}."""
        return {tp: dict(counts) for tp, counts in self._by_source.items()}

    def _delivered(self, state: PartitionState) -> None:
        if self._config.auto_offset_store and state.position is not None:
            self._stored[state.tp] = state.position

    def close(self) -> None:
        """Commit stored offsets (with enable.auto.commit), leave the group, stop every thread.
        A failed final commit raises KafkaException once all that is done."""
        if self._closed:
            return
        error: KafkaException | None = None
        try:
            if self._inner is not None and self._auto_commit:
                try:
                    self._commit_stored()
                except KafkaException as err:
                    error = err
        finally:
            readers = [s.reader for s in self._partitions.values() if s.reader is not None]
            for state in self._partitions.values():
                state.stop_remote()
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
        raise_if(error)

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

