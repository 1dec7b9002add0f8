"""Fetch (``FetchRequest.json``/``FetchResponse.json``, api key 1, versions 4-17): S3 first, then the mode.

**Which tier** serves a partition's FetchOffset is ``tiered_kafka.modes`` (the one rule, shared with the
SDK and the HTTP side): ``decide`` picks remote storage or Kafka; remote storage's end is
``at_remote_end`` (REMOTE_ONLY: the remote end is the log end, the Fetch waits ``MaxWaitMs`` and
answers no records; the others: Kafka); below remote storage's start ``below_remote_start``; in a
recorded gap ``at_gap``; KAFKA_PREFERRED falls back to remote storage when Kafka answers
OFFSET_OUT_OF_RANGE below its log start (``decide(..., kafka_below_log_start=True)``).

**From S3**: the read plans the HTTP side makes (``ClusterSource.plan``: batch-aligned ranges of one
segment, then the following segments) and their bytes as the broker wrote them
(``ClusterSource.read_range``), forwarded without decoding or re-encoding. The first batch may start
before FetchOffset; clients skip those records, as they do with Kafka's own answers. Bounds, as
Kafka's: PartitionMaxBytes per partition and MaxBytes (and the listener's ``max_response_bytes``)
per response, except KIP-74: the first partition with data gets at least its first batch whole.

**Proxied to Kafka**: the partitions the mode gives Kafka are fetched from their leaders (Fetch v12,
``upstream``), with the client's MaxWaitMs and MinBytes when nothing came from S3 (the live end
waits as Kafka waits), without waiting otherwise; Kafka's answer per partition (records bytes,
error, watermarks, aborted transactions) is forwarded as it is.

**read_committed** (IsolationLevel 1) over S3 data answers what a broker answers (KIP-98): the
records below the last stable offset only, and AbortedTransactions listing every aborted
transaction (ProducerId, FirstOffset) overlapping the records sent, from the ``.txnindex`` of the
segments read and of every later one that has aborts (an ABORT marker may come segments later).
The last stable offset is remote storage's (``ClusterSource.last_stable_offset``, the rule in
``tiered_kafka.transactions``: every marker of a transaction below it is in remote storage); at or
past it, remote storage has nothing decided to give: that is its end for this read (``at_remote_end``).

**Sessions** (KIP-227): none. The listener answers SessionId 0, which tells a client that asked for
a session (SessionEpoch 0) that none was made, so it keeps sending full Fetch requests; an
incremental request (SessionId not 0) is FETCH_SESSION_ID_NOT_FOUND. A session would pin a client
to one replica's memory, and the listener is stateless behind any load balancer.

**Leader epochs**: CurrentLeaderEpoch is not checked (Metadata announces -1, see ``metadata``).
"""

from __future__ import annotations

import asyncio
import struct
from dataclasses import dataclass, field
from typing import Any

from tiered_kafka.modes import Action, Mode, Source, at_gap, at_remote_end, below_remote_start, decide, reads_kafka
from tiered_kafka.read_plan import ByteRange
from tiered_kafka.registry import PartitionInfo
from tiered_kafka.transactions import decided_by
from tiered_kafka_gateway.deps import Access
from tiered_kafka_gateway.errors import ErrorCode, GatewayError
from tiered_kafka_gateway.kafka_listener.read_ahead import ReadAhead, split
from tiered_kafka_gateway.kafka_listener import errors as kafka_errors
from tiered_kafka_gateway.kafka_listener.context import ListenerContext
from tiered_kafka_gateway.kafka_listener.upstream import KafkaUpstreamError
from tiered_kafka_gateway.sources import ClusterSource

FETCH_SESSION_ID_NOT_FOUND = 70


@dataclass
class Slot:
    """One requested partition and, once decided, its PartitionData."""

    topic: str | None
    topic_id: bytes
    partition: int
    offset: int
    max_bytes: int
    data: dict[str, Any] | None = None
    proxy: bool = False
    kafka_first: bool = False  # KAFKA_PREFERRED asked Kafka first: remote storage if Kafka refuses below its log start
    info: PartitionInfo | None = None
    extra: dict[str, Any] = field(default_factory=dict)


