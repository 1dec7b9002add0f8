"""Columnar decoding: a buffer of record batches straight into Arrow arrays (issue #14).

``decode_columnar(data)`` returns two Arrow record batches: ``records`` (RECORD_SCHEMA, one row
per record of every non-control batch, in offset order) and ``batches`` (BATCH_SCHEMA, one row per
record batch, control batches included). The byte layouts it reads are documented once, in
``tiered_kafka.format.record_batch`` (batch header) and ``tiered_kafka/format/_native.c`` (the
``DefaultRecord`` varint layout, Java ``org.apache.kafka.common.record.DefaultRecord``).

Two implementations return equal results (``pa.RecordBatch.equals``):

* ``"c"``: the compiled extension ``tiered_kafka.format._native`` walks the buffer, checks every
  magic 2 batch's framing and CRC-32C, decodes the varint records and fills raw Arrow buffers
  (validity bitmaps, int32 offsets, data), which this module wraps without copying
  (``pa.Array.from_buffers``). No Python object is created per record; compressed batches call
  back into Python once per batch to decompress (``record_batch.decompress``, the per-record
  path's codecs). A buffer holding any magic 0/1 message set goes through the reference path
  as a whole.
* ``"python"``: the reference, built on ``record_batch.iter_batches`` and its records, one Python
  object per record.

Both raise the same error type with the same message for a corrupt batch: the record checks, and
where they are stricter than Java's ``DefaultRecord.readFrom`` (lengths below -1, offsetDelta outside
``0..lastOffsetDelta``, offsets or timestamps past int64), are stated in
``tiered_kafka.format.default_record``; ``tests/unit/format/test_decoder_differential.py`` holds the
two to it on randomly corrupted batches. A batch decompresses to at most 256 MiB (``format.codecs``).

Decision: the environment variable ``TIERED_KAFKA_PURE_PYTHON=1`` selects the reference (here and in
``record_batch``, which loads the extension). Otherwise the extension must load: a missing build
raises ImportError naming ``make install``, never a silent fall-back to a 30x slower path.
``COLUMNAR_IMPLEMENTATION`` says which one loaded.

Column rules (both implementations):

* ``timestamp`` is null when the record has none: magic 0, or the value -1 (Java
  ``RecordBatch.NO_TIMESTAMP``). A LogAppendTime magic 2 batch gives every record the batch's
  maxTimestamp (Java ``DefaultRecordBatch``). ``timestamp_type`` is -1 for magic 0.
* ``key``/``value`` are null for length -1; ``headers`` is a (possibly empty) list, a header's
  value null for length -1; a header key must be valid UTF-8 (Java decodes it as a String).
* ``control`` is the control record key's type (version int16, type int16; Java
  ``ControlRecordType``: 0 ABORT, 1 COMMIT); control batches contribute no record rows.
* Binary columns use int32 offsets (Spark's BinaryType): a single call producing more than
  2 GiB - 1 of keys, values or header bytes raises ValueError; decode such a range in parts.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import ModuleType

import pyarrow as pa

from tiered_kafka.errors import CorruptRecordError
from tiered_kafka.format import record_batch
from tiered_kafka.format.record_batch import (
    CONTROL_KEY_STRUCT,
    MAGIC_OFFSET,
    NO_TIMESTAMP,
    PURE_PYTHON_ENV,
    decompress,
    iter_batches,
)

__all__ = [
    "BATCH_SCHEMA",
    "COLUMNAR_IMPLEMENTATION",
    "PURE_PYTHON_ENV",
    "RECORD_SCHEMA",
    "ColumnarRange",
    "decode_columnar",
]

#: One header: key (UTF-8 string), value (bytes, null for length -1).
HEADER_TYPE = pa.struct([pa.field("key", pa.string(), nullable=False), pa.field("value", pa.binary())])
HEADERS_TYPE = pa.list_(pa.field("item", HEADER_TYPE, nullable=False))

RECORD_SCHEMA = pa.schema(
    [
        pa.field("offset", pa.int64(), nullable=False),
        pa.field("timestamp", pa.int64()),  # ms since the epoch; null when the record has none
        pa.field("timestamp_type", pa.int32(), nullable=False),  # 0 CreateTime, 1 LogAppendTime, -1 none
        pa.field("key", pa.binary()),
        pa.field("value", pa.binary()),
        pa.field("headers", HEADERS_TYPE, nullable=False),
    ]
)
#: RECORD_SCHEMA without the headers column (``include_headers=False``).
RECORD_SCHEMA_NO_HEADERS = pa.schema(list(RECORD_SCHEMA)[:-1])

BATCH_SCHEMA = pa.schema(
    [
        pa.field("position", pa.int64(), nullable=False),  # absolute byte position of the batch
        pa.field("base_offset", pa.int64(), nullable=False),
        pa.field("last_offset", pa.int64(), nullable=False),
        pa.field("producer_id", pa.int64(), nullable=False),
        pa.field("transactional", pa.bool_(), nullable=False),
        pa.field("control", pa.int8(), nullable=False),  # -1 not a control batch, else ControlRecordType
        pa.field("row_start", pa.int64(), nullable=False),  # first row of the batch in ``records``
        pa.field("row_count", pa.int64(), nullable=False),  # 0 for control batches
    ]
)

NOT_CONTROL = -1


@dataclass(frozen=True)
class ColumnarRange:
    """The decoded contents of one buffer: its records and its batches."""

    records: pa.RecordBatch
    batches: pa.RecordBatch


def decode_columnar(
    data: bytes | bytearray | memoryview, *, position: int = 0, include_headers: bool = True
) -> ColumnarRange:
    """Decode every record batch of ``data`` (a whole number of batches) into Arrow arrays.

    ``position`` is the file or object position of ``data[0]``: the ``position`` column and every
    error name absolute positions. Every magic 2 batch's CRC-32C is checked; a torn, corrupt or
    unknown-magic batch raises CorruptRecordError (TruncatedRecordError for a torn tail), an
    unknown codec UnsupportedCodecError. Nothing is skipped.
    """
    record_batch.check_position(position, len(data) if not isinstance(data, memoryview) else data.nbytes)
    native = record_batch._native  # read at each call: record_batch.reference_paths() switches it off
    if native is not None and not _has_legacy_magic(data):
        try:
            return _decode_native(native, data, position, include_headers)
        except native.LegacyMagic:
            pass  # a magic 0/1 message set after magic 2 batches (a log from before an upgrade)
    return _decode_python(data, position, include_headers)


# -- the pure-Python reference ------------------------------------------------------------------


def _decode_python(data: bytes | bytearray | memoryview, position: int, include_headers: bool) -> ColumnarRange:
    offsets: list[int] = []
    timestamps: list[int | None] = []
    timestamp_types: list[int] = []
    keys: list[bytes | None] = []
    values: list[bytes | None] = []
    headers: list[list[dict[str, object]]] = []
    batch_columns: dict[str, list[object]] = {field.name: [] for field in BATCH_SCHEMA}
    for batch in iter_batches(data, position=position):
        row_start = len(offsets)
        control = NOT_CONTROL
        if batch.is_control:
            control = _control_type(batch)
        else:
            batch_type = batch.timestamp_type
            for record in batch:
                offsets.append(record.offset)
                timestamp = record.timestamp
                timestamps.append(None if timestamp is None or timestamp == NO_TIMESTAMP else timestamp)
                if batch.magic == 1:  # a legacy wrapper's inner messages carry their own type
                    record_type = record.timestamp_type
                    timestamp_types.append(batch_type if record_type is None else int(record_type))
                else:
                    timestamp_types.append(int(batch_type))
                keys.append(record.key)
                values.append(record.value)
                if include_headers:
                    headers.append([{"key": k, "value": v} for k, v in record.headers])
        for name, value in (
            ("position", batch.position),
            ("base_offset", batch.base_offset),
            ("last_offset", batch.last_offset),
            ("producer_id", batch.producer_id),
            ("transactional", batch.is_transactional),
            ("control", control),
            ("row_start", row_start),
            ("row_count", len(offsets) - row_start),
        ):
            batch_columns[name].append(value)
    _check_binary_size(keys, "keys")
    _check_binary_size(values, "values")
    columns = [
        pa.array(offsets, pa.int64()),
        pa.array(timestamps, pa.int64()),
        pa.array(timestamp_types, pa.int32()),
        pa.array(keys, pa.binary()),
        pa.array(values, pa.binary()),
    ]
    if include_headers:
        columns.append(pa.array(headers, HEADERS_TYPE))
    schema = RECORD_SCHEMA if include_headers else RECORD_SCHEMA_NO_HEADERS
    records = pa.RecordBatch.from_arrays(columns, schema=schema)
    batches = pa.RecordBatch.from_arrays(
        [pa.array(batch_columns[f.name], f.type) for f in BATCH_SCHEMA], schema=BATCH_SCHEMA
    )
    return ColumnarRange(records, batches)


def _control_type(batch) -> int:  # noqa: ANN001 - a record_batch.RecordBatch
    """The type in a control batch's first record key (version int16, type int16)."""
    for record in batch:
        key = record.key
        if key is not None and len(key) >= CONTROL_KEY_STRUCT.size:
            _version, marker = CONTROL_KEY_STRUCT.unpack_from(key)
            if 0 <= marker <= 127:
                return marker
            raise CorruptRecordError(
                f"control record type {marker} out of range", position=batch.position, base_offset=batch.base_offset
            )
        break
    raise CorruptRecordError(
        "control batch without a valid control record key", position=batch.position, base_offset=batch.base_offset
    )


