"""Driver-side planning of a ``tiered-kafka`` read: offsets resolved, read plans asked, Spark
partitions balanced by bytes (no pyspark here; the gateway is reached through the SDK).

Rules:

1. **Partitions and offsets.** The partitions read come from the options (``subscribe``,
   ``subscribePattern``, ``assign``) checked against the gateway's topics. For each, starting and
   ending offsets are resolved against remote storage only (``options`` module doc): ``earliest``
   is remote storage's first offset E, ``latest`` one past its last offset L. A starting offset
   below E is data loss: an ``OffsetNotRemoteError`` unless ``failOnDataLoss=false`` (then a
   warning and E). An offset past L + 1 is not remote (yet): always an error. Ending offsets are
   exclusive. A start after the end is an ``OptionError``. Filters Spark pushed then narrow them
   (``pushdown`` module doc): partitions they exclude are not resolved, each [start, end) is
   intersected with the offset bounds, starts no earlier than the first offset at or after the
   lower timestamp bound, and is cut into pieces that skip the segments no record of which is
   stamped within the timestamp bounds (``pushdown`` rules 4-6; ``make_tasks`` gives each piece
   its own slice).
2. **Number of Spark partitions** N = max(``minPartitions``, Kafka partitions with data to read,
   ceil(bytes / ``maxBytesPerPartition``)), capped by the number of planned ranges (a batch is
   never split, so a read of fewer batches than ``minPartitions`` gets fewer partitions).
3. **Plans.** Each partition's offsets are planned through the gateway's plan endpoint from the
   starting offset until the ending one (``next_offset`` chains the plans), in parallel over
   partitions. Plans are asked with ``max_bytes`` = bytes / N / 4, between 16 KiB and
   ``GET_BYTES`` (a task's memory budget ``TASK_MEMORY_BYTES`` over its GETs in flight: ``PREFETCH``
   fetched while one is selected, each holding its bytes and then its Arrow columns), so ranges are
   small enough for N balanced partitions and each is one GET within the task's budget (#15: a plan
   asks ``range_bytes`` = ``max_bytes``, so it comes in as few ranges, hence GETs, as the batches
   allow); the gateway cuts them on batch boundaries.
   A ``plan.gap`` inside the read is a ``RemoteGapError`` unless ``failOnDataLoss=false`` (a
   warning; the read goes on after the gap); a plan starting after the asked offset without one is
   compaction, passed silently as Spark's Kafka source does (``gateway_client.read_gap``).
   Remote storage ending before the ending offset (e.g. retention meanwhile) is an error.
4. **Balancing.** The ranges, ordered by (topic, partition, offset), are cut into N contiguous
   runs whose byte sizes are as equal as the range boundaries allow (each cut at the range
   boundary nearest to k × bytes / N). A run may span two Kafka partitions; it is then read as
   one *slice* per partition. Ranges are batch-aligned (read-plan contract), so no batch is split.
   Decision (read_committed): a partition whose remote last stable offset is unknown
   (``OffsetRange.stable_end`` None) is never cut: all its ranges go to one task, read as one slice,
   so one ``CommittedFilter`` sees the partition in order and its read stops at the first
   undecided offset (``reading`` module doc). Cut into slices, each slice's own filter would drop
   the rest of its slice after a transaction open at the end of remote data while the next slice
   delivered its own records: a hole a Kafka read_committed consumer never produces.
5. **Exact offsets.** Every slice carries its partition's [start, end): the first range may start
   at the batch holding ``start`` and the last may end after ``end``; the executor drops records
   outside [start, end). Ranges are disjoint, so every offset is read exactly once.
"""

from __future__ import annotations

