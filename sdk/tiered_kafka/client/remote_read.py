"""Reading one planned range: fetch it (re-planning an expired URL), check it is batch-aligned as
the read-plan contract promises (DESIGN.md, contract 3), verify every CRC and decode it.

Shared by ``TieredConsumer`` (in its prefetch threads) and the PySpark data source (in executors),
and by the CLI's end-of-read check (``visible_until``).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

from tiered_kafka.errors import CorruptRecordError, FormatError, OffsetNotRemoteError, PresignedUrlError, RemoteReadError
from tiered_kafka.format.record_batch import ControlRecordType, Record, RecordBatch, iter_batches
from tiered_kafka.client.gateway import GatewayClient, PlannedRange, object_url
from tiered_kafka.read_on import End, Step, read_on_budget, walk
from tiered_kafka.transactions import CommittedFilter, Fate

#: bytes ``visible_until`` reads at most (``read_on.read_on_budget`` for a reader that concludes nothing past it)
SCAN_MAX_BYTES = read_on_budget(None, resumable=True)


@dataclass(slots=True)
class DecodedBatch:
    """A record batch's identity and records (none for a control batch: ``control`` says which)."""

    base_offset: int
    last_offset: int
    producer_id: int
    transactional: bool
    control: ControlRecordType | None
    records: list[Record] = field(default_factory=list)


def fetch_range(client: GatewayClient, topic: str, partition: int, planned: PlannedRange) -> bytes | memoryview:
    """The bytes of ``planned``; an expired or refused URL is re-planned once and fetched again.

    The fresh plan starts at the same offset, so its first byte is the same batch boundary; its
    ranges are fetched until they cover ``planned.last_offset``.

    Every reader (the consumer's prefetch, bulk and columnar reads, Spark) fetches here, so a range
    of a compressed KIP-405 segment (``planned.transformed``: ``_fetch_chunked``) comes back as the
    original batch-aligned bytes like any other.
    """
    try:
        return _fetch_one(client, planned)
    except PresignedUrlError as first_error:
        fresh = client.plan(topic, partition, planned.first_offset, planned.size)
        parts: list[bytes | memoryview] = []
        for byte_range in fresh.ranges:
            if byte_range.first_offset > planned.last_offset:
                break
            try:
                parts.append(_fetch_one(client, byte_range))
            except PresignedUrlError as err:
                raise PresignedUrlError(f"{err} (also after re-planning; the first refusal: {first_error})") from err
        data = b"".join(parts)
        if fresh.ranges[0].start != planned.start or len(data) != planned.size:
            raise RemoteReadError(
                f"{topic}-{partition}: re-planned range at offset {planned.first_offset} no longer matches "
                f"bytes {planned.start}..{planned.end} of the segment (got {len(data)} bytes from {fresh.ranges[0].start})"
            ) from first_error
        return data


def _fetch_one(client: GatewayClient, planned: PlannedRange) -> bytes | memoryview:
    return client.fetch(planned) if planned.transformed is None else _fetch_chunked(client, planned)


def _fetch_chunked(client: GatewayClient, planned: PlannedRange) -> bytes:
    """Original bytes ``[start, end)`` of a compressed KIP-405 segment (Aiven's RemoteStorageManager):
    one ranged GET of the whole chunks covering them (``chunk_sizes``, each one zstd frame), then
    ``tiered_kafka.rsm.transform.detransform_range`` on the chunks the plan describes (each
    decompressed to at most, and exactly, its original size, then sliced). A chunk that does not
    decompress to its size is a ``CorruptRecordError`` naming the object, never bytes passed on."""
    from tiered_kafka.rsm.chunk_index import Chunk
    from tiered_kafka.rsm.transform import detransform_range

    chunked = planned.transformed
    if chunked is None or chunked.compression != "zstd":
        raise RemoteReadError(f"unsupported chunk transform {None if chunked is None else chunked.compression!r} in a plan")
    wire = PlannedRange(chunked.fetch_start, chunked.fetch_end, planned.first_offset, planned.last_offset, planned.url, chunked.range_header)
    data = client.fetch(wire)
    where = object_url(planned.url)
    chunks, original, stored = [], chunked.original_start, chunked.fetch_start
    for i, (size, original_size) in enumerate(zip(chunked.chunk_sizes, chunked.original_chunk_sizes, strict=True)):
        chunks.append(Chunk(i, original, original_size, stored, size))
        original, stored = original + original_size, stored + size
    try:
        return detransform_range(data, chunks, compression=True, encryption=None, start=planned.start, end=planned.end, what=where)
    except FormatError as err:
        raise CorruptRecordError(str(err), position=chunked.fetch_start) from err
    except ValueError as err:  # the plan's chunks do not cover [start, end)
        raise CorruptRecordError(f"{where}: {err}", position=planned.start) from err


def decode_batch(batch: RecordBatch, with_records: bool = True) -> DecodedBatch:
    """A batch's identity (KIP-98 fields of magic 2; none for magic 0/1) and, unless it is a control
    batch or ``with_records`` is false, its decoded records."""
    v2 = batch.magic >= 2
    control = batch.control_type() if v2 and batch.is_control else None
    return DecodedBatch(
        base_offset=batch.base_offset,
        last_offset=batch.last_offset,
        producer_id=batch.producer_id if v2 else -1,
        transactional=v2 and batch.is_transactional,
        control=control,
        records=list(batch) if control is None and with_records else [],
    )


