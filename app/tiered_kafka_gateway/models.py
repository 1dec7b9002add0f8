"""Response bodies of the gateway's v1 API (they define openapi/openapi.json)."""

from __future__ import annotations

from pydantic import BaseModel, Field


class ErrorDetail(BaseModel):
    """Codes may carry details beside ``message`` (e.g. ``topic`` and ``kafka_error_code`` of a 403,
    ``earliest_offset``/``latest_offset``/``coverage_start_offset`` of a 416, ``error_id`` of a 500)."""

    code: str = Field(description="stable error code, e.g. offset_not_in_remote_storage")
    message: str


class ErrorResponse(BaseModel):
    error: ErrorDetail


class ClusterList(BaseModel):
    clusters: list[str]


class TopicPartitions(BaseModel):
    name: str
    partitions: list[int]


class TopicList(BaseModel):
    cluster: str
    topics: list[TopicPartitions] = Field(
        description="topics with remote data, from the registry and from S3 listings (buckets in Pinterest's layout), "
        "whether or not Kafka knows them; only those the caller may read"
    )
    complete: bool = Field(description="false when the S3 listing stopped at the gateway's bound: topics may be missing")
    next_after: str | None = Field(
        description="the cursor of the next page ('topic/partition': pass it as ?after=); null on the last page. "
        "A topic cut by a page edge continues on the next page",
    )
    total_partitions: int | None = Field(description="partitions in the whole listing (before the caller's topic filter)")


class RemoteExtent(BaseModel):
    earliest_offset: int = Field(description="first offset held in remote storage")
    latest_offset: int = Field(description="last offset held in remote storage")
    segment_count: int
    total_bytes: int
    last_stable_offset: int | None = Field(
        description="remote last stable offset: the first offset of the earliest transaction still open at the end of remote data "
        "(latest_offset + 1 when none is); read_committed reads of remote data return nothing at or past it. "
        "null when unknown (no producer snapshot in remote storage)",
    )


class KafkaExtent(BaseModel):
    log_start_offset: int
    high_watermark: int


class GapOut(BaseModel):
    start_offset: int
    end_offset: int
    reason: str


class PartitionDetail(BaseModel):
    cluster: str
    topic: str
    partition: int
    remote: RemoteExtent | None = Field(description="null when nothing of the partition is remote")
    kafka: KafkaExtent | None = Field(description="null when the cluster has no Kafka configured, or Kafka does not know the partition (kafka_error)")
    kafka_error: ErrorDetail | None = Field(description="why kafka is null although Kafka is configured (unknown_topic_or_partition)")
    coverage_start_offset: int | None = Field(
        description="the log start the agent first observed for the partition: offsets below it were never followed, so they are "
        "neither remote nor a gap; null when no coverage is recorded (e.g. a bucket written by Pinterest's uploader)"
    )
    coverage_observed_ms: int | None = Field(description="when the coverage start was observed (epoch ms); null with it")
    gaps: list[GapOut] = Field(description="recorded gaps: offsets known never to reach remote storage, with their reasons")


class SegmentRef(BaseModel):
    object_key: str
    base_offset: int
    last_offset: int
    size: int


class ChunkedRange(BaseModel):
    """How to read a range of a compressed KIP-405 segment (Aiven's RemoteStorageManager): the URL
    covers whole chunks of the stored object, each one zstd frame; decompress each, concatenate, and
    keep the range's original bytes ``[start - original_start, end - original_start)``."""

    compression: str = Field(description="zstd: each chunk is one zstd frame")
    fetch_start: int = Field(description="first byte (inclusive) of the chunks in the stored object")
    fetch_end: int = Field(description="end byte (exclusive) of the chunks in the stored object")
    range_header: str = Field(description="the Range header to send (the URL was signed with it), instead of the range's own")
    chunk_sizes: list[int] = Field(description="stored (compressed) size of each chunk, in order; they add up to fetch_end - fetch_start")
    original_chunk_sizes: list[int] = Field(description="original (decompressed) size of each chunk")
    original_start: int = Field(description="position in the original segment of the first chunk's first byte")


