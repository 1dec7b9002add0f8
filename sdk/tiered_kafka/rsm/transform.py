"""Chunk transforms of the RSM (Java: ``io.aiven.kafka.tieredstorage.transform``).

Upload (``KafkaRemoteStorageManager.transformation``) chains, per chunk of ``chunk.size`` original bytes::

    BaseTransformChunkEnumeration -> CompressionChunkEnumeration (if compressed) -> EncryptionChunkEnumeration (if encrypted)

so a transformed chunk is ``encrypt(compress(original))``, and reading (``FetchChunkEnumeration`` /
``DetransformChunkEnumeration``) undoes it in the reverse order: decrypt, then decompress.

* compression (``CompressionChunkEnumeration``): each chunk is its own zstd frame, with its content size in the
  header (``ZstdCompressCtx.setContentSize(true)``); ``DecompressionChunkEnumeration`` needs that size;
* encryption (``EncryptionChunkEnumeration``, ``AesEncryptionProvider``): AES-256 in ``AES/GCM/NoPadding`` with a
  fresh random 12-byte IV per chunk, the manifest's ``aad`` as additional authenticated data, a 128-bit tag::

      IV (12 bytes) || ciphertext (as long as the input) || GCM tag (16 bytes)

  A wrong data key, a changed byte or a truncated chunk all fail the tag check: :class:`RsmDecryptionError`.

The ``.indexes`` object is encrypted the same way (one chunk per index) but never compressed (indexes.py).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tiered_kafka.errors import RsmDecryptionError, RsmFormatError
from tiered_kafka.rsm._zstd import compress_frame, decompress_frame, frame_content_size
from tiered_kafka.rsm.chunk_index import Chunk

#: ``SegmentEncryptionMetadataV1.IV_SIZE``.
IV_SIZE = 12
#: ``AesEncryptionProvider.GCM_TAG_LENGTH`` (128 bits).
TAG_SIZE = 16


@dataclass(frozen=True, repr=False)
class EncryptionMetadata:
    """``SegmentEncryptionMetadataV1``: the unwrapped data key and the AAD. Never printed."""

    data_key: bytes
    aad: bytes

    def __repr__(self) -> str:
        return f"EncryptionMetadata(data_key=<{len(self.data_key)} bytes>, aad=<{len(self.aad)} bytes>)"


def _aesgcm(key: bytes) -> Any:
    try:
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM
    except ImportError as exc:  # pragma: no cover - the gateway extra installs it
        raise ImportError("reading encrypted RSM segments needs cryptography: pip install 'tiered-kafka[gateway]'") from exc
    return AESGCM(key)


def decrypt_chunk(data: bytes | memoryview, encryption: EncryptionMetadata, *, what: str = "chunk") -> bytes:
    """``DecryptionChunkEnumeration``: ``IV || ciphertext || tag`` to the plaintext; RsmDecryptionError naming
    ``what`` when the chunk is too short or the tag does not verify."""
    if len(data) < IV_SIZE + TAG_SIZE:
        raise RsmDecryptionError(
            f"{what}: {len(data)} bytes cannot hold an AES-GCM chunk (IV {IV_SIZE} + tag {TAG_SIZE}): truncated"
        )
    aesgcm = _aesgcm(encryption.data_key)
    from cryptography.exceptions import InvalidTag

    view = memoryview(data)
    try:
        return aesgcm.decrypt(bytes(view[:IV_SIZE]), bytes(view[IV_SIZE:]), encryption.aad)
    except InvalidTag:
        raise RsmDecryptionError(
            f"{what}: AES-GCM tag does not verify (wrong data key or AAD, tampered or truncated chunk)"
        ) from None


def encrypt_chunk(data: bytes, encryption: EncryptionMetadata, *, iv: bytes | None = None) -> bytes:
    """``EncryptionChunkEnumeration.nextElement``: a random IV, then the AES-GCM ciphertext and tag."""
    iv = os.urandom(IV_SIZE) if iv is None else iv
    if len(iv) != IV_SIZE:
        raise ValueError(f"IV must be {IV_SIZE} bytes")
    return iv + _aesgcm(encryption.data_key).encrypt(iv, data, encryption.aad)


def transform_chunk(data: bytes, *, compression: bool, encryption: EncryptionMetadata | None) -> bytes:
    """One original chunk as the RSM uploads it: zstd first, then AES-GCM."""
    if compression:
        data = compress_frame(data)
    if encryption is not None:
        data = encrypt_chunk(data, encryption)
    return data


def detransform_chunk(
    data: bytes | memoryview, *, compression: bool, encryption: EncryptionMetadata | None, original_size: int, what: str = "chunk"
) -> bytes:
    """One transformed chunk back to its ``original_size`` bytes (the chunk index's): decrypt (if encrypted),
    then zstd-decompress. A frame whose header states another content size is refused *before* anything is
    decompressed (a header may claim gigabytes), and so is a result of another length: RsmFormatError."""
    out = bytes(data) if encryption is None else decrypt_chunk(data, encryption, what=what)
    if compression:
        try:
            claimed = frame_content_size(out)
            if claimed is not None and claimed != original_size:
                raise RsmFormatError(f"zstd frame claims {claimed} bytes, the chunk index says {original_size}")
            out = decompress_frame(out, limit=original_size)
        except RsmFormatError as exc:
            raise RsmFormatError(f"{what}: {exc}") from None
    if len(out) != original_size:
        raise RsmFormatError(f"{what}: de-transformed to {len(out)} bytes, the chunk index says {original_size}")
    return out


def detransform_range(
    data: bytes | memoryview,
    chunks: Sequence[Chunk],
    *,
    compression: bool,
    encryption: EncryptionMetadata | None,
    start: int,
    end: int,
    what: str = "segment",
) -> bytes:
    """Original bytes ``[start, end)`` from the transformed bytes of exactly ``chunks`` (contiguous, in order,
    as :meth:`ChunkIndex.chunks_for` returns them and one ranged GET fetches them).

    Each chunk is checked to decompress to its ``original_size`` (and never past it: ``detransform_chunk``);
    a short ``data`` is a truncated object.
    """
    if not chunks:
        if start >= end:
            return b""
        raise ValueError(f"no chunks given for the original byte range [{start}, {end})")
    base = chunks[0].transformed_position
    expected = chunks[-1].transformed_end - base
    if len(data) != expected:
        error = RsmDecryptionError if encryption is not None and len(data) < expected else RsmFormatError
        state = "truncated" if len(data) < expected else "too long"
        raise error(
            f"{what}: transformed chunks {chunks[0].id}..{chunks[-1].id} span {expected} bytes, got {len(data)} ({state})"
        )
    if start < chunks[0].original_position or end > chunks[-1].original_end or start > end:
        raise ValueError(
            f"original range [{start}, {end}) is not inside chunks {chunks[0].id}..{chunks[-1].id} "
            f"([{chunks[0].original_position}, {chunks[-1].original_end}))"
        )
    view = memoryview(data)
    parts = []
    previous: Chunk | None = None
    for chunk in chunks:
        if previous is not None and (chunk.transformed_position != previous.transformed_end or chunk.id != previous.id + 1):
            raise ValueError(f"chunks {previous.id} and {chunk.id} are not contiguous")
        previous = chunk
        piece = view[chunk.transformed_position - base : chunk.transformed_end - base]
        where = f"{what} chunk {chunk.id} (transformed bytes {chunk.transformed_position}..{chunk.transformed_end})"
        parts.append(detransform_chunk(piece, compression=compression, encryption=encryption, original_size=chunk.original_size, what=where))
    joined = b"".join(parts)
    offset = chunks[0].original_position
    return joined[start - offset : end - offset]
