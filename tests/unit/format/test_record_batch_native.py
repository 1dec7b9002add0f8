"""record_batch's compiled per-record path against its reference (default_record's decoder, Python framing).

Both must yield identical batches (position, magic, header fields) and identical records, and raise the
same error types at the same positions.
"""

from __future__ import annotations

import contextlib
import os
import struct
import subprocess
import sys
from pathlib import Path

import crc32c
import pytest

from bench.decode_data import CODECS, build_segment, generate_records
from tests.support.batches import Rec, build_control, build_legacy, build_v2, sample_records
from tests.unit.format.test_columnar import pure_python
from tiered_kafka.errors import CorruptRecordError, TruncatedRecordError
from tiered_kafka.format import record_batch
from tiered_kafka.format.record_batch import Codec, ControlRecordType, iter_batches

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "kafka-segments"
FIXTURE_LOGS = sorted(FIXTURES.glob("*/*.log"))


def _decode(data: bytes, **kwargs: object) -> list[tuple]:
    out = []
    for batch in iter_batches(data, **kwargs):
        header = (batch.position, batch.magic, batch.base_offset, batch.last_offset, batch.is_control,
                  batch.is_transactional, batch.producer_id, batch.size)  # fmt: skip
        records = [
            (r.offset, r.timestamp, r.timestamp_type, r.key, r.value, [tuple(h) for h in r.headers]) for r in batch
        ]
        out.append((header, records))
    return out


def _same(data: bytes, **kwargs: object) -> list[tuple]:
    native = _decode(data, **kwargs)
    with pure_python():
        reference = _decode(data, **kwargs)
    assert native == reference
    return native


_DIGEST = """
import hashlib, sys
from pathlib import Path
from tiered_kafka.format import record_batch as r
digest = hashlib.sha256()
for log in sys.argv[1:]:
    for batch in r.iter_batches(Path(log).read_bytes()):
        fields = (batch.position, batch.base_offset, batch.is_control, batch.is_transactional)
        records = [(x.offset, x.timestamp, x.timestamp_type, x.key, x.value, list(map(tuple, x.headers))) for x in batch]
        digest.update(repr((fields, records)).encode())
print(r.DECODER_IMPLEMENTATION, r._native is None, digest.hexdigest())
"""


def test_switch_selects_the_reference() -> None:
    """The switch as users set it, in a fresh process: the reference loads and yields the same records."""
    logs = [str(path) for path in (FIXTURE_LOGS[0], FIXTURE_LOGS[-1])]
    native = subprocess.run([sys.executable, "-c", _DIGEST, *logs], capture_output=True, text=True, check=True)
    env = {**os.environ, "TIERED_KAFKA_PURE_PYTHON": "1"}
    pure = subprocess.run([sys.executable, "-c", _DIGEST, *logs], env=env, capture_output=True, text=True, check=True)
    assert record_batch.DECODER_IMPLEMENTATION == "c"
    assert native.stdout.split()[:2] == ["c", "False"]
    assert pure.stdout.split()[:2] == ["python", "True"]
    assert pure.stdout.split()[2] == native.stdout.split()[2]


@pytest.mark.parametrize("log", FIXTURE_LOGS[:3] + FIXTURE_LOGS[-3:], ids=lambda p: f"{p.parent.name}/{p.name}")
def test_fixture_segments(log: Path) -> None:
    assert _same(log.read_bytes(), position=123)


@pytest.mark.parametrize("codec", sorted(CODECS), ids=lambda c: CODECS[c])
def test_generated_segments_every_codec(codec: int) -> None:
    data, batches = build_segment(generate_records(100), codec, 4096)
    assert len(_same(data)) == batches


def test_nulls_control_transactional_and_legacy() -> None:
    data = (
        build_legacy(sample_records(3), magic=0)
        + build_legacy(sample_records(3), magic=1, codec=Codec.SNAPPY, base_offset=3)
        + build_v2(sample_records(12), base_offset=6, codec=Codec.ZSTD, producer_id=9, transactional=True)
        + build_control(ControlRecordType.COMMIT, base_offset=18, producer_id=9)
    )
    decoded = _same(data)
    assert [header[4] for header, _records in decoded][-1] is True


def test_truncated_tail_allowed_and_refused() -> None:
    data = build_v2(sample_records(3)) * 3
    assert len(_same(data[:-5], allow_truncated_tail=True)) == 2
    for pure in (False, True):
        with pure_python() if pure else contextlib.nullcontext():
            with pytest.raises(TruncatedRecordError, match="runs past the end"):
                list(iter_batches(data[:-5]))


