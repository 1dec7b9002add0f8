"""Kafka's ``__remote_log_metadata`` records and the set of live remote segments they describe.

Java (Apache Kafka, ``storage``): the schemas ``src/main/resources/message/RemoteLogSegmentMetadataRecord.json``
(apiKey 0), ``RemoteLogSegmentMetadataUpdateRecord.json`` (1), ``RemotePartitionDeleteMetadataRecord.json`` (2),
``RemoteLogSegmentMetadataSnapshotRecord.json`` (3); serde ``RemoteLogMetadataSerde`` over ``BytesApiMessageSerde``
/ ``AbstractApiMessageSerde``; states ``RemoteLogSegmentState`` and ``RemotePartitionDeleteState``; the live view
``RemoteLogMetadataCache`` / ``RemotePartitionMetadataStore``.

A record's key is null (``ProducerManager``); its value is::

    frameVersion  unsigned varint   1 (AbstractApiMessageSerde.DEFAULT_FRAME_VERSION; 0 and others are refused)
    apiKey        unsigned varint   0..3, as above
    version       unsigned varint   0 (every schema: validVersions "0", flexibleVersions "0+")
    message       the generated message in flexible version 0, then nothing (trailing bytes are an error)

Flexible-version encoding (Kafka's generated ``Message.write``): ``int8/32/64`` big-endian; ``uuid`` 16 bytes;
``string`` compact (unsigned varint length + 1, UTF-8); nullable ``bytes`` compact (0 = null); arrays compact
(unsigned varint count + 1); every struct, nested or not, ends with its tagged fields: an unsigned varint count,
then per field unsigned varint tag, unsigned varint size, bytes. None of these schemas declares a tagged field,
so decoding skips unknown ones (as Java keeps them aside) and encoding writes none.

Field order on the wire is the schema's, e.g. RemoteLogSegmentMetadataRecord::

    RemoteLogSegmentId {TopicIdPartition {Name string, Id uuid, Partition int32, tags}, Id uuid, tags}
    StartOffset int64, EndOffset int64, BrokerId int32, MaxTimestampMs int64, EventTimestampMs int64,
    SegmentLeaderEpochs [{LeaderEpoch int32, Offset int64, tags}], SegmentSizeInBytes int32,
    CustomMetadata nullable bytes, RemoteLogSegmentState int8, tags

Live segments (:class:`LiveSegments`, following ``RemoteLogMetadataCache``): a segment is added by its metadata
record (state COPY_SEGMENT_STARTED); updates move it along ``RemoteLogSegmentState.isValidTransition``
(STARTED -> FINISHED | DELETE_STARTED, FINISHED -> DELETE_STARTED, DELETE_STARTED -> DELETE_FINISHED, and a state to
itself); a metadata record is taken only in state COPY_SEGMENT_STARTED and only for a segment unknown or still
in that state (``addCopyInProgressSegment``); invalid transitions, updates of unknown segments and such records are
ignored, as Kafka does, and counted in ``problems`` (the last ``MAX_PROBLEMS``) and ``problem_count``.
Only COPY_SEGMENT_FINISHED segments are live. Decision: any partition delete record (MARKED, STARTED or
FINISHED) ends the partition's life for readers - Kafka only drops its cache at FINISHED, but a topic marked for
deletion is gone for consumers. (Kafka 3.9 and 4.4 in KRaft mode write no partition delete record when a tiered topic is
deleted: they mark each of its segments DELETE_SEGMENT_STARTED, then DELETE_SEGMENT_FINISHED, as remote retention
and DeleteRecords do; tests/integration/rsm/test_kip405_real.py.) Snapshot records (apiKey 3) live in Kafka's
local snapshot files, not in the topic; they decode, and :meth:`LiveSegments.apply` ignores them.
"""

from __future__ import annotations

import enum
import struct
from collections import deque
from dataclasses import dataclass, field, replace

from tiered_kafka.errors import RsmFormatError
from tiered_kafka.rsm._message_wire import Reader as _Reader
from tiered_kafka.rsm._message_wire import Writer as _Writer
from tiered_kafka.rsm._message_wire import murmur2 as _murmur2
from tiered_kafka.rsm.keys import uuid_to_bytes

