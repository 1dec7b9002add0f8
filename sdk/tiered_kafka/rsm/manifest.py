"""The ``.rsm-manifest`` object (Java: ``manifest.SegmentManifest`` / ``SegmentManifestV1``, ``SegmentIndexesV1``,
``SegmentIndexV1``, ``SegmentEncryptionMetadataV1``, ``serde.KafkaTypeSerdeModule``).

JSON written by Jackson, Jackson type id ``version`` (only ``"1"`` exists), field by field::

    {"version": "1",
     "chunkIndex": {...},                                   ChunkIndex (chunk_index.py), required
     "segmentIndexes": {                                    SegmentIndexesV1, required
        "offset": {"position": 0, "size": 1},              SegmentIndexV1: int32s, required, non-null
        "timestamp": {...}, "producerSnapshot": {...}, "leaderEpoch": {...},    required, non-null
        "transaction": {...} | null},                        required, null when the segment has no .txnindex
     "compression": false,                                  required bool: each .log chunk is one zstd frame
     "encryption": {"dataKey": "keyId:base64", "aad": "base64"},   absent when not encrypted (keyring.py)
     "remoteLogSegmentMetadata": {                          written, never read back by the RSM (READ_ONLY)
        "remoteLogSegmentId": {"topicIdPartition": {"topicId": "<Uuid>",
                                                    "topicPartition": {"topic": "t", "partition": 42}},
                               "id": "<Uuid>"},
        "startOffset": 0, "endOffset": 1000, "maxTimestampMs": 1000000000, "brokerId": 2,
        "eventTimestampMs": 2000000000, "segmentLeaderEpochs": {"0": 100, "1": 200}}}

Index positions and sizes are in the ``.indexes`` object *as stored* (encrypted sizes when encrypted; see
indexes.py); the byte positions inside Kafka's offset and time indexes are positions in the original ``.log``,
which the chunk index maps to transformed chunks.

Decisions: unknown fields are ignored (Jackson's default would refuse them; ignoring lets a newer RSM's additions
through); ``remoteLogSegmentMetadata`` is optional (older RSM versions did not write it) but validated when present.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Mapping
from dataclasses import dataclass, field

from tiered_kafka.errors import RsmDecryptionError, RsmFormatError
from tiered_kafka.rsm.chunk_index import ChunkIndex, _int_field, parse_chunk_index
from tiered_kafka.rsm.keyring import KeyRing, parse_encrypted_data_key
from tiered_kafka.rsm.keys import uuid_to_bytes
from tiered_kafka.rsm.transform import EncryptionMetadata

#: SegmentIndexesV1's fields in upload order (``KafkaRemoteStorageManager.uploadIndexes``), with Kafka's
#: ``RemoteStorageManager.IndexType`` names.
INDEX_FIELDS: tuple[tuple[str, str], ...] = (
    ("offset", "OFFSET"),
    ("timestamp", "TIMESTAMP"),
    ("producerSnapshot", "PRODUCER_SNAPSHOT"),
    ("leaderEpoch", "LEADER_EPOCH"),
    ("transaction", "TRANSACTION"),
)
#: SegmentIndexesV1 field name -> the :class:`SegmentManifest` attribute holding its range (the one place
#: the two are paired: parsing, dumping, lookups by name and ``from_ranges`` all go through it).
_INDEX_ATTRIBUTES: dict[str, str] = {
    "offset": "offset_index",
    "timestamp": "timestamp_index",
    "producerSnapshot": "producer_snapshot_index",
    "leaderEpoch": "leader_epoch_index",
    "transaction": "transaction_index",
}


@dataclass(frozen=True)
class IndexRange:
    """``SegmentIndexV1``: one index's bytes in the ``.indexes`` object."""

    position: int
    size: int

    @property
    def end(self) -> int:
        return self.position + self.size


@dataclass(frozen=True)
class SegmentMetadata:
    """The manifest's copy of Kafka's ``RemoteLogSegmentMetadata`` (the fields ``KafkaTypeSerdeModule`` writes)."""

    topic: str
    topic_id: str
    partition: int
    segment_id: str
    start_offset: int
    end_offset: int
    max_timestamp_ms: int
    broker_id: int
    event_timestamp_ms: int
    segment_leader_epochs: dict[int, int] = field(default_factory=dict)

    def to_json(self) -> dict[str, object]:
        return {
            "remoteLogSegmentId": {
                "topicIdPartition": {
                    "topicId": self.topic_id,
                    "topicPartition": {"topic": self.topic, "partition": self.partition},
                },
                "id": self.segment_id,
            },
            "startOffset": self.start_offset,
            "endOffset": self.end_offset,
            "maxTimestampMs": self.max_timestamp_ms,
            "brokerId": self.broker_id,
            "eventTimestampMs": self.event_timestamp_ms,
            "segmentLeaderEpochs": {str(epoch): offset for epoch, offset in sorted(self.segment_leader_epochs.items())},
        }


