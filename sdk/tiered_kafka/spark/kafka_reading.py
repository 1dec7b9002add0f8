"""Executor side of a hybrid read: one ``KafkaSlice`` [start, end) read from Kafka, as Arrow batches.

A confluent-kafka ``Consumer`` per slice: ``assign`` at ``start`` (that is the seek), no
subscription and no commit (``enable.auto.commit=false``; librdkafka requires a ``group.id``:
``kafka.group.id``, else ``<groupIdPrefix>-<uuid>`` per query, ``kafka_options``; no group is joined,
and the group errors librdkafka reports, e.g. GROUP_AUTHORIZATION_FAILED from its FindCoordinator,
are ignored), ``auto.offset.reset=error`` so an offset Kafka no longer
holds is an event, not a silent jump, ``isolation.level`` from ``kafka.isolation.level`` (under
read_committed librdkafka leaves aborted records out itself; control records are never delivered).
Rows have the batch source's columns (``arrow.arrow_schema``: headers with ``includeHeaders``, a null
``skipped`` with ``tiered.includeControlRecords``).

Exactness, following Spark's ``KafkaDataConsumer`` (``fetchRecord`` / ``getAvailableOffsetRange``,
Spark 3.x+ ``kafka010``): every offset of [start, end) is delivered once or accounted for.

- A record at an offset past the one expected: if the expected offset is still at or above Kafka's
  log start (``get_watermark_offsets``, cached: the log start the fetch that delivered the record
  reported; Spark's ``availableOffsetRange.earliest <= offset``), the offsets in between are
  *invisible* (compacted away, control records, aborted records): skipped silently. Otherwise
  retention removed [expected, log start) from Kafka since the driver planned the slice: see below.
- OFFSET_OUT_OF_RANGE at the expected offset: below the log start, see below; at or past Kafka's
  end, data loss for the rest of the slice (Spark: "Skip missing records", per ``failOnDataLoss``);
  within [log start, end) (a leader change), a new seek at the same offset (Spark retries there),
  bounded by ``kafkaConsumer.pollTimeoutMs``.
- Below Kafka's log start: the offsets Kafka no longer holds are decided by
  ``modes.kafka_out_of_range`` with remote storage's extent (the gateway named in the task): READ_REMOTE
  reads them from remote storage (``reading.read_task`` on a slice planned like the driver's),
  then the read returns to Kafka at its log start (the slice is Kafka's part of the plan; Kafka and
  remote storage hold the same records above it); GAP / RESET is data loss, reported per
  ``failOnDataLoss`` (true: an error "Cannot fetch records in [a, b)"; false: a warning "Skip
  missing records in [a, b)"), up to the first offset a tier holds.
- An error event of the consumer: fatal errors, and non-retriable errors of the slice's
  partition (TOPIC_AUTHORIZATION_FAILED), fail the task; others (transient
  UNKNOWN_TOPIC_OR_PART while metadata propagates, broker transport errors, group errors) are
  logged at debug and the read goes on, bounded by ``kafkaConsumer.pollTimeoutMs``.
- Kafka's partition end reached (``PARTITION_EOF`` at offset ``eof``) while ``expected < end``:
  offsets [expected, min(eof, end)) are invisible (a transaction's marker or aborted records at the
  end, Spark's ``offsetAfterPoll``) when ``eof`` is past ``expected``.
- A record below the expected offset never becomes a row twice (Spark: IllegalStateException; here
  a ``KafkaReadError`` since it means the consumer moved back).
- No progress for ``kafkaConsumer.pollTimeoutMs``: an error "Cannot fetch record for offset X in N
  milliseconds" (Spark's ``TimeoutException``).
"""

from __future__ import annotations

import dataclasses
import logging
import time
import uuid
from collections.abc import Generator, Iterator
from typing import Any, Protocol

import pyarrow as pa

from tiered_kafka import modes
from tiered_kafka.errors import KafkaDataLossError, KafkaReadError
from tiered_kafka.modes import Action
from tiered_kafka.spark.arrow import HEADERS_TYPE, NO_TIMESTAMP_TYPE, TIMESTAMP_TYPE, arrow_schema
from tiered_kafka.spark.kafka_options import DEFAULT_GROUP_ID_PREFIX, kafka_client
from tiered_kafka.spark.tasks import KafkaSlice, ReadTask

