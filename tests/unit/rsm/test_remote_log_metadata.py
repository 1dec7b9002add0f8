"""``__remote_log_metadata`` records (Kafka's generated messages in flexible version 0 behind the
AbstractApiMessageSerde frame) and LiveSegments (RemoteLogMetadataCache's state rules)."""

from __future__ import annotations

import struct
from dataclasses import replace

import pytest

from tiered_kafka.errors import RsmFormatError
from tiered_kafka.rsm.keys import uuid_to_bytes
from tiered_kafka.rsm.remote_log_metadata import (
    MAX_PROBLEMS,
    LiveSegments,
    RemoteLogSegmentMetadataRecord,
    RemoteLogSegmentMetadataSnapshotRecord,
    RemoteLogSegmentMetadataUpdateRecord,
    RemoteLogSegmentState,
    RemotePartitionDeleteMetadataRecord,
    RemotePartitionDeleteState,
    TopicIdPartition,
    _murmur2,
    decode_record,
    encode_record,
    metadata_partition,
)

TOPIC_ID = "lZ6vvmajTWKDBUTV6SQAtQ"
TIP = TopicIdPartition("topic1", TOPIC_ID, 42)
SEGMENT = "adh9f8BMS4anaUnD8KWfWg"


def _metadata(segment_id: str = SEGMENT, start: int = 0, end: int = 1000) -> RemoteLogSegmentMetadataRecord:
    return RemoteLogSegmentMetadataRecord(
        topic_id_partition=TIP, segment_id=segment_id, start_offset=start, end_offset=end, broker_id=2,
        max_timestamp_ms=1_000_000_000, event_timestamp_ms=2_000_000_000,
        segment_leader_epochs=((0, start), (1, start + 10)), segment_size_in_bytes=4096,
        custom_metadata=None, state=RemoteLogSegmentState.COPY_SEGMENT_STARTED,
    )


def _update(state: RemoteLogSegmentState, segment_id: str = SEGMENT) -> RemoteLogSegmentMetadataUpdateRecord:
    return RemoteLogSegmentMetadataUpdateRecord(TIP, segment_id, 2, 2_000_000_001, state, b"\x01custom")


def test_metadata_record_bytes_follow_the_schema() -> None:
    tags = b"\x00"
    expected = (
        b"\x01\x00\x00"  # frame version 1, apiKey 0, version 0
        + b"\x07topic1" + uuid_to_bytes(TOPIC_ID) + struct.pack(">i", 42) + tags  # TopicIdPartition
        + uuid_to_bytes(SEGMENT) + tags  # RemoteLogSegmentId.Id
        + struct.pack(">qqiqq", 0, 1000, 2, 1_000_000_000, 2_000_000_000)  # Start, End, BrokerId, MaxTs, EventTs
        + b"\x03" + struct.pack(">iq", 0, 0) + tags + struct.pack(">iq", 1, 10) + tags  # SegmentLeaderEpochs
        + struct.pack(">i", 4096)  # SegmentSizeInBytes
        + b"\x00"  # CustomMetadata null
        + b"\x00"  # RemoteLogSegmentState COPY_SEGMENT_STARTED
        + tags
    )
    assert encode_record(_metadata()) == expected
    assert decode_record(expected) == _metadata()


def test_update_and_delete_record_bytes() -> None:
    update = _update(RemoteLogSegmentState.COPY_SEGMENT_FINISHED)
    head = b"\x07topic1" + uuid_to_bytes(TOPIC_ID) + struct.pack(">i", 42) + b"\x00"
    assert encode_record(update) == (
        b"\x01\x01\x00" + head + uuid_to_bytes(SEGMENT) + b"\x00"
        + struct.pack(">iq", 2, 2_000_000_001) + b"\x08\x01custom" + b"\x01" + b"\x00"
    )
    delete = RemotePartitionDeleteMetadataRecord(TIP, 3, 5, RemotePartitionDeleteState.DELETE_PARTITION_MARKED)
    assert encode_record(delete) == b"\x01\x02\x00" + head + struct.pack(">iq", 3, 5) + b"\x00" + b"\x00"
    assert decode_record(encode_record(update)) == update
    assert decode_record(encode_record(delete)) == delete


