"""Test-only writer laying out a broker-written segment the way Aiven's RemoteStorageManager uploads it.

Follows Aiven-Open/tiered-storage-for-apache-kafka at commit 8fb15816 (``core/src/main/java/io/aiven/kafka/
tieredstorage``), ``KafkaRemoteStorageManager.copyLogSegmentData``:

1. ``uploadSegmentLog``: ``BaseTransformChunkEnumeration`` cuts the ``.log`` into ``chunk.size`` chunks,
   ``CompressionChunkEnumeration`` zstd-compresses each (when compression is required), ``EncryptionChunkEnumeration``
   encrypts each with AES-256-GCM (random 12-byte IV, the segment's AAD, 16-byte tag) when encryption is on;
   ``TransformFinisher`` builds a ``VariableSizeChunkIndex`` when compressed, else a ``FixedSizeChunkIndex``;
2. ``uploadIndexes`` / ``transformIndex``: offset, time, producer snapshot, leader epoch and (if any) transaction
   index, each one chunk, encrypted (never compressed), concatenated (``SegmentIndexesV1Builder``);
3. ``uploadManifest``: ``SegmentManifestV1`` JSON with the data key wrapped by the active RSA key pair
   (``RsaEncryptionProvider.encryptDataKey``, ``DataKeySerializer``) and the ``remoteLogSegmentMetadata``.

The data key and AAD are fresh per segment (``AesEncryptionProvider.createDataKeyAndAAD``: 32 random bytes each).
Kafka's side: the ``__remote_log_metadata`` records the broker publishes around the copy
(``RemoteLogSegmentMetadata`` in COPY_SEGMENT_STARTED, then an update to COPY_SEGMENT_FINISHED), with the leader
epochs taken from the batches' partitionLeaderEpoch (``RemoteLogManager`` takes them from the epoch cache), and the
leader-epoch index as Kafka's checkpoint text for the epochs up to the segment's end.

Byte layouts live in ``tiered_kafka.rsm`` (this writer composes them); a test needing a layout the RSM never
writes asks for it (``variable_chunk_index=True`` without compression). Decision: the writer has no encoder of
its own: the manifest JSON (``dump_manifest``, Jackson's field order), the ``.indexes`` layout (``build_indexes``),
the chunk transform and the ``__remote_log_metadata`` codec (``encode_record``) are the reader's own modules, so a
layout rule is written once; what keeps the round trip honest is that those codecs follow the Java classes named
here and must reproduce the RSM's own Java test vectors (tests/fixtures/rsm/rsm_test_vectors.json).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tiered_kafka.format.checkpoints import EpochEntry, format_leader_epoch_checkpoint, parse_leader_epoch_checkpoint
from tiered_kafka.format.record_batch import iter_batches
from tiered_kafka.rsm.chunk_index import ChunkIndex, FixedSizeChunkIndex, VariableSizeChunkIndex
from tiered_kafka.rsm.indexes import build_indexes
from tiered_kafka.rsm.keyring import wrap_data_key
from tiered_kafka.rsm.keys import RsmSegmentKey, uuid_from_bytes
from tiered_kafka.rsm.manifest import SegmentManifest, SegmentMetadata, dump_manifest
from tiered_kafka.rsm.remote_log_metadata import (
    RemoteLogSegmentMetadataRecord,
    RemoteLogSegmentMetadataUpdateRecord,
    RemoteLogSegmentState,
    TopicIdPartition,
    encode_record,
)
from tiered_kafka.rsm.transform import IV_SIZE, TAG_SIZE, EncryptionMetadata, transform_chunk

#: The RSM's ``chunk.size`` has no default; 4 MiB is what its documentation suggests. Tests pass small sizes.
DEFAULT_CHUNK_SIZE = 4 * 1024 * 1024


def random_uuid() -> str:
    """A random Kafka Uuid in its text form (22 base64url characters)."""
    return uuid_from_bytes(os.urandom(16))


def make_rsa_key_pair(bits: int = 2048) -> tuple[bytes, bytes]:
    """(private PEM PKCS#8, public PEM) as the RSM's ``encryption.key.pairs.<id>.{private,public}.key.file``."""
    from Crypto.PublicKey import RSA

    key = RSA.generate(bits)
    return key.export_key(format="PEM", pkcs=8), key.public_key().export_key(format="PEM")


@dataclass(frozen=True)
class RsmSegmentObjects:
    """One segment laid out by the RSM: the three objects' bytes and the metadata records."""

    key: RsmSegmentKey
    original_log: bytes
    log: bytes
    indexes: bytes
    manifest: bytes
    chunk_index: ChunkIndex
    encryption: EncryptionMetadata | None
    metadata: RemoteLogSegmentMetadataRecord
    copy_finished: RemoteLogSegmentMetadataUpdateRecord

    def objects(self) -> dict[str, bytes]:
        """Object key -> bytes, in upload order (.log, .indexes, .rsm-manifest)."""
        return {
            self.key.object_key("log"): self.log,
            self.key.object_key("indexes"): self.indexes,
            self.key.object_key("rsm-manifest"): self.manifest,
        }

    def metadata_values(self, *, finished: bool = True) -> list[bytes]:
        """``__remote_log_metadata`` record values (key null): STARTED, and FINISHED unless ``finished=False``."""
        values = [encode_record(self.metadata)]
        if finished:
            values.append(encode_record(self.copy_finished))
        return values


def _sibling(log_path: Path, base_offset: int, suffix: str) -> Path:
    return log_path.with_name(f"{base_offset:020d}{suffix}")


def layout_rsm_segment(
    *,
    prefix: str,
    topic: str,
    topic_id: str,
    partition: int,
    segment_log: Path,
    segment_id: str | None = None,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
    compression: bool = False,
    encryption_key: tuple[str, bytes] | None = None,
    variable_chunk_index: bool | None = None,
    broker_id: int = 0,
    event_timestamp_ms: int | None = None,
    segment_metadata: bool = True,
) -> RsmSegmentObjects:
    """Lay out one segment (``segment_log`` is its ``.log``; the indexes are read beside it) without uploading.

    ``encryption_key`` is (key pair id, RSA public key PEM). ``variable_chunk_index`` None follows the RSM
    (variable exactly when compressed); True forces a variable index; False with compression is refused.
    ``segment_metadata`` False writes the manifest without ``remoteLogSegmentMetadata``, as RSM versions
    before it did (a reader by listing then learns the segment's end from its indexes and batches).
    """
    if chunk_size <= 0:
        raise ValueError("chunk_size must be positive")
    if variable_chunk_index is None:
        variable_chunk_index = compression
    if compression and not variable_chunk_index:
        raise ValueError("compressed chunks have variable sizes: the RSM always writes a variable chunk index")
    original = segment_log.read_bytes()
    base_offset = int(segment_log.stem)
    batches = list(iter_batches(original))
    if not batches:
        raise ValueError(f"{segment_log} holds no batches")
    end_offset = batches[-1].last_offset
    next_offset = end_offset + 1
    epochs: dict[int, int] = {}
    for batch in batches:
        epochs.setdefault(batch.partition_leader_epoch, batch.base_offset)

    encryption: EncryptionMetadata | None = None
    data_key_field: str | None = None
    if encryption_key is not None:
        encryption = EncryptionMetadata(data_key=os.urandom(32), aad=os.urandom(32))
        data_key_field = wrap_data_key(encryption_key[0], encryption_key[1], encryption.data_key)

    pieces = [original[i : i + chunk_size] for i in range(0, len(original), chunk_size)] or [b""]
    stored = [transform_chunk(p, compression=compression, encryption=encryption) for p in pieces]
    sizes = [len(s) for s in stored]
    chunk_index: ChunkIndex
    if variable_chunk_index:
        chunk_index = VariableSizeChunkIndex(chunk_size, len(original), sizes)
    else:
        # FixedSizeChunkIndexBuilder: the size EncryptionChunkEnumeration.transformedChunkSize announces up front.
        fixed_size = chunk_size + (IV_SIZE + TAG_SIZE if encryption is not None else 0)
        assert all(size == fixed_size for size in sizes[:-1])
        chunk_index = FixedSizeChunkIndex(chunk_size, len(original), fixed_size, sizes[-1])

    checkpoint_path = segment_log.with_name("leader-epoch-checkpoint")
    checkpoint = parse_leader_epoch_checkpoint(checkpoint_path.read_text()) if checkpoint_path.exists() else []
    segment_epochs = [e for e in checkpoint if e.start_offset < next_offset] or [EpochEntry(0, base_offset)]
    index_files: dict[str, bytes | None] = {
        "offset": _read(_sibling(segment_log, base_offset, ".index")),
        "timestamp": _read(_sibling(segment_log, base_offset, ".timeindex")),
        "producerSnapshot": _read(_sibling(segment_log, next_offset, ".snapshot")),
        "leaderEpoch": format_leader_epoch_checkpoint(segment_epochs).encode(),
        "transaction": _read(_sibling(segment_log, base_offset, ".txnindex"), missing=None),
    }
    indexes, ranges = build_indexes(index_files, encryption)

    segment_id = segment_id or random_uuid()
    key = RsmSegmentKey(prefix, topic, topic_id, partition, base_offset, segment_id)
    event_ts = int(time.time() * 1000) if event_timestamp_ms is None else event_timestamp_ms
    max_ts = max(b.max_timestamp for b in batches)
    manifest = SegmentManifest.from_ranges(
        ranges,
        chunk_index=chunk_index,
        compression=compression,
        encryption=encryption,
        segment_metadata=SegmentMetadata(
            topic, topic_id, partition, segment_id, base_offset, end_offset, max_ts, broker_id, event_ts, epochs
        ) if segment_metadata else None,
    )
    tip = TopicIdPartition(topic, topic_id, partition)
    metadata = RemoteLogSegmentMetadataRecord(
        topic_id_partition=tip,
        segment_id=segment_id,
        start_offset=base_offset,
        end_offset=end_offset,
        broker_id=broker_id,
        max_timestamp_ms=max_ts,
        event_timestamp_ms=event_ts,
        segment_leader_epochs=tuple(sorted(epochs.items())),
        segment_size_in_bytes=len(original),
        custom_metadata=None,
        state=RemoteLogSegmentState.COPY_SEGMENT_STARTED,
    )
    finished = RemoteLogSegmentMetadataUpdateRecord(
        tip, segment_id, broker_id, event_ts + 1, RemoteLogSegmentState.COPY_SEGMENT_FINISHED, None
    )
    return RsmSegmentObjects(
        key=key,
        original_log=original,
        log=b"".join(stored),
        indexes=indexes,
        manifest=dump_manifest(manifest, data_key_field=data_key_field),
        chunk_index=chunk_index,
        encryption=encryption,
        metadata=metadata,
        copy_finished=finished,
    )


def _read(path: Path, missing: bytes | None = b"") -> bytes | None:
    return path.read_bytes() if path.exists() else missing


def write_rsm_segment(
    s3_client: Any,
    bucket: str,
    *,
    prefix: str,
    topic: str,
    topic_id: str,
    partition: int,
    segment_dir_or_files: Path,
    segment_id: str | None = None,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
    compression: bool = False,
    encryption_key: tuple[str, bytes] | None = None,
    variable_chunk_index: bool | None = None,
    segment_metadata: bool = True,
) -> RsmSegmentKey:
    """Lay out one segment (``segment_dir_or_files``: its ``.log`` path) and upload .log, .indexes, .rsm-manifest
    in the RSM's order with a boto3 S3 client. Use :func:`layout_rsm_segment` for the metadata records."""
    objects = layout_rsm_segment(
        prefix=prefix,
        topic=topic,
        topic_id=topic_id,
        partition=partition,
        segment_log=Path(segment_dir_or_files),
        segment_id=segment_id,
        chunk_size=chunk_size,
        compression=compression,
        encryption_key=encryption_key,
        variable_chunk_index=variable_chunk_index,
        segment_metadata=segment_metadata,
    )
    upload_rsm_segment(s3_client, bucket, objects)
    return objects.key


def upload_rsm_segment(s3_client: Any, bucket: str, objects: RsmSegmentObjects) -> None:
    """PUT the three objects in the RSM's order (a reader seeing the manifest sees the other two)."""
    for object_key, body in objects.objects().items():
        s3_client.put_object(Bucket=bucket, Key=object_key, Body=body)
