"""Which segments of a KIP-405 cluster are live: from ``__remote_log_metadata``, or by listing.

Two sources, chosen per cluster (``config``: ``clusters.{name}.kind = "kip405"``):

* **``__remote_log_metadata``** (``MetadataCatalog``), when the cluster's ``bootstrap_servers`` is
  set: the authoritative list. Every partition of the topic is read with confluent-kafka from the
  beginning up to its high watermark (never in a group, nothing committed), each record decoded with
  ``tiered_kafka.rsm.remote_log_metadata`` (Kafka's ``RemoteLogMetadataSerde``) and applied to
  ``LiveSegments``, as Kafka's ``RemoteLogMetadataCache`` does: a segment is served only once its
  ``RemoteLogSegmentMetadataUpdateRecord`` says COPY_SEGMENT_FINISHED, and no longer once a
  DELETE_SEGMENT_STARTED/FINISHED update or a partition delete arrives. A manifest in the bucket whose
  segment never finished copying (the broker died mid-copy, or the copy failed and was retried under a
  new segment id) is an orphan: it is not served. Refreshed at most every ``cache.listing_ttl_s``
  (the consumer stays assigned; a refresh reads what was appended since). Between refreshes its
  partitions are paused: a Kafka broker answers one request of a connection at a time, so a
  ListOffsets (the high watermarks a refresh asks first) queued behind a Fetch waiting for data
  (``fetch.max.wait.ms``, librdkafka's ``fetch.wait.max.ms``: 500 ms) waited that long, once per
  partition of the topic (Kafka's default ``remote.log.metadata.topic.num.partitions``: 50).
* **A listing of manifests** (``ListingCatalog``) otherwise, *best effort*: every
  ``*.rsm-manifest`` under the key prefix (keys parsed from the right, ``tiered_kafka.rsm.keys``).
  A listing cannot tell a finished copy from an orphan, nor see deletions in progress. Overlaps are
  resolved by leader-epoch lineage: segments are taken in decreasing order of their highest leader
  epoch (``segmentLeaderEpochs`` in the manifest's ``remoteLogSegmentMetadata``), then of end offset,
  and each serves only the offsets no segment taken before it serves (``resolve_lineage``): one
  covered completely is dropped, one covered in part is clipped. After an unclean leader election
  the new leader's lineage (higher epochs) wins, and an older copy of the same offsets is not mixed
  in; offsets no kept segment serves are a gap the partition endpoint reports. A manifest that
  cannot be read fails its own partition (``Partitions.failed``), never the listing. When one topic
  name has several topic ids (deleted and re-created), the id whose newest manifest is the most
  recent is served. Manifests written without ``remoteLogSegmentMetadata``
  carry no end offset: their end is the next segment's start minus one, and the last one's is read
  from its batch headers by the reader.

Both keep topic ids and names together: the metadata record names the ``TopicIdPartition``, the key
holds ``{topic}-{topicId}``.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from tiered_kafka.errors import TieredKafkaError
from tiered_kafka.rsm.keys import RsmSegmentKey, parse_key
from tiered_kafka_gateway.errors import ErrorCode, GatewayError

log = logging.getLogger(__name__)

MANIFEST_SUFFIX = "rsm-manifest"
UNKNOWN = -1


@dataclass(frozen=True)
class RsmSegment:
    """One live remote segment: its keys, offsets and (original, de-transformed) .log size.

    ``last_offset`` / ``size`` / ``max_timestamp``: -1 when the source did not say (a listed
    manifest without ``remoteLogSegmentMetadata``); the reader fills them from the manifest."""

    key: RsmSegmentKey
    base_offset: int
    last_offset: int
    max_timestamp: int
    size: int
    leader_epochs: tuple[tuple[int, int], ...] = ()  # (epoch, start offset), as segmentLeaderEpochs
    modified_ms: int = 0  # listing: the manifest's LastModified
    first_offset: int | None = None  # the first offset served (``resolve_lineage``); None: base_offset
    serve_last: int | None = None  # the last offset served, when before the segment's own end; None: last_offset

    @property
    def first(self) -> int:
        """The first offset this segment serves (its base offset unless a later lineage holds the start)."""
        return self.base_offset if self.first_offset is None else self.first_offset

    @property
    def last(self) -> int:
        """The last offset this segment serves (-1: unknown yet, see ``last_offset``)."""
        return self.last_offset if self.serve_last is None else self.serve_last

    @property
    def log_key(self) -> str:
        return self.key.object_key("log")

    @property
    def manifest_key(self) -> str:
        return self.key.object_key(MANIFEST_SUFFIX)

    @property
    def max_epoch(self) -> int:
        return max((e for e, _ in self.leader_epochs), default=UNKNOWN)


@dataclass
class Partitions:
    """Live segments by (topic, partition), each list sorted by first served offset without overlaps;
    ``failed``: partitions whose segments could not be described (listing: an unreadable manifest),
    with the error their reads answer (the other partitions are served)."""

    by_partition: dict[tuple[str, int], list[RsmSegment]] = field(default_factory=dict)
    failed: dict[tuple[str, int], TieredKafkaError] = field(default_factory=dict)

    def topics(self) -> dict[str, list[int]]:
        out: dict[str, list[int]] = {}
        for topic, partition in sorted(self.by_partition.keys() | self.failed.keys()):
            out.setdefault(topic, []).append(partition)
        return out


class ListingCatalog:
    """Segments found by listing manifests (module docstring: best effort)."""

    def __init__(self, s3: Any, bucket: str, prefix: str, ttl_s: float, manifest_metadata: Callable[[RsmSegmentKey], RsmSegment]) -> None:
        """``manifest_metadata``: the segment as the reader's (cached) manifest describes it."""
        self.s3, self.bucket, self.prefix, self.ttl_s = s3, bucket, prefix, ttl_s
        self._describe = manifest_metadata
        self._lock = threading.Lock()
        self._cached: tuple[float, Partitions] | None = None
        self.source = "listing"

    def partitions(self) -> Partitions:
        with self._lock:
            now = time.monotonic()
            if self._cached is None or now - self._cached[0] >= self.ttl_s:
                self._cached = (now, self._list())
            return self._cached[1]

    def _list(self) -> Partitions:
        found: dict[tuple[str, int], dict[str, list[RsmSegment]]] = {}  # (topic, partition) -> topic id -> segments
        skipped: list[str] = []
        try:
            for page in self.s3.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=self.prefix):
                for item in page.get("Contents", ()):
                    if not item["Key"].endswith("." + MANIFEST_SUFFIX):
                        continue
                    try:
                        key, _ = parse_key(item["Key"], self.prefix)
                    except TieredKafkaError:
                        skipped.append(item["Key"])
                        continue
                    modified = int(item["LastModified"].timestamp() * 1000)
                    segment = RsmSegment(key, key.start_offset, UNKNOWN, UNKNOWN, UNKNOWN, (), modified)
                    found.setdefault((key.topic, key.partition), {}).setdefault(key.topic_id, []).append(segment)
        except (ClientError, BotoCoreError) as err:
            raise GatewayError(ErrorCode.STORAGE_UNAVAILABLE, f"S3 listing of {self.bucket}/{self.prefix} failed: {err}") from err
        if skipped:
            log.warning("%d .%s object(s) under s3://%s/%s are not RSM keys and were skipped, e.g. %s",
                        len(skipped), MANIFEST_SUFFIX, self.bucket, self.prefix, skipped[0])
        out = Partitions()
        for tp, by_id in found.items():
            newest_id = max(by_id, key=lambda topic_id: max(s.modified_ms for s in by_id[topic_id]))
            try:
                described = [self._describe_listed(s) for s in by_id[newest_id]]
            except TieredKafkaError as err:  # this partition only: its reads answer the error, the others are served
                log.warning("%s-%d of s3://%s/%s cannot be listed: %s", tp[0], tp[1], self.bucket, self.prefix, err)
                out.failed[tp] = err
                continue
            out.by_partition[tp] = resolve_lineage(described)
        return out

    def _describe_listed(self, listed: RsmSegment) -> RsmSegment:
        described = self._describe(listed.key)
        return RsmSegment(listed.key, described.base_offset, described.last_offset, described.max_timestamp, described.size,
                          described.leader_epochs, listed.modified_ms)