log = logging.getLogger(__name__)

ROWS_PER_BATCH = 10_000
CONSUME_BATCH = 5_000
POLL_S = 0.5
WATERMARK_TIMEOUT_S = 30.0


__all__ = ["KafkaDataLossError", "KafkaReadError", "consumer_config", "read_kafka_slice"]

#: error codes of the slice's partition that are transient (metadata propagating, a leader moving)
TRANSIENT_CODES = frozenset(("UNKNOWN_TOPIC_OR_PART", "_UNKNOWN_PARTITION", "_UNKNOWN_TOPIC", "LEADER_NOT_AVAILABLE", "NOT_LEADER_FOR_PARTITION", "_TRANSPORT"))

def consumer_config(task: ReadTask) -> dict[str, object]:
    """librdkafka settings of a slice's consumer: the user's ``kafka.*`` plus the ones the reader owns."""
    return {
        **dict(task.kafka_config),
        "group.id": task.kafka_group_id or f"{DEFAULT_GROUP_ID_PREFIX}-{uuid.uuid4()}",  # required by librdkafka; never joined
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "auto.offset.reset": "error",
        "enable.partition.eof": True,
        "isolation.level": "read_committed" if task.read_committed else "read_uncommitted",
    }


class _Rows:
    """Columns of the rows read so far (flushed into Arrow batches of ``ROWS_PER_BATCH``)."""

    def __init__(self, piece: KafkaSlice, task: ReadTask) -> None:
        self.piece, self.task = piece, task
        self.clear()

    def clear(self) -> None:
        self.keys: list[bytes | None] = []
        self.values: list[bytes | None] = []
        self.offsets: list[int] = []
        self.timestamps: list[int | None] = []
        self.types: list[int] = []
        self.headers: list[list[dict[str, object]]] = []

    def add(self, message) -> None:  # type: ignore[no-untyped-def]
        kind, ts = message.timestamp()
        self.keys.append(message.key())
        self.values.append(message.value())
        self.offsets.append(message.offset())
        self.timestamps.append(None if kind == 0 else ts * 1000)  # confluent: 0 none, 1 CreateTime, 2 LogAppendTime
        self.types.append(NO_TIMESTAMP_TYPE if kind == 0 else kind - 1)
        if self.task.include_headers:
            self.headers.append([{"key": k, "value": v} for k, v in (message.headers() or [])])

    def batch(self) -> pa.RecordBatch:
        n = len(self.offsets)
        columns = [
            pa.array(self.keys, pa.binary()),
            pa.array(self.values, pa.binary()),
            pa.repeat(pa.scalar(self.piece.topic, pa.string()), n),
            pa.repeat(pa.scalar(self.piece.partition, pa.int32()), n),
            pa.array(self.offsets, pa.int64()),
            pa.array(self.timestamps, pa.int64()).cast(TIMESTAMP_TYPE),
            pa.array(self.types, pa.int32()),
        ]
        if self.task.include_headers:
            columns.append(pa.array(self.headers, HEADERS_TYPE))
        if self.task.include_control_records:
            columns.append(pa.nulls(n, pa.string()))
        self.clear()
        return pa.RecordBatch.from_arrays(columns, schema=arrow_schema(self.task.include_headers, self.task.include_control_records))


class RemoteTier(Protocol):
    """Remote storage as the executor's Kafka reader asks it (:class:`GatewayTier`; a fake in unit tests)."""

    def bounds(self, topic: str, partition: int) -> tuple[int, int] | None:
        """Remote storage's (earliest, latest) offsets of the partition, None when it holds nothing."""

    def read(self, task: ReadTask, topic: str, partition: int, start: int, end: int) -> Iterator[pa.RecordBatch]:
        """The rows of [start, end) from remote storage."""