def check_planned_range(planned: PlannedRange, object_key: str, first: int | None, last: int | None, bad_control: tuple[int, int, int] | None) -> None:
    """The read-plan promise for one decoded range (DESIGN.md contract 3), for every decoder of it:
    ``CorruptRecordError`` naming the object unless its batches hold exactly
    ``planned.first_offset..last_offset`` (``first``/``last``: the first batch's base offset and the
    last batch's last offset, None when it holds none) and every control batch's type is a
    ``ControlRecordType`` (``bad_control``: the first that is not, as (position, base offset, type);
    as ``record_batch.RecordBatch.control_type``: a marker is ABORT or COMMIT)."""
    if first != planned.first_offset or last != planned.last_offset:
        found = f"{first}..{last}" if first is not None else "nothing"
        raise CorruptRecordError(
            f"{object_key}: range {planned.range_header} should hold offsets {planned.first_offset}..{planned.last_offset}, holds {found}",
            position=planned.start,
        )
    if bad_control is not None:
        position, base, kind = bad_control
        raise CorruptRecordError(f"{object_key}: control batch without a valid control record key (type {kind})", position=position, base_offset=base)


def decode_range(data: bytes, planned: PlannedRange, *, object_key: str) -> list[DecodedBatch]:
    """Every batch of a fetched range, CRC-checked, in offset order.

    The range must hold whole batches from ``planned.first_offset`` to ``planned.last_offset``;
    anything else (a torn batch, other offsets) is a ``CorruptRecordError`` naming the object.
    """
    try:
        batches = [decode_batch(batch) for batch in iter_batches(data, position=planned.start)]
    except CorruptRecordError as err:
        err.args = (f"{object_key}: {err}",)
        raise
    check_planned_range(planned, object_key, batches[0].base_offset if batches else None, batches[-1].last_offset if batches else None, None)
    return batches


@dataclass(frozen=True, slots=True)
class Visibility:
    """What a reader at ``start`` can still get of remote offsets ``start..end-1`` (``visible_until``).

    ``stable_end``: where reading must stop for now (read_uncommitted: ``end``; read_committed: the
    first offset of the earliest transaction still open in remote storage, Kafka's last stable
    offset, capped at ``end``; below ``start`` when that transaction began before it).
    ``has_records``: whether any record in ``start..stable_end-1`` would be delivered (False when
    only control batches, aborted or filtered records remain).
    ``known``: False when remote storage could not answer (offsets not remote, or a recorded gap
    in the way) or the scan reached ``SCAN_MAX_BYTES`` first: then nothing is concluded.
    The scan stops at the first record that would be delivered: then ``has_records`` is True and
    ``stable_end`` is ``end`` (not computed further: the reader is not stuck).
    """

    stable_end: int
    has_records: bool
    known: bool = True


def visible_until(client: GatewayClient, topic: str, partition: int, start: int, end: int, *, read_committed: bool) -> Visibility:
    """Scan remote batches ``start..end-1`` and say what a reader positioned at ``start`` can still
    get there (``Visibility``), with the read_committed rule of ``tiered_kafka.transactions``.

    A reader whose position stops moving before ``end`` uses it to tell "the rest is not visible"
    (an open transaction, trailing control batches) from "the rest is still coming". The scan ends
    at the first record delivered in the range, at ``end``, or after ``SCAN_MAX_BYTES`` (unknown);
    a plan that does not advance is a ``RemoteReadError``. The walk and its plan sizes are
    ``tiered_kafka.read_on.walk``'s.
    """
    committed = CommittedFilter() if read_committed else None
    lso: int | None = None
    found: list[Visibility] = []  # set when the scan can conclude before the walk ends
    object_key = [""]  # the segment of the plan being read

    def plan(offset: int, max_bytes: int) -> Step[PlannedRange] | None:
        nonlocal lso
        try:
            plan = client.plan(topic, partition, offset, max_bytes, read_committed=read_committed)
        except OffsetNotRemoteError:
            found.append(Visibility(end, True, known=False))
            return None
        if plan.gap is not None:
            found.append(Visibility(end, True, known=False))
            return None
        if committed is not None:  # nothing at or past the remote last stable offset (tiered_kafka.transactions)
            committed.set_stable_end(plan.last_stable_offset)
            lso = committed.stable_end
            if lso is not None and lso <= start:  # a transaction open since before the position holds everything
                found.append(Visibility(lso, False))
                return None
            if _delivers([r for b, fate in committed.take_released() if fate is Fate.DELIVER for r in b.records], start, end):
                found.append(Visibility(end, True))
                return None
        object_key[0] = plan.object_key
        return Step(list(itertools.takewhile(lambda r: r.first_offset < end, plan.ranges)), plan.next_offset)

    def read(planned: PlannedRange) -> list[DecodedBatch]:
        return decode_range(fetch_range(client, topic, partition, planned), planned, object_key=object_key[0])

    def visit(batch: DecodedBatch) -> None:
        if batch.base_offset < end and _delivers(batch.records if committed is None else committed.push(batch), start, end):
            found.append(Visibility(end, True))

    walked = walk(plan, read, start, visit=visit, done=lambda: bool(found), budget=SCAN_MAX_BYTES, until=end)
    if found:
        return found[0]
    if walked.reason is End.BUDGET:
        return Visibility(end, True, known=False)
    if walked.reason is End.STUCK:
        raise RemoteReadError(f"{topic}-{partition}: the gateway's plan at offset {walked.offset} does not advance")
    held = None if committed is None else committed.first_held_offset
    stable_end = end if held is None else max(start, min(end, held))
    if lso is not None and lso < stable_end:  # the remote LSO: may be below start (a transaction opened before it)
        stable_end = lso
    return Visibility(stable_end, False)


def _delivers(records: list[Record], start: int, end: int) -> bool:
    return any(start <= r.offset < end for r in records)