def test_snapshot_record_round_trip() -> None:
    snapshot = RemoteLogSegmentMetadataSnapshotRecord(
        SEGMENT, 5, 9, 1, 100, 200, ((3, 5),), 77, None, RemoteLogSegmentState.COPY_SEGMENT_FINISHED
    )
    assert decode_record(encode_record(snapshot)) == snapshot


def test_unknown_tagged_fields_are_skipped() -> None:
    value = encode_record(_metadata())
    # Replace the top-level tagged-field count 0 with one tagged field (tag 5, 3 bytes).
    assert decode_record(value[:-1] + b"\x01\x05\x03abc") == _metadata()


@pytest.mark.parametrize(
    "value, message",
    [
        (b"\x00\x00\x00", "frame version 0"),
        (b"\x01\x07\x00", "unknown apiKey 7"),
        (b"\x01\x00\x01", "version 1, only version 0"),
        (b"\x01\x00", "runs past the end"),
        (b"\x01\x00\x00\x00", "null for a non-nullable string"),
    ],
)
def test_bad_records(value: bytes, message: str) -> None:
    with pytest.raises(RsmFormatError, match=message):
        decode_record(value)


def test_truncated_garbage_and_bad_state() -> None:
    value = encode_record(_metadata())
    with pytest.raises(RsmFormatError, match="needs"):
        decode_record(value[:-4])
    with pytest.raises(RsmFormatError, match="1 byte\\(s\\) of garbage"):
        decode_record(value + b"\x00")
    with pytest.raises(RsmFormatError, match="RemoteLogSegmentState 9"):
        decode_record(value[:-2] + b"\x09\x00")


def test_murmur2_matches_kafka_utils_test() -> None:
    # org.apache.kafka.common.utils.UtilsTest.testMurmur2
    cases = {b"21": -973932308, b"foobar": -790332482, b"a-little-bit-long-string": -985981536,
             b"a-little-bit-longer-string": -1486304829,
             b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971, b"abc": 479470107}
    for data, signed in cases.items():
        assert _murmur2(data) == signed & 0xFFFFFFFF


@pytest.mark.parametrize(
    "topic_id, partition, count, expected",
    [(TOPIC_ID, 42, 50, 33), (TOPIC_ID, 0, 50, 9), ("AAAAAAAAAAAAAAAAAAAAAQ", 7, 50, 46),
     ("_-_-_-_-_-_-_-_-_-_-_w", 3, 50, 36), (TOPIC_ID, 42, 7, 1)],
)
def test_metadata_partition_matches_kafka(topic_id: str, partition: int, count: int, expected: int) -> None:
    # Expected values computed with Java 17 by RemoteLogMetadataTopicPartitioner.metadataPartition's rule:
    # Objects.hash(uuid.getLeastSignificantBits(), uuid.getMostSignificantBits(), partition), its int32 big-endian
    # bytes through Utils.murmur2 (copied from Kafka's Utils), Utils.toPositive, % count.
    assert metadata_partition(topic_id, partition, count) == expected


