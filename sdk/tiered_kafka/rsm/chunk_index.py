"""The RSM's chunk index: where each chunk of the original ``.log`` lies in the transformed object.

Java: ``io.aiven.kafka.tieredstorage.manifest.index`` - ``ChunkIndex``, ``AbstractChunkIndex``,
``FixedSizeChunkIndex``, ``VariableSizeChunkIndex``, ``Chunk``, and ``serde.ChunkSizesBinaryCodec``,
``serde.TransformedChunksSerializer`` / ``TransformedChunksDeserializer``.

The original file is cut into chunks of ``originalChunkSize`` bytes (the RSM's ``chunk.size``), the last one
shorter; each chunk is transformed on its own and the transformed chunks are concatenated. In the manifest
(``"chunkIndex"``, Jackson type id ``"type"``)::

    {"type": "fixed", "originalChunkSize": 100, "originalFileSize": 250,
     "transformedChunkSize": 110, "finalTransformedChunkSize": 30}
    {"type": "variable", "originalChunkSize": 100, "originalFileSize": 250,
     "transformedChunks": "<base64 of one zstd frame of ChunkSizesBinaryCodec(sizes)>"}

The RSM writes "fixed" when every transformed chunk but the last has one size (no transform: the sizes are the
original ones; encryption alone: ``12 + size + 16``) and "variable" when compression is on
(``TransformFinisher.chunkIndexBuilder``). A chunk count of zero (an empty file) materializes as one empty chunk,
as ``AbstractChunkIndex.materializeChunks`` does.

``ChunkSizesBinaryCodec``, big-endian::

    count            int32
    base             int32       min of all values but the last           } present only when
    bytesPerValue    int8        1..4: bytes of the largest value - base  } count >= 2
    values           (count - 1) * bytesPerValue, each value - base, big-endian, truncated to bytesPerValue
    last value       int32       in full (present when count >= 1)

The zstd frame holds its content size and may claim at most 10 MiB (``MAX_DECOMPRESSED_SIZE``); the base64 is
``java.util.Base64`` (standard alphabet, padded).
"""

from __future__ import annotations

import base64
import binascii
import struct
from dataclasses import dataclass

from tiered_kafka.errors import RsmFormatError
from tiered_kafka.rsm._zstd import compress_frame, decompress_frame

#: ``TransformedChunksDeserializer.MAX_DECOMPRESSED_SIZE``.
MAX_DECOMPRESSED_SIZE = 10 * 1024 * 1024
_INT32_MAX = 2**31 - 1


@dataclass(frozen=True)
class Chunk:
    """``Chunk``: one chunk's place in the original file and in the transformed object."""

    id: int
    original_position: int
    original_size: int
    transformed_position: int
    transformed_size: int

    @property
    def original_end(self) -> int:
        return self.original_position + self.original_size

    @property
    def transformed_end(self) -> int:
        return self.transformed_position + self.transformed_size


