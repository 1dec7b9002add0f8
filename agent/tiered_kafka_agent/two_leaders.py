"""Two leaders, one partition: what an uploader does when another leader's agent got there first.

After a leadership move the old leader's agent finishes its segment in flight while the new
leader's starts (Kafka's ``RemoteLogManager`` has the same window: the old leader's
``RLMTask`` copying a segment while the new one's ``copyLogSegmentsToRemote`` starts from the
copied offset), and replicas roll segments at different offsets. The registry is the arbiter:
each offset is registered once, by whoever registers it first, and an object a registry entry
names is never overwritten with other bytes (``remote_store``'s conditional PUT).

- **A straddling segment** (its base below the expected next offset, its last offset at or past
  it) is uploaded whole under its own base offset's key and registered from the expected offset
  (``SegmentEntry.first_offset``; readers start at the batch holding it). A registration refused
  because the other leader registered more meanwhile is retried from the new expected offset, or
  the segment holds nothing new (:meth:`TwoLeaders._register`). Never a gap.
- **The same base offset, the same bytes** (both replicas rolled there): the object is
  recognised by its size and checksum, and the upload goes on; the second registration is a no-op.
- **The same base offset, other bytes** (``ObjectKeyTakenError``; :meth:`TwoLeaders._taken_entries`):
  when every offset of this segment is registered, it holds nothing new. Otherwise:

  - a registry entry names the object: the offsets still missing are uploaded as this segment's
    *tail*, a segment of its own named by the base offset of the batch holding the first of them
    (``segment_tail``), and registered from that offset;
  - no entry names it, and it is a byte prefix of this segment (the CRC-32C of our first
    ``size`` bytes is its ``tk-checksum``, a batch of ours starts right after it) whose listed
    files are all there: it is an upload whose agent died before registering (the usual reason
    leadership moved). It is registered (the same batches: nothing to verify further), from the
    expected offset, and our offsets past it go up as a tail. No wait;
  - no entry names it and it holds nothing we miss (it ends before the expected offset): our
    tail goes up (when the batch holding that offset is not our first), no wait;
  - no entry names it and it is not our prefix: an upload in flight, tried again every
    ``KEY_BUSY_RETRY_S`` (:class:`ObjectKeyBusyError`) until ``ABANDONED_AFTER_S`` have passed
    on the agent's monotonic clock since this uploader first saw that key with that ETag (the
    store's LastModified is another clock, and a multipart upload's may be its start). Then it was
    abandoned: our tail goes up when the batch holding the first missing offset is not our first;
    else the object is deleted only if it still has that ETag (``If-Match``) and our segment is
    uploaded again under the freed key.

  - no entry names it and it has no ``tk-*`` metadata at all (``ForeignObjectError``: another uploader's,
    Pinterest's, with other bytes; the same bytes are kept and registered by ``remote_store``): it is never
    waited on as an upload in flight nor replaced as an abandoned one; the error goes up to the uploader,
    which reports it once and retries with a backoff (``partition_uploader``).

  A tail whose own key is taken is handled the same way (up to ``MAX_TAKEN_DEPTH`` levels). Only a
  segment that cannot be split (not magic 2: no batch index) under a *registered* object records
  its missing offsets as a gap naming why.
- **Diverged replicas** (acks=1, an unclean leader election, or offsets the old leader's agent
  uploaded above the high watermark that a clean election then dropped: the old leader's registered
  batches differ from ours). Before registering from an offset inside the batches of the other leader's
  history, :meth:`TwoLeaders._check_continuity` requires that our batch holding it starts exactly
  there and that our batch before it ends where the registered segment ends with the same CRC
  (its ``.batchindex`` locates its last batch, a ranged GET reads the CRC). Real Kafka replicas roll
  at the same offsets (a follower's fetch never spans the leader's segment boundary), so a new
  leader's first registration usually starts at its own segment's base: :meth:`TwoLeaders._check_handover`
  then compares our previous local segment's last batch with the registered one the same way, once
  per uploader (its first registration: where another agent's history ends). A mismatch raises
  :class:`ReplicaDivergedError`: the partition stops advancing with an error logged and counted
  (``upload_failures``) every pass, never a silent skip, until an operator decides.

Crash order, each step idempotent: ``.log`` (conditional) → indexes → registry → ``offset.wm``
(``partition_uploader``), for a tail exactly as for a segment; an adopted object is registered
before our tail. A crash after the ``.log`` leaves an object the restarted agent recognises as
its own and completes; after registration, a no-op registration is repeated; after deleting an
abandoned object, the next pass uploads our segment under the free key. An upload that lost every
race leaves an object no entry names: ``rebuild`` leaves out or trims such leftovers (it keeps
every offset the kept objects hold).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from typing import TYPE_CHECKING

import crc32c

from tiered_kafka.format.batch_index import BatchIndex
from tiered_kafka.errors import FormatError
from tiered_kafka.format.offset_index import OffsetIndex
from tiered_kafka.format.record_batch import CRC_OFFSET, iter_batches
from tiered_kafka.format.segment_names import FileKind
from tiered_kafka.registry import Registry, RegistryConflictError, SegmentEntry, SegmentOverlapError
from tiered_kafka.retry import RetryPolicy
from tiered_kafka_agent.errors import AgentError, RemoteObjectError
from tiered_kafka_agent.faults import crash_point
from tiered_kafka_agent.local_segments import (
    LocalSegment,
    OpenSegment,
    SegmentGoneError,
    SegmentNotReadyError,
    SegmentStats,
    list_segments,
    open_segment,
    read_stats,
    snapshot_ready,
)
from tiered_kafka_agent.remote_store import ForeignObjectError, ObjectKeyTakenError, RemoteStore, UploadHooks, registered_from
from tiered_kafka_agent.segment_tail import TailUnavailableError, segment_tail

if TYPE_CHECKING:
    from tiered_kafka_agent.metrics import AgentMetrics
    from tiered_kafka_agent.partition_offsets import PartitionOffsets

log = logging.getLogger(__name__)

KEY_BUSY_RETRY_S = 1.0  # how soon a segment whose key holds another agent's unregistered upload is tried again
ABANDONED_AFTER_S = 120.0  # an unregistered .log under our key, unchanged this long (monotonic), was left by an agent that died
MAX_TAKEN_DEPTH = 3  # a tail whose key is taken too, and so on: then the pass is retried

#: what to register: an entry and the batch index of the segment holding its batches (None: none)
Registration = tuple[SegmentEntry, bytes | None]


class ObjectKeyBusyError(RemoteObjectError):
    """The segment's key holds another agent's upload that no registry entry names yet (in flight)."""


class ReplicaDivergedError(AgentError):
    """This replica's batches where registration would start differ from the registered segment's
    before it (acks=1 or an unclean leader election): registering would splice two histories."""


class TwoLeaders:
    """The uploader's part for another leader's uploads (module doc); mixed into ``PartitionUploader``."""

    topic: str
    partition: int
    name: str
    registry: Registry
    store: RemoteStore
    retry: RetryPolicy
    metrics: AgentMetrics
    upload_slots: threading.Semaphore
    offsets: PartitionOffsets  # offset.wm, the expected next offset, the gaps (partition_offsets)
    _taken_seen: dict[tuple[str, str], float]  # (key, ETag) → when this uploader first met it (monotonic)

    def _hooks(self) -> UploadHooks:
        raise NotImplementedError

    # -- registration ----------------------------------------------------------------------
    def _register_in_order(self, segment: LocalSegment, entry: SegmentEntry, batch_index: bytes | None) -> tuple[SegmentEntry, bool] | None:
        """Register ``entry`` from the expected next offset (a gap recorded before it when it starts
        later); None when it holds nothing new or the registry refused it (a gap recorded)."""
        expected = self.offsets.expected_next()
        if expected is not None and entry.last_offset < expected:
            return None
        if expected is not None and entry.first < expected:  # the other leader registered more meanwhile
            entry = registered_from(entry, expected, batch_index)
        floor = self.offsets.gap_floor(expected)
        if floor is not None and entry.first > floor:
            self.offsets.record_gap(floor, entry.first - 1, "deleted before upload")
        if entry.first > entry.base_offset:
            self._check_continuity(entry, batch_index)
        elif entry.base_offset == segment.base_offset:
            self._check_handover(segment, entry)
        crash_point("before_register")
        try:
            registered = self._register(entry, batch_index)
        except (SegmentOverlapError, RegistryConflictError) as err:
            # another uploader registered past this segment's start: report the offsets, never drop them silently
            log.error("%s: %s", self.name, err)
            self.offsets.record_gap(max(self.offsets.expected_next() or 0, entry.first), entry.last_offset, f"refused by the registry: {err}")
            return None
        if registered is None:
            log.info("%s: segment %d: another leader registered all its offsets meanwhile", self.name, segment.base_offset)
            return None
        self.offsets.account(registered[0].last_offset + 1)
        return registered

    def _register(self, entry: SegmentEntry, batch_index: bytes | None) -> tuple[SegmentEntry, bool] | None:
        """Register ``entry``; when refused because the other leader registered offsets at or past
        its first offset meanwhile, again from the new expected next offset. Returns the entry
        registered and whether it was added, or None when every offset is registered already.
        Raises the registry's refusal when the expected offset does not explain it."""
        for attempt in range(5):
            try:
                added = self.retry.call(lambda: self.registry.register(entry), what=f"registration of {self.name} segment {entry.base_offset}")
                return entry, added
            except (SegmentOverlapError, RegistryConflictError):
                expected = self.offsets.expected_next()
                if attempt == 4 or expected is None or expected <= entry.first:
                    raise
                if entry.last_offset < expected:
                    return None
                log.info("%s: segment %d: offsets up to %d were registered meanwhile; registering from there", self.name, entry.base_offset, expected - 1)
                entry = registered_from(entry, expected, batch_index)
                self._check_continuity(entry, batch_index)
        raise AssertionError("unreachable")

    def _check_continuity(self, entry: SegmentEntry, batch_index: bytes | None, local: OpenSegment | None = None) -> None:
        """Raise :class:`ReplicaDivergedError` when ``entry``'s batches do not continue the registered
        segment before its first offset (module doc). The CRC of our batch before it is read from
        ``local`` (the segment holding ``entry``'s batches and that one) or else from ``entry``'s object."""
        first = entry.first
        holder = self.registry.find(self.topic, self.partition, first - 1) if first > 0 else None
        if holder is None or batch_index is None:  # nothing registered just before (a gap, or the start), or no batch index
            return
        ours = BatchIndex.from_bytes(batch_index)
        try:
            batch = ours.holding(first)
        except KeyError:
            return
        if batch.base_offset != first:
            self._diverged(entry, f"our batch holding offset {first} is {batch.base_offset}..{batch.last_offset}, the registered segment {holder.object_key} ends at {holder.last_offset}")
        slot = ours.slot_at(batch.position)
        if slot == 0:
            return  # our batch before it is in another segment: the tail's caller checks against the original
        before = ours.entry(slot - 1)
        if before.last_offset != holder.last_offset:
            self._diverged(entry, f"our batch before offset {first} ends at {before.last_offset}, the registered segment {holder.object_key} at {holder.last_offset}")
        theirs = self._last_batch_crc(holder)
        if theirs is None:
            return
        if local is not None:
            mine = os.pread(local.files[FileKind.LOG], 4, before.position + CRC_OFFSET)
        else:
            mine = self.store.get_range(entry.object_key, before.position + CRC_OFFSET, 4)
        if mine != theirs:
            self._diverged(
                entry,
                f"our batch {before.base_offset}..{before.last_offset} has CRC {mine.hex()}, the registered segment {holder.object_key}'s last batch {theirs.hex()}",
            )

    def _check_handover(self, segment: LocalSegment, entry: SegmentEntry) -> None:
        """Raise :class:`ReplicaDivergedError` when this uploader's first registration, ``segment``
        whole from its base, does not continue the registered segment before it: our previous local
        segment's last batch must end where that segment ends, with the same CRC (module doc). Nothing
        to compare (no registered segment before, our previous segment gone): no check."""
        if self.offsets.accounted_until is not None or entry.first == 0:
            return
        holder = self.registry.find(self.topic, self.partition, entry.first - 1)
        if holder is None:
            return
        ours = _last_batch_before(segment)
        if ours is None:
            return
        last_offset, mine = ours
        if last_offset != holder.last_offset:
            self._diverged(entry, f"our segment before {segment.base_offset} ends at {last_offset}, the registered segment {holder.object_key} at {holder.last_offset}")
        theirs = self._last_batch_crc(holder)
        if theirs is not None and mine != theirs:
            self._diverged(entry, f"our batch ending at {last_offset} has CRC {mine.hex()}, the registered segment {holder.object_key}'s last batch {theirs.hex()}")

    def _last_batch_crc(self, holder: SegmentEntry) -> bytes | None:
        """The CRC field of the last batch of a registered segment (its ``.batchindex`` and a ranged GET); None without a batch index."""
        if FileKind.BATCHINDEX.value not in holder.files:
            return None
        key = holder.object_key[: -len(FileKind.LOG.value)] + FileKind.BATCHINDEX.value  # beside the .log its entry names
        data = self.store.get_bytes(key)
        if data is None:  # its entry names a batch index: gone since (remote retention), or never written
            log.warning("%s: %s, named by the registered segment %s, is missing: its last batch cannot be compared with ours", self.name, key, holder.object_key)
            return None
        index = BatchIndex.from_bytes(data, name=key)
        last = index.entry(len(index) - 1)
        return self.store.get_range(holder.object_key, last.position + CRC_OFFSET, 4)

    def _diverged(self, entry: SegmentEntry, why: str) -> None:
        raise ReplicaDivergedError(
            f"{self.name}: segment {entry.base_offset} is not registered from offset {entry.first}: this replica's log diverged from the registered one ({why}); "
            "the partition stops advancing until an operator compares the replicas"
        )

    # -- another leader's object under our key ---------------------------------------------
    def _taken_entries(
        self, segment: LocalSegment, next_base: int | None, stats: SegmentStats, taken: ObjectKeyTakenError, expected: int | None, depth: int = 0
    ) -> list[Registration]:
        """The segment's ``.log`` key holds another leader's bytes (module doc): what to register, in
        order ([] when nothing: all registered, or a gap recorded). Raises :class:`ObjectKeyBusyError`
        to try again shortly."""
        base = segment.base_offset
        holder = self._registered_object(taken, stats.last_offset)
        fresh = self.offsets.expected_next()  # after the lookup: the other leader may have registered meanwhile
        expected = max((o for o in (expected, fresh) if o is not None), default=None)
        start = expected if expected is not None and expected > base else base
        if stats.last_offset < start:
            log.info("%s: segment %d: its key holds another leader's upload and all its offsets are registered", self.name, base)
            return []
        if holder is not None:
            return self._tail_entries(segment, next_base, stats, start, depth, f"registered for offsets {holder.first_offset}..{holder.last_offset}")
        if isinstance(taken, ForeignObjectError):  # another uploader's object nobody registered: never replaced (partition_uploader)
            raise taken
        adopted = self._adoptable(segment, next_base, stats, taken, start)
        if adopted is not None:
            log.info("%s: segment %d: adopting the unregistered object %s (a prefix of ours, offsets ..%d)", self.name, base, taken.key, adopted.last_offset)
            if adopted.last_offset >= stats.last_offset:
                return [(adopted, stats.batch_index)]
            return [(adopted, stats.batch_index), *self._tail_entries(segment, next_base, stats, adopted.last_offset + 1, depth, "adopted")]
        splits = stats.batch_index is not None and BatchIndex.from_bytes(stats.batch_index).holding(start).base_offset > base
        if splits and taken.theirs is not None and taken.theirs.last_offset < start:  # it holds nothing we miss: no need to wait for it
            return self._tail_entries(segment, next_base, stats, start, depth, f"unregistered, offsets up to {taken.theirs.last_offset} only")
        seen = self._taken_seen.setdefault((taken.key, taken.etag), time.monotonic())
        waited = time.monotonic() - seen
        if waited < ABANDONED_AFTER_S:
            raise ObjectKeyBusyError(f"segment {base}: {taken}; no registry entry names it yet (seen for {waited:.0f}s), trying again")
        why = f"no registry entry names it after {ABANDONED_AFTER_S:.0f}s: an upload abandoned before registration"
        if splits:
            return self._tail_entries(segment, next_base, stats, start, depth, why)
        return self._replace_abandoned(segment, next_base, stats, taken, start)

    def _tail_entries(self, segment: LocalSegment, next_base: int | None, stats: SegmentStats, start: int, depth: int, why: str) -> list[Registration]:
        """Upload the segment's batches from the one holding ``start`` as a segment of its own (module doc)."""
        base = segment.base_offset
        try:
            with open_segment(segment, next_base) as opened, segment_tail(opened, stats.batch_index, start, next_base) as (tail, tail_next):
                if tail.base_offset == base:
                    raise TailUnavailableError(f"the batch holding offset {start} is the segment's first")
                with open_segment(tail, tail_next) as tail_opened:
                    if tail_next is not None and not snapshot_ready(tail_opened):  # the same rule as the segment's (partition_uploader)
                        tail_opened.drop(FileKind.SNAPSHOT)
                    tail_stats = read_stats(tail_opened)
                    first = start if start > tail.base_offset else None
                    try:
                        with self.upload_slots:
                            entry = self.store.upload_segment(self.topic, self.partition, tail_opened, tail_stats, self._hooks(), first_offset=first)
                    except ObjectKeyTakenError as err:
                        if depth >= MAX_TAKEN_DEPTH:
                            raise ObjectKeyBusyError(f"segment {base}: its tail's key is taken too ({err}); trying again") from err
                        return self._taken_entries(tail, tail_next, tail_stats, err, start, depth + 1)
                if entry.first == entry.base_offset:  # our batch before the tail is in the original segment
                    self._check_continuity(entry, stats.batch_index, opened)
        except SegmentGoneError as err:
            self.offsets.record_gap(start, stats.last_offset, f"the object key of segment {base} holds another leader's segment ({why}) and the segment is gone: {err}")
            return []
        except TailUnavailableError as err:
            self.offsets.record_gap(start, stats.last_offset, f"the object key of segment {base} holds another leader's segment ({why}) and its tail cannot be split off: {err}")
            return []
        log.info("%s: segment %d: its key holds another leader's segment; offsets %d..%d uploaded as segment %d", self.name, base, start, entry.last_offset, entry.base_offset)
        return [(entry, tail_stats.batch_index)]

    def _adoptable(self, segment: LocalSegment, next_base: int | None, stats: SegmentStats, taken: ObjectKeyTakenError, start: int) -> SegmentEntry | None:
        """The unregistered object at our key, to register from ``start``, when it is a byte prefix
        of our segment ending at one of our batch boundaries, holding ``start``, with every file its
        metadata lists present; else None."""
        theirs = taken.theirs
        if theirs is None or stats.batch_index is None or theirs.base_offset != segment.base_offset:
            return None
        if not (start <= theirs.last_offset < stats.last_offset) or theirs.size >= stats.size:
            return None
        index = BatchIndex.from_bytes(stats.batch_index)
        try:
            after = index.holding(theirs.last_offset + 1)
        except KeyError:
            return None
        if after.position != theirs.size or after.base_offset != theirs.last_offset + 1:
            return None
        try:
            with open_segment(segment, next_base) as opened:
                checksum = _crc32c_prefix(opened.files[FileKind.LOG], theirs.size)
        except SegmentGoneError:
            return None
        if checksum != theirs.checksum:
            return None
        stem = taken.key[: -len(FileKind.LOG.value)]
        if not all(self.store.object_exists(stem + kind) for kind in theirs.files if kind != FileKind.LOG.value):
            return None  # its agent may still be uploading them: an upload in flight
        return registered_from(theirs, start, stats.batch_index)

    def _replace_abandoned(self, segment: LocalSegment, next_base: int | None, stats: SegmentStats, taken: ObjectKeyTakenError, start: int) -> list[Registration]:
        """Delete an abandoned object of other bytes under our key (only while it keeps its ETag) and
        upload our segment there; raises :class:`ObjectKeyBusyError` when it changed meanwhile."""
        base = segment.base_offset
        if not self.store.delete_if_unchanged(taken.key, taken.etag):
            raise ObjectKeyBusyError(f"segment {base}: the abandoned object {taken.key} changed or went meanwhile; trying again")
        log.warning("%s: segment %d: deleted %s, abandoned before registration (%s); uploading ours there", self.name, base, taken.key, taken)
        try:
            with open_segment(segment, next_base) as opened, self.upload_slots:
                entry = self.store.upload_segment(self.topic, self.partition, opened, stats, self._hooks(), first_offset=start if start > base else None)
        except ObjectKeyTakenError as err:
            raise ObjectKeyBusyError(f"segment {base}: its key was taken again after deleting an abandoned upload ({err}); trying again") from err
        except SegmentGoneError as err:
            self.offsets.record_gap(start, stats.last_offset, f"segment {base} is gone after its key was freed from an abandoned upload: {err}")
            return []
        return [(entry, stats.batch_index)]

    def _registered_object(self, taken: ObjectKeyTakenError, last_offset: int) -> SegmentEntry | None:
        """The registry entry naming the object at ``taken.key`` (with its checksum), if any: among
        every entry from its base offset to ``last_offset`` (the segment's), however many."""
        base = taken.ours.base_offset
        for entry in self.registry.segments(self.topic, self.partition, from_offset=base, to_offset=last_offset):
            if entry.object_key == taken.key and (taken.theirs is None or entry.checksum == taken.theirs.checksum):
                return entry
        return None


