"""What one partition's uploader knows of its offsets, and the one place they move.

``PartitionOffsets`` owns, for one partition:

- ``watermark``: ``offset.wm``, the base offset of the last segment this agent's replica finished
  (read from S3 once, written there each time it moves, never backwards);
- ``coverage``: the coverage start, recorded before anything is uploaded (``coverage``);
- the first offset not yet accounted for (``expected_next``: registered or recorded as a gap),
  from the registry's ``next_offset``, this uploader's own mark (``accounted_until``) and the end of
  offset.wm's segment (a previous agent's);
- the gaps: offsets that will never be in remote storage, recorded in the registry and as an S3
  marker, counted and logged as errors (``record_gap``).

Which segments are pending, why offsets are never "unknown" and how two leaders share a
partition are the rules of ``partition_uploader`` (its module docstring) and ``two_leaders``;
``PartitionUploader`` holds one of these and the uploads, this holds the offsets.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

from botocore.exceptions import ClientError

from tiered_kafka.format.segment_names import FileKind, partition_dir_name
from tiered_kafka.registry import CoverageStart, Registry
from tiered_kafka.retry import RetryPolicy
from tiered_kafka_agent.coverage import establish_coverage_start, observed_log_start
from tiered_kafka_agent.local_segments import LocalSegment
from tiered_kafka_agent.metrics import AgentMetrics
from tiered_kafka_agent.remote_store import META_PREFIX, RemoteStore

log = logging.getLogger(__name__)


class PartitionOffsets:
    """offset.wm, the coverage start, the expected next offset and the gaps of one partition (module doc)."""

    def __init__(self, topic: str, partition: int, store: RemoteStore, registry: Registry, metrics: AgentMetrics, retry: RetryPolicy) -> None:
        self.topic = topic
        self.partition = partition
        self.name = partition_dir_name(topic, partition)
        self.store = store
        self.registry = registry
        self.metrics = metrics
        self.retry = retry
        self.watermark: int | None = None  # offset.wm; None: none written yet
        self.watermark_moved = time.monotonic()
        self.accounted_until: int | None = None  # None until this uploader registered a segment or recorded a gap
        self.coverage: CoverageStart | None = None
        self._watermark_loaded = False
        self._watermark_next: int | None = None  # the first offset after offset.wm's segment, when the registry cannot say

    # -- offset.wm and the coverage start -----------------------------------------------------
    def load(self, directory: Path, segments: list[LocalSegment], active: int | None) -> bool:
        """Read offset.wm (once) and record the coverage start (once, ``coverage``); False while the
        partition has no segment at all yet (nothing to observe: the pass waits)."""
        if not self._watermark_loaded:
            self.watermark = self._trusted(self.store.read_watermark(self.topic, self.partition))
            self._watermark_loaded = True
        if self.coverage is None:
            observed = observed_log_start(directory, segments, active)
            if observed is None:
                return False
            self.coverage = establish_coverage_start(self.topic, self.partition, self.registry, self.store, observed, self.watermark)
            self._watermark_next = self._end_of_watermark_segment(segments, active)
        return True

    def _trusted(self, wm: int | None) -> int | None:
        """offset.wm as far as it is this project's progress (issue 37's hand-over).

        Our agent moves offset.wm only after registering the segment it names (or recording its gap),
        so the registry's ``next_offset`` is past it. Another uploader's offset.wm (Pinterest's writes
        one per segment, unordered: it can name a segment past one never uploaded, or go backwards)
        is not: when the registry knows the partition, offset.wm is taken no higher than the offset
        before its ``next_offset``; when the registry knows nothing and offset.wm's ``.log`` has no
        ``tk-*`` metadata (another uploader's), it is ignored. Either way the pass then starts from the
        first offset not registered, and segments already in S3 are recognised there by their bytes
        (``remote_store``)."""
        if wm is None:
            return None
        registered = self.registry.coverage(self.topic, self.partition).next_offset
        if registered >= 0:
            if wm >= registered:
                log.info("%s: offset.wm %d is past the registered offsets (next %d): continuing from offset %d", self.name, wm, registered, registered)
                return registered - 1 if registered > 0 else None
            return wm
        try:
            _, metadata = self.store.head_metadata(self.store.keyspace.segment_key(self.topic, self.partition, wm, FileKind.LOG))
        except ClientError:
            return wm  # gone (remote retention) or unreadable: as before
        if not any(name.startswith(META_PREFIX) for name in metadata):
            log.info("%s: offset.wm %d was written by another uploader (its .log has no tk-* metadata): not taken as progress", self.name, wm)
            return None
        return wm

    def advance_watermark(self, base_offset: int) -> int:
        """offset.wm moves to ``base_offset``, never backwards (a straddling segment's base can be
        below it: ``pending``); returns where it stands."""
        base_offset = max(base_offset, self.watermark if self.watermark is not None else -1)
        if base_offset != self.watermark:
            self.retry.call(lambda: self.store.write_watermark(self.topic, self.partition, base_offset), what=f"offset.wm of {self.name}")
        self.watermark = base_offset
        self.watermark_moved = time.monotonic()
        return base_offset

    def _end_of_watermark_segment(self, segments: list[LocalSegment], active: int | None) -> int | None:
        """The first offset after offset.wm's segment, when only offset.wm knows it (a previous
        agent, or a registry rebuilt after remote retention deleted that segment).

        From the registry if it holds the segment; else the .log object's tk-last-offset; else
        the next local segment's base if the segment is still local; else wm + 1 (a lower bound:
        a gap measured from it may include offsets of that segment, and says so)."""
        wm = self.watermark
        if wm is None or self.registry.coverage(self.topic, self.partition).next_offset > wm:
            return None
        found = self.registry.find(self.topic, self.partition, wm)
        if found is not None:
            return found.next_offset
        try:
            _, metadata = self.store.head_metadata(self.store.keyspace.segment_key(self.topic, self.partition, wm, FileKind.LOG))
            return int(metadata["tk-last-offset"]) + 1
        except (ClientError, KeyError, ValueError) as err:  # gone (remote retention), or not ours
            log.debug("%s: offset.wm's segment %d has no readable .log metadata: %s", self.name, wm, err)
        bases = [s.base_offset for s in segments] + ([active] if active is not None else [])
        if wm in bases:
            later = [b for b in bases if b > wm]
            return later[0] if later else None
        log.warning("%s: the end of offset.wm's segment %d is unknown; gaps after it are measured from %d", self.name, wm, wm + 1)
        return wm + 1

    # -- what is accounted for ------------------------------------------------------------------
    def pending(self, segments: list[LocalSegment], active: int | None) -> list[LocalSegment]:
        """Rotated segments past offset.wm: those based above it, and those based at or below it
        that hold offsets past the expected next offset (offset.wm written by a replica that rolled
        elsewhere: ``partition_uploader``'s module doc). A replica's own finished segments never
        hold any: not re-read."""
        wm = self.watermark
        if wm is None:
            return list(segments)
        expected: int | None = None
        pending = []
        for index, segment in enumerate(segments):
            following = segments[index + 1].base_offset if index + 1 < len(segments) else active
            if segment.base_offset > wm:
                pending.append(segment)
            elif following is not None and following > wm:  # at most two segments reach past offset.wm's base
                if self.accounted_locally(following):
                    continue
                if expected is None:
                    expected = self.expected_next()
                if expected is not None and following > expected:
                    pending.append(segment)
        return pending

    def expected_next(self) -> int | None:
        """The first offset not yet accounted for (registered or recorded as a gap), None before any.

        The registry's ``next_offset`` (it survives remote retention emptying the partition),
        this uploader's own mark, or the end of offset.wm's segment, whichever is highest. Segments
        starting below it hold nothing new. With none of them, gaps are still measured from the
        coverage start (``gap_floor``)."""
        coverage = self.registry.coverage(self.topic, self.partition)
        registered = coverage.next_offset if coverage.next_offset >= 0 else None
        candidates = [o for o in (registered, self.accounted_until, self._watermark_next) if o is not None]
        return max(candidates) if candidates else None

    def accounted_locally(self, offset: int) -> bool:
        """Whether this uploader alone knows every offset below ``offset`` is accounted for (its
        own mark or offset.wm's segment end). The registry's ``next_offset`` only ever raises the
        expected next offset, so when this is true the registry cannot change the answer: an idle
        pass then asks Redis nothing (500 partitions rescanned every second used to cost 500
        HGETALLs a second, and the CPU they took)."""
        local = [o for o in (self.accounted_until, self._watermark_next) if o is not None]
        return bool(local) and max(local) >= offset

    def account(self, next_offset: int) -> None:
        """Every offset below ``next_offset`` is registered or recorded as a gap."""
        self.accounted_until = max(self.accounted_until or 0, next_offset)

    # -- gaps -----------------------------------------------------------------------------------
    def gap_floor(self, expected: int | None) -> int | None:
        """Where missing offsets start counting: the expected next offset, else the coverage start."""
        if expected is not None:
            return expected
        return None if self.coverage is None else self.coverage.offset

    def check_deleted_below(self, active: int) -> None:
        """Every rotated segment is uploaded: offsets between the expected next offset and the
        active segment that are in no local segment any more were deleted before upload."""
        if self.accounted_locally(active):
            return
        floor = self.gap_floor(self.expected_next())
        if floor is not None and floor < active:
            self.record_gap(floor, active - 1, "deleted before upload: no local segment holds these offsets any more")

    def record_gap(self, start: int, end: int, reason: str) -> None:
        """Offsets ``start..end`` will never be in remote storage: an S3 marker, then the registry,
        a metric and an ERROR line; accounted for from then on."""
        if end < start:
            return
        self.account(end + 1)
        log.error("%s: GAP offsets %d..%d will not be in remote storage: %s", self.name, start, end, reason)
        self.metrics.gaps.labels(self.topic).inc()
        detected_ms = time.time_ns() // 1_000_000
        self.store.write_gap_marker(self.topic, self.partition, start, end, reason, detected_ms)
        self.retry.call(
            lambda: self.registry.record_gap(self.topic, self.partition, start, end, reason, detected_ms=detected_ms),
            what=f"gap marker of {self.name}",
        )
