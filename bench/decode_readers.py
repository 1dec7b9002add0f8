"""The readers compared by ``bench_decode.py``, all doing the same work per segment.

Every reader frames the segment into batches, validates each batch's CRC-32C, skips control
batches and hands each remaining batch's records to a *sink* (the columnar readers decode into
Arrow arrays instead, see :func:`_columnar_reader`). The timed sink (:func:`touch`)
reads every record's offset, timestamp, key, value and headers; the verification sink
(:class:`Collector`) keeps them for comparison. Timing and verification therefore run the
same code path.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from aiokafka.record.memory_records import MemoryRecords as AioMemoryRecords
from kafka.record.memory_records import MemoryRecords as KafkaPythonMemoryRecords

from tiered_kafka.format.columnar import ColumnarRange, decode_columnar
from tiered_kafka.format.record_batch import iter_batches, iter_records, reference_paths

#: Consumes one iterable of records, returns how many it saw.
Sink = Callable[[Iterable[Any]], int]
#: Decodes one segment, feeding its records to the sink; returns the record count.
Reader = Callable[[bytes, Sink], int]
#: offset, timestamp, key, value, headers
RecordFields = tuple[int, int | None, bytes | None, bytes | None, tuple[tuple[str, bytes | None], ...]]
RECORD_FIELD_NAMES = ("offset", "timestamp", "key", "value", "headers")

#: "c" when aiokafka's reference reader is its Cython extension, "python" otherwise.
AIOKAFKA_IMPLEMENTATION = "c" if "._crecords." in AioMemoryRecords.__module__ else "python"

OURS = "ours"
OURS_ITER_RECORDS = "ours.iter_records"
COLUMNAR_C = "columnar.c"
COLUMNAR_PYTHON = "columnar.python"


class ReferenceCrcError(Exception):
    """A reference reader found a batch whose stored CRC does not match its bytes."""


def touch(records: Iterable[Any]) -> int:
    """Read every field of every record (the timed work); return the record count."""
    count = 0
    for record in records:
        _fields = (record.offset, record.timestamp, record.key, record.value, record.headers)
        count += 1
    return count


class Collector:
    """A sink that keeps every record's fields, for checking readers against each other."""

    def __init__(self) -> None:
        self.records: list[RecordFields] = []

    def __call__(self, records: Iterable[Any]) -> int:
        before = len(self.records)
        self.records.extend(
            (r.offset, r.timestamp, r.key, r.value, tuple(tuple(h) for h in r.headers)) for r in records
        )
        return len(self.records) - before


def read_ours(segment: bytes, sink: Sink) -> int:
    """Our reader as the log writer and consumers use it: iter_batches (CRC verified), then
    each non-control batch's records."""
    count = 0
    for batch in iter_batches(segment):
        if not batch.is_control:
            count += sink(batch)
    return count


def read_ours_iter_records(segment: bytes, sink: Sink) -> int:
    """Our convenience API: iter_records (CRC verified, control batches skipped)."""
    return sink(iter_records(segment))


def memory_records_reader(memory_records_cls: type) -> Reader:
    """A reference reader over a MemoryRecords class (aiokafka's or kafka-python's): the loop
    those clients' fetchers run."""

    def read(segment: bytes, sink: Sink) -> int:
        records = memory_records_cls(segment)
        count = 0
        while records.has_next():
            batch = records.next_batch()
            if not batch.validate_crc():
                raise ReferenceCrcError(f"CRC mismatch in batch with base offset {batch.base_offset}")
            if not batch.is_control_batch:
                count += sink(batch)
        return count

    return read


def _columnar_rows(decoded: ColumnarRange) -> Iterable[Any]:
    """The rows of decode_columnar's records table as record-like objects (for the Collector only)."""
    table = decoded.records.to_pydict()
    for offset, timestamp, key, value, headers in zip(
        table["offset"], table["timestamp"], table["key"], table["value"], table["headers"]
    ):
        yield _Row(offset, timestamp, key, value, [(h["key"], h["value"]) for h in headers])


class _Row:
    __slots__ = ("offset", "timestamp", "key", "value", "headers")

    def __init__(self, offset: int, timestamp: int | None, key: Any, value: Any, headers: list) -> None:
        self.offset, self.timestamp, self.key, self.value, self.headers = offset, timestamp, key, value, headers


def _columnar_reader(reference: bool) -> Reader:
    """decode_columnar (the C path, or the pure-Python reference): the timed work is decoding the segment
    into Arrow arrays, every field of every record, with no per-record object; the timed sink is not
    called (it would create the objects columnar decoding avoids). The Collector reads the arrays back
    as rows, so that the records are checked against the reference readers' like every other reader's."""

    def read(segment: bytes, sink: Sink) -> int:
        if reference:
            with reference_paths():
                decoded = decode_columnar(segment)
        else:
            decoded = decode_columnar(segment)
        if isinstance(sink, Collector):
            return sink(_columnar_rows(decoded))
        return decoded.records.num_rows

    return read


#: Our readers; OURS is the one the goal applies to.
OUR_READERS: dict[str, Reader] = {
    OURS: read_ours,
    OURS_ITER_RECORDS: read_ours_iter_records,
    COLUMNAR_C: _columnar_reader(reference=False),
    COLUMNAR_PYTHON: _columnar_reader(reference=True),
}

#: Reference readers (fastest one is the yardstick).
REFERENCE_READERS: dict[str, Reader] = {
    "aiokafka": memory_records_reader(AioMemoryRecords),
    "kafka-python": memory_records_reader(KafkaPythonMemoryRecords),
}

ALL_READERS: dict[str, Reader] = {**OUR_READERS, **REFERENCE_READERS}


def read_dataset(reader: Reader, segments: Iterable[bytes], sink: Sink = touch) -> int:
    """Decode every segment of a dataset with ``reader``; return the record count."""
    return sum(reader(segment, sink) for segment in segments)
