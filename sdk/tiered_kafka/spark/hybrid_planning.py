"""Planning of hybrid batch reads and micro-batches (``tiered.mode`` REMOTE_PREFERRED / KAFKA_PREFERRED).

The rules are the ``hybrid`` module's (which tier serves which offsets, both tiers' bounds); this
module applies them to a batch read (:func:`plan_hybrid_source`, called by ``planning.plan_source``)
and to a stream (:func:`initial_offsets`, :func:`latest_offsets`, :func:`plan_micro_batch`, called by
``stream_planning.StreamPlanner`` in the hybrid modes). Resolution of ``startingOffsets`` /
``endingOffsets`` follows Spark's Kafka source with both tiers' bounds: ``earliest`` the first offset
a tier holds, ``latest`` Kafka's end (high watermark, or LSO under read_committed), -2 / -1 likewise,
a specific offset below ``earliest`` is data loss (``failOnDataLoss``), past ``latest`` an error.

Decisions:
- read_committed: remote storage's part ends at its last stable offset (remote records past it are
  held behind a transaction whose marker remote storage does not have yet), so the handoff to Kafka
  is at the first held offset, as ``Handoff`` hands over at ``max(position, held)``; Kafka's own
  read_committed decides from there (``hybrid.split``'s ``stable``). Kafka refusing that offset
  (below its log start) is decided with remote storage's real end (``modes.kafka_out_of_range``):
  remote storage reads on, never a "between tiers" gap for offsets it holds. A partition whose
  remote last stable offset is unknown cannot place that handoff: an error naming it, raised only
  when a remote piece ends at remote storage's end and Kafka reads on from there.
- Filter pushdown is not applied in the hybrid modes (``datasource``): Spark applies every filter.
- A recorded gap inside a remote piece (``planning.collect_units``'s ``on_gap``): ``hybrid.gap_pieces``
  asks ``Handoff.gap``: Kafka reads it when it may hold it; when Kafka's log start is inside the gap,
  the part below it is lost (``failOnDataLoss``) and Kafka reads the rest; a gap wholly below
  Kafka's log start is REMOTE_ONLY's (``failOnDataLoss``).
- A timestamp resolves to the smaller of both tiers' offsets for it (remote retention may be
  shorter than Kafka's: remote storage's answer is then its earliest, though Kafka holds earlier
  offsets with such timestamps).
- A stream's ``latest`` is Kafka's end as reported, even below the stream's position (a high
  watermark that went back after an unclean leader election): the micro-batch reports it as data
  loss (``failOnDataLoss``), as Spark's ``KafkaMicroBatchStream`` does.
- One ``KafkaView`` (one ``AdminClient``) per Kafka configuration serves every plan of the process
  while plans keep coming (:func:`kafka_view`); one unused for ``KAFKA_VIEW_IDLE_S`` is let go
  (``idle_cache``: a process-long cache kept a librdkafka handle reconnecting to a cluster gone
  away until the interpreter exited). The bounds :func:`initial_offsets` and :func:`latest_offsets` learned (the
  ``HybridContext`` they return) serve the next call of the same stream that is handed them (the
  ``StreamPlanner`` keeps it: an AvailableNow start's ``latestOffset``, the micro-batch planned right
  after a ``latestOffset``, when every partition is known), no later one, as the REMOTE_ONLY stream
  reuses its listing: the executor's reader copes with Kafka's log start moving meanwhile
  (``kafka_reading``: remote storage's, or data loss).
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence

from tiered_kafka.errors import RemoteReadError
from tiered_kafka.spark.idle_cache import IdleCache
from tiered_kafka.client.gateway import GatewayClient, PartitionExtent
from tiered_kafka.modes import Source
from tiered_kafka.spark.hybrid import KafkaBounds, KafkaView, Piece, earliest_of, gap_pieces, gateway_extent, kafka_slices, lost_piece, record_bytes, remote_bounds, resolve_start, split
from tiered_kafka.spark.options import (
    EARLIEST,
    LATEST,
    Earliest,
    GlobalTimestamp,
    Latest,
    OffsetSpec,
    OptionError,
    ReadOptions,
    SpecificOffsets,
    TopicPartition,
)
from tiered_kafka.spark.planning import KafkaSlice, OffsetRange, ReadTask, SourcePlan, _check_named_topics, _parallel, plan_tasks


KAFKA_VIEW_IDLE_S = 30.0  # longer than a stream's usual trigger interval: its plans reuse one view

_views: IdleCache[tuple[tuple[tuple[str, str], ...], bool], KafkaView] = IdleCache(
    lambda key: KafkaView(*key), idle_s=KAFKA_VIEW_IDLE_S, name="kafka-views"
)


def kafka_view(options: ReadOptions) -> KafkaView:
    """The process's ``KafkaView`` for ``options``' Kafka settings (created on first use, let go
    after ``KAFKA_VIEW_IDLE_S`` unused: module doc)."""
    return _views.get((options.kafka_config, options.read_committed))


def release_kafka_views() -> None:
    """Let go of every ``KafkaView`` now (their AdminClients are freed once no plan holds them):
    for a process about to stop the clusters it planned against, e.g. a test's teardown."""
    _views.clear()