def partition_data(slot: Slot, error: int = 0, hw: int = -1, lso: int = -1, log_start: int = -1, records: Any = None,
                   aborted: list[dict[str, int]] | None = None) -> dict[str, Any]:
    return {"PartitionIndex": slot.partition, "ErrorCode": error, "HighWatermark": hw, "LastStableOffset": lso, "LogStartOffset": log_start,
            "AbortedTransactions": aborted, "PreferredReadReplica": -1, "Records": records if records is not None else b""}


@dataclass
class RemoteRead:
    chunks: list[bytes]
    size: int
    next_offset: int
    gap: Any = None
    aborted: list[dict[str, int]] | None = None


def cut_at(data: bytes, end: int) -> bytes:
    """``data`` (whole record batches) without the batches whose baseOffset is at or past ``end``:
    each batch is baseOffset int64, batchLength int32, then batchLength bytes."""
    pos = 0
    while pos + 12 <= len(data):
        base, length = struct.unpack_from(">qi", data, pos)
        if base >= end:
            break
        pos += 12 + length
    return data[:pos]


def read_remote(source: ClusterSource, topic: str, partition: int, offset: int, limit: int, info: PartitionInfo,
                stable_end: int | None, committed: bool, ahead: ReadAhead | None = None, ahead_bytes: int = 0) -> RemoteRead:
    """Plans from ``offset`` and their bytes, within ``limit`` (at least the first range: KIP-74), stopping
    before a gap met after the first plan and, read_committed, at ``stable_end``. Blocking (S3, Redis)."""
    if ahead is not None:
        return _read_ahead(source, ahead, ahead_bytes, topic, partition, offset, limit, stable_end, committed)
    chunks: list[bytes] = []
    size = 0
    position = offset
    first = True
    gap = None
    while True:
        plan = source.plan(topic, partition, position, max(limit - size, 1))
        if plan.gap is not None:
            if first:
                return RemoteRead([], 0, offset, gap=plan.gap)
            break  # a gap after the data read: the next Fetch meets it
        first = False
        stop = False
        for byte_range in plan.ranges:
            if stable_end is not None and byte_range.first_offset >= stable_end:
                stop = True
                break
            if size and size + byte_range.size > limit:
                stop = True
                break
            data = source.read_range(plan.segment.object_key, byte_range)
            if stable_end is not None and byte_range.last_offset >= stable_end:
                data = cut_at(data, stable_end)
                stop = True
            chunks.append(data)
            size += len(data)
            position = byte_range.last_offset + 1
            if stop:
                break
        if stop or size >= limit or position > info.latest_offset or not plan.ranges:
            break
    aborted = aborted_overlapping(source, topic, partition, offset, position - 1) if committed and chunks else ([] if committed else None)
    return RemoteRead(chunks, size, position, gap, aborted)


def contiguous(ranges: list[ByteRange]) -> list[ByteRange]:
    """The plan's ranges with each run of adjacent ones merged: one GET per run (the S3 server's cost is
    mostly per request; a plan's ranges are split at its index's granularity, ~1 MiB)."""
    merged: list[ByteRange] = []
    for r in ranges:
        if merged and merged[-1].end == r.start:
            last = merged[-1]
            merged[-1] = ByteRange(last.start, r.end, last.first_offset, r.last_offset)
        else:
            merged.append(r)
    return merged


def _read_ahead(source: ClusterSource, ahead: ReadAhead, ahead_bytes: int, topic: str, partition: int, offset: int, limit: int,
                stable_end: int | None = None, committed: bool = False) -> RemoteRead:
    """``read_remote`` through the read-ahead (``read_ahead`` module): whole batches within ``limit``, at least one,
    read_committed below ``stable_end`` with the aborted transactions overlapping them."""
    data = ahead.take(topic, partition, offset)
    if data is None:
        plan = source.plan(topic, partition, offset, max(ahead_bytes, limit))
        if plan.gap is not None:
            return RemoteRead([], 0, offset, gap=plan.gap)
        parts = [source.read_range(plan.segment.object_key, r) for r in contiguous(plan.ranges)]
        data = memoryview(parts[0] if len(parts) == 1 else b"".join(parts))
    size, next_offset = split(data, limit, stable_end)
    if size == 0:  # nothing whole below the bound (the caller checked offset < stable_end): fail loudly rather than loop
        raise GatewayError(ErrorCode.CORRUPT_REMOTE_DATA, f"no whole record batch at {topic}-{partition} offset {offset}")
    if size < len(data):
        ahead.put(topic, partition, next_offset, data[size:])
    aborted = aborted_overlapping(source, topic, partition, offset, next_offset - 1) if committed else None
    return RemoteRead([data[:size]], size, next_offset, None, aborted)