def _crc32c_prefix(fd: int, size: int) -> str:
    """``crc32c:xxxxxxxx`` of the first ``size`` bytes of the open file ``fd``."""
    value, position = 0, 0
    while position < size:
        chunk = os.pread(fd, min(8 << 20, size - position), position)
        if not chunk:
            break
        value = crc32c.crc32c(chunk, value)
        position += len(chunk)
    return f"crc32c:{value:08x}"


def _last_batch_before(segment: LocalSegment) -> tuple[int, bytes] | None:
    """(last offset, CRC field) of the last batch of the local segment before ``segment``, read from
    its last ``.index`` entry on; None when there is none, it is gone, or it cannot be read."""
    rotated, _active = list_segments(segment.directory)
    previous = [s for s in rotated if s.base_offset < segment.base_offset]
    if not previous:
        return None
    try:
        with open_segment(previous[-1]) as opened:
            index_size = opened.size(FileKind.INDEX)
            start = 0
            if index_size:
                index = OffsetIndex.from_bytes(os.pread(opened.files[FileKind.INDEX], index_size, 0), previous[-1].base_offset)
                start = index.lookup(segment.base_offset).position
            data = os.pread(opened.files[FileKind.LOG], opened.size(FileKind.LOG) - start, start)
        last: tuple[int, bytes] | None = None
        for batch in iter_batches(data, position=start):
            last = (batch.last_offset, bytes(batch.buffer[CRC_OFFSET : CRC_OFFSET + 4]))
    except (SegmentGoneError, SegmentNotReadyError, OSError):
        return None
    except FormatError as err:  # a corrupt index or batch: reported here, and again when that segment is read
        log.warning("segment %d: %s; its last batch cannot be compared with the registered one", previous[-1].base_offset, err)
        return None
    return last