def test_live_segments_follow_the_state_machine() -> None:
    live = LiveSegments()
    other = "AAAAAAAAAAAAAAAAAAAAAQ"
    live.apply(_metadata())
    live.apply(_metadata(other, 1001, 2000))
    assert live.segments(TOPIC_ID, 42) == []  # copies started, not finished: never served
    live.apply(_update(RemoteLogSegmentState.COPY_SEGMENT_FINISHED))
    [segment] = live.segments(TOPIC_ID, 42)
    assert segment.segment_id == SEGMENT and segment.state == RemoteLogSegmentState.COPY_SEGMENT_FINISHED
    assert segment.custom_metadata == b"\x01custom"
    assert live.partitions() == [TIP]
    live.apply(_update(RemoteLogSegmentState.COPY_SEGMENT_FINISHED, other))
    assert [s.segment_id for s in live.segments(TOPIC_ID, 42)] == [SEGMENT, other]
    live.apply(_update(RemoteLogSegmentState.DELETE_SEGMENT_STARTED))
    assert [s.segment_id for s in live.segments(TOPIC_ID, 42)] == [other]
    # DELETE_SEGMENT_STARTED -> COPY_SEGMENT_FINISHED is invalid: ignored and reported.
    live.apply(_update(RemoteLogSegmentState.COPY_SEGMENT_FINISHED))
    assert [s.segment_id for s in live.segments(TOPIC_ID, 42)] == [other]
    assert any("invalid transition DELETE_SEGMENT_STARTED -> COPY_SEGMENT_FINISHED" in p for p in live.problems)
    live.apply(_update(RemoteLogSegmentState.DELETE_SEGMENT_FINISHED))
    assert [s.segment_id for s in live.all_segments(TOPIC_ID, 42)] == [other]
    live.apply(_update(RemoteLogSegmentState.COPY_SEGMENT_FINISHED, "AAAAAAAAAAAAAAAAAAAAAg"))
    assert any("unknown segment AAAAAAAAAAAAAAAAAAAAAg" in p for p in live.problems)
    assert live.segments(TOPIC_ID, 41) == [] and live.segments("AAAAAAAAAAAAAAAAAAAAAw", 42) == []


def test_partition_delete_ends_the_partition() -> None:
    live = LiveSegments()
    live.apply(_metadata())
    live.apply(_update(RemoteLogSegmentState.COPY_SEGMENT_FINISHED))
    live.apply(RemotePartitionDeleteMetadataRecord(TIP, 1, 10, RemotePartitionDeleteState.DELETE_PARTITION_MARKED))
    assert live.segments(TOPIC_ID, 42) == [] and live.partitions() == []
    assert live.partition_deleted(TOPIC_ID, 42) == RemotePartitionDeleteState.DELETE_PARTITION_MARKED
    live.apply(RemoteLogSegmentMetadataSnapshotRecord(SEGMENT, 0, 1, 1, 1, 1, (), 1, None, RemoteLogSegmentState.COPY_SEGMENT_FINISHED))
    assert live.segments(TOPIC_ID, 42) == []


def test_metadata_records_are_taken_only_in_copy_started_state() -> None:
    # RemoteLogMetadataCache.addCopyInProgressSegment: a metadata record in another state is refused, and
    # a STARTED record for a segment already past STARTED does not overwrite it.
    live = LiveSegments()
    finished = replace(_metadata(), state=RemoteLogSegmentState.COPY_SEGMENT_FINISHED)
    live.apply(finished)
    assert live.all_segments(TOPIC_ID, 42) == [] and live.segments(TOPIC_ID, 42) == []
    assert "metadata record in state COPY_SEGMENT_FINISHED ignored" in live.problems[-1]
    live.apply(_metadata())
    live.apply(_update(RemoteLogSegmentState.COPY_SEGMENT_FINISHED))
    live.apply(_metadata(end=5))  # published again in COPY_SEGMENT_STARTED: must not un-finish nor change the segment
    [segment] = live.segments(TOPIC_ID, 42)
    assert segment.end_offset == 1000 and segment.state == RemoteLogSegmentState.COPY_SEGMENT_FINISHED
    assert "published again while COPY_SEGMENT_FINISHED" in live.problems[-1]
    live.apply(_metadata("AAAAAAAAAAAAAAAAAAAAAQ", 2000, 2100))
    live.apply(_metadata("AAAAAAAAAAAAAAAAAAAAAQ", 2000, 2200))  # STARTED again while STARTED: Kafka's self transition, replaced
    assert [s.end_offset for s in live.all_segments(TOPIC_ID, 42)] == [1000, 2200]


def test_problems_are_capped_and_counted() -> None:
    live = LiveSegments()
    for i in range(MAX_PROBLEMS + 5):
        live.apply(_update(RemoteLogSegmentState.COPY_SEGMENT_FINISHED, f"AAAAAAAAAAAAAAAAAAAA{i:02d}"[:22]))
    assert live.problem_count == MAX_PROBLEMS + 5 and len(live.problems) == MAX_PROBLEMS
    assert "AAAAAAAAAAAAAAAAAAAA24" in live.problems[-1]
