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
objects without an entry; every run also sweeps the partition's prefix for segment objects below
the earliest registered base offset and deletes them, so no object is left dangling (but for one
whose ``.log`` reaches the live offsets: an upload not registered yet, ``_sweep_orphans``).
"""

from __future__ import annotations

import logging
import time

from botocore.exceptions import ClientError

from tiered_kafka.errors import InvalidSegmentNameError
from tiered_kafka.format.segment_names import FileKind
from tiered_kafka.registry import Registry, SegmentEntry
from tiered_kafka.retry import RetryPolicy
from tiered_kafka_agent.conditional_writes import s3_error_code
from tiered_kafka_agent.config import RemoteRetentionSettings
from tiered_kafka_agent.remote_store import RemoteStore

log = logging.getLogger(__name__)


class RemoteRetention:
    def __init__(self, registry: Registry, store: RemoteStore, settings: RemoteRetentionSettings, retry: RetryPolicy) -> None:
        self.registry = registry
        self.store = store
        self.settings = settings
        self.retry = retry

    def run_once(self, now_ms: int | None = None) -> list[SegmentEntry]:
        """Apply every topic's limits; returns the segments deleted."""
        now = time.time_ns() // 1_000_000 if now_ms is None else now_ms
        deleted: list[SegmentEntry] = []
        for topic, partition in self.registry.partitions():
            limits = self.settings.for_topic(topic)
            if limits.ms < 0 and limits.bytes < 0:
                continue
            doomed = self._apply(topic, partition, limits.ms, limits.bytes, now)
            deleted += doomed
            self._sweep_orphans(topic, partition, doomed)
        return deleted

    def _apply(self, topic: str, partition: int, max_age_ms: int, max_bytes: int, now: int) -> list[SegmentEntry]:
        segments = self.registry.segments(topic, partition)
        doomed: list[SegmentEntry] = []
        excess = sum(s.size for s in segments) - max_bytes if max_bytes >= 0 else -1
        for segment in segments:
            # without timestamps (magic 0 data) the upload time stands in, as Kafka uses the file's mtime
            age_from = segment.max_timestamp if segment.max_timestamp >= 0 else segment.upload_time_ms
            too_old = max_age_ms >= 0 and now - age_from > max_age_ms
            too_big = max_bytes >= 0 and excess - segment.size >= 0
            if not (too_old or too_big):
                break
            if too_big:
                excess -= segment.size
            doomed.append(segment)
        if doomed:
            remaining = segments[len(doomed)] if len(doomed) < len(segments) else None
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
        registered = self.registry.segments(topic, partition)
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
