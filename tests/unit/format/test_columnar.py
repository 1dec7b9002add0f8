"""The columnar decoder: the C path against the pure-Python reference and against iter_records.

Every comparison is exact (``pa.RecordBatch.equals``) on the records and the batches tables.
"""

from __future__ import annotations

import os
import struct
import subprocess
import sys
from pathlib import Path

import crc32c
import pyarrow as pa
import pytest

from bench.decode_data import CODECS, build_segment, generate_records
from tests.support.batches import Rec, build_control, build_legacy, build_v2, raw_snappy, sample_records
from tiered_kafka.errors import CorruptRecordError, TruncatedRecordError, UnsupportedCodecError
from tiered_kafka.format import columnar, record_batch
from tiered_kafka.format.columnar import (
    BATCH_SCHEMA,
    COLUMNAR_IMPLEMENTATION,
    RECORD_SCHEMA,
    ColumnarRange,
    decode_columnar,
)
from tiered_kafka.format.record_batch import Codec, ControlRecordType, iter_batches, iter_records

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "kafka-segments"
FIXTURE_LOGS = sorted(FIXTURES.glob("*/*.log"))


#: The reference paths in this process (what TIERED_KAFKA_PURE_PYTHON=1 selects at import).
pure_python = record_batch.reference_paths


def _reference(data: bytes, position: int = 0, include_headers: bool = True) -> ColumnarRange:
    with pure_python():
        return decode_columnar(data, position=position, include_headers=include_headers)


def _both(data: bytes, *, position: int = 0, include_headers: bool = True) -> ColumnarRange:
    """Decode with the C path and the reference; assert they are equal; return the C result."""
    native = decode_columnar(data, position=position, include_headers=include_headers)
    reference = _reference(data, position, include_headers)
    native.records.validate(full=True)
    native.batches.validate(full=True)
    assert native.records.schema.equals(reference.records.schema)
    assert native.records.equals(reference.records)
    assert native.batches.equals(reference.batches)
    return native


def _as_iter_records(data: bytes) -> list[tuple]:
    """The independent check: what the per-record API (aiokafka's decoder) yields, in RECORD_SCHEMA's rows."""
    with pure_python():
        return [
            (r.offset, r.timestamp, r.key, r.value, [{"key": k, "value": v} for k, v in r.headers])
            for r in iter_records(data)
        ]


def _rows(decoded: ColumnarRange) -> list[tuple]:
    table = decoded.records.to_pydict()
    return list(zip(table["offset"], table["timestamp"], table["key"], table["value"], table["headers"]))


_DIGEST = """
import hashlib, sys
from pathlib import Path
from tiered_kafka.format.columnar import COLUMNAR_IMPLEMENTATION, decode_columnar
digest = hashlib.sha256()
for log in sys.argv[1:]:
    decoded = decode_columnar(Path(log).read_bytes())
    for table in (decoded.records, decoded.batches):
        digest.update(repr(table.to_pydict()).encode())
print(COLUMNAR_IMPLEMENTATION, digest.hexdigest())
"""


def test_c_implementation_loaded_and_reference_switch() -> None:
    """The switch as users set it, in a fresh process: the reference loads and decodes the same tables."""
    logs = [str(path) for path in (FIXTURE_LOGS[0], FIXTURE_LOGS[-1])]
    native = subprocess.run([sys.executable, "-c", _DIGEST, *logs], capture_output=True, text=True, check=True)
    env = {**os.environ, "TIERED_KAFKA_PURE_PYTHON": "1"}
    pure = subprocess.run([sys.executable, "-c", _DIGEST, *logs], env=env, capture_output=True, text=True, check=True)
    assert COLUMNAR_IMPLEMENTATION == "c" and native.stdout.split()[0] == "c"
    assert pure.stdout.split()[0] == "python"
    assert pure.stdout.split()[1] == native.stdout.split()[1]


