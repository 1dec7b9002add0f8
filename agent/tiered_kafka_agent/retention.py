"""Remote retention: per-topic limits by time and by bytes on what the registry holds.

Kafka's rules, applied to the remote copy, oldest segment first, stopping at the first one that
does not qualify:
    remote_retention.ms     now - segment max timestamp > ms
    remote_retention.bytes  total remote bytes - segment size >= bytes (what remains stays >= the limit)

Order of deletion, so that nothing ever points at a missing object: the S3 mark ``expired.json``
(offsets below the new remote log start were deleted by remote retention: the audit and a rebuilt
registry count them as expired, not lost), then the registry entry (readers stop being sent
there; it raises the registry's own ``expired_until``), then the objects (``.log`` first). A crash
after the mark leaves offsets both remote and marked expired: harmless. A crash in between leaves
objects without an entry; every run that deletes from a partition also sweeps its prefix for segment
objects below the earliest registered base offset and deletes them, so no object is left dangling
(but for one whose ``.log`` reaches the live offsets: an upload not registered yet, ``_sweep_orphans``).

Cost (issue 34): each agent applies retention to the partitions it leads (``partitions``: the
agent's led partitions; without it, every partition of the registry). A pass reads each partition's
summary (``Registry.summaries``: pipelined, ``SUMMARY_BATCH`` partitions a round trip): its total
bytes and the oldest segment's age. Only a partition whose oldest segment qualifies reads segments,
oldest first, ``PAGE`` at a time, until the first that does not: a pass with nothing to expire
costs its partition count, not its segments, and lists nothing in S3.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable

from botocore.exceptions import ClientError

from tiered_kafka.errors import InvalidSegmentNameError
from tiered_kafka.format.segment_names import FileKind
from tiered_kafka.registry import Registry, SegmentEntry
from tiered_kafka.retry import RetryPolicy
from tiered_kafka_agent.conditional_writes import s3_error_code
from tiered_kafka_agent.config import RemoteRetentionSettings
from tiered_kafka_agent.remote_store import RemoteStore

log = logging.getLogger(__name__)


SUMMARY_BATCH = 1000
PAGE = 32


class RemoteRetention:
    def __init__(self, registry: Registry, store: RemoteStore, settings: RemoteRetentionSettings, retry: RetryPolicy,
                 partitions: Callable[[], Iterable[tuple[str, int]]] | None = None) -> None:
        self.registry = registry
        self.store = store
        self.settings = settings
        self.retry = retry
        self.partitions = partitions  # the partitions this agent leads (module doc); None: every registered one
        self.summaries_read = 0  # partitions whose summary a pass read (the benchmark's cost figure)
        self.segments_read = 0  # segment entries passes read

    def run_once(self, now_ms: int | None = None) -> list[SegmentEntry]:
        """Apply every topic's limits; returns the segments deleted."""
        now = time.time_ns() // 1_000_000 if now_ms is None else now_ms
        deleted: list[SegmentEntry] = []
        wanted = [tp for tp in (self.registry.partitions() if self.partitions is None else sorted(self.partitions()))
                  if self.settings.for_topic(tp[0]).ms >= 0 or self.settings.for_topic(tp[0]).bytes >= 0]
        for start in range(0, len(wanted), SUMMARY_BATCH):
            chunk = wanted[start : start + SUMMARY_BATCH]
            self.summaries_read += len(chunk)
            for (topic, partition), summary in zip(chunk, self.registry.summaries(chunk), strict=True):
                if summary is None or summary.info.is_empty:
                    continue
                limits = self.settings.for_topic(topic)
                too_old = limits.ms >= 0 and now - summary.oldest_age_from > limits.ms
                too_big = limits.bytes >= 0 and summary.info.total_bytes > limits.bytes
                if not (too_old or too_big):
                    continue  # the oldest segment stays: nothing after it is deleted either (Kafka's rule)
                doomed = self._apply(topic, partition, limits.ms, limits.bytes, summary.info.total_bytes, now)
                deleted += doomed
                if doomed:
                    self._sweep_orphans(topic, partition, doomed)
        return deleted

    def _apply(self, topic: str, partition: int, max_age_ms: int, max_bytes: int, total_bytes: int, now: int) -> list[SegmentEntry]:
        doomed: list[SegmentEntry] = []
        remaining: SegmentEntry | None = None
        excess = total_bytes - max_bytes if max_bytes >= 0 else -1
        start = 0
        while remaining is None:
            page = self.registry.segments_page(topic, partition, start, PAGE)
            self.segments_read += len(page)
            for segment in page:
                # without timestamps (magic 0 data) the upload time stands in, as Kafka uses the file's mtime
                age_from = segment.max_timestamp if segment.max_timestamp >= 0 else segment.upload_time_ms
                too_old = max_age_ms >= 0 and now - age_from > max_age_ms
                too_big = max_bytes >= 0 and excess - segment.size >= 0
                if not (too_old or too_big):
                    remaining = segment
                    break
                if too_big:
                    excess -= segment.size
                doomed.append(segment)
            if len(page) < PAGE:
                break
            start += PAGE
        if doomed:
            self.store.write_expired(topic, partition, remaining.first if remaining else doomed[-1].next_offset)
        for segment in doomed:
            self.registry.delete_segment(topic, partition, segment.first)  # keyed by its registered first offset
            self.store.delete_segment_objects(topic, partition, segment.base_offset, [FileKind(k) for k in segment.files])
            log.info("remote retention deleted %s-%d segment %d..%d", topic, partition, segment.base_offset, segment.last_offset)
        return doomed

    def _sweep_orphans(self, topic: str, partition: int, doomed: list[SegmentEntry]) -> None:
        """Delete segment objects below the earliest registered segment (left by a crash mid-deletion).

        When retention emptied the partition, the bound is the last segment it just deleted; an
        emptied partition is otherwise left alone, since its next segments may be uploading now.
        A segment whose ``.log`` reaches the offsets still live (its ``tk-last-offset`` at or past
        the earliest registered first offset) is not an orphan but an upload not yet registered: a
        new leader's straddling segment (``two_leaders``) has a base below the registered ones and
        is registered from a later offset. Its objects are kept."""
        registered = self.registry.segments_page(topic, partition, 0, PAGE)  # the oldest: the bound lies among them
        if registered:  # objects are named by base offsets, which may lie below a segment's first offset
            below, live_from = min(s.base_offset for s in registered), min(s.first for s in registered)
        elif doomed:
            below, live_from = doomed[-1].base_offset + 1, doomed[-1].next_offset
        else:
            return
        prefix = self.store.keyspace.partition_prefix(topic, partition)
        by_base: dict[int, list[tuple[str, FileKind]]] = {}
        for key, _size in list(self.store.list_keys(prefix)):
            try:
                parsed = self.store.keyspace.parse(key)
            except InvalidSegmentNameError:
                continue
            if parsed.segment is not None and parsed.segment.base_offset < below:
                by_base.setdefault(parsed.segment.base_offset, []).append((key, parsed.segment.kind))
        for base, objects in sorted(by_base.items()):
            log_key = next((key for key, kind in objects if kind == FileKind.LOG), None)
            if log_key is not None and self._reaches(log_key, live_from):
                log.info("remote retention: %s-%d segment %d reaches offset %d: an upload not registered yet, kept", topic, partition, base, live_from)
                continue
            for key, _kind in objects:
                log.warning("remote retention: deleting dangling object %s", key)
                self.retry.call(lambda key=key: self.store.client.delete_object(Bucket=self.store.bucket, Key=key), what=f"delete of {key}")

    def _reaches(self, log_key: str, offset: int) -> bool:
        """Whether the ``.log`` object ``log_key`` holds ``offset`` or later (its ``tk-last-offset``);
        True when it does not say (not ours to judge: kept), False when it is gone."""
        try:
            _, metadata = self.store.head_metadata(log_key)
        except ClientError as err:
            if s3_error_code(err) in ("NoSuchKey", "404", "NotFound"):
                return False
            raise
        try:
            return int(metadata["tk-last-offset"]) >= offset
        except (KeyError, ValueError):
            log.warning("remote retention: %s has no readable tk-last-offset; kept", log_key)
            return True
