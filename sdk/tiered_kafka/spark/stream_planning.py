"""Driver-side logic of a ``tiered-kafka`` stream (no pyspark): offsets, their JSON, rate limits, micro-batch plans.

The reference is Spark's Kafka source for micro-batches (``KafkaMicroBatchStream``, options
validated by ``KafkaSourceProvider``); ``streaming`` wires this module into PySpark's
``DataSourceStreamReader``.

Offsets (the checkpoint's ``offsets/N`` files, Spark's ``KafkaSourceOffset`` JSON,
``JsonUtils.partitionOffsets``): ``{"topic": {"0": 42, "1": 17}}``, per partition the *next*
offset to read; topics and partitions sorted, so equal offsets are equal JSON (the engine
compares them to decide whether a micro-batch has new data).

Where a stream starts (``initial_offsets``, on the first micro-batch of a new checkpoint):
``startingOffsets`` (default ``latest``; ``earliest``, ``latest`` or the offsets JSON with -2 / -1),
``startingTimestamp`` / ``startingOffsetsByTimestamp`` through the gateway's offsets-for-timestamp,
resolved as a batch read resolves them (``planning.resolve_partition``). A partition with no
remote data yet is left out: it starts at earliest once it has some.

Where it may read to (``latest_offsets``; the hybrid modes: Kafka's end, ``hybrid_planning``): remote storage's end per partition, from the gateway's
partition info (``remote.latest_offset + 1``); under ``kafka.isolation.level=read_committed`` the
remote last stable offset (a stream never reads past an undecided transaction, as a Kafka
read_committed consumer stops at the LSO; an unknown LSO is an error, never a guess). New segments
uploaded while the query runs move it; partitions that gain remote data (new partitions of a topic,
new topics matching ``subscribePattern``) join, starting at remote storage's earliest offset
(Kafka's source: "added partition ... starting from earliest"). An end never goes backwards.

Limits (``rate_limit``, Kafka's ``rateLimit``): ``maxOffsetsPerTrigger`` is split over the
partitions proportionally to the offsets each has available; a partition whose share is below 1
gets 1 (Kafka: "don't completely starve small partitions"), others the floor of their share.

Gateway calls (a decision, to keep a micro-batch's fixed cost low): each listing (``topics`` and
every partition's extent) serves one offset decision and the micro-batch planned right after it
(``plan_micro_batch`` takes the extents ``latest_offsets`` listed in the same trigger, then drops
them), and a new query's ``prepareForTriggerAvailableNow`` and ``initialOffset`` share one
listing: one snapshot of remote storage, so an AvailableNow query's start and target agree.
``latest_offsets`` itself always lists anew (a stream must see new segments).

A micro-batch [start, end) (``plan_micro_batch``) is planned exactly as a batch read of those
offsets (``planning.plan_tasks``: plans split by bytes, a batch never split, gaps and retention
under ``failOnDataLoss``). Kafka's data-loss cases of a micro-batch are reported the same way:
a partition in the start but not the end (``failOnDataLoss``: error; else a warning), an end
below its start.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tiered_kafka.errors import ConfigError, RemoteReadError
from tiered_kafka.client.gateway import GatewayClient, PartitionExtent
from tiered_kafka.modes import reads_kafka
from tiered_kafka.spark.options import LATEST, Latest, OptionError, ReadOptions, SpecificOffsets, TopicPartition, parse_options, positive_int_option
from tiered_kafka.spark.planning import OffsetRange, ReadTask, _check_named_topics, _parallel, _warn, plan_tasks, resolve_partition

PartitionOffsets = dict[TopicPartition, int]

DEFAULT_MAX_TRIGGER_DELAY_MS = 15 * 60 * 1000
"""Kafka source's default ``maxTriggerDelay``, 15 minutes."""


class StreamOffsetError(ConfigError, ValueError):
    """A stream offset (checkpoint or engine) is not the Kafka source's ``{"topic": {"0": 42}}`` JSON."""