class RangeOut(BaseModel):
    start: int = Field(description="first byte (inclusive) in the segment object")
    end: int = Field(description="end byte (exclusive)")
    size: int
    first_offset: int
    last_offset: int
    url: str = Field(description="presigned SigV4 GET; send the Range header given here")
    range_header: str = Field(description="the Range header the URL was signed with")
    transformed: ChunkedRange | None = Field(
        description="set for a compressed KIP-405 segment: the URL serves stored chunks, not these bytes (ChunkedRange); null otherwise"
    )


class PlanResponse(BaseModel):
    cluster: str
    topic: str
    partition: int
    offset: int = Field(description="the requested offset")
    segment: SegmentRef
    ranges: list[RangeOut] = Field(description="batch-aligned; the first holds the offset (or the first after a gap)")
    next_offset: int = Field(description="the offset to plan next")
    expires_at_ms: int
    gap: GapOut | None = Field(description="set when the offset lies in a gap of remote storage")
    last_stable_offset: int | None = Field(
        description="with isolation_level=read_committed: the remote last stable offset (as in the partition endpoint); null when unknown or not asked"
    )


class OffsetForTime(BaseModel):
    cluster: str
    topic: str
    partition: int
    timestamp: int = Field(description="the requested timestamp (ms)")
    offset: int | None = Field(description="first offset whose timestamp is >= the requested one; null if none remote")
    record_timestamp: int | None


class Health(BaseModel):
    status: str
    clusters: dict[str, dict[str, str]] = Field({}, description="per cluster, each dependency's state; with auth enabled, only for an authenticated caller")


class HeaderOut(BaseModel):
    key: str
    value: str | None = Field(description="encoded per the request's encoding; null when null")


class RecordOut(BaseModel):
    offset: int
    timestamp: int | None = Field(description="epoch ms; null for magic 0 data")
    timestamp_type: str | None = Field(description="CreateTime or LogAppendTime; null when the record has no timestamp")
    key: str | None = Field(description="encoded per the request's encoding (base64 or utf8); null when null")
    value: str | None = Field(description="encoded per the request's encoding (base64 or utf8); null when null")
    headers: list[HeaderOut]


class RecordsResponse(BaseModel):
    cluster: str
    topic: str
    partition: int
    offset: int = Field(description="the requested offset")
    source: str = Field(description="where the records were read: remote or kafka")
    records: list[RecordOut] = Field(description="in offset order; control records and (read_committed) aborted ones left out")
    next_offset: int = Field(description="the offset to read next (no gap, no duplicate)")
    high_watermark: int | None = Field(None, description="Kafka's high watermark, when Kafka was asked")
    log_start_offset: int | None = Field(None, description="Kafka's log start offset, when Kafka was asked")
    remote_earliest_offset: int | None = Field(None, description="first remote offset, when remote storage was read")
    remote_latest_offset: int | None = Field(None, description="last remote offset, when remote storage was read")
    gap: GapOut | None = Field(None, description="set when the offset lay in a gap of remote storage and the read started after it")
    last_stable_offset: int | None = Field(
        None,
        description="read_committed from remote storage: the response stops at this offset, held behind a transaction whose marker is not in "
        "remote storage yet (the remote last stable offset of this read; below `offset` when that transaction began before it). "
        "With no records and next_offset == offset, nothing is readable at the offset until the marker is uploaded",
    )


class OffsetSpan(BaseModel):
    first_offset: int
    last_offset: int = Field(description="inclusive")
    size: int = Field(description="bytes of the segments in it")


class TimeRanges(BaseModel):
    """Remote offsets proven to hold no record stamped in [from_timestamp, to_timestamp] (``routes.time_ranges``)."""

    cluster: str
    topic: str
    partition: int
    from_timestamp: int
    to_timestamp: int
    pruned: list[OffsetSpan] = Field(
        [], description="runs of adjacent pruned segments, in offset order: no record in them is stamped in the range; every other offset may hold one"
    )
    inexact: list[OffsetSpan] = Field(
        [], description="kept segments whose minimum timestamp is not known exactly (registered before it was recorded, or listed from S3 only)"
    )
    earliest_offset: int | None = Field(None, description="first offset of the registered segments the answer was computed over; null: none registered")
    pruned_segments: int = Field(0, description="segments no record of which is stamped in the range")
    pruned_bytes: int = 0