import bisect
import dataclasses
import itertools
import logging
import math
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from tiered_kafka.errors import GatewayRequestError, OffsetNotRemoteError, RemoteGapError, RemoteReadError, TopicAuthorizationError
from tiered_kafka.client.gateway import GatewayClient, PartitionExtent, read_gap
from tiered_kafka.spark.options import (
    EARLIEST,
    Assign,
    Subscribe,
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
from tiered_kafka.modes import reads_kafka
from tiered_kafka.spark.pushdown import Pushdown, narrow_pieces
from tiered_kafka.spark.tasks import GapHandler, KafkaSlice, OffsetRange, RangeUnit, ReadTask, Slice, SourcePlan  # noqa: F401 (re-exported: planning's units)

log = logging.getLogger(__name__)
T = TypeVar("T")

MIN_PLAN_BYTES = 16 * 1024
TASK_MEMORY_BYTES = 128 * 1024 * 1024
"""What one Spark task's reads hold at most: GETs in flight, their bytes and their Arrow columns."""
PREFETCH = 2
"""GETs a task fetches while it selects the rows of another."""
GET_BYTES = TASK_MEMORY_BYTES // (2 * (PREFETCH + 1))
"""The largest GET a task asks for (a larger batch alone is still read whole)."""
MAX_PLAN_BYTES = GET_BYTES
RANGES_PER_PARTITION = 4
PLANNING_THREADS = 8
def client_for(options: ReadOptions) -> GatewayClient:
    return GatewayClient(options.gateway_url, options.cluster, token=options.token)


def plan_source(options: ReadOptions, client: GatewayClient | None = None, pushed: Pushdown | None = None) -> SourcePlan:
    """Plan the whole read (rules 1-4 of the module doc), narrowed by the filters Spark pushed
    (``pushdown`` module doc: partitions not kept are not resolved; each [start, end) narrowed)."""
    own = client is None
    gateway = client_for(options) if client is None else client
    try:
        warnings: list[str] = []
        if reads_kafka(options.mode):
            from tiered_kafka.spark.hybrid_planning import plan_hybrid_source

            return plan_hybrid_source(options, gateway, warnings)
        offsets = resolve_offsets(options, gateway, warnings, pushed)
        if pushed is not None and not pushed.is_noop:
            offsets = [piece for pieces in _parallel(lambda r: _narrowed(r, pushed, gateway, options), offsets) for piece in pieces]
        return SourcePlan(offsets, plan_tasks(options, gateway, offsets, warnings), warnings)
    finally:
        if own:
            gateway.close()


def plan_tasks(options: ReadOptions, gateway: GatewayClient, offsets: Sequence[OffsetRange], warnings: list[str], on_gap: GapHandler | None = None) -> list[ReadTask]:
    """Rules 2-4 for resolved offsets: plans asked, ranges balanced into tasks (also a stream's micro-batch);
    ``on_gap``: ``collect_units``'."""
    to_read = [r for r in offsets if r.count > 0]
    estimated = sum(r.estimated_bytes for r in to_read)
    n = partition_count(options, len(to_read), estimated)
    max_bytes = plan_bytes(estimated, n)
    unit_lists = _parallel(lambda r: collect_units(gateway, r, max_bytes, options.fail_on_data_loss, warnings, on_gap), to_read)
    units = [u for us in unit_lists for u in us]
    n = min(partition_count(options, len(to_read), sum(u.size for u in units)), len(units))
    return make_tasks(units, n, options)


# -- rule 1: offsets ------------------------------------------------------------------------------


def resolve_offsets(options: ReadOptions, client: GatewayClient, warnings: list[str] | None = None, pushed: Pushdown | None = None) -> list[OffsetRange]:
    """[start, end) for every partition read (those ``pushed`` keeps), in (topic, partition) order."""
    sink = [] if warnings is None else warnings
    available = client.topics()
    _check_named_topics(options, client, available)
    partitions = [tp for tp in options.topic_partitions(available) if pushed is None or pushed.keeps(*tp)]
    return _parallel(lambda tp: resolve_partition(options, client, tp, client.partition(*tp), sink), partitions)


def _check_named_topics(options: ReadOptions, client: GatewayClient, available: dict[str, list[int]]) -> None:
    """A topic named by ``subscribe`` or ``assign`` but missing from the gateway's listing may be one the
    token may not read (listings show only readable topics): ask for it, so that the gateway's 403
    raises TopicAuthorizationError (TOPIC_AUTHORIZATION_FAILED) instead of an "unknown topic"."""
    selection = options.selection
    named = selection.topics if isinstance(selection, Subscribe) else tuple(selection.partitions) if isinstance(selection, Assign) else ()
    for topic in named:
        if topic in available:
            continue
        try:
            client.partition(topic, 0)
        except TopicAuthorizationError:
            raise
        except GatewayRequestError as err:
            if err.status != 404:
                raise


def resolve_partition(options: ReadOptions, client: GatewayClient, tp: TopicPartition, extent: PartitionExtent, warnings: list[str]) -> OffsetRange:
    topic, partition = tp
    remote = extent.remote
    if remote is None or remote.segment_count == 0:
        earliest, end_of_remote, total = None, None, 0
    else:
        earliest, end_of_remote, total = remote.earliest_offset, remote.latest_offset + 1, remote.total_bytes
    start = _resolve(options, client, tp, options.starting, earliest, end_of_remote, warnings, starting=True)
    end = _resolve(options, client, tp, options.ending, earliest, end_of_remote, warnings, starting=False)
    if start is None or end is None or earliest is None or end_of_remote is None:
        return OffsetRange(topic, partition, 0, 0, 0)
    if start > end:
        raise OptionError(
            f"{topic}-{partition}: the starting offset {start} ({_describe(options.starting)}) is after the ending offset "
            f"{end} ({_describe(options.ending)})"
        )
    estimated = total * (end - start) // max(1, end_of_remote - earliest)
    stable_end = remote.last_stable_offset if options.read_committed else None
    return OffsetRange(topic, partition, start, end, estimated, stable_end)


def _resolve(
    options: ReadOptions,
    client: GatewayClient,
    tp: TopicPartition,
    spec: OffsetSpec,
    earliest: int | None,
    end_of_remote: int | None,
    warnings: list[str],
    *,
    starting: bool,
) -> int | None:
    """One end of a partition's read; None when remote storage holds nothing of the partition."""
    name = f"{tp[0]}-{tp[1]}"
    if isinstance(spec, Earliest | Latest):
        offset = EARLIEST if isinstance(spec, Earliest) else LATEST
    elif isinstance(spec, SpecificOffsets):
        offset = spec.offsets[tp]
    else:
        timestamp = spec.timestamp_ms if isinstance(spec, GlobalTimestamp) else spec.timestamps[tp]
        found = None if earliest is None else client.offset_for_timestamp(tp[0], tp[1], timestamp)
        if found is not None:
            return found
        if starting and options.no_match_start == "error" and earliest is not None:
            raise OptionError(
                f"option '{spec.option}': no record of {name} in remote storage has a timestamp >= {timestamp} "
                "(set startingOffsetsByTimestampStrategy=latest to read nothing from such partitions)"
            )
        offset = LATEST
    if earliest is None or end_of_remote is None:  # nothing of the partition is remote (any more)
        if offset >= 0:
            message = f"option '{'startingOffsets' if starting else 'endingOffsets'}': offset {offset} of {name} is not in remote storage, which holds nothing of {name}"
            if options.fail_on_data_loss:
                raise OffsetNotRemoteError(f"{message} (set failOnDataLoss=false to skip it)", offset=offset, earliest=None, latest=None)
            _warn(warnings, f"{message}; skipped (failOnDataLoss=false)")
        return None
    if offset == EARLIEST:
        return earliest
    if offset == LATEST:
        return end_of_remote
    option = "startingOffsets" if starting else "endingOffsets"
    if offset > end_of_remote:
        raise OffsetNotRemoteError(
            f"option '{option}': offset {offset} of {name} is past remote storage's end (its last offset is {end_of_remote - 1}); "
            "the tiered-kafka source reads remote storage only",
            offset=offset,
            earliest=earliest,
            latest=end_of_remote - 1,
        )
    if offset < earliest:
        message = f"option '{option}': offset {offset} of {name} is below remote storage's earliest offset {earliest}: offsets {offset}..{earliest - 1} are lost"
        if options.fail_on_data_loss:
            raise OffsetNotRemoteError(f"{message} (set failOnDataLoss=false to read what remains)", offset=offset, earliest=earliest, latest=end_of_remote - 1)
        _warn(warnings, f"{message}; reading from {earliest} (failOnDataLoss=false)")
        return earliest
    return offset


def _describe(spec: OffsetSpec) -> str:
    return "earliest" if isinstance(spec, Earliest) else "latest" if isinstance(spec, Latest) else f"option '{spec.option}'"


def _narrowed(offsets: OffsetRange, pushed: Pushdown, client: GatewayClient, options: ReadOptions) -> list[OffsetRange]:
    """``offsets`` under the pushed filters: the pieces ``pushdown.narrow_pieces`` keeps (timestamps skip
    segments, mid-partition too), each with its share of the estimated bytes. Under read_committed
    with an unknown stable end, one piece (the partition is read as one slice: rule 4)."""
    whole = options.read_committed and offsets.stable_end is None
    pieces = narrow_pieces(pushed, client, offsets.topic, offsets.partition, offsets.start, offsets.end, ordered=options.timestamps_ordered, whole=whole)
    if pieces == [(offsets.start, offsets.end)]:
        return [offsets]
    if not pieces:  # nothing matches: an empty range keeps the partition in the plan's offsets
        return [dataclasses.replace(offsets, start=offsets.start, end=offsets.start, estimated_bytes=0)]
    return [
        dataclasses.replace(offsets, start=start, end=end, estimated_bytes=offsets.estimated_bytes * (end - start) // offsets.count)
        for start, end in pieces
    ]


# -- rule 2: how many Spark partitions -------------------------------------------------------------


def partition_count(options: ReadOptions, kafka_partitions: int, total_bytes: int) -> int:
    """N = max(minPartitions, Kafka partitions read, ceil(bytes / maxBytesPerPartition)); 0 when nothing is read."""
    if kafka_partitions == 0:
        return 0
    return max(options.min_partitions or 0, kafka_partitions, math.ceil(total_bytes / options.max_bytes_per_partition))


def plan_bytes(total_bytes: int, partitions: int) -> int:
    """``max_bytes`` to ask plans with: a quarter of a balanced partition, within [16 KiB, ``GET_BYTES``]."""
    if partitions <= 0:
        return MAX_PLAN_BYTES
    return int(min(MAX_PLAN_BYTES, max(MIN_PLAN_BYTES, total_bytes // (partitions * RANGES_PER_PARTITION))))


# -- rule 3: plans -------------------------------------------------------------------------------------


def collect_units(
    client: GatewayClient, offsets: OffsetRange, max_bytes: int, fail_on_data_loss: bool, warnings: list[str], on_gap: GapHandler | None = None
) -> list[RangeUnit]:
    """The planned ranges covering [offsets.start, offsets.end), from successive plans. ``on_gap(offsets,
    first, last, reason)`` True: another tier reads the gap ``first..last`` (hybrid modes), not an
    error; asked for a recorded gap and for offsets remote retention removed since the read was
    resolved."""
    topic, partition, end = offsets.topic, offsets.partition, offsets.end
    name = f"{topic}-{partition}"
    units: list[RangeUnit] = []
    offset = offsets.start
    while offset < end:
        try:
            plan = client.plan(topic, partition, offset, max_bytes)
        except OffsetNotRemoteError as err:
            upto = end if err.earliest is None else min(err.earliest, end)  # remote retention moved past the offset (or removed all)
            if (err.latest is None or not err.past_the_end) and on_gap is not None and on_gap(offsets, offset, upto - 1, "no longer in remote storage: retention meanwhile"):
                offset = upto  # another tier reads them (hybrid modes)
                continue
            if err.past_the_end:
                raise OffsetNotRemoteError(
                    f"{name}: remote storage ends at offset {err.latest} while the read asks up to {end - 1} (deleted meanwhile?): {err}",
                    offset=offset,
                    earliest=err.earliest,
                    latest=err.latest,
                ) from err
            if err.earliest is None or fail_on_data_loss:
                raise OffsetNotRemoteError(
                    f"{name}: offset {offset} is no longer in remote storage (retention meanwhile?){'' if err.earliest is None else f'; it now starts at {err.earliest}'}"
                    + (" (set failOnDataLoss=false to read what remains)" if fail_on_data_loss else ""),
                    offset=offset,
                    earliest=err.earliest,
                    latest=err.latest,
                ) from err
            _warn(warnings, f"{name}: offsets {offset}..{min(err.earliest, end) - 1} are no longer in remote storage; skipped (failOnDataLoss=false)")
            offset = err.earliest
            continue
        gap = read_gap(plan, offset, end)  # (a first range after the offset alone is compaction, not a gap)
        if gap is not None:
            gap_end, reason = gap.end_offset, gap.reason
            message = f"{name}: remote storage lacks offsets {offset}..{gap_end} ({reason})"
            if on_gap is not None and on_gap(offsets, offset, gap_end, reason):
                pass  # another tier reads the gap
            elif fail_on_data_loss:
                raise RemoteGapError(
                    f"{message}; set failOnDataLoss=false to skip it",
                    topic=topic,
                    partition=partition,
                    start_offset=offset,
                    end_offset=gap_end,
                    reason=reason,
                )
            else:
                _warn(warnings, f"{message}; skipped (failOnDataLoss=false)")
        for planned in plan.ranges:
            if planned.first_offset >= end:
                break
            units.append(RangeUnit(offsets, plan.object_key, planned))
        if plan.next_offset <= offset:
            raise RemoteReadError(f"{name}: the gateway's plan at offset {offset} does not advance (next_offset {plan.next_offset})")
        offset = plan.next_offset
    return units


# -- rule 4: balancing -------------------------------------------------------------------------------


def balance(sizes: Sequence[int], n: int) -> list[tuple[int, int]]:
    """Cut indexes 0..len(sizes) into min(n, len(sizes)) contiguous, non-empty runs [a, b) of
    nearly equal total size: the k-th cut is the boundary nearest to k × total / n."""
    count = len(sizes)
    n = min(n, count)
    if n <= 0:
        return []
    prefix = list(itertools.accumulate(sizes, initial=0))
    total = prefix[-1]
    cuts = [0]
    for k in range(1, n):
        target = total * k / n
        i = bisect.bisect_left(prefix, target)
        if i >= len(prefix) or (i > 0 and target - prefix[i - 1] <= prefix[i] - target):
            i -= 1
        cuts.append(min(max(i, cuts[-1] + 1), count - (n - k)))
    cuts.append(count)
    return list(itertools.pairwise(cuts))


def make_tasks(units: Sequence[RangeUnit], n: int, options: ReadOptions) -> list[ReadTask]:
    """``n`` tasks of contiguous units (ordered by topic, partition, offset), balanced by bytes."""
    ordered = sorted(units, key=lambda u: (u.offsets.topic, u.offsets.partition, u.planned.first_offset))
    atoms = uncut_runs(ordered, options.read_committed)
    tasks = []
    for index, (a, b) in enumerate(balance([sum(u.size for u in atom) for atom in atoms], n)):
        slices = []
        members_of_task = [u for atom in atoms[a:b] for u in atom]
        for _piece, group in itertools.groupby(members_of_task, key=lambda u: (u.offsets.topic, u.offsets.partition, u.offsets.start)):  # a partition may be read in pieces (_narrowed)
            members = list(group)
            r = members[0].offsets
            slices.append(Slice(r.topic, r.partition, r.start, r.end, tuple((u.object_key, u.planned) for u in members), r.stable_end))
        tasks.append(ReadTask.of(options, index, tuple(slices)))
    return tasks


def uncut_runs(ordered: Sequence[RangeUnit], read_committed: bool) -> list[list[RangeUnit]]:
    """The units (ordered) grouped into runs no task boundary may cut: under read_committed, all
    the units of a partition whose stable end is unknown (rule 4's decision); every other unit alone."""
    runs: list[list[RangeUnit]] = []
    for unit in ordered:
        whole = read_committed and unit.offsets.stable_end is None
        if whole and runs and (runs[-1][0].offsets.topic, runs[-1][0].offsets.partition) == (unit.offsets.topic, unit.offsets.partition):
            runs[-1].append(unit)
        else:
            runs.append([unit])
    return runs


# -- helpers -----------------------------------------------------------------------------------------


def _parallel(function: Callable[[T], object], items: Iterable[T]) -> list:  # type: ignore[type-arg]
    items = list(items)
    if len(items) <= 1:
        return [function(item) for item in items]
    with ThreadPoolExecutor(min(PLANNING_THREADS, len(items)), thread_name_prefix="tiered-kafka-plan") as pool:
        return list(pool.map(function, items))


def _warn(warnings: list[str], message: str) -> None:
    log.warning("tiered-kafka: %s", message)
    warnings.append(message)