class ChunkIndex:
    """``AbstractChunkIndex``: original chunks of one size (but the last), transformed sizes per subclass."""

    kind: str = ""

    def __init__(self, original_chunk_size: int, original_file_size: int, transformed_sizes: list[int]) -> None:
        if original_chunk_size <= 0:
            raise RsmFormatError(f"chunk index: originalChunkSize must be positive, got {original_chunk_size}")
        if original_file_size < 0:
            raise RsmFormatError(f"chunk index: originalFileSize must be non-negative, got {original_file_size}")
        if any(size < 0 for size in transformed_sizes):
            raise RsmFormatError("chunk index: transformed chunk sizes must be non-negative")
        self.original_chunk_size = original_chunk_size
        self.original_file_size = original_file_size
        chunks: list[Chunk] = []
        original = transformed = 0
        count = len(transformed_sizes)
        for i, size in enumerate(transformed_sizes):
            original_size = original_file_size - original if i == count - 1 else original_chunk_size
            chunks.append(Chunk(i, original, original_size, transformed, size))
            original += original_size
            transformed += size
        self._chunks = chunks or [Chunk(0, 0, 0, 0, 0)]
        self.transformed_file_size = transformed

    def chunks(self) -> list[Chunk]:
        """All chunks, in order (``ChunkIndex.chunks``)."""
        return list(self._chunks)

    def chunk_for(self, position: int) -> Chunk | None:
        """The chunk holding original byte ``position`` (``findChunkForOriginalOffset``); None past the end."""
        if position < 0:
            raise ValueError(f"position must be non-negative, got {position}")
        if position >= self.original_file_size:
            return None
        return self._chunks[min(position // self.original_chunk_size, len(self._chunks) - 1)]

    def chunks_for(self, start: int, end: int) -> list[Chunk]:
        """The whole chunks covering original bytes ``[start, end)`` (``chunksForRange``), clipped to the file.

        Contiguous in the transformed object: they are fetched as one byte range
        ``[chunks[0].transformed_position, chunks[-1].transformed_end)``. Empty when the range is empty or
        starts at or past the end of the file.
        """
        if start < 0 or end < start:
            raise ValueError(f"invalid original byte range [{start}, {end})")
        end = min(end, self.original_file_size)
        if start >= end:
            return []
        first = start // self.original_chunk_size
        last = min((end - 1) // self.original_chunk_size, len(self._chunks) - 1)
        return self._chunks[first : last + 1]

    def __eq__(self, other: object) -> bool:
        return (
            type(other) is type(self)
            and isinstance(other, ChunkIndex)
            and other.original_chunk_size == self.original_chunk_size
            and other.original_file_size == self.original_file_size
            and other._chunks == self._chunks
        )

    def __hash__(self) -> int:
        return hash((self.kind, self.original_chunk_size, self.original_file_size, tuple(self._chunks)))

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(originalChunkSize={self.original_chunk_size}, "
            f"originalFileSize={self.original_file_size}, chunks={len(self._chunks)})"
        )

    def to_json(self) -> dict[str, object]:
        raise NotImplementedError


def _expected_chunk_count(original_chunk_size: int, original_file_size: int) -> int:
    return -(-original_file_size // original_chunk_size)


class FixedSizeChunkIndex(ChunkIndex):
    """``FixedSizeChunkIndex``: every transformed chunk ``transformedChunkSize`` bytes, the last one
    ``finalTransformedChunkSize``; the chunk count follows from the original sizes."""

    kind = "fixed"

    def __init__(
        self, original_chunk_size: int, original_file_size: int, transformed_chunk_size: int, final_transformed_chunk_size: int
    ) -> None:
        if original_chunk_size <= 0:
            raise RsmFormatError(f"chunk index: originalChunkSize must be positive, got {original_chunk_size}")
        for name, value in (("transformedChunkSize", transformed_chunk_size), ("finalTransformedChunkSize", final_transformed_chunk_size)):
            if value < 0:  # checkSizeNonNegative, whatever the chunk count
                raise RsmFormatError(f"chunk index: {name} must be non-negative, got {value}")
        count = max(_expected_chunk_count(original_chunk_size, original_file_size), 0)
        sizes = [transformed_chunk_size] * (count - 1) + [final_transformed_chunk_size] if count else []
        super().__init__(original_chunk_size, original_file_size, sizes)
        self.transformed_chunk_size = transformed_chunk_size
        self.final_transformed_chunk_size = final_transformed_chunk_size

    def to_json(self) -> dict[str, object]:
        return {
            "type": "fixed",
            "originalChunkSize": self.original_chunk_size,
            "originalFileSize": self.original_file_size,
            "transformedChunkSize": self.transformed_chunk_size,
            "finalTransformedChunkSize": self.final_transformed_chunk_size,
        }


class VariableSizeChunkIndex(ChunkIndex):
    """``VariableSizeChunkIndex``: one transformed size per chunk (compression)."""

    kind = "variable"

    def __init__(self, original_chunk_size: int, original_file_size: int, transformed_chunks: list[int]) -> None:
        if original_chunk_size <= 0:
            raise RsmFormatError(f"chunk index: originalChunkSize must be positive, got {original_chunk_size}")
        expected = max(_expected_chunk_count(original_chunk_size, original_file_size), 1)
        if len(transformed_chunks) != expected:
            raise RsmFormatError(
                f"variable chunk index: {len(transformed_chunks)} transformed chunk sizes for an original file of "
                f"{original_file_size} bytes in chunks of {original_chunk_size} (expected {expected})"
            )
        super().__init__(original_chunk_size, original_file_size, list(transformed_chunks))
        self.transformed_chunks = list(transformed_chunks)

    def to_json(self) -> dict[str, object]:
        return {
            "type": "variable",
            "originalChunkSize": self.original_chunk_size,
            "originalFileSize": self.original_file_size,
            "transformedChunks": encode_transformed_chunks(self.transformed_chunks),
        }


def encode_chunk_sizes(values: list[int]) -> bytes:
    """``ChunkSizesBinaryCodec.encode``."""
    if any(v < 0 or v > _INT32_MAX for v in values):
        raise ValueError("Values cannot be negative" if any(v < 0 for v in values) else "Values must fit an int32")
    count = len(values)
    if count == 0:
        return struct.pack(">i", 0)
    if count == 1:
        return struct.pack(">ii", 1, values[0])
    base = min(values[:-1])
    width = max(_bytes_needed(v - base) for v in values[:-1])
    body = b"".join((v - base).to_bytes(4, "big")[4 - width :] for v in values[:-1])
    return struct.pack(">iib", count, base, width) + body + struct.pack(">i", values[-1])


def _bytes_needed(value: int) -> int:
    return 1 if value <= 0xFF else 2 if value <= 0xFFFF else 3 if value <= 0xFFFFFF else 4


def decode_chunk_sizes(data: bytes) -> list[int]:
    """``ChunkSizesBinaryCodec.decode``, with RsmFormatError for truncated, over-long or impossible encodings."""

    def bad(reason: str) -> RsmFormatError:
        return RsmFormatError(f"ChunkSizesBinaryCodec: {reason} ({len(data)} bytes)")

    if len(data) < 4:
        raise bad("truncated count")
    (count,) = struct.unpack_from(">i", data)
    if count < 0:
        raise bad(f"negative count {count}")
    if count == 0:
        expected = 4
    elif count == 1:
        expected = 8
    else:
        if len(data) < 9:
            raise bad("truncated header")
        width = data[8]
        if not 1 <= width <= 4:
            raise bad(f"bytes per value {width} is not 1..4")
        expected = 9 + (count - 1) * width + 4
    if len(data) != expected:
        raise bad(f"count {count} needs {expected} bytes")
    if count == 0:
        return []
    if count == 1:
        values = [struct.unpack_from(">i", data, 4)[0]]
    else:
        (base,) = struct.unpack_from(">i", data, 4)
        values = [base + int.from_bytes(data[9 + i * width : 9 + (i + 1) * width], "big") for i in range(count - 1)]
        values.append(struct.unpack_from(">i", data, expected - 4)[0])
    if any(v < 0 or v > _INT32_MAX for v in values):
        raise bad("a chunk size is negative or over 2^31-1")
    return values


def encode_transformed_chunks(values: list[int]) -> str:
    """``TransformedChunksSerializer``: base64 of one zstd frame (with content size) of the binary codec."""
    return base64.b64encode(compress_frame(encode_chunk_sizes(values))).decode("ascii")


def decode_transformed_chunks(text: object) -> list[int]:
    """``TransformedChunksDeserializer``: the manifest's ``transformedChunks`` string to the chunk sizes."""
    if not isinstance(text, str):
        raise RsmFormatError(f"chunkIndex.transformedChunks must be a base64 string, got {type(text).__name__}")
    try:
        frame = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise RsmFormatError(f"chunkIndex.transformedChunks is not base64: {exc}") from None
    try:
        return decode_chunk_sizes(decompress_frame(frame, limit=MAX_DECOMPRESSED_SIZE))
    except RsmFormatError as exc:
        raise RsmFormatError(f"chunkIndex.transformedChunks: {exc}") from None


def parse_chunk_index(obj: object) -> ChunkIndex:
    """The manifest's ``chunkIndex`` object (already parsed from JSON) to a :class:`ChunkIndex`."""
    if not isinstance(obj, dict):
        raise RsmFormatError(f"chunkIndex must be a JSON object, got {type(obj).__name__}")
    kind = obj.get("type")
    if kind == "fixed":
        return FixedSizeChunkIndex(
            _int_field(obj, "originalChunkSize"),
            _int_field(obj, "originalFileSize"),
            _int_field(obj, "transformedChunkSize"),
            _int_field(obj, "finalTransformedChunkSize"),
        )
    if kind == "variable":
        chunk_size, file_size = _int_field(obj, "originalChunkSize"), _int_field(obj, "originalFileSize")
        if "transformedChunks" not in obj:
            raise RsmFormatError("chunkIndex: missing required field 'transformedChunks'")
        return VariableSizeChunkIndex(chunk_size, file_size, decode_transformed_chunks(obj["transformedChunks"]))
    raise RsmFormatError(f"chunkIndex.type must be 'fixed' or 'variable', got {kind!r}")


def _int_field(obj: dict[str, object], name: str, where: str = "chunkIndex") -> int:
    """A required JSON int32 (Java ``int``); RsmFormatError naming ``where.name`` otherwise."""
    if name not in obj:
        raise RsmFormatError(f"{where}: missing required field {name!r}")
    value = obj[name]
    if isinstance(value, bool) or not isinstance(value, int) or not -(2**31) <= value <= _INT32_MAX:
        raise RsmFormatError(f"{where}.{name} must be a 32-bit integer, got {value!r}")
    return value