@dataclass(frozen=True)
class SegmentManifest:
    """``SegmentManifestV1``, with the data key unwrapped."""

    chunk_index: ChunkIndex
    compression: bool
    encryption: EncryptionMetadata | None
    offset_index: IndexRange
    timestamp_index: IndexRange
    producer_snapshot_index: IndexRange
    leader_epoch_index: IndexRange
    transaction_index: IndexRange | None
    segment_metadata: SegmentMetadata | None = None

    @classmethod
    def from_ranges(
        cls,
        ranges: Mapping[str, IndexRange | None],
        *,
        chunk_index: ChunkIndex,
        compression: bool,
        encryption: EncryptionMetadata | None,
        segment_metadata: SegmentMetadata | None = None,
    ) -> SegmentManifest:
        """A manifest whose index ranges are keyed by SegmentIndexesV1 field name (as the JSON holds them and
        ``indexes.build_indexes`` returns them); KeyError when one of the five names is missing."""
        return cls(
            chunk_index=chunk_index,
            compression=compression,
            encryption=encryption,
            segment_metadata=segment_metadata,
            **{attribute: ranges[name] for name, attribute in _INDEX_ATTRIBUTES.items()},  # type: ignore[arg-type]
        )

    def index_range(self, name: str) -> IndexRange | None:
        """By SegmentIndexesV1 field name (``offset``, ...) or IndexType name (``OFFSET``, ...)."""
        for json_name, type_name in INDEX_FIELDS:
            if name in (json_name, type_name):
                return getattr(self, _INDEX_ATTRIBUTES[json_name])  # type: ignore[no-any-return]
        raise ValueError(f"unknown index {name!r}")


def _object(value: object, where: str) -> dict[str, object]:
    if not isinstance(value, dict):
        raise RsmFormatError(f"{where} must be a JSON object, got {type(value).__name__}")
    return value


def _long_field(obj: dict[str, object], name: str, where: str) -> int:
    if name not in obj:
        raise RsmFormatError(f"{where}: missing required field {name!r}")
    value = obj[name]
    if isinstance(value, bool) or not isinstance(value, int) or not -(2**63) <= value < 2**63:
        raise RsmFormatError(f"{where}.{name} must be a 64-bit integer, got {value!r}")
    return value


def _index_range(indexes: dict[str, object], name: str, *, nullable: bool) -> IndexRange | None:
    where = f"segmentIndexes.{name}"
    if name not in indexes:
        raise RsmFormatError(f"segmentIndexes: missing required field {name!r}")
    value = indexes[name]
    if value is None:
        if nullable:
            return None
        raise RsmFormatError(f"{where} cannot be null")
    obj = _object(value, where)
    position, size = _int_field(obj, "position", where), _int_field(obj, "size", where)
    if position < 0 or size < 0:
        raise RsmFormatError(f"{where}: position {position} and size {size} must be non-negative")
    return IndexRange(position, size)


def _segment_metadata(value: object) -> SegmentMetadata | None:
    if value is None:
        return None
    where = "remoteLogSegmentMetadata"
    obj = _object(value, where)
    segment_id_obj = _object(obj.get("remoteLogSegmentId"), f"{where}.remoteLogSegmentId")
    tip = _object(segment_id_obj.get("topicIdPartition"), f"{where}.remoteLogSegmentId.topicIdPartition")
    tp = _object(tip.get("topicPartition"), f"{where}.remoteLogSegmentId.topicIdPartition.topicPartition")
    topic = tp.get("topic")
    if not isinstance(topic, str) or not topic:
        raise RsmFormatError(f"{where}: topicPartition.topic must be a non-empty string, got {topic!r}")
    topic_id, segment_id = tip.get("topicId"), segment_id_obj.get("id")
    uuid_to_bytes(topic_id, what=f"{where} topicId")  # type: ignore[arg-type]
    uuid_to_bytes(segment_id, what=f"{where} segment id")  # type: ignore[arg-type]
    epochs_obj = _object(obj.get("segmentLeaderEpochs", {}), f"{where}.segmentLeaderEpochs")
    epochs: dict[int, int] = {}
    for epoch_text, offset in epochs_obj.items():
        if not epoch_text.lstrip("-").isdigit() or isinstance(offset, bool) or not isinstance(offset, int):
            raise RsmFormatError(f"{where}.segmentLeaderEpochs: {epoch_text!r}: {offset!r} is not epoch: offset")
        epochs[int(epoch_text)] = offset
    metadata = SegmentMetadata(
        topic=topic,
        topic_id=topic_id,  # type: ignore[arg-type]
        partition=_int_field(tp, "partition", f"{where}.topicPartition"),
        segment_id=segment_id,  # type: ignore[arg-type]
        start_offset=_long_field(obj, "startOffset", where),
        end_offset=_long_field(obj, "endOffset", where),
        max_timestamp_ms=_long_field(obj, "maxTimestampMs", where),
        broker_id=_int_field(obj, "brokerId", where),
        event_timestamp_ms=_long_field(obj, "eventTimestampMs", where),
        segment_leader_epochs=epochs,
    )
    if metadata.end_offset < metadata.start_offset:
        raise RsmFormatError(f"{where}: endOffset {metadata.end_offset} < startOffset {metadata.start_offset}")
    return metadata