FRAME_VERSION = 1
TOPIC = "__remote_log_metadata"


class RemoteLogSegmentState(enum.IntEnum):
    COPY_SEGMENT_STARTED = 0
    COPY_SEGMENT_FINISHED = 1
    DELETE_SEGMENT_STARTED = 2
    DELETE_SEGMENT_FINISHED = 3


class RemotePartitionDeleteState(enum.IntEnum):
    DELETE_PARTITION_MARKED = 0
    DELETE_PARTITION_STARTED = 1
    DELETE_PARTITION_FINISHED = 2


_VALID_TRANSITIONS = {
    RemoteLogSegmentState.COPY_SEGMENT_STARTED: {
        RemoteLogSegmentState.COPY_SEGMENT_FINISHED,
        RemoteLogSegmentState.DELETE_SEGMENT_STARTED,
    },
    RemoteLogSegmentState.COPY_SEGMENT_FINISHED: {RemoteLogSegmentState.DELETE_SEGMENT_STARTED},
    RemoteLogSegmentState.DELETE_SEGMENT_STARTED: {RemoteLogSegmentState.DELETE_SEGMENT_FINISHED},
    RemoteLogSegmentState.DELETE_SEGMENT_FINISHED: set(),
}


@dataclass(frozen=True)
class TopicIdPartition:
    """``TopicIdPartitionEntry``: topic name, topic id (Uuid text), partition."""

    topic: str
    topic_id: str
    partition: int


@dataclass(frozen=True)
class RemoteLogSegmentMetadataRecord:
    """apiKey 0: a segment's metadata, published when its copy starts."""

    topic_id_partition: TopicIdPartition
    segment_id: str
    start_offset: int
    end_offset: int
    broker_id: int
    max_timestamp_ms: int
    event_timestamp_ms: int
    segment_leader_epochs: tuple[tuple[int, int], ...]
    segment_size_in_bytes: int
    custom_metadata: bytes | None = None
    state: RemoteLogSegmentState = RemoteLogSegmentState.COPY_SEGMENT_STARTED

    API_KEY = 0


@dataclass(frozen=True)
class RemoteLogSegmentMetadataUpdateRecord:
    """apiKey 1: a segment's state change."""

    topic_id_partition: TopicIdPartition
    segment_id: str
    broker_id: int
    event_timestamp_ms: int
    state: RemoteLogSegmentState
    custom_metadata: bytes | None = None

    API_KEY = 1


@dataclass(frozen=True)
class RemotePartitionDeleteMetadataRecord:
    """apiKey 2: a partition's remote data being deleted (the topic was deleted)."""

    topic_id_partition: TopicIdPartition
    broker_id: int
    event_timestamp_ms: int
    state: RemotePartitionDeleteState

    API_KEY = 2


@dataclass(frozen=True)
class RemoteLogSegmentMetadataSnapshotRecord:
    """apiKey 3: a segment in Kafka's local metadata snapshot files (no topic-partition of its own)."""

    segment_id: str
    start_offset: int
    end_offset: int
    broker_id: int
    max_timestamp_ms: int
    event_timestamp_ms: int
    segment_leader_epochs: tuple[tuple[int, int], ...]
    segment_size_in_bytes: int
    custom_metadata: bytes | None
    state: RemoteLogSegmentState

    API_KEY = 3


RemoteLogMetadataRecord = (
    RemoteLogSegmentMetadataRecord
    | RemoteLogSegmentMetadataUpdateRecord
    | RemotePartitionDeleteMetadataRecord
    | RemoteLogSegmentMetadataSnapshotRecord
)


def _read_tip(r: _Reader) -> TopicIdPartition:
    topic = r.string("TopicIdPartition.Name")
    topic_id = r.uuid("TopicIdPartition.Id")
    partition = r.int(">i", "TopicIdPartition.Partition")
    r.tagged_fields("TopicIdPartition")
    return TopicIdPartition(topic, topic_id, partition)


