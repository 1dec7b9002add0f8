"""One led partition: upload every rotated segment past offset.wm, in order, never losing one.

Before anything else, the partition's coverage start is recorded (``coverage``: registry, then
S3), so that from then on every offset at or after it that never reaches remote storage is a
recorded gap, whatever crashes happen. Then, for each rotated segment past the watermark (based
above it, or holding offsets past the expected next offset: below), oldest first:

1. open its files (live or ``.deleted`` names; its producer snapshot is the next segment's) and
   read its facts (CRC-verified batch headers, control records, .txnindex entries);
2. upload them (``RemoteStore.upload_segment``: the .log, then its indexes);
3. register it in Redis (atomic and idempotent, ``tiered_kafka.registry``);
4. write ``offset.wm`` (its base offset) to S3.

Up to ``upload.max_concurrent_segments`` (at most 4) segments of the partition upload at once
(steps 1-2), but steps 3-4 happen strictly in offset order, so the watermark never passes a
segment that is not registered. A pass that stops early (a snapshot not written yet, the other
leader's upload in flight, a failure) keeps the uploads that finished and commits them on a later
pass: nothing uploaded is uploaded again by this uploader; and no segment is submitted past one
still waiting for its snapshot. A crash anywhere repeats at most the segments in flight on
restart: the ``.log`` found in place is recognised as the same bytes (``remote_store``), the
indexes are written again, registration of the same segment is a no-op, and the watermark only
moves after it.
On start, after any missed filesystem event, and every ``upload.rescan_interval_s``, the
directory is rescanned from the watermark, so nothing depends on inotify alone.

Only committed offsets go up (``high_watermark``; Kafka's ``RemoteLogManager`` rule): a rotated
segment is uploaded once its end (the next segment's base offset) is at or below the partition's
high watermark as Kafka last checkpointed it (``replication-offset-checkpoint``); the segments
after it wait, in order, and the agent wakes the uploader when the broker rewrites the
checkpoint with a new high watermark for it. No high watermark known (the partition not in the
checkpoint, no checkpoint yet): they wait. A segment found only under its ``.deleted`` name is
uploaded whatever the checkpoint says (retention deleted it, hence it was below the high
watermark: ``high_watermark.committed_count``), so waiting never turns a segment into a gap while
it is still on disk. The check happens before step 1 and writes nothing, so the crash order is
unchanged: a restarted agent reads the checkpoint afresh, and what was registered before was
committed. Segments waiting are not gaps: ``_check_deleted_below`` runs only when no rotated
segment is pending at all.

A segment that retention deleted before it could be opened is a *gap*: its offsets
[expected, next base - 1] are recorded in the registry and as an S3 marker, counted in a metric
and logged as an error. Offsets are never skipped silently. The expected next offset is never
"unknown": it is the registry's ``next_offset`` (which survives remote retention emptying the
partition), this uploader's own mark, the end of offset.wm's segment (a previous agent), or
else the coverage start, so that segments retention deleted while the agent was down before its
first upload are gaps too. A segment with corrupt bytes is never registered: the partition stops
advancing and retries, with an error in the log.

The partition's offsets (offset.wm, the coverage start, the expected next offset, the gaps) are
held and moved by one collaborator, ``partition_offsets.PartitionOffsets`` (``self.offsets``).

Another uploader's objects (Pinterest's, issue 37's hand-over): offset.wm is taken as progress only as far as
the registry vouches for it (``PartitionOffsets._trusted``), so the agent continues from the first offset not
registered; a ``.log`` already under our key with the same bytes is kept and registered (``remote_store``); one
with other bytes (``ForeignObjectError``) is logged once per object and retried with a backoff of up to
``FOREIGN_RETRY_MAX_S`` that filesystem events do not cut short (never a tight loop, never deleted).

Two leaders, one partition (after a leadership move; ``two_leaders``): a segment whose offsets
are all registered is not uploaded; one straddling the expected next offset is registered from it
(``SegmentEntry.first_offset``), never recorded as a gap; the ``.log`` goes up with
``If-None-Match: *`` so no agent overwrites another's object (``remote_store``). Crash order per
segment: ``.log`` (conditional) → indexes → registry → ``offset.wm``. ``offset.wm`` holds the
base offset of the last segment this agent's replica finished, so a replica with other segment
boundaries also reconsiders the one local segment that straddles it (its base below it, its end
past it).
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from tiered_kafka.errors import FormatError
from tiered_kafka.format.segment_names import FileKind, Suffix, partition_dir_name
from tiered_kafka.registry import Registry, SegmentEntry
from tiered_kafka.retry import RetryPolicy
from tiered_kafka_agent.faults import crash_point
from tiered_kafka_agent.high_watermark import HighWatermarks, committed_count
from tiered_kafka_agent.local_segments import (
    LocalSegment,
    OpenSegment,
    SegmentGoneError,
    SegmentNotReadyError,
    SegmentStats,
    list_segments,
    refuse_symlink,
    open_segment,
    read_stats,
    snapshot_ready,
)
from tiered_kafka_agent.metrics import AgentMetrics
from tiered_kafka_agent.partition_offsets import PartitionOffsets
from tiered_kafka_agent.remote_store import ForeignObjectError, ObjectKeyTakenError, RemoteStore, UploadHooks
from tiered_kafka_agent.two_leaders import KEY_BUSY_RETRY_S, ObjectKeyBusyError, TwoLeaders

log = logging.getLogger(__name__)
NOT_READY_RETRY_S = 0.05
SNAPSHOT_GRACE_S = 2.0  # how long a rolled segment waits for the broker's snapshot (local_segments)
MAX_WINDOW = 4
PREDECESSOR_WARN_S = 30.0  # how often a new uploader still waiting for the previous one says so
FOREIGN_RETRY_MAX_S = 60.0  # the longest wait between two tries of a segment whose key holds another uploader's other bytes


@dataclass(frozen=True)
class _Upload:
    """What uploading one segment produced: its facts and registry entry, or why there is none."""

    stats: SegmentStats | None
    entry: SegmentEntry | None
    gone: SegmentGoneError | None
    taken: ObjectKeyTakenError | None = None


class PartitionUploader(TwoLeaders):
    """Uploads one partition's rotated segments; ``run`` in its own thread, ``stop`` to end it."""

    def __init__(
        self,
        topic: str,
        partition: int,
        log_dirs: list[Path],
        store: RemoteStore,
        registry: Registry,
        metrics: AgentMetrics,
        upload_slots: threading.Semaphore,
        retry: RetryPolicy,
        rescan_interval_s: float,
        upload_window: int = 1,
        predecessor: PartitionUploader | None = None,
        high_watermarks: HighWatermarks | None = None,
    ) -> None:
        self.topic = topic
        self.partition = partition
        self.log_dirs = log_dirs
        self.store = store
        self.registry = registry
        self.metrics = metrics
        self.upload_slots = upload_slots
        self.retry = retry
        self.rescan_interval_s = rescan_interval_s
        self.name = partition_dir_name(topic, partition)
        self.high_watermarks = high_watermarks or HighWatermarks()
        self.offsets = PartitionOffsets(topic, partition, store, registry, metrics, retry)
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._first_seen: dict[int, float] = {}
        self._failures = 0
        self._done: dict[int, tuple[int | None, _Upload]] = {}  # base → (next base, finished upload) not committed yet
        self._taken_seen: dict[tuple[str, str], float] = {}  # two_leaders: (key, ETag) of another leader's object → first seen
        self._foreign_reported: set[tuple[str, str]] = set()  # (key, ETag) of another uploader's objects in the way, logged once
        # several segments of this partition upload at once; registration stays in offset order
        self.window = max(1, min(MAX_WINDOW, upload_window))
        self._pool = ThreadPoolExecutor(self.window, thread_name_prefix=f"upload-{self.name}")
        self.thread = threading.Thread(target=self.run, name=f"upload-{self.name}", daemon=True)
        self._predecessor = predecessor
        self._predecessor_done = threading.Event()
        if predecessor is None:
            self._predecessor_done.set()

    # -- control ---------------------------------------------------------------------------
    def start(self) -> None:
        self.thread.start()

    def wake(self) -> None:
        """A filesystem event in the partition directory: rescan now."""
        self._wake.set()

    def stop(self) -> None:
        """Stop after the segment in flight (a lost leadership finishes its upload)."""
        self._stop.set()
        self._wake.set()

    def join(self, timeout: float | None = None) -> None:
        self.thread.join(timeout)

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    @property
    def waiting_for_predecessor(self) -> bool:
        """True until the previous uploader of this partition (see ``_await_predecessor``) has ended."""
        return not self._predecessor_done.is_set()

    def _await_predecessor(self) -> None:
        """Wait, in this uploader's own thread, for the partition's previous uploader to end.

        Leadership that comes back while the uploader it stopped still finishes its segment in
        flight must never give the partition two uploaders (their watermarks would race), and the
        wait must never hold up leadership handling for other partitions: the agent hands the old
        uploader over as ``predecessor`` instead of joining it in its leadership callback. The wait
        has no deadline (giving up would mean two uploaders); a warning every
        ``PREDECESSOR_WARN_S`` names the partition. It is unconditional, even when this uploader
        is itself stopped meanwhile, so that a chain of quick leadership flips still ends each
        uploader before its successor starts."""
        previous = self._predecessor
        if previous is None:
            return
        started = time.monotonic()
        while True:
            previous.join(PREDECESSOR_WARN_S)
            if not previous.thread.is_alive():
                break
            log.warning("%s: still waiting for the previous uploader to finish its segment in flight (%.0fs)", self.name, time.monotonic() - started)
        self._predecessor = None
        self._predecessor_done.set()

    def run(self) -> None:
        self._await_predecessor()
        log.info("uploading %s", self.name)
        while not self._stop.is_set():
            self._wake.clear()
            delay = self.rescan_interval_s
            try:
                delay = self.sync()
            except ForeignObjectError as err:  # another uploader's object under our key: once, then a backoff no event shortens
                self._failures += 1
                delay = min(FOREIGN_RETRY_MAX_S, 2.0 ** min(self._failures, 10))
                if (err.key, err.etag) not in self._foreign_reported:
                    self._foreign_reported.add((err.key, err.etag))
                    self.metrics.failures.labels(self.topic).inc()
                    log.error("%s: %s (trying again with a backoff, up to every %.0fs)", self.name, err, FOREIGN_RETRY_MAX_S)
                else:
                    log.debug("%s: still %s", self.name, err)
                self._stop.wait(delay)
                continue
            except Exception as err:  # never let one partition's failure kill its thread
                self._failures += 1
                self.metrics.failures.labels(self.topic).inc()
                delay = self.retry.delay(min(self._failures, 10))
                log.error("%s: upload pass failed (retrying in %.1fs): %s", self.name, delay, err, exc_info=not isinstance(err, (OSError, FormatError)))
            self._wake.wait(delay)
        self._pool.shutdown(wait=True)
        log.info("stopped uploading %s", self.name)

    # -- one pass --------------------------------------------------------------------------
    def directory(self) -> Path | None:
        """The partition's directory in a log dir; a symbolic link is refused (``local_segments`` module doc)."""
        for log_dir in self.log_dirs:
            candidate = log_dir / self.name
            if candidate.is_symlink():
                refuse_symlink(candidate, "partition_dir", self.metrics)
                continue
            if candidate.is_dir():
                return candidate
        return None

    def sync(self) -> float:
        """Upload what is pending; returns how long to wait before the next pass."""
        directory = self.directory()
        if directory is None:
            return self.rescan_interval_s
        segments, active = list_segments(directory, self.metrics)
        if not self.offsets.load(directory, segments, active):  # no segment at all yet: nothing to observe
            return self.rescan_interval_s
        now = time.monotonic()
        pending = self.offsets.pending(segments, active)
        for segment in pending:
            self._first_seen.setdefault(segment.base_offset, now)
        self._update_lag(pending, active)
        committed = self._committed(directory, pending, active)
        in_flight: deque[tuple[LocalSegment, int | None, Future[_Upload]]] = deque()
        try:
            for index, segment in enumerate(pending[:committed]):
                if self._stop.is_set():
                    break
                next_base = pending[index + 1].base_offset if index + 1 < len(pending) else active
                in_flight.append((segment, next_base, self._submit(segment, next_base)))
                while len(in_flight) > 2 * self.window:  # keep the pool busy while committing in order
                    self._commit_next(in_flight)
                if self._snapshot_pending(segment, next_base):  # it will wait: upload nothing past it this pass
                    break
            while in_flight:  # uploads already started finish and commit, even when stopping
                self._commit_next(in_flight)
            if not pending and active is not None and not self._stop.is_set():
                self.offsets.check_deleted_below(active)
        except SegmentNotReadyError as err:
            log.debug("%s: %s", self.name, err)
            return NOT_READY_RETRY_S
        except ObjectKeyBusyError as err:
            log.warning("%s: %s", self.name, err)
            return KEY_BUSY_RETRY_S
        finally:
            for segment, next_base, future in in_flight:  # after a failure: commit nothing out of order, keep what finished
                future.cancel()
                with contextlib.suppress(Exception):
                    self._done[segment.base_offset] = (next_base, future.result())
        self._failures = 0
        self._update_lag(self.offsets.pending(segments, active), active)
        return self.rescan_interval_s

    def _committed(self, directory: Path, pending: list[LocalSegment], active: int | None) -> int:
        """How many of the pending segments (oldest first) hold only committed offsets
        (``high_watermark.committed_count``, with the high watermark Kafka last checkpointed in
        the partition's log.dir). The rest wait, counted in the ``segments_awaiting_high_watermark``
        gauge."""
        high_watermark = self.high_watermarks.get(directory.parent, self.topic, self.partition)
        committed = committed_count(pending, active, high_watermark)
        waiting = len(pending) - committed
        self.metrics.awaiting_high_watermark.labels(self.topic, str(self.partition)).set(waiting)
        if waiting:
            log.debug(
                "%s: %d rotated segment(s) from offset %d wait for the high watermark (%s in %s)",
                self.name,
                waiting,
                pending[committed].base_offset,
                "not checkpointed" if high_watermark is None else f"checkpointed at {high_watermark}",
                directory.parent,
            )
        return committed

    def _submit(self, segment: LocalSegment, next_base: int | None) -> Future[_Upload]:
        """The upload of ``segment``: the one an earlier pass finished, else a new one in the pool."""
        done = self._done.pop(segment.base_offset, None)
        if done is not None and done[0] == next_base:
            future: Future[_Upload] = Future()
            future.set_result(done[1])
            return future
        return self._pool.submit(self._upload, segment, next_base)

    def _commit_next(self, in_flight: deque[tuple[LocalSegment, int | None, Future[_Upload]]]) -> None:
        """Commit the oldest upload in flight; one whose commit fails is kept for the next pass (its
        upload finished), except when another leader's or uploader's object was in the way (looked at afresh)."""
        segment, next_base, future = in_flight.popleft()
        upload = future.result()
        try:
            self._commit(segment, next_base, upload)
        except (ObjectKeyBusyError, ForeignObjectError):
            raise
        except Exception:
            self._done[segment.base_offset] = (next_base, upload)
            raise

    def _snapshot_pending(self, segment: LocalSegment, next_base: int | None) -> bool:
        """True when the segment's upload will wait for the broker's producer snapshot (``_settle_snapshot``)."""
        if next_base is None or time.monotonic() - self._first_seen.get(segment.base_offset, time.monotonic()) >= SNAPSHOT_GRACE_S:
            return False
        try:
            with open_segment(segment, next_base) as opened:
                return not snapshot_ready(opened)
        except (SegmentGoneError, SegmentNotReadyError):
            return False

    def _upload(self, segment: LocalSegment, next_base: int | None) -> _Upload:
        """Read and upload one segment (in the pool; several segments of a partition at once).

        Nothing is uploaded for an empty segment, nor for one whose offsets are all registered
        already. One that straddles the expected next offset is uploaded to be registered from it
        (``first_offset``; module doc)."""
        expected = self.offsets.expected_next()
        hooks = self._hooks()
        try:
            with open_segment(segment, next_base) as opened:
                self._settle_snapshot(segment, next_base, opened)
                stats = read_stats(opened)  # outside the upload slot: the slots stay busy sending bytes
                if stats.record_count == 0 or (expected is not None and stats.last_offset < expected):
                    return _Upload(stats, None, None)
                first = expected if expected is not None and expected > segment.base_offset else None
                with self.upload_slots:
                    try:
                        return _Upload(stats, self.store.upload_segment(self.topic, self.partition, opened, stats, hooks, first_offset=first), None)
                    except ObjectKeyTakenError as err:
                        return _Upload(stats, None, None, err)
        except SegmentGoneError as err:
            return _Upload(None, None, err)

    def _hooks(self) -> UploadHooks:
        return UploadHooks(
            on_bytes=lambda n: self.metrics.uploaded_bytes.labels(self.topic).inc(n),
            on_retry=lambda err: self.metrics.retries.labels(self.topic).inc(),
            checkpoint=crash_point,
            pause=self._pause_without_slot,
        )

    def _settle_snapshot(self, segment: LocalSegment, next_base: int | None, opened: OpenSegment) -> None:
        """Keep the producer snapshot only when it is there and whole; else wait for it up to
        SNAPSHOT_GRACE_S after first seeing the segment (SegmentNotReadyError: retried shortly).

        Kafka writes it just after the roll, so a fresh segment waits; a broker that never writes
        snapshots costs each segment that wait once (and a restart, once for all of them)."""
        if next_base is None or snapshot_ready(opened):
            return
        waited = time.monotonic() - self._first_seen.get(segment.base_offset, time.monotonic())
        if waited < SNAPSHOT_GRACE_S:
            raise SegmentNotReadyError(f"segment {segment.base_offset}: waiting for the broker's {next_base:020d}.snapshot")
        if FileKind.SNAPSHOT in opened.files:
            log.warning("%s: %s is incomplete; segment %d is uploaded without it", self.name, opened.names[FileKind.SNAPSHOT], segment.base_offset)
        opened.drop(FileKind.SNAPSHOT)

    def _pause_without_slot(self, seconds: float) -> None:
        """Back off between retries without holding an upload slot: a failing S3 prefix or
        partition must not starve the other partitions' uploads."""
        self.upload_slots.release()
        try:
            time.sleep(seconds)
        finally:
            self.upload_slots.acquire()

    def _commit(self, segment: LocalSegment, next_base: int | None, upload: _Upload) -> None:
        """Register one uploaded segment (or what stands for it: another leader's object, a tail) and
        move offset.wm: strictly in offset order."""
        expected = self.offsets.expected_next()
        if upload.gone is not None:
            if next_base is None:
                raise SegmentNotReadyError(f"segment {segment.base_offset} is gone; waiting for a later segment to bound the gap")
            start = self.offsets.gap_floor(expected)
            self.offsets.record_gap(segment.base_offset if start is None else start, next_base - 1, f"deleted before upload: {upload.gone}")
            self._advance_watermark(segment.base_offset)
            return
        stats = upload.stats
        assert stats is not None
        if upload.taken is not None:
            registrations = self._taken_entries(segment, next_base, stats, upload.taken, expected)
        else:
            registrations = [] if upload.entry is None else [(upload.entry, stats.batch_index)]
        seen = self._first_seen.get(segment.base_offset)
        done = [r for r in (self._register_in_order(segment, entry, batch_index) for entry, batch_index in registrations) if r is not None]
        if not done:
            log.info("%s: segment %d holds nothing new (last offset %d)", self.name, segment.base_offset, stats.last_offset)
            self._advance_watermark(segment.base_offset)
            return
        crash_point("before_watermark")
        self._advance_watermark(segment.base_offset)
        for entry, added in done:
            self.metrics.segments.labels(self.topic).inc()
            log.info(
                "%s: segment %d..%d uploaded and %s%s (%d bytes)",
                self.name,
                entry.base_offset,
                entry.last_offset,
                "registered" if added else "already registered",
                f" from offset {entry.first_offset}" if entry.first != entry.base_offset else "",
                entry.size,
            )
        if seen is not None:
            self.metrics.roll_to_registered.observe(time.monotonic() - seen)

    def _advance_watermark(self, base_offset: int) -> None:
        """offset.wm moves to ``base_offset`` (``PartitionOffsets.advance_watermark``: never
        backwards): every branch finishing with a segment (registered, a gap, nothing new, refused
        by the registry) ends here, so it also forgets when the segments up to it were first seen
        and the uploads kept for them (never pending again; a long-running agent keeps nothing of them)."""
        base_offset = self.offsets.advance_watermark(base_offset)
        for base in [b for b in self._first_seen if b <= base_offset]:
            del self._first_seen[base]
        for base in [b for b in self._done if b <= base_offset]:
            del self._done[base]

    def _update_lag(self, pending: list[LocalSegment], active: int | None) -> None:
        labels = (self.topic, str(self.partition))
        if pending and active is not None:
            self.metrics.lag_offsets.labels(*labels).set(active - pending[0].base_offset)
            oldest = pending[0]
            try:
                mtime = _mtime(oldest)
                self.metrics.lag_seconds.labels(*labels).set(max(0.0, time.time() - mtime))
            except FileNotFoundError:
                pass
        else:
            self.metrics.lag_offsets.labels(*labels).set(0)
            self.metrics.lag_seconds.labels(*labels).set(0)
        self.metrics.watermark_age.labels(*labels).set(time.monotonic() - self.offsets.watermark_moved)


def _mtime(segment: LocalSegment) -> float:
    for suffix in (Suffix.NONE, Suffix.DELETED):
        try:
            return os.stat(segment.path(FileKind.LOG, suffix)).st_mtime
        except FileNotFoundError:
            continue
    raise FileNotFoundError(segment.path(FileKind.LOG))
