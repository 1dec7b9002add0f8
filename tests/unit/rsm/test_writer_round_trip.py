"""Our broker-written fixture segments laid out the RSM's way (tests/support/rsm_writer.py), then parsed back with
tiered_kafka.rsm: every variant gives the original segment bytes, indexes and metadata records."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from tests.support.fixtures import FIXTURES
from tests.support.rsm_writer import RsmSegmentObjects, layout_rsm_segment, random_uuid
from tiered_kafka.errors import RsmDecryptionError, RsmFormatError
from tiered_kafka.format.checkpoints import parse_leader_epoch_checkpoint
from tiered_kafka.rsm.chunk_index import FixedSizeChunkIndex, VariableSizeChunkIndex
from tiered_kafka.rsm.indexes import index_bytes, read_indexes
from tiered_kafka.rsm.keyring import KeyRing
from tiered_kafka.rsm.keys import parse_key
from tiered_kafka.rsm.manifest import SegmentManifest, parse_manifest
from tiered_kafka.rsm.remote_log_metadata import LiveSegments, decode_record
from tiered_kafka.rsm.transform import detransform_range

SMALL = FIXTURES / "test_topic_a-0" / "00000000000000000362.log"
LARGE = FIXTURES / "large_segments-0" / "00000000000000007729.log"
TOPIC_ID = "-bcdefghijklmnopqrst-w"

VARIANTS = {
    "plain": {"compression": False, "encrypted": False, "variable": None},
    "compressed": {"compression": True, "encrypted": False, "variable": None},
    "encrypted": {"compression": False, "encrypted": True, "variable": None},
    "compressed+encrypted": {"compression": True, "encrypted": True, "variable": None},
    "variable index, uncompressed": {"compression": False, "encrypted": False, "variable": True},
}


def _layout(log: Path, variant: str, key_pair: tuple[bytes, bytes], chunk_size: int = 1000) -> RsmSegmentObjects:
    v = VARIANTS[variant]
    return layout_rsm_segment(
        prefix="tiered/", topic="test_topic-a", topic_id=TOPIC_ID, partition=int(log.parent.name.rsplit("-", 1)[1]),
        segment_log=log, chunk_size=chunk_size, compression=bool(v["compression"]),
        encryption_key=("key-1", key_pair[1]) if v["encrypted"] else None, variable_chunk_index=v["variable"],
    )


def _read_all(objects: RsmSegmentObjects, manifest: SegmentManifest, start: int, end: int) -> bytes:
    chunks = manifest.chunk_index.chunks_for(start, end)
    data = objects.log[chunks[0].transformed_position : chunks[-1].transformed_end]
    return detransform_range(
        data, chunks, compression=manifest.compression, encryption=manifest.encryption, start=start, end=end,
        what=objects.key.object_key("log"),
    )


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_round_trip(variant: str, key_pair: tuple[bytes, bytes]) -> None:
    objects = _layout(SMALL, variant, key_pair)
    original = SMALL.read_bytes()
    keys = list(objects.objects())
    assert [parse_key(k, "tiered/") for k in keys] == [(objects.key, s) for s in ("log", "indexes", "rsm-manifest")]
    assert objects.key.start_offset == 362
    manifest = parse_manifest(objects.manifest, KeyRing.from_pem({"key-1": key_pair[0]}))
    v = VARIANTS[variant]
    assert manifest.compression is v["compression"]
    assert (manifest.encryption is not None) is v["encrypted"]
    expected_kind = VariableSizeChunkIndex if (v["compression"] or v["variable"]) else FixedSizeChunkIndex
    assert type(manifest.chunk_index) is expected_kind
    assert manifest.chunk_index.original_file_size == len(original)
    assert manifest.chunk_index.transformed_file_size == len(objects.log)
    if variant in ("plain", "variable index, uncompressed"):
        assert objects.log == original  # unencrypted, uncompressed: the segment byte for byte
    else:
        assert objects.log != original
    assert _read_all(objects, manifest, 0, len(original)) == original
    for start, end in [(0, 1), (999, 1001), (5000, 9000), (len(original) - 7, len(original))]:
        assert _read_all(objects, manifest, start, end) == original[start:end]

    indexes = read_indexes(objects.indexes, manifest)
    assert indexes.offset == SMALL.with_suffix(".index").read_bytes()
    assert indexes.timestamp == SMALL.with_suffix(".timeindex").read_bytes()
    assert indexes.producer_snapshot == (SMALL.parent / "00000000000000000644.snapshot").read_bytes()
    assert parse_leader_epoch_checkpoint(indexes.leader_epoch.decode())[0].epoch == 0
    assert indexes.transaction is None and manifest.transaction_index is None
    if manifest.encryption is not None:
        assert manifest.timestamp_index.size == len(indexes.timestamp) + 12 + 16

    meta = manifest.segment_metadata
    assert meta is not None and (meta.start_offset, meta.end_offset) == (362, 643)
    live = LiveSegments()
    for value in objects.metadata_values():
        live.apply(decode_record(value))
    [segment] = live.segments(TOPIC_ID, 0)
    assert (segment.segment_id, segment.start_offset, segment.end_offset) == (objects.key.segment_id, 362, 643)
    assert segment.segment_size_in_bytes == len(original)


def test_never_finished_segment_is_not_live(key_pair: tuple[bytes, bytes]) -> None:
    objects = _layout(SMALL, "plain", key_pair)
    live = LiveSegments()
    for value in objects.metadata_values(finished=False):
        live.apply(decode_record(value))
    assert live.segments(TOPIC_ID, 0) == []
    assert parse_manifest(objects.manifest, None).chunk_index.original_file_size > 0  # the manifest alone exists


@pytest.mark.parametrize("variant", ["compressed", "compressed+encrypted"])
def test_offset_index_positions_are_original_log_positions(variant: str, key_pair: tuple[bytes, bytes]) -> None:
    objects = _layout(LARGE, variant, key_pair, chunk_size=64 * 1024)
    manifest = parse_manifest(objects.manifest, KeyRing.from_pem({"key-1": key_pair[0]}))
    # A ranged GET of just the offset index, as the gateway does it.
    entry = manifest.offset_index
    offset_index = index_bytes(objects.indexes[entry.position : entry.end], manifest, "OFFSET", base=entry.position)
    assert offset_index == LARGE.with_suffix(".index").read_bytes()
    for i in (0, 100, len(offset_index) // 8 - 1):
        relative, position = struct.unpack_from(">ii", offset_index, i * 8)
        header = _read_all(objects, manifest, position, position + 61)  # DefaultRecordBatch header
        base_offset, _, _, magic = struct.unpack_from(">qiib", header)
        assert (base_offset, magic) == (7729 + relative, 2)


def test_wrong_key_is_a_clear_error(key_pair: tuple[bytes, bytes], other_key_pair: tuple[bytes, bytes]) -> None:
    objects = _layout(SMALL, "encrypted", key_pair)
    with pytest.raises(RsmDecryptionError, match="does not unwrap with key pair 'key-1'"):
        parse_manifest(objects.manifest, KeyRing.from_pem({"key-1": other_key_pair[0]}), what=objects.key.object_key("rsm-manifest"))
    with pytest.raises(RsmDecryptionError, match="not hold"):
        parse_manifest(objects.manifest, KeyRing.from_pem({"key-2": key_pair[0]}))


def test_data_key_of_another_segment_fails_the_tag(key_pair: tuple[bytes, bytes]) -> None:
    first, second = (_layout(SMALL, "encrypted", key_pair) for _ in range(2))
    ring = KeyRing.from_pem({"key-1": key_pair[0]})
    manifest = parse_manifest(second.manifest, ring)
    chunks = manifest.chunk_index.chunks_for(0, 10)
    with pytest.raises(RsmDecryptionError, match=r"\.log chunk 0 .*tag does not verify"):
        detransform_range(first.log[: chunks[0].transformed_end], chunks, compression=False,
                          encryption=manifest.encryption, start=0, end=10, what=first.key.object_key("log"))


@pytest.mark.parametrize("variant", ["encrypted", "compressed+encrypted"])
def test_truncated_and_tampered_chunks(variant: str, key_pair: tuple[bytes, bytes]) -> None:
    objects = _layout(SMALL, variant, key_pair)
    manifest = parse_manifest(objects.manifest, KeyRing.from_pem({"key-1": key_pair[0]}))
    chunks = manifest.chunk_index.chunks_for(1500, 2500)
    assert [c.id for c in chunks] == [1, 2]
    data = objects.log[chunks[0].transformed_position : chunks[-1].transformed_end]
    kwargs = {"compression": manifest.compression, "encryption": manifest.encryption, "start": 1500, "end": 2500,
              "what": objects.key.object_key("log")}
    with pytest.raises(RsmDecryptionError, match=r"chunks 1\.\.2 span .* \(truncated\)"):
        detransform_range(data[:-1], chunks, **kwargs)  # type: ignore[arg-type]
    tampered = bytearray(data)
    tampered[chunks[0].transformed_size - 1] ^= 0x01  # the last byte of chunk 1's GCM tag
    with pytest.raises(RsmDecryptionError, match=r"chunk 1 \(transformed bytes .*\): AES-GCM tag does not verify"):
        detransform_range(bytes(tampered), chunks, **kwargs)  # type: ignore[arg-type]
    # The indexes are AES-GCM chunks too (this segment's offset index is empty; its time index is not).
    assert manifest.offset_index.size == 0
    index_tampered = bytearray(objects.indexes)
    index_tampered[manifest.timestamp_index.position + 12] ^= 0x80  # the first ciphertext byte
    with pytest.raises(RsmDecryptionError, match="index timestamp: AES-GCM tag does not verify"):
        read_indexes(bytes(index_tampered), manifest)


def test_truncated_indexes_object(key_pair: tuple[bytes, bytes]) -> None:
    objects = _layout(SMALL, "plain", key_pair)
    manifest = parse_manifest(objects.manifest, None)
    with pytest.raises(RsmFormatError, match="index leaderEpoch at bytes .* outside"):
        read_indexes(objects.indexes[: manifest.leader_epoch_index.position + 2], manifest)


def test_compression_needs_a_variable_index(key_pair: tuple[bytes, bytes]) -> None:
    with pytest.raises(ValueError, match="variable chunk index"):
        layout_rsm_segment(prefix="", topic="t", topic_id=random_uuid(), partition=0, segment_log=SMALL,
                           compression=True, variable_chunk_index=False)


class _RecordingS3:
    """Records put_object calls (write_rsm_segment's only S3 call); the integration tests use SeaweedFS."""

    def __init__(self) -> None:
        self.puts: list[tuple[str, str, bytes]] = []

    def put_object(self, *, Bucket: str, Key: str, Body: bytes) -> None:  # noqa: N803 - boto3's names
        self.puts.append((Bucket, Key, Body))


def test_write_rsm_segment_uploads_in_the_rsm_order(key_pair: tuple[bytes, bytes]) -> None:
    from tests.support.rsm_writer import write_rsm_segment

    s3 = _RecordingS3()
    segment_id = random_uuid()
    key = write_rsm_segment(
        s3, "bucket", prefix="p/", topic="t", topic_id=TOPIC_ID, partition=0, segment_dir_or_files=SMALL,
        segment_id=segment_id, chunk_size=4096, compression=True, encryption_key=("key-1", key_pair[1]),
    )
    assert key.segment_id == segment_id
    assert [k for _, k, _ in s3.puts] == [key.object_key(s) for s in ("log", "indexes", "rsm-manifest")]
    manifest = parse_manifest(s3.puts[2][2], KeyRing.from_pem({"key-1": key_pair[0]}))
    chunks = manifest.chunk_index.chunks()
    assert detransform_range(s3.puts[0][2], chunks, compression=True, encryption=manifest.encryption,
                             start=0, end=manifest.chunk_index.original_file_size) == SMALL.read_bytes()