def _write_tip(w: _Writer, tip: TopicIdPartition) -> None:
    w.string(tip.topic)
    w.uuid(tip.topic_id)
    w.int(">i", tip.partition)
    w.tagged_fields()


def _read_segment_id(r: _Reader) -> tuple[TopicIdPartition, str]:
    tip = _read_tip(r)
    segment_id = r.uuid("RemoteLogSegmentId.Id")
    r.tagged_fields("RemoteLogSegmentId")
    return tip, segment_id


def _read_epochs(r: _Reader) -> tuple[tuple[int, int], ...]:
    n = r.uvarint("SegmentLeaderEpochs")
    if n == 0:
        raise RsmFormatError("SegmentLeaderEpochs: null for a non-nullable array")
    epochs = []
    for _ in range(n - 1):
        epoch = r.int(">i", "SegmentLeaderEpochs.LeaderEpoch")
        offset = r.int(">q", "SegmentLeaderEpochs.Offset")
        r.tagged_fields("SegmentLeaderEpochEntry")
        epochs.append((epoch, offset))
    return tuple(epochs)


def _write_epochs(w: _Writer, epochs: tuple[tuple[int, int], ...]) -> None:
    w.uvarint(len(epochs) + 1)
    for epoch, offset in epochs:
        w.int(">i", epoch)
        w.int(">q", offset)
        w.tagged_fields()


def _segment_state(value: int) -> RemoteLogSegmentState:
    try:
        return RemoteLogSegmentState(value)
    except ValueError:
        raise RsmFormatError(f"RemoteLogSegmentState {value} is not one of Kafka's 0..3") from None


_SegmentFields = tuple[int, int, int, int, int, tuple[tuple[int, int], ...], int, bytes | None, RemoteLogSegmentState]


def _read_segment_fields(r: _Reader) -> _SegmentFields:
    """StartOffset .. RemoteLogSegmentState: the fields apiKey 0 and apiKey 3 share, in their schemas' order
    (which is also the order of the two dataclasses' fields after the segment id)."""
    return (
        r.int(">q", "StartOffset"),
        r.int(">q", "EndOffset"),
        r.int(">i", "BrokerId"),
        r.int(">q", "MaxTimestampMs"),
        r.int(">q", "EventTimestampMs"),
        _read_epochs(r),
        r.int(">i", "SegmentSizeInBytes"),
        r.nullable_bytes("CustomMetadata"),
        _segment_state(r.int(">b", "RemoteLogSegmentState")),
    )


def decode_record(value: bytes) -> RemoteLogMetadataRecord:
    """One ``__remote_log_metadata`` record value (``RemoteLogMetadataSerde.deserialize``); RsmFormatError if bad."""
    r = _Reader(bytes(value))
    frame = r.uvarint("frame version")
    if frame != FRAME_VERSION:
        raise RsmFormatError(f"__remote_log_metadata record: frame version {frame}, only {FRAME_VERSION} is supported")
    api_key, version = r.uvarint("apiKey"), r.uvarint("version")
    if version != 0:
        raise RsmFormatError(f"__remote_log_metadata record: apiKey {api_key} version {version}, only version 0 exists")
    record: RemoteLogMetadataRecord
    if api_key == 0:
        tip, segment_id = _read_segment_id(r)
        record = RemoteLogSegmentMetadataRecord(tip, segment_id, *_read_segment_fields(r))
    elif api_key == 1:
        tip, segment_id = _read_segment_id(r)
        broker_id, event_ts = r.int(">i", "BrokerId"), r.int(">q", "EventTimestampMs")
        custom = r.nullable_bytes("CustomMetadata")
        record = RemoteLogSegmentMetadataUpdateRecord(
            tip, segment_id, broker_id, event_ts, _segment_state(r.int(">b", "RemoteLogSegmentState")), custom
        )
    elif api_key == 2:
        tip = _read_tip(r)
        broker_id, event_ts = r.int(">i", "BrokerId"), r.int(">q", "EventTimestampMs")
        state_value = r.int(">b", "RemotePartitionDeleteState")
        try:
            state = RemotePartitionDeleteState(state_value)
        except ValueError:
            raise RsmFormatError(f"RemotePartitionDeleteState {state_value} is not one of Kafka's 0..2") from None
        record = RemotePartitionDeleteMetadataRecord(tip, broker_id, event_ts, state)
    elif api_key == 3:
        record = RemoteLogSegmentMetadataSnapshotRecord(r.uuid("SegmentId"), *_read_segment_fields(r))
    else:
        raise RsmFormatError(f"__remote_log_metadata record: unknown apiKey {api_key} (Kafka knows 0..3)")
    r.tagged_fields(type(record).__name__)
    if r.pos != len(r.data):
        raise RsmFormatError(f"__remote_log_metadata record: {len(r.data) - r.pos} byte(s) of garbage after apiKey {api_key}")
    return record