def aborted_overlapping(source: ClusterSource, topic: str, partition: int, first: int, last: int) -> list[dict[str, int]]:
    """Aborted transactions overlapping offsets ``first..last`` (module docstring), from the
    ``.txnindex`` of the segments from the one holding ``first`` that have aborts (registry count
    not 0), up to the first after which every transaction reaching ``last`` is decided
    (``transactions.decided_by``): it costs the segments read, not the partition's history."""
    found: dict[tuple[int, int], None] = {}
    for segment in source.segments_from(topic, partition, first):
        if segment.aborted_txns != 0:
            for txn in source.aborted_txns(topic, partition, segment):
                if txn.last_offset >= first and txn.first_offset <= last:
                    found[(txn.producer_id, txn.first_offset)] = None
        if decided_by(segment.last_offset, segment.open_txn_first_offset, last):
            break
    return [{"ProducerId": pid, "FirstOffset": off} for pid, off in found]


async def handle(ctx: ListenerContext, access: Access, version: int, request: dict[str, Any]) -> dict[str, Any]:
    if request.get("SessionId", 0) != 0:
        return {"ThrottleTimeMs": 0, "ErrorCode": FETCH_SESSION_ID_NOT_FOUND, "SessionId": 0, "Responses": []}
    listing = await ctx.listing()
    committed = request.get("IsolationLevel", 0) == 1
    budget = min(request.get("MaxBytes") or 0x7FFFFFFF, ctx.settings.max_response_bytes)
    order: list[tuple[str | None, bytes, list[Slot]]] = []
    for t in request["Topics"]:
        name = t.get("Topic") if version < 13 else listing.by_id.get(t.get("TopicId") or b"")
        if version >= 13 and name is None:
            listing = await ctx.listing(refresh=True)
            name = listing.by_id.get(t.get("TopicId") or b"")
        slots = [Slot(name, t.get("TopicId") or bytes(16), p["Partition"], p["FetchOffset"], p["PartitionMaxBytes"]) for p in t["Partitions"]]
        order.append((name, t.get("TopicId") or bytes(16), slots))

    sent = 0
    for name, _tid, slots in order:
        for slot in slots:
            if name is None:
                slot.data = partition_data(slot, kafka_errors.UNKNOWN_TOPIC_ID)
            elif not access.allows(name):
                slot.data = partition_data(slot, kafka_errors.TOPIC_AUTHORIZATION_FAILED)
            else:
                try:
                    sent += await _decide_and_read(ctx, slot, committed, budget - sent, sent == 0)
                except GatewayError as err:
                    ctx.metrics.errors.labels(ctx.name, "Fetch", err.error.value).inc()
                    slot.data = partition_data(slot, kafka_errors.KAFKA_STORAGE_ERROR)
            if slot.data is not None and slot.data["ErrorCode"]:
                ctx.metrics.errors.labels(ctx.name, "Fetch", str(slot.data["ErrorCode"])).inc()

    proxied = [s for _n, _t, slots in order for s in slots if s.proxy]
    if proxied:
        wait = request["MaxWaitMs"] if sent == 0 else 0
        await _proxy(ctx, proxied, wait_ms=wait, min_bytes=request["MinBytes"] if sent == 0 else 0, max_bytes=max(budget - sent, 1),
                     committed=committed)
        for slot in proxied:  # KAFKA_PREFERRED: Kafka refused below its log start, remote storage may hold it
            if slot.kafka_first and slot.data is not None and slot.data["ErrorCode"] == kafka_errors.OFFSET_OUT_OF_RANGE:
                log_start = slot.data["LogStartOffset"]
                if log_start < 0:  # Kafka's error answers carry no log start: ask it
                    log_start = await ctx.kafka_offset(slot.topic, slot.partition, -2) or -1  # type: ignore[arg-type]
                if slot.offset < log_start and decide(ctx.mode, remote_holds=lambda: True, kafka_configured=True, kafka_below_log_start=True) is Source.REMOTE:
                    slot.proxy = False
                    slot.extra["kafka_log_start"] = log_start
                    await _decide_and_read(ctx, slot, committed, budget - sent, sent == 0, after_kafka=True)
        for slot in proxied:
            records = slot.data["Records"] if slot.data and slot.proxy else None  # a KAFKA_PREFERRED fallback counted as remote
            if records:
                ctx.metrics.bytes.labels(ctx.name, "out", "kafka").inc(len(records))
    elif sent == 0 and request["MaxWaitMs"] > 0 and all(s.data is not None and not s.data["ErrorCode"] for _n, _t, slots in order for s in slots):
        await asyncio.sleep(min(request["MaxWaitMs"], 30_000) / 1000)  # REMOTE_ONLY at the remote end: the live end waits

    responses = []
    for name, topic_id, slots in order:
        responses.append({"Topic": name, "TopicId": topic_id, "Partitions": [s.data for s in slots]})
    return {"ThrottleTimeMs": 0, "ErrorCode": 0, "SessionId": 0, "Responses": responses}