def resolve_lineage(segments: list[RsmSegment]) -> list[RsmSegment]:
    """Segments serving disjoint offsets by leader-epoch lineage (module docstring), sorted by first offset.

    Taken in rank order, each serves what the segments ranked before it do not: a segment covered
    completely is dropped, one covered in part is kept and clipped to the uncovered offsets (its
    ``first_offset``/``serve_last``; one entry per uncovered run). Finished segments of one lineage do
    overlap in part: when leadership moves between replicas whose segments roll at other offsets, the
    new leader's copy starts at the segment holding its first offset to copy (RemoteLogManager's copy
    task), and Kafka serves each offset from one of them (RemoteLogLeaderEpochState, a floor lookup per
    epoch). A segment without an end offset (-1) is kept only when no segment ranked before holds its
    base; it ends where the next kept one starts (the last: open), and holds off the segments ranked
    after it at its base only."""
    ranked = sorted(segments, key=lambda s: (s.max_epoch, s.last_offset, s.key.segment_id), reverse=True)
    kept: list[RsmSegment] = []
    taken: list[tuple[int, int]] = []  # served offsets of kept segments, inclusive
    for candidate in ranked:
        if candidate.last_offset < 0:
            if any(lo <= candidate.base_offset <= hi for lo, hi in taken):
                log.info("segment %s starts in offsets a segment of a later lineage serves: not served", candidate.log_key)
                continue
            kept.append(candidate)
            taken.append((candidate.base_offset, candidate.base_offset))
            continue
        runs = _uncovered(candidate.base_offset, candidate.last_offset, taken)
        if not runs:
            log.info("segment %s is covered by segments of a later lineage: not served", candidate.log_key)
            continue
        if runs != [(candidate.base_offset, candidate.last_offset)]:
            log.info("segment %s overlaps segments of a later lineage: serves only %s", candidate.log_key, runs)
        for lo, hi in runs:
            kept.append(replace(candidate, first_offset=None if lo == candidate.base_offset else lo,
                                serve_last=None if hi == candidate.last_offset else hi))
            taken.append((lo, hi))
    kept.sort(key=lambda s: s.first)
    return kept