def parse_manifest(data: bytes, key_ring: KeyRing | None, *, what: str = "manifest") -> SegmentManifest:
    """Parse and validate a ``.rsm-manifest``; unwraps the data key with ``key_ring`` when encrypted.

    RsmFormatError names the bad field (prefixed by ``what``, e.g. the object key); RsmDecryptionError when the
    segment is encrypted and ``key_ring`` is None or cannot unwrap its data key.
    """
    try:
        return _parse(data, key_ring)
    except RsmDecryptionError as exc:
        raise RsmDecryptionError(f"{what}: {exc}") from None
    except RsmFormatError as exc:
        raise RsmFormatError(f"{what}: {exc}") from None


def _parse(data: bytes, key_ring: KeyRing | None) -> SegmentManifest:
    try:
        doc = json.loads(data)
    except (UnicodeDecodeError, ValueError) as exc:
        raise RsmFormatError(f"not JSON: {exc}") from None
    doc = _object(doc, "the manifest")
    version = doc.get("version")
    if version != "1":
        raise RsmFormatError(f"version must be \"1\" (SegmentManifestV1), got {version!r}")
    if "chunkIndex" not in doc:
        raise RsmFormatError("missing required field 'chunkIndex'")
    chunk_index = parse_chunk_index(doc["chunkIndex"])
    if "segmentIndexes" not in doc:
        raise RsmFormatError("missing required field 'segmentIndexes'")
    indexes = _object(doc["segmentIndexes"], "segmentIndexes")
    ranges = {name: _index_range(indexes, name, nullable=name == "transaction") for name, _ in INDEX_FIELDS}
    if "compression" not in doc:
        raise RsmFormatError("missing required field 'compression'")
    compression = doc["compression"]
    if not isinstance(compression, bool):
        raise RsmFormatError(f"compression must be true or false, got {compression!r}")
    encryption = _encryption(doc.get("encryption"), key_ring)
    return SegmentManifest.from_ranges(
        ranges,
        chunk_index=chunk_index,
        compression=compression,
        encryption=encryption,
        segment_metadata=_segment_metadata(doc.get("remoteLogSegmentMetadata")),
    )


def _encryption(value: object, key_ring: KeyRing | None) -> EncryptionMetadata | None:
    if value is None:
        return None
    obj = _object(value, "encryption")
    for name in ("dataKey", "aad"):
        if name not in obj:
            raise RsmFormatError(f"encryption: missing required field {name!r}")
    aad_text = obj["aad"]
    if not isinstance(aad_text, str):
        raise RsmFormatError(f"encryption.aad must be a base64 string, got {type(aad_text).__name__}")
    try:
        aad = base64.b64decode(aad_text, validate=True)
    except (binascii.Error, ValueError):
        raise RsmFormatError("encryption.aad is not base64") from None
    key_id, _ = parse_encrypted_data_key(obj["dataKey"])
    if key_ring is None:
        raise RsmDecryptionError(
            f"the segment is encrypted (data key wrapped by key pair {key_id!r}) and no RSM key ring is configured"
        )
    return EncryptionMetadata(data_key=key_ring.unwrap(obj["dataKey"]), aad=aad)  # type: ignore[arg-type]


def dump_manifest(manifest: SegmentManifest, *, data_key_field: str | None = None) -> bytes:
    """The manifest as Jackson writes it (same field order, compact); ``data_key_field`` is the wrapped
    ``"keyId:base64"`` (keyring.wrap_data_key), required when ``manifest.encryption`` is set."""
    doc: dict[str, object] = {"version": "1", "chunkIndex": manifest.chunk_index.to_json()}
    ranges = {name: manifest.index_range(name) for name, _ in INDEX_FIELDS}
    doc["segmentIndexes"] = {
        name: (None if r is None else {"position": r.position, "size": r.size}) for name, r in ranges.items()
    }
    doc["compression"] = manifest.compression
    if manifest.encryption is not None:
        if data_key_field is None:
            raise ValueError("an encrypted manifest needs its wrapped data key (data_key_field)")
        doc["encryption"] = {"dataKey": data_key_field, "aad": base64.b64encode(manifest.encryption.aad).decode("ascii")}
    if manifest.segment_metadata is not None:
        doc["remoteLogSegmentMetadata"] = manifest.segment_metadata.to_json()
    return json.dumps(doc, separators=(",", ":")).encode()