def encode_record(record: RemoteLogMetadataRecord) -> bytes:
    """``RemoteLogMetadataSerde.serialize``: the record value (the key is null)."""
    w = _Writer()
    w.uvarint(FRAME_VERSION)
    w.uvarint(record.API_KEY)
    w.uvarint(0)
    if isinstance(record, RemoteLogSegmentMetadataSnapshotRecord):
        w.uuid(record.segment_id)
    elif isinstance(record, RemotePartitionDeleteMetadataRecord):
        _write_tip(w, record.topic_id_partition)
    else:
        _write_tip(w, record.topic_id_partition)
        w.uuid(record.segment_id)
        w.tagged_fields()
    if isinstance(record, (RemoteLogSegmentMetadataRecord, RemoteLogSegmentMetadataSnapshotRecord)):
        for fmt, value in (
            (">q", record.start_offset),
            (">q", record.end_offset),
            (">i", record.broker_id),
            (">q", record.max_timestamp_ms),
            (">q", record.event_timestamp_ms),
        ):
            w.int(fmt, value)
        _write_epochs(w, record.segment_leader_epochs)
        w.int(">i", record.segment_size_in_bytes)
        w.nullable_bytes(record.custom_metadata)
        w.int(">b", int(record.state))
    elif isinstance(record, RemoteLogSegmentMetadataUpdateRecord):
        w.int(">i", record.broker_id)
        w.int(">q", record.event_timestamp_ms)
        w.nullable_bytes(record.custom_metadata)
        w.int(">b", int(record.state))
    else:
        w.int(">i", record.broker_id)
        w.int(">q", record.event_timestamp_ms)
        w.int(">b", int(record.state))
    w.tagged_fields()
    return b"".join(w.parts)


def metadata_partition(topic_id: str, partition: int, num_partitions: int) -> int:
    """``RemoteLogMetadataTopicPartitioner.metadataPartition``: the ``__remote_log_metadata`` partition that
    holds a topic-partition's records: ``toPositive(murmur2(int32 BE of Objects.hash(lsb, msb, partition)))
    % num_partitions``."""
    raw = uuid_to_bytes(topic_id)
    msb, lsb = struct.unpack(">qq", raw)

    def long_hash(v: int) -> int:
        return ((v ^ ((v & 0xFFFFFFFFFFFFFFFF) >> 32)) & 0xFFFFFFFF)

    h = 1
    for element in (long_hash(lsb), long_hash(msb), partition & 0xFFFFFFFF):
        h = (31 * h + element) & 0xFFFFFFFF
    return (_murmur2(struct.pack(">I", h)) & 0x7FFFFFFF) % num_partitions


#: problems kept by ``LiveSegments`` (the newest; ``problem_count`` counts them all)
MAX_PROBLEMS = 20


