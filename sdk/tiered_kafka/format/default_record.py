"""The pure-Python reference decoder of a magic 2 batch's records (Java ``DefaultRecord.readFrom``).

The record layout (varints zigzag-encoded as in Java ``ByteUtils``) is documented once, in
``tiered_kafka/format/_native.c``; the batch header in ``record_batch``. This module makes exactly the
checks, in exactly the order, of the compiled ``_batch.c`` (``tk_check_header``, ``tk_open_batch``,
``tk_parse_record``, ``tk_check_record``, ``tk_each_record``), raising the same error types with the
same messages: ``tests/unit/format/test_record_batch_native.py`` mutates valid batches at random and
holds both to that.

Decision (strictness): where Java is lenient about a record that contradicts its own batch or its own
length, both paths reject it as corrupt (CorruptRecordError), since such bytes were not written by a
Kafka producer or broker:

* a key or value length below -1 (Java's ``DefaultRecord.readFrom`` reads any negative length as null),
  a header key length below 0, a header value length below -1;
* an offsetDelta outside ``0..lastOffsetDelta``; a negative lastOffsetDelta (also in an empty batch);
  a negative baseOffset, or baseOffset + lastOffsetDelta past int64 (baseOffset is not covered by the
  CRC); baseTimestamp + timestampDelta past int64 (Java wraps silently), checked for LogAppendTime
  batches too, whose records take maxTimestamp;
* a varint longer than 5 bytes or outside int32 after zigzag decoding (a varlong: 10 bytes);
* a record whose length does not end exactly after its headers, a batch with bytes after its
  recordCount records. The record attributes byte is ignored, as in Java.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

from tiered_kafka.errors import CorruptRecordError, UnsupportedCodecError

#: The smallest record after its length varint: one byte each for attributes, timestampDelta,
#: offsetDelta, keyLength, valueLength, headersCount (``TK_MIN_RECORD_SIZE`` - 1 in ``_native.h``).
MIN_RECORD_SIZE = 7
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
_INT32_MIN, _INT32_MAX = -(2**31), 2**31 - 1
_UINT64_MASK = 2**64 - 1


class DefaultRecord(NamedTuple):
    """One record of a magic 2 batch: the fields of ``record_batch.Record``."""

    offset: int
    timestamp: int
    timestamp_type: int  # 0 CreateTime, 1 LogAppendTime
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]]
    checksum: None = None  # magic 2 records carry no checksum (as aiokafka's and _native.Record)


class BatchHeader(NamedTuple):
    """The magic 2 header fields the records need (``record_batch.RecordBatch`` properties)."""

    position: int
    base_offset: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    record_count: int


class _RecordError(Exception):
    """A record's problem, wrapped by the caller with the record's index (C: ``tk_parse_record``'s err)."""


def check_header(header: BatchHeader) -> None:
    """The header checks beyond framing (``tk_check_header``): CorruptRecordError naming the field."""
    problem = None
    if header.record_count < 0:
        problem = f"negative recordCount {header.record_count}"
    elif header.last_offset_delta < 0:
        problem = f"negative lastOffsetDelta {header.last_offset_delta}"
    elif header.base_offset < 0:
        problem = f"negative baseOffset {header.base_offset}"
    elif header.base_offset > _INT64_MAX - header.last_offset_delta:
        problem = (
            f"baseOffset {header.base_offset} + lastOffsetDelta {header.last_offset_delta} "
            "is past the largest offset (int64)"
        )
    if problem is not None:
        raise CorruptRecordError(problem, position=header.position, base_offset=header.base_offset)


def _varlong(data: bytes, pos: int, end: int, max_bytes: int, what: str, kind: str) -> tuple[int, int]:
    """A zigzag varint of at most max_bytes bytes at data[pos] (before end): (value, next pos)."""
    value = 0
    for i in range(max_bytes):
        if pos >= end:
            raise _RecordError(f"record ends inside its {what}")
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << (7 * i)
        if not byte & 0x80:
            value &= _UINT64_MASK
            return (value >> 1) ^ -(value & 1), pos
    raise _RecordError(f"invalid {kind} for the record's {what}")


def _varint(data: bytes, pos: int, end: int, what: str) -> tuple[int, int]:
    value, pos = _varlong(data, pos, end, 5, what, "varint")
    if not _INT32_MIN <= value <= _INT32_MAX:
        raise _RecordError(f"invalid varint for the record's {what}")
    return value, pos


def _parse_record(data: bytes, pos: int, end: int) -> tuple[tuple[int, int, bytes | None, bytes | None, list], int]:
    """One record at data[pos] (``tk_parse_record``): ((timestampDelta, offsetDelta, key, value, headers), next)."""
    length, pos = _varint(data, pos, end, "length")
    if length < MIN_RECORD_SIZE - 1:
        raise _RecordError("record length is below the smallest record")
    if length > end - pos:
        raise _RecordError("record length runs past the end of the batch")
    end = pos + length
    pos += 1  # attributes int8, unused (Java ignores it too)
    timestamp_delta, pos = _varlong(data, pos, end, 10, "timestampDelta", "varlong")
    offset_delta, pos = _varint(data, pos, end, "offsetDelta")
    key, pos = _bytes(data, pos, end, "key length", "negative key length below -1", "key")
    value, pos = _bytes(data, pos, end, "value length", "negative value length below -1", "value")
    count, pos = _varint(data, pos, end, "header count")
    if count < 0:
        raise _RecordError("negative header count")
    if count > end - pos:
        raise _RecordError("header count exceeds the record's bytes")
    headers: list[tuple[str, bytes | None]] = []
    for _ in range(count):
        key_len, pos = _varint(data, pos, end, "header key length")
        if key_len < 0:
            raise _RecordError("negative header key length")
        if key_len > end - pos:
            raise _RecordError("header key runs past the end of the record")
        try:
            header_key = bytes(data[pos : pos + key_len]).decode("utf-8")
        except UnicodeDecodeError:
            raise _RecordError("header key is not valid UTF-8") from None
        pos += key_len
        header_value, pos = _bytes(
            data, pos, end, "header value length", "negative header value length below -1", "header value"
        )
        headers.append((header_key, header_value))
    if pos != end:
        raise _RecordError("record length does not match its fields")
    return (timestamp_delta, offset_delta, key, value, headers), pos


def _bytes(data: bytes, pos: int, end: int, what: str, below: str, name: str) -> tuple[bytes | None, int]:
    length, pos = _varint(data, pos, end, what)
    if length < -1:
        raise _RecordError(below)
    if length < 0:
        return None, pos
    if length > end - pos:
        raise _RecordError(f"{name} runs past the end of the record")
    return bytes(data[pos : pos + length]), pos + length


def decode_records(
    header: BatchHeader, payload: memoryview, decompress: Callable[[int, memoryview], bytes]
) -> list[DefaultRecord]:
    """Every record of a framed magic 2 batch (``payload``: its bytes after the 61-byte header), checked
    as ``tk_open_batch`` and ``tk_each_record`` check them."""
    check_header(header)
    where = {"position": header.position, "base_offset": header.base_offset}
    codec = header.attributes & 0x07
    if codec > 4:
        raise UnsupportedCodecError(
            f"unknown compression codec id {codec} in batch with base offset {header.base_offset} "
            f"at position {header.position}"
        )
    data: bytes | memoryview = payload
    if codec != 0 and header.record_count > 0:
        try:
            data = decompress(codec, payload)
        except Exception as err:  # as _batch.c's decompress_payload: any failure is a corrupt batch
            raise CorruptRecordError(
                f"cannot decode records (decompression failed, {type(err).__name__}: {str(err)[:200]})", **where
            ) from err
    size = len(data)
    if header.record_count * MIN_RECORD_SIZE > size:
        raise CorruptRecordError(
            f"recordCount {header.record_count} is more than {size} bytes of records can hold", **where
        )
    timestamp_type = 1 if header.attributes & 0x08 else 0
    records = []
    pos = 0
    for i in range(header.record_count):
        try:
            (timestamp_delta, offset_delta, key, value, headers), pos = _parse_record(data, pos, size)
        except _RecordError as err:
            raise CorruptRecordError(f"record {i} of {header.record_count}: {err}", **where) from None
        if not 0 <= offset_delta <= header.last_offset_delta:
            raise CorruptRecordError(
                f"record {i}: offsetDelta {offset_delta} outside 0..lastOffsetDelta {header.last_offset_delta}",
                **where,
            )
        timestamp = header.base_timestamp + timestamp_delta
        if not _INT64_MIN <= timestamp <= _INT64_MAX:
            raise CorruptRecordError(
                f"record {i}: baseTimestamp {header.base_timestamp} + timestampDelta {timestamp_delta} "
                "overflows int64",
                **where,
            )
        if timestamp_type == 1:
            timestamp = header.max_timestamp
        records.append(
            DefaultRecord(header.base_offset + offset_delta, timestamp, timestamp_type, key, value, headers)
        )
    if pos != size:
        raise CorruptRecordError(
            f"{size - pos} bytes left after the batch's recordCount {header.record_count} records", **where
        )
    return records