class GatewayTier:
    """Remote storage through the gateway the task names (``reading.shared_client``)."""

    def __init__(self, task: ReadTask) -> None:
        from tiered_kafka.consumer.tiers import Tiers
        from tiered_kafka.spark.reading import shared_client

        self.client = shared_client(task.gateway_url, task.cluster, task.token)
        self.tiers = Tiers(None, self.client)

    def bounds(self, topic: str, partition: int) -> tuple[int, int] | None:
        return self.tiers.remote_range((topic, partition))

    def read(self, task: ReadTask, topic: str, partition: int, start: int, end: int) -> Iterator[pa.RecordBatch]:
        from tiered_kafka.spark.planning import GET_BYTES, OffsetRange, Slice, collect_units
        from tiered_kafka.spark.reading import read_task

        remote = self.tiers.extent((topic, partition)).remote
        stable_end = remote.last_stable_offset if task.read_committed and remote is not None else None
        offsets = OffsetRange(topic, partition, start, end, 0, stable_end)
        warnings: list[str] = []
        units = collect_units(self.client, offsets, GET_BYTES, task.fail_on_data_loss, warnings)
        piece = Slice(topic, partition, start, end, tuple((u.object_key, u.planned) for u in units), stable_end)
        yield from read_task(dataclasses.replace(task, slices=(piece,), kafka_slices=()), client=self.client)


def read_kafka_slice(task: ReadTask, piece: KafkaSlice, *, consumer: Any = None, remote: RemoteTier | None = None) -> Iterator[pa.RecordBatch]:
    """The rows of [piece.start, piece.end) from Kafka (module doc: every offset once or accounted
    for); ``consumer`` / ``remote``: injected by unit tests (default: a confluent-kafka ``Consumer``,
    :class:`GatewayTier`)."""
    from confluent_kafka import Consumer, KafkaError
    from confluent_kafka import TopicPartition as KafkaTopicPartition

    name = f"{piece.topic}-{piece.partition}"
    consumer = kafka_client(Consumer, consumer_config(task)) if consumer is None else consumer
    reader = _Reader(task, piece, consumer, remote)
    rows = _Rows(piece, task)
    expected = piece.start
    last_error = ""
    try:
        consumer.assign([KafkaTopicPartition(piece.topic, piece.partition, expected)])
        progress_at = time.monotonic()
        while expected < piece.end:
            messages = consumer.consume(CONSUME_BATCH, POLL_S)
            before = expected
            for message in messages:
                error = message.error()
                if error is not None:
                    code = error.code()
                    if code == KafkaError._PARTITION_EOF:
                        eof = message.offset()
                        if eof > expected:  # invisible offsets at the end (markers, aborted records)
                            expected = min(eof, piece.end)
                        continue
                    if code in (KafkaError._AUTO_OFFSET_RESET, KafkaError.OFFSET_OUT_OF_RANGE):
                        if rows.offsets:
                            yield rows.batch()
                        expected = yield from reader.out_of_range(expected)
                        if expected < piece.end:
                            consumer.assign([KafkaTopicPartition(piece.topic, piece.partition, expected)])
                        break
                    last_error = f"{error.name()}: {error.str()}"
                    if _fails(error, message, piece):
                        raise KafkaReadError(f"{name}: Kafka answered {error.name()} at offset {expected}: {error.str()}")
                    log.debug("tiered-kafka: %s: %s (going on, bounded by kafkaConsumer.pollTimeoutMs)", name, last_error)
                    continue
                offset = message.offset()
                if offset < expected:
                    raise KafkaReadError(f"{name}: Kafka returned offset {offset} while offset {expected} was expected (the consumer moved back)")
                if offset > expected:
                    if rows.offsets:
                        yield rows.batch()
                    expected = yield from reader.missing(expected, offset)
                if offset >= piece.end:
                    expected = piece.end
                    break
                rows.add(message)
                expected = offset + 1
                if len(rows.offsets) >= ROWS_PER_BATCH:
                    yield rows.batch()
            if expected > before:
                progress_at = time.monotonic()
            elif (time.monotonic() - progress_at) * 1000 > task.poll_timeout_ms:
                cause = f" (last error: {last_error})" if last_error else ""
                raise KafkaReadError(f"{name}: Cannot fetch record for offset {expected} in {task.poll_timeout_ms} milliseconds (kafkaConsumer.pollTimeoutMs){cause}")
        if rows.offsets:
            yield rows.batch()
    finally:
        consumer.close()