class StreamDataLossError(RemoteReadError):
    """A micro-batch cannot read what its offsets name (Kafka source's ``reportDataLoss`` with ``failOnDataLoss=true``)."""


@dataclass(frozen=True)
class StreamOptions:
    """A stream's options: the read's (``options.parse_options(streaming=True)``) and the trigger limits."""

    read: ReadOptions
    max_offsets_per_trigger: int | None = None
    min_offsets_per_trigger: int | None = None
    max_trigger_delay_ms: int = DEFAULT_MAX_TRIGGER_DELAY_MS


def parse_stream_options(options: Mapping[str, str]) -> StreamOptions:
    """The stream's options (names case-insensitive), or :class:`OptionError` naming the bad one."""
    opts = {str(k).lower(): ("" if v is None else str(v)) for k, v in options.items()}
    read = parse_options(options, streaming=True)
    max_offsets = positive_int_option(opts, "maxOffsetsPerTrigger")
    min_offsets = positive_int_option(opts, "minOffsetsPerTrigger")
    if max_offsets is not None and min_offsets is not None and min_offsets > max_offsets:
        raise OptionError(f"option 'minOffsetsPerTrigger' ({min_offsets}) must not exceed 'maxOffsetsPerTrigger' ({max_offsets})")
    delay = DEFAULT_MAX_TRIGGER_DELAY_MS
    if opts.get("maxtriggerdelay", "").strip():
        delay = parse_duration_ms(opts["maxtriggerdelay"], "maxTriggerDelay")
    return StreamOptions(read, max_offsets, min_offsets, delay)


def parse_duration_ms(text: str, option: str) -> int:
    """Spark's time strings as the Kafka source takes them: ``500ms``, ``30s``, ``15m``, ``1h``, ``1d`` → ms."""
    match = re.fullmatch(r"\s*([0-9]+)\s*(ms|s|m|min|h|d)?\s*", text.lower())
    if not match:
        raise OptionError(f"option '{option}' must be a duration such as 30s, 15m or 1h, got {text!r}")
    unit = {"ms": 1, "s": 1000, "m": 60_000, "min": 60_000, "h": 3_600_000, "d": 86_400_000}[match.group(2) or "ms"]
    return int(match.group(1)) * unit


# -- offsets JSON ------------------------------------------------------------------------------------


def offsets_to_json(offsets: Mapping[TopicPartition, int]) -> dict[str, dict[str, int]]:
    """``{"topic": {"0": 42}}``, topics and partitions sorted (partitions numerically)."""
    out: dict[str, dict[str, int]] = {}
    for (topic, partition), offset in sorted(offsets.items()):
        out.setdefault(topic, {})[str(partition)] = int(offset)
    return out


def offsets_from_json(data: Any) -> PartitionOffsets:
    """The offsets of a ``{"topic": {"0": 42}}`` JSON value, or :class:`StreamOffsetError` naming the bad entry."""
    if not isinstance(data, Mapping):
        raise StreamOffsetError(f'stream offset must be a JSON object like {{"topic": {{"0": 42}}}}, got {data!r}')
    out: PartitionOffsets = {}
    for topic, partitions in data.items():
        if not isinstance(topic, str) or not isinstance(partitions, Mapping):
            raise StreamOffsetError(f"stream offset: topic {topic!r} must map to an object of partition → offset, got {partitions!r}")
        for key, offset in partitions.items():
            if not (isinstance(key, str) and re.fullmatch(r"[0-9]+", key)) or not isinstance(offset, int) or isinstance(offset, bool) or offset < 0:
                raise StreamOffsetError(f"stream offset: {topic!r} has {key!r}: {offset!r}; expected a partition number and an offset >= 0")
            out[(topic, int(key))] = offset
    return out


# -- limits --------------------------------------------------------------------------------------------