async def _decide_and_read(ctx: ListenerContext, slot: Slot, committed: bool, budget: int, first_data: bool, after_kafka: bool = False) -> int:
    """Decide the slot's tier; read S3 now or mark it for the proxy. Returns the S3 bytes it took."""
    topic, partition, offset = slot.topic, slot.partition, slot.offset
    assert topic is not None
    if not after_kafka and ctx.ahead is not None and ctx.mode in (Mode.REMOTE_ONLY, Mode.REMOTE_PREFERRED):
        served = await _from_read_ahead(ctx, slot, budget, first_data, committed)
        if served is not None:
            return served
    info = await ctx.blocking(ctx.source.partition_info, topic, partition) if not after_kafka or slot.info is None else slot.info
    slot.info = ctx.infos[(topic, partition)] = info
    has_remote = info is not None and not info.is_empty
    holds = has_remote and info.earliest_offset <= offset <= info.latest_offset  # type: ignore[union-attr]
    kafka = ctx.upstream is not None
    if not after_kafka:
        source = decide(ctx.mode, remote_holds=lambda: holds, kafka_configured=kafka)
        if source is Source.KAFKA:
            slot.proxy, slot.kafka_first = True, True
            return 0
    kafka_log_start = slot.extra.get("kafka_log_start")
    if not has_remote:
        return _remote_end(ctx, slot, info, committed)
    assert info is not None
    if offset > info.latest_offset:
        return _remote_end(ctx, slot, info, committed)
    if offset < info.earliest_offset:
        if below_remote_start(ctx.mode, offset, kafka_log_start) is Action.READ_KAFKA and kafka and not after_kafka:
            slot.proxy = True
            return 0
        slot.data = partition_data(slot, kafka_errors.OFFSET_OUT_OF_RANGE, log_start=info.earliest_offset)
        return 0
    stable_end = None
    if committed:
        stable_end = await ctx.blocking(ctx.source.last_stable_offset, topic, partition, info)
        if stable_end is None:
            stable_end = info.latest_offset + 1
        segments = await ctx.blocking(ctx.source.segments, topic, partition)
        ctx.txn_meta[(topic, partition)] = (stable_end, all(e.aborted_txns == 0 for e in segments if e.last_offset >= offset))
        if offset >= stable_end:
            return _remote_end(ctx, slot, info, committed, stable_end)
    limit = min(slot.max_bytes, budget) if not first_data else max(min(slot.max_bytes, budget), 1)
    if limit <= 0:
        limit = 1 if first_data else 0
    if limit == 0:  # the response is full: this partition waits for the next Fetch, as Kafka's does
        hw = await _high_watermark(ctx, topic, partition, info)
        if hw is None:
            return _unknown_end(slot)
        slot.data = partition_data(slot, hw=hw, lso=stable_end if stable_end is not None else hw, log_start=info.earliest_offset,
                                   aborted=[] if committed else None)
        return 0
    read = await ctx.blocking(read_remote, ctx.source, topic, partition, offset, limit, info, stable_end, committed, ctx.ahead,
                              ctx.settings.read_ahead_bytes)
    if read.gap is not None:
        gap = read.gap
        if at_gap(ctx.mode, offset, gap.start_offset, gap.end_offset, kafka_log_start) is Action.READ_KAFKA and kafka and not after_kafka:
            slot.proxy = True
            return 0
        # offsets remote storage lost and no tier holds: Kafka's answer for lost offsets, never silence;
        # LogStartOffset says where the data resumes
        slot.data = partition_data(slot, kafka_errors.OFFSET_OUT_OF_RANGE, log_start=gap.end_offset + 1)
        return 0
    hw = await _high_watermark(ctx, topic, partition, info)
    if hw is None:
        return _unknown_end(slot)
    lso = stable_end if stable_end is not None else hw
    slot.data = partition_data(slot, hw=hw, lso=lso, log_start=info.earliest_offset, records=read.chunks, aborted=read.aborted)
    ctx.metrics.bytes.labels(ctx.name, "out", "remote").inc(read.size)
    return read.size


