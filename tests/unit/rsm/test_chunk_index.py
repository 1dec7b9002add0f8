"""Chunk indexes and ChunkSizesBinaryCodec, pinned to the RSM's ChunkIndexSerializationTest and
ChunkSizesBinaryCodecTest vectors (tests/fixtures/rsm/rsm_test_vectors.json)."""

from __future__ import annotations

import base64
import json
import struct
from typing import Any

import pytest

from tiered_kafka.errors import RsmFormatError
from tiered_kafka.rsm._zstd import compress_frame
from tiered_kafka.rsm.chunk_index import (
    Chunk,
    FixedSizeChunkIndex,
    VariableSizeChunkIndex,
    decode_chunk_sizes,
    decode_transformed_chunks,
    encode_chunk_sizes,
    encode_transformed_chunks,
    parse_chunk_index,
)


def test_encoded_chunks_vector(vectors: dict[str, Any]) -> None:
    v = vectors["ChunkIndexSerializationTest"]
    assert decode_transformed_chunks(v["ENCODED_CHUNKS"]) == v["ENCODED_CHUNKS_values"]
    # The static block's layout: count 3, base 10, 1 byte per value, 0, 10, last value 30 in full.
    raw = struct.pack(">iib", 3, 10, 1) + bytes([0, 10]) + struct.pack(">i", 30)
    assert encode_chunk_sizes([10, 20, 30]) == raw
    # Java's zstd-jni frame and ours may differ in bytes; both must decode to the same values.
    assert decode_transformed_chunks(encode_transformed_chunks([10, 20, 30])) == [10, 20, 30]


def test_fixed_size_chunk_index_vector(vectors: dict[str, Any]) -> None:
    v = vectors["ChunkIndexSerializationTest"]
    index = parse_chunk_index(json.loads(v["FIXED_SIZE_CHUNK_INDEX_JSON"]))
    assert isinstance(index, FixedSizeChunkIndex)
    assert index.chunks() == [Chunk(*c) for c in v["fixed_chunks"]]
    assert json.dumps(index.to_json(), separators=(",", ":")) == v["FIXED_SIZE_CHUNK_INDEX_JSON"]


def test_variable_size_chunk_index_vector(vectors: dict[str, Any]) -> None:
    v = vectors["ChunkIndexSerializationTest"]
    index = parse_chunk_index(json.loads(v["VARIABLE_CHUNK_INDEX_JSON"]))
    assert isinstance(index, VariableSizeChunkIndex)
    assert index.chunks() == [Chunk(*c) for c in v["variable_chunks"]]
    assert index.transformed_file_size == 60
    again = parse_chunk_index(index.to_json())
    assert again == index


@pytest.mark.parametrize("missing", ["originalChunkSize", "originalFileSize", "transformedChunkSize", "finalTransformedChunkSize"])
def test_fixed_index_requires_fields(vectors: dict[str, Any], missing: str) -> None:
    obj = json.loads(vectors["ChunkIndexSerializationTest"]["FIXED_SIZE_CHUNK_INDEX_JSON"])
    del obj[missing]
    with pytest.raises(RsmFormatError, match=f"missing required field '{missing}'"):
        parse_chunk_index(obj)


@pytest.mark.parametrize("missing", ["originalChunkSize", "originalFileSize", "transformedChunks"])
def test_variable_index_requires_fields(vectors: dict[str, Any], missing: str) -> None:
    obj = json.loads(vectors["ChunkIndexSerializationTest"]["VARIABLE_CHUNK_INDEX_JSON"])
    del obj[missing]
    with pytest.raises(RsmFormatError, match=f"missing required field '{missing}'"):
        parse_chunk_index(obj)


def test_codec_multiple_values(vectors: dict[str, Any]) -> None:
    for values, bytes_per_value in vectors["ChunkSizesBinaryCodecTest"]["multipleValues"]:
        encoded = encode_chunk_sizes(values)
        assert len(encoded) == 4 + 4 + 1 + (len(values) - 1) * bytes_per_value + 4
        assert struct.unpack_from(">i", encoded)[0] == len(values)
        assert encoded[8] == bytes_per_value
        assert decode_chunk_sizes(encoded) == values


def test_codec_long_lists_use_four_bytes() -> None:
    # ChunkSizesBinaryCodecTest's longList: 0, 1000, ... below Integer.MAX_VALUE - 2000 (sampled: every 1000th).
    values = list(range(0, 2**31 - 1 - 2000, 1000 * 1000))
    for order in (values, values[::-1]):
        encoded = encode_chunk_sizes(order)
        assert encoded[8] == 4
        assert decode_chunk_sizes(encoded) == order


