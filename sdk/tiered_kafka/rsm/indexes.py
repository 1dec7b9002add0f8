"""The ``.indexes`` object: a segment's five indexes in one object (Java: ``KafkaRemoteStorageManager.uploadIndexes``,
``transformIndex``, ``fetchIndexBytes``; ``manifest.SegmentIndexesV1Builder``).

Layout, in this order, each index stored as one chunk (chunking disabled) and concatenated::

    offset            the segment's .index               (Kafka's RemoteStorageManager.IndexType.OFFSET)
    timestamp         .timeindex                         (TIMESTAMP)
    producerSnapshot  the producer state .snapshot       (PRODUCER_SNAPSHOT)
    leaderEpoch       leader-epoch-checkpoint text for the segment (LEADER_EPOCH)
    transaction       .txnindex, only when the segment has one (TRANSACTION; the manifest then says null)

* never compressed, even when the ``.log`` is;
* when the segment is encrypted each non-empty index is one AES-GCM chunk ``IV || ciphertext || tag`` with the
  segment's data key and AAD (transform.py), so positions and sizes in ``segmentIndexes`` are those of the stored,
  encrypted bytes (``SegmentIndexesV1Builder.add`` accumulates the transformed sizes);
* an empty index takes no bytes: ``{"position": p, "size": 0}``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from tiered_kafka.errors import RsmFormatError
from tiered_kafka.rsm.manifest import INDEX_FIELDS, IndexRange, SegmentManifest
from tiered_kafka.rsm.transform import EncryptionMetadata, decrypt_chunk, encrypt_chunk


@dataclass(frozen=True)
class RsmIndexes:
    """The de-transformed indexes of one segment (``transaction`` None when the segment has no .txnindex)."""

    offset: bytes
    timestamp: bytes
    producer_snapshot: bytes
    leader_epoch: bytes
    transaction: bytes | None


def index_bytes(
    data: bytes | memoryview,
    manifest: SegmentManifest,
    name: str,
    *,
    base: int = 0,
    what: str = "indexes",
) -> bytes | None:
    """One index's original bytes from ``data``, the ``.indexes`` object's bytes from position ``base`` on
    (the whole object, or one ranged GET). None for an absent transaction index.

    RsmFormatError when ``data`` does not cover the index; RsmDecryptionError when it does not decrypt.
    """
    entry = manifest.index_range(name)
    if entry is None:
        return None
    if entry.size == 0:
        return b""
    start, end = entry.position - base, entry.end - base
    if start < 0 or end > len(data):
        raise RsmFormatError(
            f"{what}: index {name} at bytes {entry.position}..{entry.end} is outside the "
            f"{len(data)} bytes read from position {base} (truncated object?)"
        )
    piece = memoryview(data)[start:end]
    if manifest.encryption is None:
        return bytes(piece)
    return decrypt_chunk(piece, manifest.encryption, what=f"{what} index {name}")


def read_indexes(data: bytes | memoryview, manifest: SegmentManifest, *, what: str = "indexes") -> RsmIndexes:
    """All indexes from the whole ``.indexes`` object."""
    values = {name: index_bytes(data, manifest, name, what=what) for name, _ in INDEX_FIELDS}
    return RsmIndexes(
        offset=values["offset"] or b"",
        timestamp=values["timestamp"] or b"",
        producer_snapshot=values["producerSnapshot"] or b"",
        leader_epoch=values["leaderEpoch"] or b"",
        transaction=values["transaction"],
    )


def build_indexes(
    files: Mapping[str, bytes | None], encryption: EncryptionMetadata | None
) -> tuple[bytes, dict[str, IndexRange | None]]:
    """The ``.indexes`` object and its ``segmentIndexes`` ranges, as ``uploadIndexes`` lays them out.

    ``files`` maps the SegmentIndexesV1 field names to the index bytes; ``transaction`` None (or missing) when
    the segment has no transaction index; the other four are required.
    """
    parts: list[bytes] = []
    ranges: dict[str, IndexRange | None] = {}
    position = 0
    for name, _ in INDEX_FIELDS:
        content = files.get(name)
        if content is None:
            if name != "transaction":
                raise ValueError(f"index {name!r} is required")
            ranges[name] = None
            continue
        stored = encrypt_chunk(content, encryption) if encryption is not None and content else content
        ranges[name] = IndexRange(position, len(stored))
        parts.append(stored)
        position += len(stored)
    return b"".join(parts), ranges