def rate_limit(limit: int, start: Mapping[TopicPartition, int], latest: Mapping[TopicPartition, int], earliest: Mapping[TopicPartition, int]) -> PartitionOffsets:
    """Kafka's ``KafkaMicroBatchStream.rateLimit``: end offsets reading about ``limit`` offsets in all,
    split proportionally to each partition's available offsets. A partition missing from ``start``
    (new) begins at its ``earliest``; one missing from both is read to ``latest``."""
    sizes: dict[TopicPartition, int] = {}
    for tp, end in latest.items():
        begin = start.get(tp, earliest.get(tp))
        if begin is not None and end - begin > 0:
            sizes[tp] = end - begin
    total = sum(sizes.values())
    if total < 1:
        return dict(latest)
    out: PartitionOffsets = {}
    for tp, end in latest.items():
        if tp not in sizes:
            out[tp] = end
            continue
        begin = start.get(tp, earliest.get(tp, 0))
        prorate = limit * (sizes[tp] / total)
        share = math.ceil(prorate) if prorate < 1 else math.floor(prorate)
        out[tp] = min(end, begin + share)
    return out


def new_offsets(start: Mapping[TopicPartition, int], end: Mapping[TopicPartition, int], earliest: Mapping[TopicPartition, int]) -> int:
    """Offsets between ``start`` and ``end`` (new partitions from ``earliest``): Kafka's ``delayBatch`` count."""
    return sum(max(0, e - start.get(tp, earliest.get(tp, e))) for tp, e in end.items())


# -- the stream's planner -------------------------------------------------------------------------------


def stream_end(extent: PartitionExtent, tp: TopicPartition, read_committed: bool) -> int | None:
    """How far a stream may read a partition: remote storage's end, or its LSO under read_committed;
    None when remote storage holds nothing of it."""
    remote = extent.remote
    if remote is None or remote.segment_count == 0:
        return None
    if not read_committed:
        return remote.latest_offset + 1
    if remote.last_stable_offset is None:
        raise RemoteReadError(
            f"{tp[0]}-{tp[1]}: kafka.isolation.level=read_committed streams stop at remote storage's last stable offset, "
            "which is unknown for this partition (no producer snapshot in remote storage); read it read_uncommitted or as a batch"
        )
    return min(remote.last_stable_offset, remote.latest_offset + 1)


