"""Record batch decoding: round trips against kafka-python's builders, flags, and corrupt input."""

from __future__ import annotations

import os
import struct
import subprocess
import sys

import pytest

from tests.support.batches import Rec, build_control, build_legacy, build_v2, raw_snappy, sample_records
from tiered_kafka.errors import CorruptRecordError, TruncatedRecordError, UnsupportedCodecError
from tiered_kafka.format import record_batch
from tiered_kafka.format.record_batch import (
    Codec,
    ControlRecordType,
    TimestampType,
    iter_batches,
    iter_records,
    set_base_offset,
)

CODECS = [pytest.param(c, id=c.name.lower()) for c in Codec]


def _fields(records) -> list[tuple]:
    return [(r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in records]


def _expected(recs: list[Rec], base: int, *, headers: bool = True, timestamps: bool = True) -> list[tuple]:
    return [
        (base + i, r.timestamp if timestamps else None, r.key, r.value, r.headers if headers else [])
        for i, r in enumerate(recs)
    ]


@pytest.mark.parametrize("codec", CODECS)
def test_magic2_round_trip_every_codec(codec: Codec) -> None:
    recs = sample_records(300)
    data = build_v2(recs[:150], codec=codec, base_offset=1000) + build_v2(recs[150:], codec=codec, base_offset=1150)
    batches = list(iter_batches(data, position=4096))
    assert [b.codec for b in batches] == [codec, codec]
    assert [b.position for b in batches] == [4096, 4096 + batches[0].size]
    assert [(b.base_offset, b.last_offset, b.record_count) for b in batches] == [(1000, 1149, 150), (1150, 1299, 150)]
    assert batches[0].max_timestamp == max(r.timestamp for r in recs[:150])
    assert batches[0].base_timestamp == recs[0].timestamp
    assert batches[0].magic == 2 and batches[0].timestamp_type == TimestampType.CREATE_TIME
    assert _fields(iter_records(data)) == _expected(recs, 1000)


def test_snappy_raw_and_xerial_framing_both_decode() -> None:
    recs = sample_records(200, value_size=2000)  # > 32 KiB: several xerial blocks
    xerial = build_v2(recs, codec=Codec.SNAPPY)
    with raw_snappy():
        raw = build_v2(recs, codec=Codec.SNAPPY)
    assert xerial[61:69] == b"\x82SNAPPY\x00" and raw[61:69] != xerial[61:69]
    assert _fields(iter_records(xerial)) == _fields(iter_records(raw)) == _expected(recs, 0)


@pytest.mark.parametrize(
    ("magic", "codec"),
    [
        pytest.param(0, Codec.NONE, id="v0-none"),
        pytest.param(0, Codec.GZIP, id="v0-gzip"),
        pytest.param(0, Codec.SNAPPY, id="v0-snappy"),
        pytest.param(1, Codec.NONE, id="v1-none"),
        pytest.param(1, Codec.GZIP, id="v1-gzip"),
        pytest.param(1, Codec.SNAPPY, id="v1-snappy"),
        pytest.param(1, Codec.LZ4, id="v1-lz4"),
    ],
)
def test_legacy_message_sets_round_trip(magic: int, codec: Codec) -> None:
    recs = sample_records(50)
    data = build_legacy(recs, magic=magic, codec=codec, base_offset=500)
    batches = list(iter_batches(data))
    assert {b.magic for b in batches} == {magic}
    assert batches[0].base_offset == 500 and batches[-1].last_offset == 549
    assert sum(b.record_count for b in batches) == 50
    assert not any(b.is_control or b.is_transactional for b in batches)
    expected = _expected(recs, 500, headers=False, timestamps=magic == 1)
    assert _fields(iter_records(data)) == expected
    if magic == 0:
        assert batches[0].timestamp_type == TimestampType.NO_TIMESTAMP_TYPE


def test_transactional_and_control_batches_are_flagged() -> None:
    recs = sample_records(3)
    data = (
        build_v2(recs, base_offset=10, producer_id=77, transactional=True)
        + build_control(ControlRecordType.ABORT, base_offset=13, producer_id=77)
        + build_control(ControlRecordType.COMMIT, base_offset=14)
    )
    data_batch, abort, commit = iter_batches(data)
    assert data_batch.is_transactional and not data_batch.is_control
    assert data_batch.producer_id == 77 and data_batch.producer_epoch == 0 and data_batch.base_sequence == 0
    assert abort.is_control and abort.is_transactional and abort.control_type() == ControlRecordType.ABORT
    assert commit.control_type() == ControlRecordType.COMMIT
    with pytest.raises(ValueError, match="not a control batch"):
        data_batch.control_type()
    assert [r.offset for r in iter_records(data)] == [10, 11, 12]  # markers are not user records


def test_set_base_offset_keeps_the_crc_valid() -> None:
    data = bytearray(build_v2(sample_records(5), codec=Codec.LZ4))
    set_base_offset(data, 123456789, partition_leader_epoch=7)
    (batch,) = iter_batches(data)  # CRC verified
    assert (batch.base_offset, batch.last_offset, batch.partition_leader_epoch) == (123456789, 123456793, 7)


def test_iteration_does_not_copy() -> None:
    data = bytearray(build_v2(sample_records(4)) * 1)
    (batch,) = iter_batches(data)
    data[60] ^= 0xFF  # the view sees writes to the underlying buffer
    assert batch.buffer.obj is data and batch.buffer[60] == data[60]


# -- corrupt input: a clear error naming the batch offset and file position, never a hang or skip


def test_flipped_byte_fails_the_crc_naming_offset_and_position() -> None:
    first = build_v2(sample_records(10), base_offset=0)
    second = bytearray(build_v2(sample_records(10), base_offset=10, codec=Codec.GZIP))
    second[len(second) // 2] ^= 0x01
    with pytest.raises(CorruptRecordError, match=rf"CRC mismatch.*base offset 10 at file position {8192 + len(first)}"):
        list(iter_batches(first + bytes(second), position=8192))


def test_every_single_byte_flip_is_detected() -> None:
    """A flip anywhere in a batch is a CRC, length or magic error; in baseOffset/epoch, a changed field."""
    clean = build_v2(sample_records(3))
    for i in range(len(clean)):
        data = bytearray(clean)
        data[i] ^= 0x40
        if i < 8 or 12 <= i < 16:  # baseOffset and partitionLeaderEpoch are outside the CRC by design
            (batch,) = iter_batches(data)
            assert batch.base_offset != 0 or batch.partition_leader_epoch != -1
            continue
        with pytest.raises(CorruptRecordError):
            list(iter_batches(data))


def test_truncated_batch() -> None:
    data = build_v2(sample_records(10)) + build_v2(sample_records(10), base_offset=10)
    cut = data[:-7]
    with pytest.raises(TruncatedRecordError, match="runs past the end"):
        list(iter_batches(cut))
    assert [b.base_offset for b in iter_batches(cut, allow_truncated_tail=True)] == [0]
    with pytest.raises(TruncatedRecordError, match="too few for a batch header"):
        list(iter_batches(data + b"\x00" * 5))


@pytest.mark.parametrize("length", [pytest.param(-1, id="negative"), pytest.param(3, id="tiny"), pytest.param(2**31 - 1, id="absurd")])
def test_absurd_lengths(length: int) -> None:
    data = bytearray(build_v2(sample_records(2)))
    struct.pack_into(">i", data, 8, length)
    with pytest.raises(CorruptRecordError):
        list(iter_batches(data))


def test_v2_length_below_header_and_unknown_magic() -> None:
    data = bytearray(build_v2(sample_records(2)))
    short = bytearray(data)
    struct.pack_into(">i", short, 8, 30)
    with pytest.raises(CorruptRecordError, match="below the magic 2 header size"):
        list(iter_batches(short))
    data[16] = 9
    with pytest.raises(CorruptRecordError, match="unknown magic 9"):
        list(iter_batches(data))


def test_corrupt_compressed_payload_with_valid_crc_is_a_clear_error() -> None:
    import crc32c

    data = bytearray(build_v2(sample_records(20), codec=Codec.ZSTD))
    data[70:80] = b"\xff" * 10
    struct.pack_into(">I", data, 17, crc32c.crc32c(bytes(data[21:])))
    (batch,) = iter_batches(data)
    with pytest.raises(CorruptRecordError, match="cannot decode records"):
        list(batch)


def test_unknown_codec_id() -> None:
    import crc32c

    data = bytearray(build_v2(sample_records(2)))
    struct.pack_into(">h", data, 21, 6)
    struct.pack_into(">I", data, 17, crc32c.crc32c(bytes(data[21:])))
    (batch,) = iter_batches(data)
    with pytest.raises(UnsupportedCodecError, match="codec id 6"):
        _ = batch.codec
    with pytest.raises(UnsupportedCodecError):
        list(batch)


def test_random_garbage_never_hangs_or_passes_silently() -> None:
    rng = __import__("random").Random(42)
    valid = build_v2(sample_records(5), codec=Codec.GZIP)
    for _ in range(300):
        data = bytearray(valid)
        for _ in range(rng.randint(1, 8)):
            data[rng.randrange(16, len(data))] = rng.randrange(256)
        if data == valid:
            continue
        with pytest.raises(CorruptRecordError):
            list(iter_records(data))


def test_empty_buffer_has_no_batches() -> None:
    assert list(iter_batches(b"")) == []


def test_c_decoder_loaded_and_python_reference_switch() -> None:
    assert record_batch.DECODER_IMPLEMENTATION == "c"
    code = "from tiered_kafka.format import record_batch as r; print(r.DECODER_IMPLEMENTATION)"
    env = {**os.environ, "AIOKAFKA_NO_EXTENSIONS": "1"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "python"


def test_offsets_follow_a_base_offset_rewritten_after_the_crc_check() -> None:
    """A small batch keeps the decoder its CRC check built; rewriting baseOffset must not leave it stale."""
    data = bytearray(build_v2(sample_records(3, value_size=10)))
    assert len(data) < 512
    (batch,) = iter_batches(data)  # CRC verified: a decoder is kept for the first iteration
    set_base_offset(batch.buffer, 1000)
    assert [r.offset for r in batch] == [1000, 1001, 1002]
    assert batch.offset_of_max_timestamp() in (1000, 1001, 1002)
