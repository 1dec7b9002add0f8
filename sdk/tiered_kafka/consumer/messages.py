"""Remote records as confluent-kafka ``Message``s (the errors TieredConsumer delivers as messages: ``channel``).

A fetched range becomes a ``RangeMessages`` (``range_messages``, on a prefetch thread), whose
Messages are made later, a slice at a time, on the consumer's thread, as the application reaches them
(``MessageSlices``). Two implementations:

* compiled (the default): ``format._native.index_batches`` checks the range once (framing, CRC-32C,
  every record, as the columnar decoder does; uncompressed batches without the GIL, so the
  consumer's thread runs meanwhile) and indexes its batches; compressed batches are decompressed
  there, once. The range is then held as its own bytes (plus decompressed payloads), and
  ``_native.build_messages`` makes the Messages of the next batches straight from them: per
  record one Message, its key and value bytes (copied once from the range's bytes), an offset int
  and a (type, ms) tuple shared by the records of one millisecond; headers only when the record
  has some. No column and no intermediate list.
* reference (``TIERED_KAFKA_PURE_PYTHON=1``, and ranges holding magic 0/1 message sets): the
  columnar decoder (``columnar_read.decode_planned``), then each column as a Python list
  (``Array.to_pylist``) and ``map`` over Message's positional constructor; the whole range at once.
  ``tests/unit/sdk/test_consumer_messages.py`` holds both to the per-record reference, field by field.

Memory (what ``range_messages`` reports, and the prefetch budget holds until the application has
taken the range): the range's bytes and decompressed payloads, plus one slice of Messages
(``SLICE_BYTES`` of keys and values, at most ``SLICE_ROWS`` records): the Messages the application
has taken are its own. Decision: slices of about 2 MiB, a few ``consume(1000)`` calls' worth; a
slice is whole batches, the read_committed rule's unit.

The read_committed rule (``transactions.CommittedFilter``) decides every batch: a range with no
transactional or control batch is pushed as one batch whose records are its ``MessageSlices``
(``as_one_batch``; the rule's fast path hands that object back and it is delivered slice by slice;
otherwise iterating it makes the rest of its Messages at once); other ranges are pushed batch by
batch with their Messages made at once (``batches``).

Messages are only ever returned to the application; TieredConsumer never hands them back to
librdkafka (commit and store_offsets take their topic, partition and offset), which is what the
constructor's "testing only" warning is about.
"""

from __future__ import annotations

from collections.abc import Iterator
from itertools import repeat
from typing import TYPE_CHECKING, Any

import pyarrow as pa
from confluent_kafka import (
    TIMESTAMP_CREATE_TIME,
    TIMESTAMP_LOG_APPEND_TIME,
    TIMESTAMP_NOT_AVAILABLE,
    Message,
)

from tiered_kafka.client.columnar_read import decode_planned
from tiered_kafka.errors import CorruptRecordError
from tiered_kafka.format import record_batch
from tiered_kafka.format.record_batch import ControlRecordType, decompress
from tiered_kafka.client.remote_read import DecodedBatch, check_planned_range

if TYPE_CHECKING:
    from tiered_kafka.format.columnar import ColumnarRange
    from tiered_kafka.client.gateway import PlannedRange

#: RECORD_SCHEMA's timestamp_type (0 CreateTime, 1 LogAppendTime) as confluent-kafka's constants
_REMOTE_TS_TYPES = {0: TIMESTAMP_CREATE_TIME, 1: TIMESTAMP_LOG_APPEND_TIME}
_TS_TYPES = (TIMESTAMP_CREATE_TIME, TIMESTAMP_LOG_APPEND_TIME)
_NO_TIMESTAMP = (TIMESTAMP_NOT_AVAILABLE, -1)
#: bytes a delivered Message costs beyond its key and value (the object, two bytes headers, the
#: offset int, a list slot, a share of a timestamp tuple: measured with tracemalloc, rounded up)
MESSAGE_OVERHEAD = 240
#: a slice of Messages made at once: about this many bytes of keys and values ...
SLICE_BYTES = 2 * 2**20
#: ... and at most this many records
SLICE_ROWS = 4096