def test_codec_empty_and_single(vectors: dict[str, Any]) -> None:
    assert encode_chunk_sizes([]) == b"\x00\x00\x00\x00"
    assert decode_chunk_sizes(encode_chunk_sizes([])) == []
    for values in vectors["ChunkSizesBinaryCodecTest"]["single"]:
        assert encode_chunk_sizes(values) == struct.pack(">ii", 1, values[0])
        assert decode_chunk_sizes(encode_chunk_sizes(values)) == values


def test_codec_refuses_negative_values(vectors: dict[str, Any]) -> None:
    for values in vectors["ChunkSizesBinaryCodecTest"]["negative"]:
        with pytest.raises(ValueError, match="Values cannot be negative"):
            encode_chunk_sizes(values)


@pytest.mark.parametrize(
    "data, reason",
    [
        (b"\x00\x00", "truncated count"),
        (struct.pack(">i", -1), "negative count"),
        (struct.pack(">i", 1), "needs 8 bytes"),
        (struct.pack(">iib", 3, 10, 5) + bytes(6), "bytes per value 5"),
        (struct.pack(">iib", 3, 10, 1) + bytes(2) + struct.pack(">i", 30) + b"x", "needs 15 bytes"),
        (struct.pack(">ii", 1, -5), "negative"),
    ],
)
def test_codec_decode_errors(data: bytes, reason: str) -> None:
    with pytest.raises(RsmFormatError, match=reason):
        decode_chunk_sizes(data)


def test_transformed_chunks_errors() -> None:
    with pytest.raises(RsmFormatError, match="not base64"):
        decode_transformed_chunks("!!!")
    with pytest.raises(RsmFormatError, match="bad magic"):
        decode_transformed_chunks(base64.b64encode(b"not zstd").decode())
    with pytest.raises(RsmFormatError, match="over the limit"):
        decode_transformed_chunks(base64.b64encode(compress_frame(bytes(10 * 1024 * 1024 + 1))).decode())
    with pytest.raises(RsmFormatError, match="must be a base64 string"):
        decode_transformed_chunks(12)


def test_variable_index_count_must_match_sizes() -> None:
    with pytest.raises(RsmFormatError, match="expected 3"):
        VariableSizeChunkIndex(100, 250, [10, 20])
    with pytest.raises(RsmFormatError, match="type must be 'fixed' or 'variable'"):
        parse_chunk_index({"type": "other"})
    with pytest.raises(RsmFormatError, match="32-bit integer"):
        parse_chunk_index({"type": "fixed", "originalChunkSize": "100", "originalFileSize": 1,
                           "transformedChunkSize": 1, "finalTransformedChunkSize": 1})
    with pytest.raises(RsmFormatError, match="originalChunkSize must be positive"):
        FixedSizeChunkIndex(0, 250, 110, 30)


@pytest.mark.parametrize("file_size", [0, 50, 250])
def test_fixed_index_sizes_must_be_non_negative_whatever_the_chunk_count(file_size: int) -> None:
    # FixedSizeChunkIndex: checkSizeNonNegative(transformedChunkSize), also with 0 or 1 chunk (unused then)
    with pytest.raises(RsmFormatError, match="transformedChunkSize must be non-negative, got -1"):
        FixedSizeChunkIndex(100, file_size, -1, 30)
    with pytest.raises(RsmFormatError, match="finalTransformedChunkSize must be non-negative, got -2"):
        FixedSizeChunkIndex(100, file_size, 110, -2)


def test_chunks_for_ranges() -> None:
    index = FixedSizeChunkIndex(100, 250, 110, 30)
    ids = lambda start, end: [c.id for c in index.chunks_for(start, end)]  # noqa: E731
    assert ids(0, 1) == [0]
    assert ids(0, 100) == [0]
    assert ids(99, 101) == [0, 1]
    assert ids(150, 250) == [1, 2]
    assert ids(0, 10_000) == [0, 1, 2]  # clipped to the file, as chunksForRange stops at originalFileSize
    assert ids(249, 250) == [2]
    assert ids(250, 300) == []
    assert ids(10, 10) == []
    assert index.chunk_for(249) == Chunk(2, 200, 50, 220, 30)
    assert index.chunk_for(250) is None
    with pytest.raises(ValueError):
        index.chunks_for(5, 4)


def test_empty_file_has_one_empty_chunk() -> None:
    # AbstractChunkIndex.materializeChunks: chunkCount 0 gives Chunk(0, 0, 0, 0, 0).
    assert FixedSizeChunkIndex(100, 0, 100, 0).chunks() == [Chunk(0, 0, 0, 0, 0)]
    assert VariableSizeChunkIndex(100, 0, [9]).chunks() == [Chunk(0, 0, 0, 0, 9)]
    assert FixedSizeChunkIndex(100, 0, 100, 0).chunks_for(0, 10) == []
