"""Bulk reads of remote history as Arrow, for analytics that need no per-message objects (#14).

::

    from tiered_kafka.bulk import read_table, read_arrow, BulkReader

    table = read_table("http://gw:8080", "prod", "orders")                 # the whole topic
    df = table.to_pandas()                                                 # or polars.from_arrow(table), duckdb.arrow(table)
    for batch in read_arrow("http://gw:8080", "prod", "orders", partition=3, start_offset=1000, end_offset=5000):
        ...                                                                # pyarrow.RecordBatch es

**Columns** (``bulk_schema``)::

    topic string, partition int32, offset int64, timestamp timestamp[ms, UTC] (null: none),
    timestamp_type int32 (0 CreateTime, 1 LogAppendTime, -1 none), key binary, value binary,
    [headers list<struct<key: string not null, value: binary> not null>]   (include_headers=True)

``timestamp`` is the decoder's ms value typed as an Arrow timestamp (zero-copy), so pandas, polars
and DuckDB see a UTC datetime. ``headers`` is the decoder's column as it is
(``format.columnar.HEADERS_TYPE``: a Kafka header key is never null, a value may be). Record
batches come per partition in offset order, partitions in ascending order; a batch never mixes
two partitions.

**Offsets** (remote storage only, as the PySpark source): ``start_offset`` defaults to the first
offset remote storage holds, ``end_offset`` (exclusive) to one past its last. Each is an int
(every partition read) or a ``{partition: offset}`` mapping (a partition it does not name takes the
default). Offsets are ints >= 0; a mapping key naming no partition of the topic is a
``ConfigError`` naming it (a typo never reads every partition from the default). Never silently empty:

- offsets remote storage does not hold (below its first offset: lost to retention; past its end:
  not uploaded yet), or a partition named explicitly of which it holds nothing:
  ``OffsetNotRemoteError`` (Kafka's OFFSET_OUT_OF_RANGE);
- a gap the agent recorded inside the read: ``RemoteGapError`` unless ``skip_gaps=True``; then the
  read goes on after it and ``BulkReader.gaps`` names each one skipped (and a warning is logged).
  Offsets a compacted segment lacks are no gap: they are passed, as a Kafka consumer does
  (``gateway_client.read_gap``);
- a ``start_offset`` at remote storage's end with no ``end_offset`` (nothing to read, as ``cat``
  answers): ``OffsetNotRemoteError`` whose ``past_the_end`` is true;
- a whole-topic read skips partitions remote storage holds nothing of (``BulkReader.empty_partitions``),
  and raises ``OffsetNotRemoteError`` when that is every partition;
- under read_committed, what is held back (a transaction open in remote storage, and everything after
  it; at or past the remote last stable offset) is named in ``BulkReader.held_back``, with its first
  offset (where a read_committed consumer stands), and logged.

**Reading** uses what ``TieredConsumer`` uses: the gateway's plans (``GatewayClient.plan``, asked with
``read_committed`` so they carry the remote LSO, which the rule's stable end follows), its retries, a
re-plan of an expired URL (``remote_read.fetch_range``), every CRC checked, and the one
read_committed rule (``tiered_kafka.transactions``) applied columnar by ``columnar_read``. A read
that ends inside an open transaction reads on for its marker (``columnar_read.finish_read``)
so a bound never changes a fate. ``isolation_level`` defaults to ``read_uncommitted``, Kafka's default.

**Memory budget** (#15). ``memory_budget`` bounds what is in flight: each GET reserves twice its size
(the bytes, then their Arrow columns) until its rows are handed to the caller, and GETs are started
while the reservations fit (at least one always runs). Plans are asked with ``max_bytes`` = the budget
/ 2 (at most the gateway's default limit, 64 MiB) and ``range_bytes`` = budget / (2 × (parallelism +
1)) (the gateway signs each range's Range header, so a GET is one planned range; contiguous ranges
sharing one URL are still merged by ``gateway_client.coalesce_ranges``): a plan is read with as few
GETs as the budget allows while ``parallelism`` of them overlap. Batches held by
an open transaction stay referenced past their reservation until decided (bounded by the
transaction's size, as in the consumer).
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Iterator, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from tiered_kafka.client.columnar_read import ColumnarSelector, finish_read, read_range
from tiered_kafka.errors import ConfigError, GatewayRequestError, OffsetNotRemoteError, RemoteGapError, RemoteReadError
from tiered_kafka.format.columnar import HEADERS_TYPE  # the decoder's headers column, delivered as it is
from tiered_kafka.client.gateway import GatewayClient, PlannedRange, coalesce_ranges, read_gap
from tiered_kafka.transactions import CommittedFilter

if TYPE_CHECKING:
    from tiered_kafka.format.columnar import ColumnarRange

log = logging.getLogger(__name__)

DEFAULT_MEMORY_BUDGET = 256 * 1024 * 1024
DEFAULT_PARALLELISM = 4
MAX_PLAN_BYTES = 64 * 1024 * 1024  # the gateway's default max_bytes_limit
MIN_PLAN_BYTES = 64 * 1024
ISOLATION_LEVELS = ("read_uncommitted", "read_committed")
TIMESTAMP_TYPE = pa.timestamp("ms", tz="UTC")

Offsets = int | Mapping[int, int] | None


def bulk_schema(include_headers: bool = False) -> pa.Schema:
    """The columns of a bulk read (module doc)."""
    fields = [
        pa.field("topic", pa.string()),
        pa.field("partition", pa.int32()),
        pa.field("offset", pa.int64()),
        pa.field("timestamp", TIMESTAMP_TYPE),
        pa.field("timestamp_type", pa.int32()),
        pa.field("key", pa.binary()),
        pa.field("value", pa.binary()),
    ]
    if include_headers:
        fields.append(pa.field("headers", HEADERS_TYPE))
    return pa.schema(fields)


@dataclass(frozen=True, slots=True)
class SkippedGap:
    """A recorded gap of remote storage the read went past (``skip_gaps=True``)."""

    topic: str
    partition: int
    start_offset: int
    end_offset: int
    reason: str


@dataclass(frozen=True, slots=True)
class HeldBack:
    """read_committed: ``records`` records from ``first_offset`` on were not delivered: a transaction
    there or before is still open in remote storage (Kafka's last stable offset)."""

    topic: str
    partition: int
    first_offset: int
    records: int


@dataclass
class ReadStats:
    """What a reader did: GETs issued, bytes fetched, rows delivered, plans asked; and where its
    wall time went: ``plan_s`` waiting for the gateway's plans, ``fetch_wait_s`` waiting for GETs
    (and their decoding) to finish."""

    gets: int = 0
    bytes: int = 0
    rows: int = 0
    plans: int = 0
    plan_s: float = 0.0
    fetch_wait_s: float = 0.0


@dataclass
class _Partition:
    topic: str
    partition: int
    start: int
    end: int
    selector: ColumnarSelector
    topic_column: _ConstantColumn = field(init=False)  # the topic and partition columns of its batches
    partition_column: _ConstantColumn = field(init=False)

    def __post_init__(self) -> None:
        self.topic_column = _ConstantColumn(self.topic, pa.string())
        self.partition_column = _ConstantColumn(self.partition, pa.int32())


class _ConstantColumn:
    """A column holding one value on every row, as zero-copy slices of one array grown to the
    largest batch seen: ``pa.repeat`` per batch allocated fresh Arrow memory each time (the
    topic's bytes and offsets on every row), page faults a profile of the bulk read showed (#38)."""

    def __init__(self, value: Any, type_: pa.DataType) -> None:
        self._scalar = pa.scalar(value, type_)
        self._array = pa.repeat(self._scalar, 0)

    def __call__(self, rows: int) -> pa.Array:
        if rows > len(self._array):
            self._array = pa.repeat(self._scalar, max(rows, 2 * len(self._array)))
        return self._array.slice(0, rows)


@dataclass
class _Item:
    """One step of the read, in order: a range to fetch, a gap, a partition's end, or an error."""

    kind: str  # "range" | "gap" | "end" | "error"
    part: _Partition | None = None
    planned: PlannedRange | None = None
    object_key: str = ""
    future: Future[ColumnarRange] | None = None
    reserved: int = 0
    gap: SkippedGap | None = None
    error: BaseException | None = None


class BulkReader:
    """Reads topics or partition ranges from remote storage as Arrow record batches (module doc).

    Thread-safe for one read at a time; ``close`` (or ``with``) releases its HTTP pools when it
    created its client."""

    def __init__(
        self,
        gateway_url: str | None = None,
        cluster: str | None = None,
        *,
        token: str | None = None,
        isolation_level: str = "read_uncommitted",
        include_headers: bool = False,
        skip_gaps: bool = False,
        memory_budget: int = DEFAULT_MEMORY_BUDGET,
        parallelism: int = DEFAULT_PARALLELISM,
        client: GatewayClient | None = None,
    ) -> None:
        if isolation_level not in ISOLATION_LEVELS:
            raise ConfigError(f"isolation_level must be one of {', '.join(ISOLATION_LEVELS)}, got {isolation_level!r}")
        if memory_budget < 2 * MIN_PLAN_BYTES:
            raise ConfigError(f"memory_budget must be at least {2 * MIN_PLAN_BYTES} bytes, got {memory_budget}")
        if parallelism < 1:
            raise ConfigError(f"parallelism must be at least 1, got {parallelism}")
        if client is None:
            if not gateway_url or not cluster:
                raise ConfigError("a bulk read needs gateway_url and cluster (or a GatewayClient)")
            client = GatewayClient(gateway_url, cluster, token=token)
            self._own_client = True
        else:
            self._own_client = False
        self.client = client
        self.read_committed = isolation_level == "read_committed"
        self.include_headers = include_headers
        self.skip_gaps = skip_gaps
        self.memory_budget = memory_budget
        self.parallelism = parallelism
        self.plan_bytes = max(MIN_PLAN_BYTES, min(MAX_PLAN_BYTES, memory_budget // 2))
        self.get_bytes = max(MIN_PLAN_BYTES, memory_budget // (2 * (parallelism + 1)))
        self.schema = bulk_schema(include_headers)
        self.gaps: list[SkippedGap] = []
        self.held_back: list[HeldBack] = []
        self.empty_partitions: list[tuple[str, int]] = []
        self.stats = ReadStats()

    def close(self) -> None:
        if self._own_client:
            self.client.close()

    def __enter__(self) -> BulkReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the API -----------------------------------------------------------------------------------
    def read_table(self, topic: str, partition: int | None = None, start_offset: Offsets = None, end_offset: Offsets = None) -> pa.Table:
        """The whole read as one ``pyarrow.Table`` (``batches`` collected)."""
        return pa.Table.from_batches(list(self.batches(topic, partition, start_offset, end_offset)), schema=self.schema)

    def batches(self, topic: str, partition: int | None = None, start_offset: Offsets = None, end_offset: Offsets = None) -> Iterator[pa.RecordBatch]:
        """The records of ``topic`` (one ``partition``, or all) in [start_offset, end_offset), as
        ``pyarrow.RecordBatch`` es of ``bulk_schema`` (module doc: offsets, errors, order)."""
        self.gaps, self.held_back, self.empty_partitions, self.stats = [], [], [], ReadStats()
        parts = self._resolve(topic, partition, start_offset, end_offset)
        return self._read(parts)

    # -- offsets ---------------------------------------------------------------------------------
    def _resolve(self, topic: str, partition: int | None, start_offset: Offsets, end_offset: Offsets) -> list[_Partition]:
        _check_offsets(start_offset, "start_offset")
        _check_offsets(end_offset, "end_offset")
        explicit = partition is not None
        numbers = [partition] if partition is not None else self._partitions_of(topic)
        existing: set[int] | None = None
        for what, offsets in (("start_offset", start_offset), ("end_offset", end_offset)):
            if isinstance(offsets, Mapping) and offsets:
                existing = existing if existing is not None else set(numbers if not explicit else self._partitions_of(topic))
                unknown = sorted(set(offsets) - existing)
                if unknown:
                    raise ConfigError(f"{what} names partitions {', '.join(map(str, unknown))} that topic {topic!r} does not have "
                                      f"(its partitions: {', '.join(map(str, sorted(existing)))})")
        parts = []
        for number in numbers:
            start = _offset_for(start_offset, number)
            end = _offset_for(end_offset, number)
            extent = self.client.partition(topic, number)
            remote = extent.remote
            name = f"{topic}-{number}"
            if remote is None or remote.segment_count == 0:
                if explicit or start is not None or end is not None:
                    raise OffsetNotRemoteError(f"OFFSET_OUT_OF_RANGE: remote storage holds nothing of {name}", offset=start or 0, earliest=None, latest=None)
                self.empty_partitions.append((topic, number))
                continue
            earliest, end_of_remote = remote.earliest_offset, remote.latest_offset + 1
            start = earliest if start is None else start
            end = end_of_remote if end is None else end
            for what, offset in (("start_offset", start), ("end_offset", end)):
                if offset < earliest:
                    raise OffsetNotRemoteError(
                        f"OFFSET_OUT_OF_RANGE: {what} {offset} of {name} is below remote storage's earliest offset {earliest} "
                        f"(offsets {offset}..{earliest - 1} are not in remote storage)", offset=offset, earliest=earliest, latest=end_of_remote - 1)
                if offset > end_of_remote:
                    raise OffsetNotRemoteError(
                        f"OFFSET_OUT_OF_RANGE: {what} {offset} of {name} is past remote storage's end (its last offset is {end_of_remote - 1})",
                        offset=offset, earliest=earliest, latest=end_of_remote - 1)
            if start > end:
                raise ConfigError(f"{name}: start_offset {start} is after end_offset {end}")
            if start == end_of_remote and _offset_for(end_offset, number) is None:
                raise OffsetNotRemoteError(f"OFFSET_OUT_OF_RANGE: nothing to read from offset {start} of {name}: remote storage ends there",
                                           offset=start, earliest=earliest, latest=end_of_remote - 1)
            stable_end = remote.last_stable_offset if self.read_committed else None
            committed = CommittedFilter(stable_end=stable_end) if self.read_committed else None
            parts.append(_Partition(topic, number, start, end, ColumnarSelector(start, end, committed=committed)))
        if not parts and self.empty_partitions:
            raise OffsetNotRemoteError(f"OFFSET_OUT_OF_RANGE: remote storage holds nothing of topic {topic!r}", offset=0, earliest=None, latest=None)
        return parts

    def _partitions_of(self, topic: str) -> list[int]:
        topics = self.client.topics()
        if topic in topics:
            return sorted(topics[topic])
        self.client.partition(topic, 0)  # raises TOPIC_AUTHORIZATION_FAILED or unknown_topic_or_partition
        raise GatewayRequestError(f"UNKNOWN_TOPIC_OR_PART: the gateway does not list topic {topic!r}", status=404, code="unknown_topic_or_partition")

    # -- the read -------------------------------------------------------------------------------------
    def _steps(self, parts: list[_Partition]) -> Iterator[_Item]:
        """Plans, in order, as steps: each partition's coalesced ranges, its gaps, then its end."""
        client = self.client
        for part in parts:
            offset, name = part.start, f"{part.topic}-{part.partition}"
            while offset < part.end:
                asked = time.perf_counter()
                plan = client.plan(part.topic, part.partition, offset, self.plan_bytes, read_committed=self.read_committed, range_bytes=self.get_bytes)
                self.stats.plan_s += time.perf_counter() - asked
                self.stats.plans += 1
                gap = read_gap(plan, offset, part.end)  # (a first range after the offset alone is compaction, not a gap)
                if gap is not None:
                    yield _Item("gap", part, gap=SkippedGap(part.topic, part.partition, gap.start_offset, gap.end_offset, gap.reason))
                if self.read_committed and part.selector.committed is not None:
                    part.selector.committed.set_stable_end(plan.last_stable_offset)
                inside = [r for r in plan.ranges if r.first_offset < part.end]
                for planned in coalesce_ranges(inside, self.get_bytes):
                    yield _Item("range", part, planned, plan.object_key)
                if plan.next_offset <= offset:
                    raise RemoteReadError(f"{name}: the gateway's plan at offset {offset} does not advance (next_offset {plan.next_offset})")
                offset = plan.next_offset
            yield _Item("end", part)

    def _read(self, parts: list[_Partition]) -> Iterator[pa.RecordBatch]:
        steps = self._steps(parts)
        window: deque[_Item] = deque()
        in_flight = 0
        exhausted = False
        with ThreadPoolExecutor(self.parallelism, thread_name_prefix="tiered-kafka-bulk") as pool:

            def top_up() -> None:
                """Start waiting GETs in order while the budget allows (one always runs); plan ahead
                while every step planned so far has started."""
                nonlocal in_flight, exhausted
                while True:
                    waiting = next((i for i in window if i.kind == "range" and i.future is None), None)
                    if waiting is None:
                        started = sum(1 for i in window if i.future is not None)
                        if exhausted or started >= 2 * self.parallelism:
                            return
                        try:
                            window.append(next(steps))
                        except StopIteration:
                            exhausted = True
                        except Exception as err:  # raised in order, after what came before it
                            exhausted = True
                            window.append(_Item("error", error=err))
                        continue
                    if waiting.planned is None or waiting.part is None:
                        raise RuntimeError("a range step without its range")
                    reserve = 2 * waiting.planned.size
                    if in_flight and in_flight + reserve > self.memory_budget:
                        return
                    waiting.reserved = reserve
                    in_flight += reserve
                    waiting.future = pool.submit(read_range, self.client, waiting.part.topic, waiting.part.partition, waiting.planned,
                                                 object_key=waiting.object_key, include_headers=self.include_headers)

            try:
                top_up()
                while window:
                    item = window.popleft()
                    if item.kind == "error" and item.error is not None:
                        raise item.error
                    if item.kind == "gap" and item.gap is not None:
                        self._gap(item.gap)
                    elif item.kind == "range" and item.part is not None and item.planned is not None:
                        if item.future is None:  # not started (cannot happen: the first waiting GET always starts)
                            raise RuntimeError(f"{item.part.topic}-{item.part.partition}: range {item.planned.range_header} was never fetched")
                        waited = time.perf_counter()
                        decoded = item.future.result()
                        self.stats.fetch_wait_s += time.perf_counter() - waited
                        self.stats.gets += 1
                        self.stats.bytes += item.planned.size
                        selected = item.part.selector.add(decoded, item.planned.first_offset, item.planned.last_offset)
                        del decoded
                        in_flight -= item.reserved  # the caller holds the rows from here
                        top_up()
                        yield from self._out(item.part, selected)
                        del selected
                    elif item.kind == "end" and item.part is not None:
                        yield from self._out(item.part, self._finish(item.part))
                    top_up()
            finally:
                for item in window:
                    if item.future is not None:
                        item.future.cancel()

    def _gap(self, gap: SkippedGap) -> None:
        message = f"{gap.topic}-{gap.partition}: remote storage lacks offsets {gap.start_offset}..{gap.end_offset} ({gap.reason})"
        if not self.skip_gaps:
            raise RemoteGapError(f"{message}; pass skip_gaps=True to read past it", topic=gap.topic, partition=gap.partition,
                                 start_offset=gap.start_offset, end_offset=gap.end_offset, reason=gap.reason)
        log.warning("%s; skipped (skip_gaps)", message)
        self.gaps.append(gap)

    def _finish(self, part: _Partition) -> list[pa.RecordBatch]:
        selector = part.selector
        out = finish_read(self.client, part.topic, part.partition, selector)  # (logs what is held back)
        if selector.undecided_records and selector.first_undecided is not None:
            self.held_back.append(HeldBack(part.topic, part.partition, selector.first_undecided, selector.undecided_records))
        return out

    def _out(self, part: _Partition, selected: list[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        topic, partition = part.topic_column, part.partition_column
        for records in selected:
            n = records.num_rows
            if not n:
                continue
            self.stats.rows += n
            columns = [
                topic(n),
                partition(n),
                records.column("offset"),
                records.column("timestamp").cast(TIMESTAMP_TYPE),
                records.column("timestamp_type"),
                records.column("key"),
                records.column("value"),
            ]
            if self.include_headers:
                columns.append(records.column("headers"))
            yield pa.RecordBatch.from_arrays(columns, schema=self.schema)


def _check_offsets(offsets: Offsets, what: str) -> None:
    """Before any request: None, an offset (an int >= 0), or a mapping of partition numbers to offsets."""
    if offsets is None:
        return
    if not isinstance(offsets, Mapping):
        if not _is_offset(offsets):
            raise ConfigError(f"{what} must be a non-negative offset or a {{partition: offset}} mapping, got {offsets!r}")
        return
    for partition, offset in offsets.items():
        if isinstance(partition, bool) or not isinstance(partition, int):
            raise ConfigError(f"{what}: the keys of a {{partition: offset}} mapping are partition numbers, got {partition!r}")
        if not _is_offset(offset):
            raise ConfigError(f"{what} of partition {partition} must be a non-negative offset, got {offset!r}")


def _is_offset(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _offset_for(offsets: Offsets, partition: int) -> int | None:
    """The offset ``offsets`` (checked by ``_check_offsets``) gives ``partition``; None: the default."""
    if offsets is None:
        return None
    if isinstance(offsets, Mapping):
        return offsets.get(partition)
    return offsets


def read_arrow(gateway_url: str, cluster: str, topic: str, partition: int | None = None, *, start_offset: Offsets = None,
               end_offset: Offsets = None, **options: Any) -> Iterator[pa.RecordBatch]:
    """``BulkReader(gateway_url, cluster, **options).batches(...)``, closing the reader at the end.
    Offsets are checked when the first batch is asked for."""
    with BulkReader(gateway_url, cluster, **options) as reader:
        yield from reader.batches(topic, partition, start_offset, end_offset)


def read_table(gateway_url: str, cluster: str, topic: str, partition: int | None = None, *, start_offset: Offsets = None,
               end_offset: Offsets = None, **options: Any) -> pa.Table:
    """The whole read as one ``pyarrow.Table`` (``.to_pandas()``, ``polars.from_arrow``, ``duckdb.arrow``)."""
    with BulkReader(gateway_url, cluster, **options) as reader:
        return reader.read_table(topic, partition, start_offset, end_offset)


__all__ = ["BulkReader", "HeldBack", "ReadStats", "SkippedGap", "bulk_schema", "read_arrow", "read_table"]