class StreamPlanner:
    """A stream's driver side: its offsets and its micro-batches' read tasks, through ``client``."""

    def __init__(self, options: StreamOptions, client: GatewayClient) -> None:
        self.options = options
        self.client = client
        self.warnings: list[str] = []
        self._listing: tuple[dict[str, list[int]], dict[TopicPartition, PartitionExtent]] | None = None  # (topics, extents): the last listing
        self._bounds: Any = None  # the hybrid modes' last HybridContext not yet used (hybrid_planning module doc)

    def extents(self, *, strict: bool, reuse: bool = False) -> dict[TopicPartition, PartitionExtent]:
        """Remote extents of the partitions read (``strict``: unknown topics or partitions are errors),
        from the gateway, or with ``reuse`` from the last listing not yet used by a micro-batch
        (module doc: "Gateway calls")."""
        read = self.options.read
        available, known = self._listing if reuse and self._listing is not None else (self.client.topics(), {})
        if strict:
            _check_named_topics(read, self.client, available)
        partitions = read.topic_partitions(available, strict=strict)
        missing = [tp for tp in partitions if tp not in known]
        known = {**known, **dict(zip(missing, _parallel(lambda tp: self.client.partition(*tp), missing), strict=True))}
        self._listing = (available, known)
        return {tp: known[tp] for tp in partitions}

    def initial_offsets(self) -> PartitionOffsets:
        """Where a new stream starts (module doc)."""
        read = self.options.read
        if reads_kafka(read.mode):
            from tiered_kafka.spark import hybrid_planning  # the hybrid modes only: a REMOTE_ONLY stream's runner skips its imports

            offsets, self._bounds = hybrid_planning.initial_offsets(read, self.client, self.warnings)
            return offsets
        extents = self.extents(strict=True, reuse=True)
        out: PartitionOffsets = {}
        for tp, extent in extents.items():
            end = stream_end(extent, tp, read.read_committed)
            resolved = resolve_partition(read, self.client, tp, extent, self.warnings)
            if end is None or resolved.end == 0:  # nothing remote yet: it will start at earliest
                continue
            latest = isinstance(read.starting, Latest) or (isinstance(read.starting, SpecificOffsets) and read.starting.offsets[tp] == LATEST)
            out[tp] = end if latest else resolved.start
        return out

    def latest_offsets(self, start: Mapping[TopicPartition, int], *, reuse: bool = False) -> tuple[PartitionOffsets, PartitionOffsets]:
        """(how far each partition may be read now, earliest offsets of the partitions new to ``start``);
        ``reuse``: as :meth:`extents`."""
        if reads_kafka(self.options.read.mode):  # Kafka's end: history from remote storage, then live Kafka
            from tiered_kafka.spark import hybrid_planning

            bounds, self._bounds = (self._bounds if reuse else None), None
            latest, earliest, self._bounds = hybrid_planning.latest_offsets(self.options.read, self.client, start, bounds)
            return latest, earliest
        latest: PartitionOffsets = dict(start)
        earliest: PartitionOffsets = {}
        for tp, extent in self.extents(strict=False, reuse=reuse).items():
            end = stream_end(extent, tp, self.options.read.read_committed)
            if end is None:
                continue
            latest[tp] = max(end, start.get(tp, 0))
            if tp not in start and extent.remote is not None:
                earliest[tp] = extent.remote.earliest_offset
        return latest, earliest

    def plan_micro_batch(self, start: Mapping[TopicPartition, int], end: Mapping[TopicPartition, int]) -> list[ReadTask]:
        """The read tasks of offsets [start, end) (module doc); data loss per ``failOnDataLoss``."""
        read = self.options.read
        self.warnings = []  # logged as they come; kept per micro-batch only
        lost = sorted(set(start) - set(end))
        if lost:
            self._data_loss(f"partition(s) {', '.join(f'{t}-{p}' for t, p in lost)} are gone from the stream; some data may have been missed")
        if reads_kafka(read.mode):
            from tiered_kafka.spark import hybrid_planning

            bounds, self._bounds = self._bounds, None  # one learning serves the micro-batch planned right after it, no later one
            return hybrid_planning.plan_micro_batch(read, self.client, start, end, self.warnings, self._data_loss, bounds)
        listed = {} if self._listing is None else self._listing[1]
        self._listing = None  # one listing serves the micro-batch planned right after it, no later one
        missing = [tp for tp in end if tp not in listed]
        extents = {**listed, **dict(zip(missing, _parallel(lambda tp: self.client.partition(*tp), missing), strict=True))}
        ranges: list[OffsetRange] = []
        for tp, last in sorted(end.items()):
            remote = extents[tp].remote
            if remote is None or remote.segment_count == 0:
                if last > start.get(tp, last):
                    self._data_loss(f"{tp[0]}-{tp[1]}: remote storage holds nothing of offsets {start[tp]}..{last - 1} any more")
                continue
            first = start.get(tp, remote.earliest_offset)  # a new partition starts at earliest
            if last < first:
                self._data_loss(f"{tp[0]}-{tp[1]}: offset went back from {first} to {last}; some data may have been missed")
                continue
            estimated = remote.total_bytes * (last - first) // max(1, remote.latest_offset + 1 - remote.earliest_offset)
            ranges.append(OffsetRange(tp[0], tp[1], first, last, estimated, remote.last_stable_offset if read.read_committed else None))
        return plan_tasks(read, self.client, ranges, self.warnings)

    def _data_loss(self, message: str) -> None:
        if self.options.read.fail_on_data_loss:
            raise StreamDataLossError(f"{message} (set failOnDataLoss=false to go on)")
        _warn(self.warnings, f"{message}; going on (failOnDataLoss=false)")