class HybridContext:
    """Both tiers' bounds of the partitions read, learned once per plan (``hybrid`` module doc)."""

    def __init__(self, options: ReadOptions, gateway: GatewayClient, *, strict: bool = True, partitions: Sequence[TopicPartition] | None = None) -> None:
        self.options = options
        self.gateway = gateway
        self.view = kafka_view(options)
        remote_topics = gateway.topics()
        if partitions is None:
            if strict:  # a named topic the token may not read is an error, never "remote holds nothing" (modes)
                _check_named_topics(options, gateway, remote_topics)
            kafka_topics = self.view.partitions()
            available = {t: sorted(set(remote_topics.get(t, ())) | set(kafka_topics.get(t, ()))) for t in set(remote_topics) | set(kafka_topics)}
            partitions = options.topic_partitions(available, strict=strict, both_tiers=True)
        self.partitions = list(partitions)
        extents = _parallel(lambda tp: gateway_extent(gateway, tp, remote_topics), self.partitions)
        self.extents: dict[TopicPartition, PartitionExtent | None] = dict(zip(self.partitions, extents, strict=True))
        self.kafka: dict[TopicPartition, KafkaBounds] = self.view.bounds(self.partitions)

    def remote(self, tp: TopicPartition) -> tuple[int, int] | None:
        """Remote storage's (earliest, end exclusive), None when it holds nothing."""
        return remote_bounds(self.extents.get(tp))

    def stable(self, tp: TopicPartition) -> int | None:
        """Under read_committed, remote storage's last stable offset when below its end (the split's
        held point); None otherwise, and when unknown (:meth:`check_stable_known`)."""
        bounds = self.remote(tp)
        if bounds is None or not self.options.read_committed:
            return None
        lso = self.extents[tp].remote.last_stable_offset  # type: ignore[union-attr]
        return lso if lso is not None and lso < bounds[1] else None

    def check_stable_known(self, tp: TopicPartition, piece: Piece, end: int) -> None:
        """A remote piece ending at remote storage's end with Kafka reading on after it needs, under
        read_committed, remote storage's last stable offset (module doc): an error when unknown."""
        bounds = self.remote(tp)
        if not self.options.read_committed or bounds is None or piece.end != bounds[1] or piece.end >= end:
            return
        if self.extents[tp].remote.last_stable_offset is None:  # type: ignore[union-attr]
            raise RemoteReadError(
                f"{tp[0]}-{tp[1]}: kafka.isolation.level=read_committed with tiered.mode={self.options.mode.value} hands over to Kafka at remote "
                "storage's last stable offset, which is unknown for this partition (no producer snapshot in remote storage)"
            )

    def earliest(self, tp: TopicPartition) -> int:
        return earliest_of(self.options.mode, self.remote(tp), self.kafka[tp])

    def resolve(self, spec: OffsetSpec, tp: TopicPartition, warnings: list[str], *, starting: bool) -> int:
        """One end of a partition's read against both tiers' bounds (module doc)."""
        earliest, latest = self.earliest(tp), self.kafka[tp].end
        if isinstance(spec, Earliest):
            return earliest
        if isinstance(spec, Latest):
            return latest
        if isinstance(spec, SpecificOffsets):
            offset = spec.offsets[tp]
            return earliest if offset == EARLIEST else latest if offset == LATEST else resolve_start(self.options, tp, offset, earliest, latest, warnings)
        timestamp = spec.timestamp_ms if isinstance(spec, GlobalTimestamp) else spec.timestamps[tp]
        remote_found = self.gateway.offset_for_timestamp(tp[0], tp[1], timestamp) if self.remote(tp) is not None else None
        kafka_found = self.view.offsets_for_timestamp({tp: timestamp})[tp]
        found = min((o for o in (remote_found, kafka_found) if o is not None), default=None)  # module doc
        if found is not None:
            return min(found, latest)
        if starting and self.options.no_match_start == "error":
            raise OptionError(
                f"option '{spec.option}': no record of {tp[0]}-{tp[1]} in remote storage or Kafka has a timestamp >= {timestamp} "
                "(set startingOffsetsByTimestampStrategy=latest to read nothing from such partitions)"
            )
        return latest

    def offset_range(self, tp: TopicPartition, start: int, end: int) -> OffsetRange:
        return OffsetRange(tp[0], tp[1], start, end, record_bytes(self.extents.get(tp)) * max(0, end - start))


def plan_hybrid_source(options: ReadOptions, gateway: GatewayClient, warnings: list[str]) -> SourcePlan:
    """A batch read in a hybrid mode: offsets resolved against both tiers, then :func:`hybrid_tasks`."""
    context = HybridContext(options, gateway)
    offsets = []
    for tp in context.partitions:
        start = context.resolve(options.starting, tp, warnings, starting=True)
        end = context.resolve(options.ending, tp, warnings, starting=False)
        if start > end:
            raise OptionError(f"{tp[0]}-{tp[1]}: the starting offset {start} is after the ending offset {end}")
        offsets.append(context.offset_range(tp, start, end))
    return SourcePlan(offsets, hybrid_tasks(context, offsets, warnings), warnings)