async def _from_read_ahead(ctx: ListenerContext, slot: Slot, budget: int, first_data: bool, committed: bool = False) -> int | None:
    """The slot answered from the read-ahead on the event loop, without a thread hop, when it holds the
    offset (the bytes are remote storage's, so remote storage holds it: REMOTE_ONLY and REMOTE_PREFERRED
    read it there, ``modes.decide``); None when it does not. The partition's extent is the one the last
    read saw (``ListenerContext.infos``), as fresh as the registry lookups it caches."""
    assert ctx.ahead is not None and slot.topic is not None
    info = ctx.infos.get((slot.topic, slot.partition))
    limit = min(slot.max_bytes, budget)
    if info is None or info.is_empty or (limit <= 0 and not first_data):
        return None
    stop = None
    if committed:  # only where no aborted transaction can overlap (the last slow read saw none from here on)
        meta = ctx.txn_meta.get((slot.topic, slot.partition))
        if meta is None or not meta[1] or slot.offset >= meta[0]:
            return None
        stop = meta[0]
    data = ctx.ahead.take(slot.topic, slot.partition, slot.offset)
    if data is None:
        return None
    size, next_offset = split(data, max(limit, 1), stop)
    hw = await _high_watermark(ctx, slot.topic, slot.partition, info) if size else None
    if hw is None:  # nothing whole within the bound, or Kafka's end unknown: the slow path answers (``_unknown_end``)
        ctx.ahead.put(slot.topic, slot.partition, slot.offset, data)
        return None
    if size < len(data):
        ctx.ahead.put(slot.topic, slot.partition, next_offset, data[size:])
    slot.info = info
    slot.data = partition_data(slot, hw=hw, lso=stop if stop is not None else hw, log_start=info.earliest_offset, records=[data[:size]],
                               aborted=[] if committed else None)
    ctx.metrics.bytes.labels(ctx.name, "out", "remote").inc(size)
    return size


async def _high_watermark(ctx: ListenerContext, topic: str, partition: int, info: PartitionInfo | None) -> int | None:
    """The partition's high watermark for an answer from S3: Kafka's (``ListenerContext.kafka_offset``) where the
    mode reads Kafka, else remote storage's end; None when the mode reads Kafka and Kafka's has never been
    answered: the remote end would tell a client at it that it reached the log's end (librdkafka's
    partition EOF, which ``kcat -e`` exits on), silently short of Kafka's records."""
    remote_end = info.latest_offset + 1 if info is not None and not info.is_empty else 0
    kafka_end = await ctx.kafka_offset(topic, partition, -1)
    if kafka_end is None and ctx.upstream is not None and reads_kafka(ctx.mode):
        return None
    return max(remote_end, kafka_end or 0)