@dataclass
class LiveSegments:
    """The remote segments Kafka would serve, built by applying ``__remote_log_metadata`` records in order.

    ``problems``: the last ``MAX_PROBLEMS`` records ignored (module docstring), ``problem_count`` all of them."""

    _segments: dict[tuple[str, int], dict[str, RemoteLogSegmentMetadataRecord]] = field(default_factory=dict)
    _deleted_partitions: dict[tuple[str, int], RemotePartitionDeleteState] = field(default_factory=dict)
    problems: deque[str] = field(default_factory=lambda: deque(maxlen=MAX_PROBLEMS))
    problem_count: int = 0

    def _problem(self, message: str) -> None:
        self.problems.append(message)
        self.problem_count += 1

    def apply(self, record: RemoteLogMetadataRecord) -> None:
        if isinstance(record, RemoteLogSegmentMetadataSnapshotRecord):
            return
        tip = record.topic_id_partition
        key = (tip.topic_id, tip.partition)
        if isinstance(record, RemotePartitionDeleteMetadataRecord):
            self._deleted_partitions[key] = record.state
            self._segments.pop(key, None)
            return
        segments = self._segments.setdefault(key, {})
        if isinstance(record, RemoteLogSegmentMetadataRecord):
            # RemoteLogMetadataCache.addCopyInProgressSegment: only COPY_SEGMENT_STARTED adds a segment, and
            # only a new one or one still in that state (isValidTransition: null or STARTED -> STARTED)
            if record.state != RemoteLogSegmentState.COPY_SEGMENT_STARTED:
                self._problem(f"segment {record.segment_id} of {tip}: metadata record in state {record.state.name} ignored "
                              "(only COPY_SEGMENT_STARTED adds a segment)")
                return
            existing = segments.get(record.segment_id)
            if existing is not None and existing.state != RemoteLogSegmentState.COPY_SEGMENT_STARTED:
                self._problem(f"segment {record.segment_id} of {tip}: metadata published again while {existing.state.name}: ignored")
                return
            segments[record.segment_id] = record
            return
        existing = segments.get(record.segment_id)
        if existing is None:
            self._problem(f"update to {record.state.name} of unknown segment {record.segment_id} of {tip}")
            return
        if record.state != existing.state and record.state not in _VALID_TRANSITIONS[existing.state]:
            self._problem(
                f"segment {record.segment_id} of {tip}: invalid transition {existing.state.name} -> {record.state.name} ignored"
            )
            return
        if record.state == RemoteLogSegmentState.DELETE_SEGMENT_FINISHED:
            del segments[record.segment_id]
            return
        segments[record.segment_id] = replace(
            existing, state=record.state, custom_metadata=record.custom_metadata, event_timestamp_ms=record.event_timestamp_ms
        )

    def partition_deleted(self, topic_id: str, partition: int) -> RemotePartitionDeleteState | None:
        """The partition's delete state when a RemotePartitionDeleteMetadataRecord was seen."""
        return self._deleted_partitions.get((topic_id, partition))

    def segments(self, topic_id: str, partition: int) -> list[RemoteLogSegmentMetadataRecord]:
        """Live segments (COPY_SEGMENT_FINISHED, partition not deleted), by start offset then end offset. Each
        carries the latest state and custom metadata of its updates. Overlaps are left to the caller."""
        if (topic_id, partition) in self._deleted_partitions:
            return []
        live = [
            s for s in self._segments.get((topic_id, partition), {}).values()
            if s.state == RemoteLogSegmentState.COPY_SEGMENT_FINISHED
        ]
        return sorted(live, key=lambda s: (s.start_offset, s.end_offset, s.segment_id))

    def all_segments(self, topic_id: str, partition: int) -> list[RemoteLogSegmentMetadataRecord]:
        """Every known segment of the partition in any state (not yet DELETE_SEGMENT_FINISHED)."""
        return sorted(self._segments.get((topic_id, partition), {}).values(), key=lambda s: (s.start_offset, s.segment_id))

    def partitions(self) -> list[TopicIdPartition]:
        """Topic-partitions with at least one live segment."""
        out = []
        for (topic_id, partition), segments in self._segments.items():
            live = [s for s in segments.values() if s.state == RemoteLogSegmentState.COPY_SEGMENT_FINISHED]
            if live and (topic_id, partition) not in self._deleted_partitions:
                out.append(live[0].topic_id_partition)
        return sorted(out, key=lambda t: (t.topic, t.partition))