def _uncovered(low: int, high: int, taken: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The runs of ``low..high`` (inclusive) outside every interval of ``taken``."""
    runs, position = [], low
    for lo, hi in sorted(taken):
        if hi < position or lo > high:
            continue
        if lo > position:
            runs.append((position, lo - 1))
        position = max(position, hi + 1)
        if position > high:
            break
    if position <= high:
        runs.append((position, high))
    return runs


class MetadataCatalog:
    """Live segments from ``__remote_log_metadata`` (module docstring)."""

    def __init__(self, bootstrap_servers: str, topic: str, prefix: str, ttl_s: float, timeout_s: float, security: dict[str, str] | None = None) -> None:
        from tiered_kafka.rsm.remote_log_metadata import LiveSegments

        self.bootstrap_servers, self.topic, self.prefix, self.ttl_s, self.timeout_s = bootstrap_servers, topic, prefix, ttl_s, timeout_s
        self._security = dict(security or {})  # the cluster's kafka_security (config), secrets revealed: never logged
        self._live = LiveSegments()
        self._lock = threading.Lock()
        self._consumer: Any = None
        self._refreshed: tuple[float, Partitions] | None = None
        self._problems_logged = 0
        self.source = "__remote_log_metadata"

    def close(self) -> None:
        with self._lock:
            if self._consumer is not None:
                self._consumer.close()
                self._consumer = None

    def partitions(self) -> Partitions:
        with self._lock:
            now = time.monotonic()
            if self._refreshed is None or now - self._refreshed[0] >= self.ttl_s:
                self._catch_up()
                self._refreshed = (now, self._snapshot())
            return self._refreshed[1]

    def _catch_up(self) -> None:
        """Read every partition of the metadata topic up to its current high watermark.

        A partition is read when its position reaches the high watermark; a position not known yet
        (no message consumed: librdkafka's OFFSET_INVALID) counts as the low watermark, so a partition
        whose records were all deleted (low == high) is read at once. Any failure (Kafka, a record
        that does not decode) drops the consumer and what it applied: records consumed but not
        applied would otherwise be skipped for good, so the next refresh reads from the beginning."""
        from confluent_kafka import KafkaException

        try:
            self._read_to_high_watermarks()
        except Exception as err:
            self._reset()
            if isinstance(err, KafkaException):
                raise GatewayError(ErrorCode.KAFKA_UNAVAILABLE, f"reading {self.topic} failed: {err}") from err
            if isinstance(err, TieredKafkaError) and not isinstance(err, GatewayError):  # a record that does not decode
                raise GatewayError(ErrorCode.CORRUPT_REMOTE_DATA, f"a record of {self.topic} is not Kafka's RemoteLogMetadata: {err}") from err
            raise
        if self._live.problem_count > self._problems_logged:
            log.warning("%s: %d record(s) ignored as Kafka's RemoteLogMetadataCache ignores them (%d in all); the last: %s",
                        self.topic, self._live.problem_count - self._problems_logged, self._live.problem_count, self._live.problems[-1])
            self._problems_logged = self._live.problem_count

    def _reset(self) -> None:
        from tiered_kafka.rsm.remote_log_metadata import LiveSegments

        if self._consumer is not None:
            try:
                self._consumer.close()
            except Exception as err:  # noqa: BLE001 - already failing: the first error is the one reported
                log.debug("closing the %s consumer: %s", self.topic, err)
        self._consumer = None
        self._live = LiveSegments()
        self._problems_logged = 0

    def _read_to_high_watermarks(self) -> None:
        from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

        from tiered_kafka.rsm.remote_log_metadata import decode_record

        if self._consumer is None:
            consumer = Consumer({
                "bootstrap.servers": self.bootstrap_servers,
                "group.id": f"tiered-kafka-gateway-rsm-{uuid.uuid4().hex}",  # never joined nor committed: assign() only
                "enable.auto.commit": False,
                "enable.partition.eof": False,
                "auto.offset.reset": "earliest",
                "socket.timeout.ms": int(self.timeout_s * 1000),
                **self._security,
            })
            self._consumer = consumer  # closed by _reset on any failure below
            metadata = consumer.list_topics(self.topic, timeout=self.timeout_s).topics.get(self.topic)
            if metadata is None or metadata.error is not None or not metadata.partitions:
                raise GatewayError(
                    ErrorCode.KAFKA_UNAVAILABLE,
                    f"Kafka at {self.bootstrap_servers} has no topic {self.topic}: the live segments of this KIP-405 cluster are unknown",
                )
            partitions = [TopicPartition(self.topic, p, OFFSET_BEGINNING) for p in sorted(metadata.partitions)]
            consumer.assign(partitions)
            consumer.pause(partitions)  # no Fetch before the watermarks are known (module docstring)
        consumer = self._consumer
        assigned = consumer.assignment()
        lows, ends = {}, {}
        for tp in assigned:
            lows[tp.partition], ends[tp.partition] = consumer.get_watermark_offsets(tp, timeout=self.timeout_s, cached=False)
        positions = {tp.partition: tp.offset for tp in consumer.position(assigned)}
        deadline = time.monotonic() + self.timeout_s
        consumer.resume(assigned)
        while any(max(positions.get(p, -1), lows[p]) < high for p, high in ends.items()):
            if time.monotonic() > deadline:
                raise GatewayError(ErrorCode.KAFKA_UNAVAILABLE, f"reading {self.topic} up to its high watermarks took over {self.timeout_s}s")
            for message in consumer.consume(500, timeout=0.05):  # returns at its timeout when fewer are there: short
                if message.error() is not None:
                    raise GatewayError(ErrorCode.KAFKA_UNAVAILABLE, f"reading {self.topic}: {message.error()}")
                if message.value() is not None:
                    self._live.apply(decode_record(message.value()))
                positions[message.partition()] = message.offset() + 1
        consumer.pause(assigned)  # until the next refresh

    def _snapshot(self) -> Partitions:
        """The live segments by topic name; when one name has several live topic ids (deleted and
        re-created while the old one's deletion is unfinished), the id with the newest event is served."""
        by_name: dict[tuple[str, int], list[list[RsmSegment]]] = {}
        for tip in self._live.partitions():
            segments = []
            for found in self._live.segments(tip.topic_id, tip.partition):
                key = RsmSegmentKey(self.prefix, tip.topic, tip.topic_id, tip.partition, found.start_offset, found.segment_id)
                segments.append(RsmSegment(key, found.start_offset, found.end_offset, found.max_timestamp_ms, found.segment_size_in_bytes,
                                           tuple(sorted(found.segment_leader_epochs)), found.event_timestamp_ms))
            by_name.setdefault((tip.topic, tip.partition), []).append(segments)
        out = Partitions()
        for tp, candidates in by_name.items():
            newest = max(candidates, key=lambda segments: max(s.modified_ms for s in segments))
            out.by_partition[tp] = resolve_lineage(newest)  # finished segments of one lineage may overlap in part (resolve_lineage)
        return out
