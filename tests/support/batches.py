"""Record batches built by an independent implementation (kafka-python's builders), for tests.

Our reader decodes through aiokafka; building with kafka-python (python-snappy, lz4, zstandard
codecs) keeps the round trips honest.
"""

from __future__ import annotations

import functools
import struct
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import crc32c
from kafka.codec import snappy_encode
from kafka.record import default_records as kp_default
from kafka.record.default_records import DefaultRecordBatchBuilder
from kafka.record.legacy_records import LegacyRecordBatchBuilder


@dataclass(frozen=True)
class Rec:
    key: bytes | None
    value: bytes | None
    timestamp: int
    headers: list[tuple[str, bytes | None]] = field(default_factory=list)


def sample_records(count: int, *, start_ts: int = 1_700_000_000_000, value_size: int = 100) -> list[Rec]:
    return [
        Rec(
            key=None if i % 7 == 3 else f"key-{i}".encode(),
            value=None if i % 11 == 5 else (f"value-{i}-".encode() * value_size)[:value_size],
            timestamp=start_ts + (i * 37) % 1000,  # not monotonic: max timestamp mid-batch
            headers=[] if i % 2 else [("h1", f"v{i}".encode()), ("h2", None)],
        )
        for i in range(count)
    ]


@contextmanager
def raw_snappy() -> Iterator[None]:
    """Make kafka-python write raw snappy blocks (librdkafka's way) instead of xerial framing (Java's)."""
    original = kp_default.snappy_encode
    kp_default.snappy_encode = functools.partial(snappy_encode, xerial_compatible=False)
    try:
        yield
    finally:
        kp_default.snappy_encode = original


def build_v2(
    records: list[Rec],
    *,
    codec: int = 0,
    base_offset: int = 0,
    producer_id: int = -1,
    transactional: bool = False,
) -> bytes:
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=codec,
        is_transactional=transactional,
        producer_id=producer_id,
        producer_epoch=0 if producer_id >= 0 else -1,
        base_sequence=0 if producer_id >= 0 else -1,
        batch_size=1 << 30,
    )
    for i, rec in enumerate(records):
        builder.append(i, timestamp=rec.timestamp, key=rec.key, value=rec.value, headers=rec.headers)
    data = bytearray(builder.build())
    struct.pack_into(">q", data, 0, base_offset)
    return bytes(data)


def build_legacy(records: list[Rec], *, magic: int, codec: int = 0, base_offset: int = 0) -> bytes:
    builder = LegacyRecordBatchBuilder(magic=magic, compression_type=codec, batch_size=1 << 30)
    # Magic 0 wrappers hold absolute inner offsets; magic 1 wrappers relative ones (KIP-31).
    inner_base = base_offset if magic == 0 and codec else 0
    for i, rec in enumerate(records):
        builder.append(inner_base + i, timestamp=rec.timestamp if magic else None, key=rec.key, value=rec.value)
    data = bytearray(builder.build())
    if codec == 0:  # one message per record: shift every message's offset
        pos = 0
        while pos < len(data):
            offset, length = struct.unpack_from(">qi", data, pos)
            struct.pack_into(">q", data, pos, base_offset + offset)
            pos += 12 + length
    else:  # a wrapper's offset is the offset of its last inner message
        struct.pack_into(">q", data, 0, base_offset + len(records) - 1)
    return bytes(data)


def build_control(marker: int, *, base_offset: int, producer_id: int = 1000, timestamp: int = 1_700_000_000_500) -> bytes:
    """A transaction marker batch: key (version 0, type), value (version 0, coordinator epoch 0)."""
    data = bytearray(
        build_v2(
            [Rec(struct.pack(">hh", 0, marker), struct.pack(">hi", 0, 0), timestamp)],
            base_offset=base_offset,
            producer_id=producer_id,
            transactional=True,
        )
    )
    attributes = struct.unpack_from(">h", data, 21)[0] | 0x20
    struct.pack_into(">h", data, 21, attributes)
    struct.pack_into(">I", data, 17, crc32c.crc32c(bytes(data[21:])))
    return bytes(data)