_INT32_MAX = 2**31 - 1


def _check_binary_size(column: list[bytes | None], what: str) -> None:
    total = sum(len(item) for item in column if item is not None)
    if total > _INT32_MAX:
        raise ValueError(f"{total} bytes of {what} exceed the 2 GiB - 1 of one binary column: decode in parts")


# -- the compiled path --------------------------------------------------------------------------


def _has_legacy_magic(data: bytes | bytearray | memoryview) -> bool:
    """Whether the first batch is a magic 0/1 message set (the extension raises LegacyMagic for one
    met later; either way the whole buffer takes the reference path)."""
    return len(data) > MAGIC_OFFSET and data[MAGIC_OFFSET] in (0, 1)


def _binary(kind: pa.DataType, length: int, validity: bytes | None, offsets: bytes, data: bytes) -> pa.Array:
    buffers = [None if validity is None else pa.py_buffer(validity), pa.py_buffer(offsets), pa.py_buffer(data)]
    return pa.Array.from_buffers(kind, length, buffers)


def _decode_native(
    native: ModuleType, data: bytes | bytearray | memoryview, position: int, include_headers: bool
) -> ColumnarRange:
    out = native.decode_columnar(data, position, include_headers, decompress)
    n = out["rows"]
    columns = [
        pa.Array.from_buffers(pa.int64(), n, [None, pa.py_buffer(out["offset"])]),
        pa.Array.from_buffers(pa.int64(), n, [_maybe(out["timestamp_validity"]), pa.py_buffer(out["timestamp"])]),
        pa.Array.from_buffers(pa.int32(), n, [None, pa.py_buffer(out["timestamp_type"])]),
        _binary(pa.binary(), n, out["key_validity"], out["key_offsets"], out["key_data"]),
        _binary(pa.binary(), n, out["value_validity"], out["value_offsets"], out["value_data"]),
    ]
    if include_headers:
        h = out["header_count"]
        header_keys = _binary(pa.string(), h, None, out["hkey_offsets"], out["hkey_data"])
        header_values = _binary(pa.binary(), h, out["hvalue_validity"], out["hvalue_offsets"], out["hvalue_data"])
        structs = pa.StructArray.from_arrays([header_keys, header_values], fields=list(HEADER_TYPE))
        columns.append(pa.ListArray.from_buffers(HEADERS_TYPE, n, [None, pa.py_buffer(out["header_offsets"])],
                                                 children=[structs]))  # fmt: skip
    schema = RECORD_SCHEMA if include_headers else RECORD_SCHEMA_NO_HEADERS
    records = pa.RecordBatch.from_arrays(columns, schema=schema)
    b = out["batches"]
    batch_columns = [
        pa.Array.from_buffers(f.type, b, [None, pa.py_buffer(out["b_" + f.name])]) for f in BATCH_SCHEMA
    ]
    return ColumnarRange(records, pa.RecordBatch.from_arrays(batch_columns, schema=BATCH_SCHEMA))


def _maybe(buffer: bytes | None) -> pa.Buffer | None:
    return None if buffer is None else pa.py_buffer(buffer)


#: "c" (the compiled extension) or "python" (the reference, forced by TIERED_KAFKA_PURE_PYTHON=1).
#: The environment variable read is ``PURE_PYTHON_ENV``.
COLUMNAR_IMPLEMENTATION = "python" if record_batch._native is None else "c"