@pytest.mark.parametrize("log", FIXTURE_LOGS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_every_fixture_segment(log: Path) -> None:
    data = log.read_bytes()
    decoded = _both(data, position=1000)
    assert _rows(decoded) == _as_iter_records(data)
    assert decoded.batches.column("position")[0].as_py() == 1000
    assert decoded.batches.num_rows == sum(1 for _ in iter_batches(data))


@pytest.mark.parametrize("codec", sorted(CODECS), ids=lambda c: CODECS[c])
@pytest.mark.parametrize("batch_size", [300, 16 * 1024])
def test_generated_segments_every_codec(codec: int, batch_size: int) -> None:
    data, batches = build_segment(generate_records(200), codec, batch_size)
    decoded = _both(data)
    assert decoded.records.num_rows == 200 and decoded.batches.num_rows == batches
    assert _rows(decoded) == _as_iter_records(data)
    without = _both(data, include_headers=False)
    assert without.records.schema.names == RECORD_SCHEMA.names[:-1]
    assert without.records.equals(decoded.records.drop_columns(["headers"]))


@pytest.mark.parametrize("codec", list(Codec))
def test_nulls_headers_and_timestamps(codec: Codec) -> None:
    records = sample_records(40)  # null keys, null values, null header values, records without headers
    data = build_v2(records, codec=codec, base_offset=77)
    decoded = _both(data)
    table = decoded.records.to_pydict()
    assert table["offset"] == list(range(77, 117))
    assert table["key"] == [r.key for r in records]
    assert table["value"] == [r.value for r in records]
    assert table["timestamp"] == [r.timestamp for r in records]
    assert set(table["timestamp_type"]) == {0}
    assert table["headers"] == [[{"key": k, "value": v} for k, v in r.headers] for r in records]
    assert decoded.records.column("key").null_count == sum(r.key is None for r in records)


def test_xerial_and_raw_snappy() -> None:
    records = sample_records(30)
    with raw_snappy():
        raw = build_v2(records, codec=Codec.SNAPPY)
    xerial = build_v2(records, codec=Codec.SNAPPY, base_offset=30)
    decoded = _both(raw + xerial)
    assert decoded.records.column("offset").to_pylist() == list(range(60))


def test_transactional_and_control_batches() -> None:
    data = (
        build_v2(sample_records(3), base_offset=10, producer_id=5, transactional=True)
        + build_control(ControlRecordType.COMMIT, base_offset=13, producer_id=5)
        + build_v2(sample_records(2), base_offset=14, producer_id=6, transactional=True)
        + build_control(ControlRecordType.ABORT, base_offset=16, producer_id=6)
        + build_v2(sample_records(1), base_offset=17)
    )
    decoded = _both(data, position=4096)
    batches = decoded.batches.to_pydict()
    assert batches["control"] == [-1, 1, -1, 0, -1]
    assert batches["transactional"] == [True, True, True, True, False]
    assert batches["producer_id"] == [5, 5, 6, 6, -1]
    assert batches["row_start"] == [0, 3, 3, 5, 5]
    assert batches["row_count"] == [3, 0, 2, 0, 1]
    assert batches["base_offset"] == [10, 13, 14, 16, 17] and batches["last_offset"] == [12, 13, 15, 16, 17]
    assert batches["position"][0] == 4096
    assert decoded.records.column("offset").to_pylist() == [10, 11, 12, 14, 15, 17]


def test_log_append_time_and_missing_timestamps() -> None:
    data = bytearray(build_v2(sample_records(5)))
    attributes = struct.unpack_from(">h", data, 21)[0] | 0x08  # LogAppendTime: records take maxTimestamp
    struct.pack_into(">h", data, 21, attributes)
    struct.pack_into(">I", data, 17, crc32c.crc32c(bytes(data[21:])))
    no_timestamp = build_v2([Rec(b"k", b"v", -1)], base_offset=5)
    decoded = _both(bytes(data) + no_timestamp)
    max_timestamp = struct.unpack_from(">q", data, 35)[0]
    assert decoded.records.column("timestamp").to_pylist() == [max_timestamp] * 5 + [None]
    assert decoded.records.column("timestamp_type").to_pylist() == [1] * 5 + [0]


@pytest.mark.parametrize("magic", [0, 1])
def test_legacy_magic_takes_the_reference_path(magic: int) -> None:
    records = sample_records(6)
    legacy = build_legacy(records, magic=magic, codec=Codec.GZIP)
    decoded = _both(legacy)
    assert decoded.records.column("offset").to_pylist() == list(range(6))
    assert decoded.records.column("timestamp_type").to_pylist() == [magic - 1] * 6
    mixed = build_v2(sample_records(2)) + build_legacy(sample_records(2), magic=magic, base_offset=2)
    assert decode_columnar(mixed).records.column("offset").to_pylist() == [0, 1, 2, 3]


def test_empty_buffer() -> None:
    decoded = _both(b"")
    assert decoded.records.num_rows == 0 and decoded.batches.num_rows == 0
    assert decoded.batches.schema.equals(BATCH_SCHEMA)


# -- corrupt input: both implementations raise, naming the position -----------------------------------


def _both_raise(data: bytes, error: type[Exception], match: str, position: int = 0) -> None:
    with pytest.raises(error, match=match):
        decode_columnar(data, position=position)
    with pytest.raises(error, match=match):
        _reference(data, position)


def test_corrupted_crc() -> None:
    first = build_v2(sample_records(4))
    second = bytearray(build_v2(sample_records(4), base_offset=4, codec=Codec.LZ4))
    second[70] ^= 0x10
    _both_raise(first + bytes(second), CorruptRecordError, rf"CRC mismatch.*position {500 + len(first)}\)", 500)


def test_torn_batch() -> None:
    data = build_v2(sample_records(4)) * 2
    _both_raise(data[:-9], TruncatedRecordError, r"runs past the end")
    _both_raise(data + b"\x00" * 5, TruncatedRecordError, r"too few for a batch header")


def _with_valid_crc(data: bytearray) -> bytes:
    struct.pack_into(">I", data, 17, crc32c.crc32c(bytes(data[21:])))
    return bytes(data)


def test_bad_varint_with_a_valid_crc() -> None:
    data = bytearray(build_v2([Rec(b"key", b"value", 1_700_000_000_000)]))
    data[61 + 1 + 1 : 61 + 1 + 1 + 10] = b"\xff" * 10  # timestampDelta: a varlong longer than 10 bytes
    _both_raise(_with_valid_crc(data), CorruptRecordError, r"decode records|timestampDelta")


@pytest.mark.parametrize(
    ("field_at", "value", "what"),
    [
        (61, b"\x7f", "record length"),  # record length past the batch end
        (57, struct.pack(">i", 3), "recordCount"),  # more records declared than present
        (57, struct.pack(">i", -1), "recordCount"),
    ],
)
def test_inconsistent_lengths_with_a_valid_crc(field_at: int, value: bytes, what: str) -> None:
    data = bytearray(build_v2(sample_records(2)))
    data[field_at : field_at + len(value)] = value
    with pytest.raises(CorruptRecordError):
        decode_columnar(_with_valid_crc(data))
    with pytest.raises(CorruptRecordError):
        _reference(_with_valid_crc(data))


def test_unknown_codec() -> None:
    data = bytearray(build_v2(sample_records(2)))
    data[22] |= 0x07
    with pytest.raises(UnsupportedCodecError, match="codec id 7"):
        decode_columnar(_with_valid_crc(data))


def test_random_flips_never_pass_silently_or_differ() -> None:
    """Each single-byte flip of the CRC-covered area is rejected by both paths."""
    base = build_v2(sample_records(3, value_size=5), codec=Codec.NONE)
    for index in range(21, len(base)):
        data = bytearray(base)
        data[index] ^= 0x5A
        _both_raise(bytes(data), CorruptRecordError, "CRC mismatch")


def test_binary_column_limit_is_checked() -> None:
    """int32 offsets: more than 2 GiB - 1 in one column is refused, not overflowed (the reference's check;
    the C path checks before each append, not testable without 2 GiB of memory)."""

    class Huge(bytes):
        def __len__(self) -> int:
            return 2**31

    with pytest.raises(ValueError, match="2 GiB"):
        columnar._check_binary_size([Huge()], "values")


def test_arrays_wrap_the_extension_buffers() -> None:
    data = build_v2(sample_records(10))
    decoded = decode_columnar(data)
    assert isinstance(decoded.records.column("value"), pa.BinaryArray)
    assert decoded.records.column("headers").type == RECORD_SCHEMA.field("headers").type
