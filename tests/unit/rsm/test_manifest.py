"""The .rsm-manifest: SegmentManifestV1SerdeTest's JSON vectors, and a clear error for every bad field."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tiered_kafka.errors import RsmDecryptionError, RsmFormatError
from tiered_kafka.rsm.chunk_index import FixedSizeChunkIndex
from tiered_kafka.rsm.keyring import KeyRing, wrap_data_key
from tiered_kafka.rsm.manifest import IndexRange, SegmentMetadata, dump_manifest, parse_manifest


def _vector(vectors: dict[str, Any], name: str) -> str:
    return vectors["SegmentManifestV1SerdeTest"][name]


def test_without_encryption_vector(vectors: dict[str, Any]) -> None:
    text = _vector(vectors, "WITHOUT_ENCRYPTION_JSON")
    manifest = parse_manifest(text.encode(), None)
    assert manifest.chunk_index == FixedSizeChunkIndex(100, 1000, 110, 110)
    assert len(manifest.chunk_index.chunks()) == 10
    assert manifest.compression is False and manifest.encryption is None
    assert [manifest.offset_index, manifest.timestamp_index, manifest.producer_snapshot_index,
            manifest.leader_epoch_index, manifest.transaction_index] == [IndexRange(i, 1) for i in range(5)]
    assert manifest.segment_metadata == SegmentMetadata(
        topic="topic1", topic_id="lZ6vvmajTWKDBUTV6SQAtQ", partition=42, segment_id="adh9f8BMS4anaUnD8KWfWg",
        start_offset=0, end_offset=1000, max_timestamp_ms=1000000000, broker_id=2, event_timestamp_ms=2000000000,
        segment_leader_epochs={0: 100, 1: 200, 2: 300},
    )
    # Written back field for field as Jackson writes it.
    assert dump_manifest(manifest).decode() == text


def test_without_txn_index_vector(vectors: dict[str, Any]) -> None:
    text = _vector(vectors, "WITHOUT_ENCRYPTION_WITHOUT_TXN_INDEX_JSON")
    manifest = parse_manifest(text.encode(), None)
    assert manifest.transaction_index is None
    assert manifest.index_range("TRANSACTION") is None and manifest.index_range("leaderEpoch") == IndexRange(3, 1)
    assert dump_manifest(manifest).decode() == text


def test_with_encryption_vector(vectors: dict[str, Any], key_pair: tuple[bytes, bytes]) -> None:
    # The Java test removes the (random) wrapped key before comparing; we put one wrapped by our key pair back.
    private_pem, public_pem = key_pair
    doc = json.loads(_vector(vectors, "WITH_ENCRYPTION_WITHOUT_SECRET_KEY_JSON"))
    data_key = bytes(range(32))  # the Java test's 10-byte DATA_KEY is no AES key; ours checks the size
    doc["encryption"] = {"dataKey": wrap_data_key("key1", public_pem, data_key), "aad": doc["encryption"]["aad"]}
    manifest = parse_manifest(json.dumps(doc).encode(), KeyRing.from_pem({"key1": private_pem}))
    assert manifest.encryption is not None
    assert manifest.encryption.data_key == data_key
    assert manifest.encryption.aad == bytes(vectors["SegmentManifestV1SerdeTest"]["AAD"])
    assert "data_key" in repr(manifest.encryption) and data_key.hex() not in repr(manifest)


def test_encrypted_manifest_without_key_ring(vectors: dict[str, Any], key_pair: tuple[bytes, bytes]) -> None:
    doc = json.loads(_vector(vectors, "WITH_ENCRYPTION_WITHOUT_SECRET_KEY_JSON"))
    doc["encryption"]["dataKey"] = wrap_data_key("key1", key_pair[1], bytes(32))
    with pytest.raises(RsmDecryptionError, match="t/x.rsm-manifest: the segment is encrypted .* no RSM key ring"):
        parse_manifest(json.dumps(doc).encode(), None, what="t/x.rsm-manifest")


def _mutated(vectors: dict[str, Any], path: list[str], value: object) -> bytes:
    doc = json.loads(_vector(vectors, "WITHOUT_ENCRYPTION_JSON"))
    target = doc
    for name in path[:-1]:
        target = target[name]
    if value is KeyError:
        del target[path[-1]]
    else:
        target[path[-1]] = value
    return json.dumps(doc).encode()


@pytest.mark.parametrize(
    "path, value, message",
    [
        (["version"], "2", 'version must be "1"'),
        (["version"], 1, 'version must be "1"'),
        (["version"], KeyError, 'version must be "1"'),
        (["chunkIndex"], KeyError, "missing required field 'chunkIndex'"),
        (["chunkIndex", "type"], "plain", "chunkIndex.type must be"),
        (["chunkIndex", "originalFileSize"], -1, "originalFileSize must be non-negative"),
        (["chunkIndex", "transformedChunkSize"], 2**31, "chunkIndex.transformedChunkSize must be a 32-bit integer"),
        (["segmentIndexes"], KeyError, "missing required field 'segmentIndexes'"),
        (["segmentIndexes"], [], "segmentIndexes must be a JSON object"),
        (["segmentIndexes", "offset"], KeyError, "segmentIndexes: missing required field 'offset'"),
        (["segmentIndexes", "timestamp"], None, "segmentIndexes.timestamp cannot be null"),
        (["segmentIndexes", "transaction"], KeyError, "missing required field 'transaction'"),
        (["segmentIndexes", "leaderEpoch", "size"], KeyError, "segmentIndexes.leaderEpoch: missing required field 'size'"),
        (["segmentIndexes", "producerSnapshot", "position"], -3, "must be non-negative"),
        (["segmentIndexes", "offset", "position"], 1.5, "segmentIndexes.offset.position must be a 32-bit integer"),
        (["compression"], KeyError, "missing required field 'compression'"),
        (["compression"], "false", "compression must be true or false"),
        (["encryption"], {"aad": "CgsMDQ=="}, "encryption: missing required field 'dataKey'"),
        (["encryption"], {"dataKey": "k:AAAA"}, "encryption: missing required field 'aad'"),
        (["encryption"], {"dataKey": "k:AAAA", "aad": "%%"}, "encryption.aad is not base64"),
        (["encryption"], {"dataKey": "nokeyid", "aad": ""}, "exactly one ':'"),
        (["encryption"], {"dataKey": "a:b:c", "aad": ""}, "exactly one ':'"),
        (["encryption"], {"dataKey": " :AAAA", "aad": ""}, "blank key pair id"),
        (["encryption"], {"dataKey": "k:%%%", "aad": ""}, "not base64"),
        (["encryption"], {"dataKey": "k:", "aad": ""}, "wrapped key is empty"),
        (["remoteLogSegmentMetadata", "remoteLogSegmentId", "id"], "short", "segment id 'short' is not a Kafka Uuid"),
        (["remoteLogSegmentMetadata", "endOffset"], -5, "endOffset -5 < startOffset 0"),
        (["remoteLogSegmentMetadata", "startOffset"], KeyError, "missing required field 'startOffset'"),
        (["remoteLogSegmentMetadata", "segmentLeaderEpochs"], {"x": 1}, "is not epoch: offset"),
    ],
)
def test_bad_fields_are_named(vectors: dict[str, Any], path: list[str], value: object, message: str) -> None:
    with pytest.raises(RsmFormatError, match=message) as info:
        parse_manifest(_mutated(vectors, path, value), None, what="p/t-x/0/seg.rsm-manifest")
    assert str(info.value).startswith("p/t-x/0/seg.rsm-manifest: ")


def test_not_json() -> None:
    with pytest.raises(RsmFormatError, match="not JSON"):
        parse_manifest(b"{", None)
    with pytest.raises(RsmFormatError, match="the manifest must be a JSON object"):
        parse_manifest(b"[]", None)


def test_unknown_fields_and_missing_metadata_are_accepted(vectors: dict[str, Any]) -> None:
    doc = json.loads(_vector(vectors, "WITHOUT_ENCRYPTION_JSON"))
    doc["someFutureField"] = {"x": 1}
    del doc["remoteLogSegmentMetadata"]
    manifest = parse_manifest(json.dumps(doc).encode(), None)
    assert manifest.segment_metadata is None and manifest.chunk_index.original_file_size == 1000