class RangeMessages:
    """One fetched range, its Messages made on demand (module doc).

    ``first_offset``/``last_offset``: the range's first batch's base offset and last batch's last
    offset (control batches included: the position may pass them); ``last_base_offset``: its last
    batch's base offset. ``plain``: no batch is transactional or a control batch. ``rows``: its
    records (control batches have none).
    """

    __slots__ = ("topic", "partition", "first_offset", "last_offset", "last_base_offset", "plain", "rows", "slice_rows")

    def __init__(self, topic: str, partition: int, first: int, last: int, last_base: int, plain: bool, rows: int, slice_rows: int) -> None:
        self.topic = topic
        self.partition = partition
        self.first_offset = first
        self.last_offset = last
        self.last_base_offset = last_base
        self.plain = plain
        self.rows = rows
        self.slice_rows = slice_rows

    # -- the implementation's part ----------------------------------------------------------------
    def build(self, start: int, min_rows: int) -> tuple[list[Message], int]:
        """Messages of the records of batches ``start``.. until at least ``min_rows`` (whole
        batches), and the index of the batch after the last one used."""
        raise NotImplementedError

    def batch_rows(self) -> list[tuple[int, int, int, bool, int, int]]:
        """(base_offset, last_offset, producer_id, transactional, control, row_count) per batch."""
        raise NotImplementedError

    # -- uses -------------------------------------------------------------------------------------
    @property
    def messages(self) -> list[Message]:
        """Every Message of the range, made now."""
        return self.build(0, self.rows)[0]

    def batches(self) -> list[DecodedBatch]:
        """Every batch, control ones included, with its Messages (made now)."""
        rows = self.batch_rows()
        messages = self.messages
        out, start = [], 0
        for base, last, producer, transactional, control, count in rows:
            out.append(DecodedBatch(base, last, producer, transactional, None if control < 0 else ControlRecordType(control), messages[start : start + count]))
            start += count
        return out

    def as_one_batch(self) -> DecodedBatch:
        """The whole range as one non-transactional batch whose records are its ``MessageSlices``
        (only for a ``plain`` range: its batches are all delivered alike by the read_committed rule)."""
        return DecodedBatch(self.first_offset, self.last_offset, -1, False, None, MessageSlices(self))  # type: ignore[arg-type]

    def slices(self) -> MessageSlices:
        return MessageSlices(self)


class MessageSlices:
    """A range's Messages not yet made, made a slice at a time (``take``); ``len`` is the records
    left; iterating makes all of them at once."""

    __slots__ = ("range", "next_batch", "left")

    def __init__(self, messages: RangeMessages) -> None:
        self.range = messages
        self.next_batch = 0
        self.left = messages.rows

    def __len__(self) -> int:
        return self.left

    def take(self, min_rows: int | None = None) -> list[Message]:
        """The next slice (whole batches, at least ``min_rows`` records; default: the range's slice size)."""
        if not self.left:
            return []
        out, self.next_batch = self.range.build(self.next_batch, self.range.slice_rows if min_rows is None else min_rows)
        self.left -= len(out)
        return out

    def skip_below(self, offset: int) -> None:
        """Pass the batches wholly below ``offset`` without making their Messages."""
        if offset <= self.range.first_offset or self.next_batch:
            return
        for base, last, _producer, _transactional, _control, count in self.range.batch_rows():
            if last >= offset:
                break
            self.next_batch += 1
            self.left -= count

    def __iter__(self) -> Iterator[Message]:
        return iter(self.take(self.left))


class _NativeRange(RangeMessages):
    """The range's bytes, checked and indexed by ``_native.index_batches``."""

    __slots__ = ("_data", "_index", "_payloads")

    def __init__(self, topic: str, partition: int, data: bytes, index: bytes, payloads: list[bytes] | None, info: tuple[Any, ...], slice_rows: int) -> None:
        _batches, rows, plain, first, last, last_base, _kv_bytes, _bad = info
        super().__init__(topic, partition, first, last, last_base, plain, rows, slice_rows)
        self._data, self._index, self._payloads = data, index, payloads

    def build(self, start: int, min_rows: int) -> tuple[list[Message], int]:
        out: tuple[list[Message], int] = record_batch._native.build_messages(  # type: ignore[union-attr]
            self._data, self._index, self._payloads, start, min_rows, Message, self.topic, self.partition, _TS_TYPES
        )
        return out

    def batch_rows(self) -> list[tuple[int, int, int, bool, int, int]]:
        rows: list[tuple[int, int, int, bool, int, int]] = record_batch._native.batch_rows(self._index)  # type: ignore[union-attr]
        return rows