def _unknown_end(slot: Slot) -> int:
    """Answer the partition KAFKA_STORAGE_ERROR (retriable: clients fetch again after a backoff) when its high
    watermark is unknown (``_high_watermark``); nothing read is given out."""
    slot.data = partition_data(slot, kafka_errors.KAFKA_STORAGE_ERROR)
    return 0


def _remote_end(ctx: ListenerContext, slot: Slot, info: PartitionInfo | None, committed: bool, stable_end: int | None = None) -> int:
    """Remote storage has nothing (decided) at the offset: ``at_remote_end`` (Kafka, or wait)."""
    if at_remote_end(ctx.mode) is Action.READ_KAFKA and ctx.upstream is not None and "kafka_log_start" not in slot.extra:
        slot.proxy = True
        return 0
    remote_end = info.latest_offset + 1 if info is not None and not info.is_empty else 0
    if info is None or info.is_empty:
        if ctx.upstream is None or at_remote_end(ctx.mode) is Action.WAIT:
            if info is None:
                slot.data = partition_data(slot, kafka_errors.UNKNOWN_TOPIC_OR_PARTITION)
                return 0
    if slot.offset > remote_end:
        slot.data = partition_data(slot, kafka_errors.OFFSET_OUT_OF_RANGE, hw=remote_end, lso=remote_end,
                                   log_start=info.earliest_offset if info is not None and not info.is_empty else 0)
        return 0
    log_start = info.earliest_offset if info is not None and not info.is_empty else remote_end
    slot.data = partition_data(slot, hw=remote_end, lso=stable_end if stable_end is not None else remote_end, log_start=log_start,
                               aborted=[] if committed else None)
    return 0


async def _proxy(ctx: ListenerContext, slots: list[Slot], *, wait_ms: int, min_bytes: int, max_bytes: int, committed: bool) -> None:
    """Kafka's answer for each slot (module docstring), by leader, one Fetch each, concurrently."""
    assert ctx.upstream is not None
    by_leader: dict[tuple[str, int], list[Slot]] = {}
    for slot in slots:
        assert slot.topic is not None
        try:
            leader = await ctx.upstream.leader(slot.topic, slot.partition)
        except KafkaUpstreamError:
            leader = None
        if leader is None:
            slot.data = partition_data(slot, kafka_errors.UNKNOWN_TOPIC_OR_PARTITION if slot.info is None else kafka_errors.NOT_LEADER_OR_FOLLOWER)
            continue
        by_leader.setdefault(leader, []).append(slot)

    async def one(address: tuple[str, int], group: list[Slot]) -> None:
        topics: dict[str, list[dict[str, Any]]] = {}
        for slot in group:
            topics.setdefault(slot.topic, []).append({"Partition": slot.partition, "FetchOffset": slot.offset, "PartitionMaxBytes": slot.max_bytes})  # type: ignore[arg-type]
        try:
            answers = await ctx.upstream.fetch(address, topics, max_wait_ms=wait_ms, min_bytes=min_bytes, max_bytes=max_bytes,  # type: ignore[union-attr]
                                               isolation_level=1 if committed else 0)
        except KafkaUpstreamError:
            answers = {}
        for slot in group:
            answer = answers.get((slot.topic, slot.partition))  # type: ignore[arg-type]
            if answer is None:
                slot.data = partition_data(slot, kafka_errors.NOT_LEADER_OR_FOLLOWER)
                continue
            answer["PartitionIndex"] = slot.partition
            for tagged in ("DivergingEpoch", "CurrentLeader", "SnapshotId"):
                answer.pop(tagged, None)
            slot.data = answer
            if slot.kafka_first and answer["ErrorCode"] == kafka_errors.OFFSET_OUT_OF_RANGE:
                continue  # Kafka's own log start stays: the KAFKA_PREFERRED fallback reads it
            if answer["LogStartOffset"] >= 0 and slot.info is not None and not slot.info.is_empty and ctx.mode is not Mode.KAFKA_ONLY:
                answer["LogStartOffset"] = min(answer["LogStartOffset"], slot.info.earliest_offset)  # what the listener serves starts there

    await asyncio.gather(*(one(address, group) for address, group in by_leader.items()))
