"""Reading one planned range: fetch it (re-planning an expired URL), check it is batch-aligned as
the read-plan contract promises (DESIGN.md, contract 3), verify every CRC and decode it.

Shared by ``TieredConsumer`` (in its prefetch threads) and the PySpark data source (in executors).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tiered_kafka.errors import CorruptRecordError, PresignedUrlError, RemoteReadError
from tiered_kafka.format.record_batch import ControlRecordType, Record, RecordBatch, iter_batches
from tiered_kafka.gateway_client import GatewayClient, PlannedRange


@dataclass(slots=True)
class DecodedBatch:
    """A record batch's identity and records (none for a control batch: ``control`` says which)."""

    base_offset: int
    last_offset: int
    producer_id: int
    transactional: bool
    control: ControlRecordType | None
    records: list[Record] = field(default_factory=list)


def fetch_range(client: GatewayClient, topic: str, partition: int, planned: PlannedRange) -> bytes:
    """The bytes of ``planned``; an expired or refused URL is re-planned once and fetched again.

    The fresh plan starts at the same offset, so its first byte is the same batch boundary; its
    ranges are fetched until they cover ``planned.last_offset``.
    """
    try:
        return client.fetch(planned)
    except PresignedUrlError as first_error:
        fresh = client.plan(topic, partition, planned.first_offset, planned.size)
        parts: list[bytes] = []
        for byte_range in fresh.ranges:
            if byte_range.first_offset > planned.last_offset:
                break
            try:
                parts.append(client.fetch(byte_range))
            except PresignedUrlError as err:
                raise PresignedUrlError(f"{err} (also after re-planning; the first refusal: {first_error})") from err
        data = b"".join(parts)
        if fresh.ranges[0].start != planned.start or len(data) != planned.size:
            raise RemoteReadError(
                f"{topic}-{partition}: re-planned range at offset {planned.first_offset} no longer matches "
                f"bytes {planned.start}..{planned.end} of the segment (got {len(data)} bytes from {fresh.ranges[0].start})"
            ) from first_error
        return data


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
    if not batches or batches[0].base_offset != planned.first_offset or batches[-1].last_offset != planned.last_offset:
        found = f"{batches[0].base_offset}..{batches[-1].last_offset}" if batches else "nothing"
        raise CorruptRecordError(
            f"{object_key}: range {planned.range_header} should hold offsets {planned.first_offset}..{planned.last_offset}, holds {found}",
            position=planned.start,
        )
    return batches