class _ColumnRange(RangeMessages):
    """The reference: a range decoded columnar, its Messages made all at once on first use."""

    __slots__ = ("_records", "_messages", "_batch_table")

    def __init__(self, topic: str, partition: int, decoded: ColumnarRange) -> None:
        batches = decoded.batches
        if batches.num_rows == 0:
            raise ValueError("a decoded range without batches")  # (decode_planned checks it holds its offsets)
        last = batches.num_rows - 1
        bases = batches.column("base_offset")
        plain = batches.column("transactional").true_count == 0 and max(batches.column("control").to_pylist()) < 0
        super().__init__(topic, partition, bases[0].as_py(), batches.column("last_offset")[last].as_py(), bases[last].as_py(), plain, decoded.records.num_rows, decoded.records.num_rows)
        self._records: pa.RecordBatch | None = decoded.records
        self._messages: list[Message] | None = None
        self._batch_table = batches

    def _all(self) -> list[Message]:
        if self._messages is None:
            records = self._records
            if records is None:
                raise RuntimeError("a range's records are gone")
            self._messages, self._records = _messages(self.topic, self.partition, records), None
        return self._messages

    def batch_rows(self) -> list[tuple[int, int, int, bool, int, int]]:
        columns = [self._batch_table.column(name).to_pylist() for name in ("base_offset", "last_offset", "producer_id", "transactional", "control", "row_count")]
        return list(zip(*columns, strict=True))

    def build(self, start: int, min_rows: int) -> tuple[list[Message], int]:
        row_starts = self._batch_table.column("row_start")
        n = self._batch_table.num_rows
        if start >= n:
            return [], n
        return self._all()[row_starts[start].as_py() :], n  # the rest of the range at once


def range_messages(topic: str, partition: int, data: bytes, planned: PlannedRange, object_key: str) -> tuple[RangeMessages, int]:
    """A fetched range (``data``, the bytes of ``planned`` in the object ``object_key``) as
    ``RangeMessages``, and what it holds in memory until the application has taken its records
    (module doc). It must hold whole batches ``planned.first_offset..last_offset``, every CRC and
    record valid (``CorruptRecordError`` naming the object otherwise), as ``decode_planned``."""
    native = record_batch._native
    if native is not None:
        try:
            index, payloads, info = native.index_batches(data, planned.start, decompress, int(max(ControlRecordType)))
        except native.LegacyMagic:
            pass  # a magic 0/1 message set: the reference path
        except CorruptRecordError as err:
            err.args = (f"{object_key}: {err}",)
            raise
        else:
            batches, rows, _plain, first, last, _last_base, kv_bytes, bad = info
            check_planned_range(planned, object_key, first if batches else None, last if batches else None, bad)
            slice_rows = max(1, min(SLICE_ROWS, rows, SLICE_BYTES * rows // max(1, kv_bytes)))
            held = len(data) + sum(map(len, payloads or ())) + slice_rows * MESSAGE_OVERHEAD + kv_bytes * slice_rows // max(1, rows)
            return _NativeRange(topic, partition, data, index, payloads, info, slice_rows), held
    decoded = decode_planned(data, planned, object_key=object_key)
    records = decoded.records
    columns = records.column("key").nbytes + records.column("value").nbytes
    # the columns, and the Messages made from them (both exist while the Messages are being made)
    return _ColumnRange(topic, partition, decoded), records.num_rows * MESSAGE_OVERHEAD + 2 * columns


def _messages(topic: str, partition: int, records: pa.RecordBatch) -> list[Message]:
    """One Message per row, with no Python loop per record (module doc)."""
    n = records.num_rows
    key_column = records.column("key")
    keys: Any = repeat(None) if key_column.null_count == n else key_column.to_pylist()
    return list(
        map(
            Message,
            repeat(topic),
            repeat(partition),
            records.column("offset").to_pylist(),
            keys,
            records.column("value").to_pylist(),
            _headers(records, n),
            repeat(None),
            _timestamps(records, n),
        )
    )


def _timestamps(records: pa.RecordBatch, n: int) -> Any:
    """(type, ms) per record as confluent-kafka's ``Message.timestamp()``."""
    stamps, types = records.column("timestamp"), records.column("timestamp_type")
    if n and stamps.null_count == 0:
        kinds = memoryview(types.buffers()[1]).cast("i")[types.offset : types.offset + n]
        low, high = min(kinds), max(kinds)
        if low == high and low in _REMOTE_TS_TYPES:  # the common case: one type for the whole range
            return zip(repeat(_REMOTE_TS_TYPES[low]), stamps.to_pylist(), strict=False)
    # a record without a type (magic 0) has none; one whose timestamp is -1 (Java NO_TIMESTAMP, a
    # null here) keeps its type with -1, as librdkafka reports it
    return [
        (_REMOTE_TS_TYPES[kind], -1 if ts is None else ts) if kind in _REMOTE_TS_TYPES else _NO_TIMESTAMP
        for ts, kind in zip(stamps.to_pylist(), types.to_pylist(), strict=True)
    ]


def _headers(records: pa.RecordBatch, n: int) -> Any:
    """Headers per record as confluent-kafka's ``Message.headers()``: a list of (key, value), or None."""
    if "headers" not in records.schema.names:
        return repeat(None)
    column = records.column("headers")
    if len(column.flatten()) == 0:  # no record has a header
        return repeat(None)
    return [[(h["key"], h["value"]) for h in hs] if hs else None for hs in column.to_pylist()]