def test_good_batches_come_before_the_error() -> None:
    """Framing in chunks must not raise before yielding the batches ahead of a corrupt one."""
    good = build_v2(sample_records(2)) * 40
    bad = bytearray(build_v2(sample_records(2), base_offset=80))
    bad[-1] ^= 1
    for pure in (False, True):
        seen = 0
        with pure_python() if pure else contextlib.nullcontext():
            with pytest.raises(CorruptRecordError, match=f"CRC mismatch.*position {len(good)}"):
                for _batch in iter_batches(good + bytes(bad)):
                    seen += 1
        assert seen == 40


def test_corrupt_records_with_a_valid_crc() -> None:
    data = bytearray(build_v2(sample_records(2)))
    data[61] = 0x7F  # record length past the end of the batch
    struct.pack_into(">I", data, 17, crc32c.crc32c(bytes(data[21:])))
    for pure in (False, True):
        with pure_python() if pure else contextlib.nullcontext():
            (batch,) = iter_batches(bytes(data))
            with pytest.raises(CorruptRecordError, match="position 0"):
                list(batch)


def test_reference_paths_really_use_the_python_decoder() -> None:
    """The in-process switch the comparisons rely on yields the Python reference's records, not the extension's."""
    data = build_v2(sample_records(2))
    (batch,) = iter_batches(data)
    assert type(next(iter(batch))).__module__ == "tiered_kafka.format._native"
    with pure_python():
        (batch,) = iter_batches(data)
        assert type(next(iter(batch))).__module__ == "tiered_kafka.format.default_record"


def _fix_crc(data: bytearray) -> bytes:
    struct.pack_into(">I", data, 17, crc32c.crc32c(bytes(data[21:])))
    return bytes(data)


def _all_paths_raise(data: bytes, match: str) -> None:
    """Columnar and per-record decoding, compiled and reference, and the consumer's index: one error."""
    from tiered_kafka.format.columnar import decode_columnar

    for pure in (False, True):
        with pure_python() if pure else contextlib.nullcontext():
            with pytest.raises(CorruptRecordError, match=match):
                decode_columnar(data)
            with pytest.raises(CorruptRecordError, match=match):
                [list(batch) for batch in iter_batches(data)]
    with pytest.raises(CorruptRecordError, match=match):
        record_batch._native.index_batches(data, 0, record_batch.decompress, 127)


def test_offsets_past_int64_are_corrupt_not_wrapped() -> None:
    """baseOffset is outside the CRC: a flipped bit near INT64_MAX must not give negative offsets."""
    data = bytearray(build_v2(sample_records(2)))
    struct.pack_into(">q", data, 0, 2**63 - 1)
    _all_paths_raise(bytes(data), r"baseOffset 9223372036854775807 \+ lastOffsetDelta 1 is past the largest offset")
    struct.pack_into(">q", data, 0, -5)
    _all_paths_raise(bytes(data), "negative baseOffset -5")


def test_timestamps_past_int64_are_corrupt() -> None:
    data = bytearray(build_v2([Rec(b"k", b"v", 5), Rec(b"k", b"v", 2**40)]))
    struct.pack_into(">q", data, 27, 2**63 - 10)  # baseTimestamp
    _all_paths_raise(_fix_crc(data), r"record 1: baseTimestamp 9223372036854775798 \+ timestampDelta \d+ overflows int64")


def test_an_empty_batch_with_a_negative_last_offset_delta_is_corrupt() -> None:
    data = bytearray(build_v2([Rec(b"k", b"v", 5)], base_offset=100))[:61]
    struct.pack_into(">i", data, 8, 49)  # batchLength: the header only
    struct.pack_into(">i", data, 57, 0)  # recordCount
    struct.pack_into(">i", data, 23, -50)  # lastOffsetDelta
    _all_paths_raise(_fix_crc(data), "negative lastOffsetDelta -50")


def test_frame_rejects_a_start_outside_the_data() -> None:
    data = memoryview(build_v2(sample_records(1)))
    for start in (-8, len(data) + 1, 10**12):
        with pytest.raises(ValueError, match=f"start {start} outside the data's 0..{len(data)}"):
            record_batch._native.frame(data, start, 0, True, 16, record_batch.RecordBatch)


@pytest.mark.parametrize("position", [-1, 2**63 - 5])
def test_positions_outside_int64_are_refused(position: int) -> None:
    from tiered_kafka.format.columnar import decode_columnar

    data = build_v2(sample_records(1))
    for pure in (False, True):
        with pure_python() if pure else contextlib.nullcontext():
            with pytest.raises(ValueError, match=f"position {position}: must be 0 or more"):
                decode_columnar(data, position=position)
            with pytest.raises(ValueError, match=f"position {position}: must be 0 or more"):
                list(iter_batches(data, position=position))
    with pytest.raises(ValueError, match=f"position {position}: must be 0 or more"):
        record_batch._native.index_batches(data, position, record_batch.decompress, 127)