def hybrid_tasks(context: HybridContext, offsets: Sequence[OffsetRange], warnings: list[str]) -> list[ReadTask]:
    """Each partition's [start, end) split by ``hybrid.split``: remote pieces planned as REMOTE_ONLY
    plans them (``planning.plan_tasks``), Kafka pieces one task per ``KafkaSlice``, lost pieces
    under ``failOnDataLoss``."""
    options = context.options
    remote_ranges: list[OffsetRange] = []
    slices: list[KafkaSlice] = []
    for r in offsets:
        tp = (r.topic, r.partition)
        if r.count == 0:
            continue
        for piece in split(options.mode, r.start, r.end, context.remote(tp), context.kafka[tp].log_start, context.stable(tp)):
            if piece.source is None:
                lost_piece(options, tp, piece, warnings)
            elif piece.source is Source.REMOTE:
                context.check_stable_known(tp, piece, r.end)
                remote = context.extents[tp].remote  # type: ignore[union-attr]
                stable_end = remote.last_stable_offset if options.read_committed and remote is not None else None
                remote_ranges.append(OffsetRange(r.topic, r.partition, piece.start, piece.end, context.offset_range(tp, piece.start, piece.end).estimated_bytes, stable_end))
            else:
                slices.extend(kafka_slices(r.topic, r.partition, piece.start, piece.end))
    lock = threading.Lock()

    def on_gap(r: OffsetRange, first: int, last: int, reason: str) -> bool:
        """A recorded gap in a remote piece: Kafka reads what it still holds (``hybrid.gap_pieces``: ``Handoff.gap``)."""
        tp = (r.topic, r.partition)
        pieces = gap_pieces(options.mode, first, last, r.end, context.kafka[tp].log_start, reason)
        if pieces is None:
            return False
        for piece in pieces:
            if piece.source is None:
                lost_piece(options, tp, piece, warnings)
            else:
                with lock:
                    slices.extend(kafka_slices(r.topic, r.partition, piece.start, piece.end))
        return True

    tasks = plan_tasks(options, context.gateway, remote_ranges, warnings, on_gap)
    tasks.extend(ReadTask.of(options, len(tasks) + i, (), (ks,)) for i, ks in enumerate(slices))
    return tasks


# -- streams ----------------------------------------------------------------------------------------


def initial_offsets(options: ReadOptions, gateway: GatewayClient, warnings: list[str]) -> tuple[dict[TopicPartition, int], HybridContext]:
    """Where a new hybrid stream starts: ``startingOffsets`` (default latest) against both tiers;
    with the bounds learned (module doc: they may serve the next ``latest_offsets``)."""
    context = HybridContext(options, gateway)
    return {tp: context.resolve(options.starting, tp, warnings, starting=True) for tp in context.partitions}, context


def latest_offsets(
    options: ReadOptions, gateway: GatewayClient, start: Mapping[TopicPartition, int], context: HybridContext | None = None
) -> tuple[dict[TopicPartition, int], dict[TopicPartition, int], HybridContext]:
    """(Kafka's end per partition, as reported: below ``start`` after a high watermark went back,
    which the micro-batch reports as data loss; earliest offsets of partitions new to ``start``;
    the bounds learned, for the micro-batch planned next). ``context``: bounds just learned to use
    instead of asking both tiers again."""
    if context is None:
        context = HybridContext(options, gateway, strict=False)
    latest = dict(start)
    earliest = {}
    for tp in context.partitions:
        latest[tp] = context.kafka[tp].end
        if tp not in start:
            earliest[tp] = context.earliest(tp)
    return latest, earliest, context


def plan_micro_batch(  # type: ignore[no-untyped-def]
    options: ReadOptions,
    gateway: GatewayClient,
    start: Mapping[TopicPartition, int],
    end: Mapping[TopicPartition, int],
    warnings: list[str],
    data_loss,
    context: HybridContext | None = None,
) -> list[ReadTask]:
    """The tasks of a hybrid micro-batch [start, end); ``data_loss(message)`` applies ``failOnDataLoss``;
    ``context``: the bounds ``latest_offsets`` just learned (used when they know every partition)."""
    if context is None or not set(end) <= set(context.partitions):
        context = HybridContext(options, gateway, partitions=sorted(end))
    ranges = []
    for tp, last in sorted(end.items()):
        first = start.get(tp, context.earliest(tp))  # a new partition starts at earliest
        if last < first:
            data_loss(f"{tp[0]}-{tp[1]}: offset went back from {first} to {last}; some data may have been missed")
            continue
        ranges.append(context.offset_range(tp, first, last))
    return hybrid_tasks(context, ranges, warnings)