def _fails(error: Any, message: Any, piece: KafkaSlice) -> bool:  # noqa: ANN401
    """Whether a consumer error event fails the task (module doc): fatal, or a non-retriable error
    of the slice's partition; client-wide and group errors never do."""
    if error.fatal():
        return True
    of_partition = message.topic() == piece.topic and message.partition() == piece.partition
    return of_partition and not error.retriable() and error.name() not in TRANSIENT_CODES


class _Reader:
    """What the slice's read does where Kafka cannot go on (module doc)."""

    def __init__(self, task: ReadTask, piece: KafkaSlice, consumer: Any, remote: RemoteTier | None) -> None:  # noqa: ANN401
        self.task, self.piece, self.consumer, self._remote = task, piece, consumer, remote

    @property
    def remote(self) -> RemoteTier:
        if self._remote is None:
            self._remote = GatewayTier(self.task)
        return self._remote

    def missing(self, expected: int, got: int) -> Generator[pa.RecordBatch, None, int]:
        """Kafka delivered ``got`` while ``expected`` was next: invisible offsets, or offsets below
        Kafka's log start (module doc). Returns ``got``."""
        low = self._low(cached=True)
        if low < 0:  # librdkafka has no log start from a fetch yet
            low = self._low(cached=False)
        if low > expected:
            yield from self.below_log_start(expected, min(low, got))
        return got  # the rest (from the log start) is invisible: compacted, control or aborted records

    def out_of_range(self, expected: int) -> Generator[pa.RecordBatch, None, int]:
        """OFFSET_OUT_OF_RANGE at ``expected``: where to go on (module doc)."""
        low, high = self._watermarks(cached=False)
        if expected < low:
            yield from self.below_log_start(expected, min(low, self.piece.end))
            return min(low, self.piece.end)
        if expected >= high:
            self.data_loss(expected, self.piece.end, f"past Kafka's end {high}", "past Kafka's end")
            return self.piece.end
        log.info("tiered-kafka: %s-%d: OFFSET_OUT_OF_RANGE at %d within [%d, %d): seeking there again", self.piece.topic, self.piece.partition, expected, low, high)
        return expected

    def below_log_start(self, start: int, stop: int) -> Generator[pa.RecordBatch, None, None]:
        """Offsets [start, stop) below Kafka's log start ``stop``: remote storage's when
        ``modes.kafka_out_of_range`` says so, else data loss up to the first offset a tier holds."""
        at = start
        while at < stop:
            bounds = self.remote.bounds(self.piece.topic, self.piece.partition)
            action = modes.kafka_out_of_range(self.task.mode, at, stop, bounds)
            if action is Action.READ_REMOTE and bounds is not None:
                upto = min(stop, bounds[1] + 1)
                yield from self.remote.read(self.task, self.piece.topic, self.piece.partition, at, upto)
                at = upto
                continue
            first = bounds[0] if bounds is not None and action is Action.RESET and at < bounds[0] < stop else stop
            self.data_loss(at, first, "no longer in Kafka (retention)", "no longer in Kafka")  # nor in remote storage
            at = first

    def data_loss(self, start: int, end: int, why: str, short: str) -> None:
        """Spark's ``reportDataLoss``: offsets [start, end) are in no tier the mode reads."""
        name = f"{self.piece.topic}-{self.piece.partition}"
        if self.task.fail_on_data_loss:
            raise KafkaDataLossError(f"{name}: Cannot fetch records in [{start}, {end}): they are {why} (set failOnDataLoss=false to skip them)")
        log.warning("tiered-kafka: %s: Skip missing records in [%d, %d) (%s; failOnDataLoss=false)", name, start, end, short)

    def _low(self, *, cached: bool) -> int:
        return self._watermarks(cached=cached)[0]

    def _watermarks(self, *, cached: bool) -> tuple[int, int]:
        from confluent_kafka import TopicPartition as KafkaTopicPartition

        tp = KafkaTopicPartition(self.piece.topic, self.piece.partition)
        if cached:
            return self.consumer.get_watermark_offsets(tp, cached=True)
        return self.consumer.get_watermark_offsets(tp, timeout=WATERMARK_TIMEOUT_S, cached=False)
