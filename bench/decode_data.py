"""Datasets for ``bench_decode.py``: the broker-written fixtures and generated segments.

A dataset is a list of segments (the bytes of ``.log`` files) that every reader decodes in
full. Generated segments are built with aiokafka's ``DefaultRecordBatchBuilder`` (magic 2),
stamped with consecutive base offsets the way a broker does on append, so they are valid
segments of one partition.
"""

from __future__ import annotations

import json
import random
import struct
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from aiokafka.record.default_records import DefaultRecordBatchBuilder
from aiokafka.record.memory_records import MemoryRecords

FIXTURES_DIR = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "kafka-segments"

#: Compression codec ids (attributes bits 0-2) and their names.
CODECS: dict[int, str] = {0: "none", 1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}

#: Batch size limits for generated data, applied (as aiokafka's builder and librdkafka do) to
#: the uncompressed batch: the Java producer's default batch.size (16384) and librdkafka's
#: (1000000, reached at high throughput with its default linger.ms=5).
BATCH_SIZES: dict[str, int] = {"16KiB": 16 * 1024, "1MB": 1_000_000}

RECORD_VALUE_SIZE = 1024
_RANDOM_PART = 512  # incompressible half of each value; the other half is repetitive text
_BASE_TIMESTAMP_MS = 1_700_000_000_000
_BASE_OFFSET_FIELD = struct.Struct(">q")
_LEADER_EPOCH_FIELD = struct.Struct(">i")
_LEADER_EPOCH_POSITION = 12
_RECORD_COUNT_FIELD = struct.Struct(">i")
_RECORD_COUNT_POSITION = 57
_CODEC_MASK = 0x07

#: One record to append: timestamp (ms), key, value, headers.
RecordSpec = tuple[int, bytes, bytes, list[tuple[str, bytes]]]


@dataclass(frozen=True)
class Dataset:
    """Segments that every reader decodes, with what we know about them."""

    name: str
    codec: str
    segments: tuple[bytes, ...]
    records: int  # expected record count (fixture MANIFEST.json or generator)
    batches: int

    @property
    def label(self) -> str:
        return f"{self.name}/{self.codec}"

    @property
    def size(self) -> int:
        """Bytes of all segments as stored (compressed size for compressed codecs)."""
        return sum(len(segment) for segment in self.segments)


# -- the broker-written fixtures ------------------------------------------------------------


def fixture_datasets(*, first_segment_only: bool = False) -> list[Dataset]:
    """One dataset per partition directory of tests/fixtures/kafka-segments."""
    manifest = json.loads((FIXTURES_DIR / "MANIFEST.json").read_text())
    datasets = []
    for partition_dir in sorted(path for path in FIXTURES_DIR.iterdir() if path.is_dir()):
        log_files = sorted(partition_dir.glob("*.log"))[: 1 if first_segment_only else None]
        segments = tuple(path.read_bytes() for path in log_files)
        expected = sum(manifest[partition_dir.name][path.name]["records"] for path in log_files)
        codec, batches = _describe(segments)
        datasets.append(Dataset(partition_dir.name, codec, segments, expected, batches))
    return datasets


def _describe(segments: Iterable[bytes]) -> tuple[str, int]:
    """The codecs the segments' batches use ("none", "gzip+lz4", ...) and the batch count.

    Framed with aiokafka's MemoryRecords, independently of the reader under test.
    """
    codec_ids = set()
    batches = 0
    for segment in segments:
        records = MemoryRecords(segment)
        while (batch := records.next_batch()) is not None:
            codec_ids.add(batch.attributes & _CODEC_MASK)
            batches += 1
    return "+".join(CODECS[codec_id] for codec_id in sorted(codec_ids)) or "-", batches


# -- generated segments ---------------------------------------------------------------------


def generate_records(count: int, *, seed: int = 20240601) -> list[RecordSpec]:
    """``count`` records of RECORD_VALUE_SIZE-byte values: half random bytes, half repetitive
    JSON-like text (so codecs get a realistic ~2x), a short key and two headers."""
    rng = random.Random(seed)
    records = []
    for index in range(count):
        text = (b'{"event":"page_view","user":%d,"path":"/catalog/item"}' % (index % 997)) * 16
        value = rng.randbytes(_RANDOM_PART) + text[: RECORD_VALUE_SIZE - _RANDOM_PART]
        headers = [("trace-id", rng.randbytes(8).hex().encode()), ("content-type", b"application/json")]
        records.append((_BASE_TIMESTAMP_MS + index, b"user-%06d" % (index % 100_000), value, headers))
    return records


def generated_datasets(records: Sequence[RecordSpec]) -> Iterator[Dataset]:
    """One dataset per (batch size, codec), each a single segment holding ``records``.

    Built lazily, one at a time, so the benchmark holds one dataset in memory at once.
    """
    for size_name, batch_size in BATCH_SIZES.items():
        for codec_id, codec_name in CODECS.items():
            segment, batches = build_segment(records, codec_id, batch_size)
            yield Dataset(f"generated-{size_name}", codec_name, (segment,), len(records), batches)


def build_segment(records: Iterable[RecordSpec], codec_id: int, batch_size: int) -> tuple[bytes, int]:
    """A valid segment of ``records`` starting at offset 0, and its batch count."""
    segment = bytearray()
    next_offset = 0
    batches = 0
    for batch in _build_batches(records, codec_id, batch_size):
        _BASE_OFFSET_FIELD.pack_into(batch, 0, next_offset)  # outside the CRC, as a broker does
        _LEADER_EPOCH_FIELD.pack_into(batch, _LEADER_EPOCH_POSITION, 0)
        next_offset += _RECORD_COUNT_FIELD.unpack_from(batch, _RECORD_COUNT_POSITION)[0]
        segment += batch
        batches += 1
    return bytes(segment), batches


def _build_batches(records: Iterable[RecordSpec], codec_id: int, batch_size: int) -> Iterator[bytearray]:
    """Producer-style batching: append until the builder refuses, then start a new batch."""
    builder = _new_builder(codec_id, batch_size)
    in_batch = 0
    for timestamp, key, value, headers in records:
        if builder.append(in_batch, timestamp, key, value, headers) is None:
            yield builder.build()
            builder = _new_builder(codec_id, batch_size)
            in_batch = 0
            builder.append(in_batch, timestamp, key, value, headers)  # a first record always fits
        in_batch += 1
    if in_batch:
        yield builder.build()


def _new_builder(codec_id: int, batch_size: int) -> DefaultRecordBatchBuilder:
    return DefaultRecordBatchBuilder(
        magic=2,
        compression_type=codec_id,
        is_transactional=0,
        producer_id=-1,
        producer_epoch=-1,
        base_sequence=-1,
        batch_size=batch_size,
    )
