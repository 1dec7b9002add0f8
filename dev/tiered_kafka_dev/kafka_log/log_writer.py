"""A log.dir writer: appends record batches to a partition directory the way a Kafka broker does.

Java: ``UnifiedLog``, ``LocalLog``, ``LogSegment``. The rules it follows, per append:

Roll (``LogSegment.shouldRoll``), checked before an append of ``messagesSize`` bytes:
    size > segment.bytes - messagesSize, or
    size > 0 and (maxTimestamp of the new batches - maxTimestamp of the segment's first batch)
        > segment.ms (now - segment creation time when the segment has no timestamp yet), or
    the offset or time index is full (segment.index.bytes), or
    the new last offset does not fit a 32-bit offset relative to the segment base.
  The new segment is based at the first offset being appended; the old one gets its final
  time index entry and its index files are trimmed to their entries.

Indexes and the ``.txnindex`` of each segment: ``log_segment`` (Java ``LogSegment``). Loading and
recovery on ``open``: ``log_recovery`` (Java ``LogLoader``). Reads: ``log_reader``.

Retention (``UnifiedLog.deleteOldSegments``), oldest segment first, stopping at the first
segment that does not qualify, never deleting an empty active segment:
    retention.ms:    now - segment max timestamp > retention.ms
    retention.bytes: total size - segment size >= retention.bytes (cumulative)
    log start:       the next segment's base offset <= log start offset
  If every segment qualifies the log first rolls a new empty one. Deleted segments' files are
  renamed ``.deleted`` and removed after file.delete.delay.ms; the log start offset moves to
  the first remaining segment's base offset.

The log start offset also moves by ``delete_records`` (the DeleteRecords API).

Batch limits (``UnifiedLog.analyzeAndValidateRecords``, ``UnifiedLog.append``): a producer's batch
larger than max.message.bytes is refused with MESSAGE_TOO_LARGE, and any append larger than
segment.bytes with RECORD_LIST_TOO_LARGE (code 18, Java RecordBatchTooLargeException), so no
segment ever exceeds segment.bytes.

Transactions (``UnifiedLog``, ``LogSegment.updateTxnIndex``): producer state (``producer_state``)
validates each append and tracks open transactions; the last stable offset is the first offset of
the earliest one, else the log end offset. An ABORT marker closing a transaction adds an AbortedTxn
(producer, first offset, marker offset, LSO after it) to the ``.txnindex`` of the segment receiving
the marker, created on its first entry. Rolling writes the producer state as ``{base}.snapshot``
(``producer_snapshot``); a snapshot goes with its segment when retention deletes it; on ``open``,
snapshots past the log end or below the first segment are deleted
(``ProducerStateManager.truncateAndReload``).

Who appends (``origin``, ``producer_state.AppendOrigin``) decides the checks. ``append`` defaults to
REPLICATION (no producer-state or max.message.bytes check), because most of its callers lay down a
log that a producer already wrote: tests, fixtures, benchmarks and replays build logs by hand with
arbitrary sequences. The one path that appends on a producer's behalf, the development broker's
Produce handler, passes CLIENT, and its transaction coordinator passes COORDINATOR. (Kafka's
``appendAsLeader`` defaults to CLIENT; with that default the hand-built logs would be refused.)
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from tiered_kafka.errors import AppendRefusedError, LogWriteError
from tiered_kafka.format import offset_index, producer_snapshot, time_index, txn_index
from tiered_kafka.format.checkpoints import (
    LEADER_EPOCH_CHECKPOINT,
    EpochEntry,
    format_leader_epoch_checkpoint,
    parse_leader_epoch_checkpoint,
    write_atomically,
)
from tiered_kafka_dev.kafka_log.log_config import LogConfig
from tiered_kafka_dev.kafka_log.log_reader import LogReads
from tiered_kafka_dev.kafka_log.log_recovery import LogRecovery
from tiered_kafka_dev.kafka_log.log_segment import Segment
from tiered_kafka.format.producer_state import AppendOrigin, ProducerStateManager
from tiered_kafka.format.record_batch import (
    NO_PARTITION_LEADER_EPOCH,
    Codec,
    RecordBatch,
    iter_batches,
    set_base_offset,
    set_legacy_offset,
)
from tiered_kafka.format.segment_names import FileKind, SegmentFileName, Suffix, segment_file_name

log = logging.getLogger(__name__)

Clock = Callable[[], int]
MAX_RELATIVE_OFFSET = 2**31 - 1


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


@dataclass(frozen=True, slots=True)
class AppendInfo:
    """Offsets and position of one append (Java ``LogAppendInfo``)."""

    first_offset: int
    last_offset: int
    max_timestamp: int
    base_position: int
    segment_base_offset: int
    size: int
    #: a producer's retry of a batch already in the log: nothing was written, the offsets are the
    #: original batch's (Kafka answers a duplicate with them, error NONE)
    duplicate: bool = False


class PartitionLog(LogRecovery, LogReads):
    """The log of one partition in ``{log.dir}/{topic}-{partition}``.

    Not thread-safe: one writer per partition, as in the broker. Use ``create`` for a new
    partition and ``open`` to continue an existing directory (which recovers the active
    segment: verifies CRCs, cuts a torn tail, rebuilds its indexes).
    """

    def __init__(self, directory: Path, config: LogConfig, clock: Clock) -> None:
        self.directory = directory
        self.config = config
        self.clock = clock
        self._segments: list[Segment] = []
        self._log_start_offset = 0
        self._epochs: list[EpochEntry] = []
        self._pending_deletes: list[tuple[int, list[Path]]] = []
        self._log_file: object | None = None
        self.producers = ProducerStateManager()
        self._replay_from = 0  # batches at or past this offset are replayed into the producer state on open

    # -- lifecycle -------------------------------------------------------------------------
    @classmethod
    def create(
        cls, directory: Path, config: LogConfig | None = None, *, start_offset: int = 0, clock: Clock = wall_clock_ms
    ) -> PartitionLog:
        """A new, empty partition log whose first offset will be ``start_offset``."""
        directory.mkdir(parents=True, exist_ok=True)
        if any(SegmentFileName.try_parse(p.name) for p in directory.iterdir()):
            raise LogWriteError(f"{directory} already holds segments; use PartitionLog.open")
        plog = cls(directory, config or LogConfig(), clock)
        plog._log_start_offset = start_offset
        plog._new_segment(start_offset)
        return plog

    @classmethod
    def open(
        cls,
        directory: Path,
        config: LogConfig | None = None,
        *,
        log_start_offset: int | None = None,
        clock: Clock = wall_clock_ms,
    ) -> PartitionLog:
        """Reopen a partition directory and continue its offsets.

        Leftover ``.deleted`` and ``.cleaned`` files are removed, as the broker does on start.
        ``log_start_offset`` comes from the broker's log-start-offset-checkpoint; it defaults to
        the first segment's base offset.
        """
        if not directory.is_dir():
            raise LogWriteError(f"{directory} is not a partition directory")
        plog = cls(directory, config or LogConfig(), clock)
        bases: list[int] = []
        snapshots: list[int] = []
        for path in sorted(directory.iterdir()):
            name = SegmentFileName.try_parse(path.name)
            if name is None:
                continue
            if name.suffix in (Suffix.DELETED, Suffix.CLEANED):
                path.unlink()
            elif name.suffix == Suffix.SWAP:
                raise LogWriteError(f"{path}: log cleaner .swap files are not supported by this writer")
            elif name.kind == FileKind.LOG:
                bases.append(name.base_offset)
            elif name.kind == FileKind.SNAPSHOT:
                snapshots.append(name.base_offset)
        if not bases:
            raise LogWriteError(f"{directory} holds no .log segment")
        plog._load_producer_snapshot([s for s in snapshots if bases[0] <= s <= bases[-1]], bases[0])
        for base in bases[:-1]:
            plog._segments.append(plog._load_rotated(base))
        plog._segments.append(plog._recover_active(bases[-1]))
        first = plog._segments[0].base_offset
        plog._log_start_offset = max(first, log_start_offset if log_start_offset is not None else first)
        for offset in snapshots:  # stale (past the log end) or orphaned (their segment is gone)
            if offset > plog.log_end_offset or offset < first:
                (directory / segment_file_name(offset, FileKind.SNAPSHOT)).unlink(missing_ok=True)
        epoch_file = directory / LEADER_EPOCH_CHECKPOINT
        if epoch_file.exists():
            plog._epochs = parse_leader_epoch_checkpoint(epoch_file.read_text(), str(epoch_file))
        return plog

    def close(self) -> None:
        """Add the active segment's final time index entry and trim its indexes, like a clean shutdown."""
        if self._segments:
            self._active.seal()
        self._close_log_file()

    def __enter__(self) -> PartitionLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- state -----------------------------------------------------------------------------
    @property
    def log_start_offset(self) -> int:
        return self._log_start_offset

    @property
    def last_stable_offset(self) -> int:
        """The LSO: first offset of the earliest open transaction, else the log end offset."""
        first_unstable = self.producers.first_unstable_offset()
        return self.log_end_offset if first_unstable is None else min(first_unstable, self.log_end_offset)

    @property
    def size(self) -> int:
        return sum(s.size for s in self._segments)

    def segment_base_offsets(self) -> list[int]:
        return [s.base_offset for s in self._segments]

    @property
    def active_segment_base_offset(self) -> int:
        return self._active.base_offset

    @property
    def leader_epochs(self) -> list[EpochEntry]:
        return list(self._epochs)

    # -- append ----------------------------------------------------------------------------
    def append(
        self,
        records: bytes | bytearray | memoryview,
        *,
        assign_offsets: bool = True,
        leader_epoch: int | None = None,
        origin: AppendOrigin = AppendOrigin.REPLICATION,
    ) -> AppendInfo:
        """Append the record batches in ``records`` (one produce request's worth, or one batch).

        With ``assign_offsets`` (the leader's path) batches get consecutive offsets from the log
        end offset and ``leader_epoch`` as partitionLeaderEpoch; their bytes are otherwise stored
        as given. Without it (replaying existing segments) each batch keeps its offsets, which
        must lie at or past the log end offset. CRCs are verified first, so a corrupt batch is
        refused whole and nothing is written. ``origin`` selects the producer-state checks
        (``producer_state.AppendOrigin``); a refused append raises AppendRefusedError.
        """
        data = bytearray(records)
        batches = list(iter_batches(data))
        if not batches:
            raise LogWriteError("nothing to append: no record batch in the data")
        self._check_sizes(data, batches, origin)
        next_offset = self.log_end_offset
        for batch in batches:
            if assign_offsets:
                self._assign_offset(batch, next_offset, leader_epoch)
            elif batch.base_offset < next_offset:
                raise LogWriteError(
                    f"batch base offset {batch.base_offset} is below the log end offset {next_offset} of {self.directory}"
                )
            next_offset = batch.last_offset + 1

        pending = self.producers.prepare(batches, origin)
        if pending.duplicate is not None:
            dup = pending.duplicate
            return AppendInfo(dup.first_offset, dup.last_offset, dup.timestamp, -1, -1, 0, duplicate=True)
        first_offset, last_offset = batches[0].base_offset, batches[-1].last_offset
        max_timestamp = max(b.max_timestamp for b in batches)
        if self._should_roll(len(data), max_timestamp, last_offset):
            self.roll(first_offset)
        segment = self._active
        if last_offset - segment.base_offset > MAX_RELATIVE_OFFSET:
            raise LogWriteError(f"offsets {first_offset}..{last_offset} do not fit one segment")
        base_position = segment.size
        self._write_batches(segment, data, batches)
        for batch in batches:
            self._maybe_assign_epoch(batch)
        completed = self.producers.apply(pending)
        segment.append_aborted(txn_index.AbortedTxn(c.producer_id, c.first_offset, c.last_offset, lso) for c, lso in completed if c.is_aborted)
        return AppendInfo(first_offset, last_offset, max_timestamp, base_position, segment.base_offset, len(data))

    def _check_sizes(self, data: bytearray, batches: list[RecordBatch], origin: AppendOrigin) -> None:
        """Kafka's batch limits: max.message.bytes per producer batch (followers and replays skip it,
        as Kafka's ``ignoreRecordSize``), segment.bytes for the whole append."""
        if origin is AppendOrigin.CLIENT:
            for batch in batches:
                if batch.size > self.config.max_message_bytes:
                    raise AppendRefusedError(
                        "message_too_large",
                        f"the record batch at base offset {batch.base_offset} is {batch.size} bytes, above "
                        f"max.message.bytes {self.config.max_message_bytes} of {self.directory.name}",
                    )
        if len(data) > self.config.segment_bytes:
            raise AppendRefusedError(
                "record_list_too_large",
                f"an append of {len(data)} bytes exceeds segment.bytes {self.config.segment_bytes} of {self.directory.name}",
            )

    def _assign_offset(self, batch: RecordBatch, offset: int, leader_epoch: int | None) -> None:
        if batch.magic >= 2:
            set_base_offset(batch.buffer, offset, leader_epoch)
        elif batch.codec == Codec.NONE:
            set_legacy_offset(batch.buffer, offset)
        elif batch.magic == 1:
            set_legacy_offset(batch.buffer, offset + batch.record_count - 1)  # inner offsets are relative
        else:
            raise LogWriteError("a compressed magic 0 message set needs recompression to assign offsets; not supported")

    def _should_roll(self, messages_size: int, max_timestamp: int, max_offset: int) -> bool:
        segment, config = self._active, self.config
        if segment.size > config.segment_bytes - messages_size:
            return True
        if segment.size > 0:
            if segment.first_batch_timestamp is not None and segment.first_batch_timestamp >= 0:
                waited = max_timestamp - segment.first_batch_timestamp
            else:
                waited = self.clock() - segment.created_ms
            if waited > config.segment_ms:
                return True
        if len(segment.index) >= config.segment_index_bytes // offset_index.ENTRY_SIZE:
            return True
        if len(segment.times) >= config.segment_index_bytes // time_index.ENTRY_SIZE:
            return True
        return max_offset - segment.base_offset > MAX_RELATIVE_OFFSET

    def _write_batches(self, segment: Segment, data: bytearray, batches: list[RecordBatch]) -> None:
        log_file = self._open_log_file()
        log_file.write(data)
        log_file.flush()
        segment.index_batches(batches, self.config.index_interval_bytes)

    def _maybe_assign_epoch(self, batch: RecordBatch) -> None:
        """Record a new leader epoch's start offset (Java ``LeaderEpochFileCache.assign``)."""
        epoch = batch.partition_leader_epoch
        if epoch == NO_PARTITION_LEADER_EPOCH or (self._epochs and epoch <= self._epochs[-1].epoch):
            return
        self._epochs.append(EpochEntry(epoch, batch.base_offset))
        write_atomically(self.directory / LEADER_EPOCH_CHECKPOINT, format_leader_epoch_checkpoint(self._epochs).encode())

    # -- roll ------------------------------------------------------------------------------
    def roll(self, base_offset: int | None = None) -> int:
        """Seal the active segment and start a new one at ``base_offset`` (default: log end offset)."""
        base = self.log_end_offset if base_offset is None else base_offset
        if base < self.log_end_offset:
            raise LogWriteError(f"cannot roll to {base}, below the log end offset {self.log_end_offset}")
        self._close_log_file()
        if self._active.size == 0:
            # Kafka's LocalLog.roll: an empty active segment is replaced, not kept beside the new one
            empty = self._segments.pop()
            for path in empty.files():
                path.unlink()
        else:
            self._active.seal()
        self._new_segment(base)
        self._write_producer_snapshot(base)
        return base

    def _write_producer_snapshot(self, offset: int) -> None:
        """Kafka's ``ProducerStateManager.takeSnapshot`` on roll: the state before ``offset``."""
        path = self.directory / segment_file_name(offset, FileKind.SNAPSHOT)
        write_atomically(path, producer_snapshot.serialize(self.producers.snapshot()))

    def _new_segment(self, base_offset: int) -> None:
        segment = Segment.empty(self.directory, base_offset, self.clock())
        if segment.path(FileKind.LOG).exists():
            raise LogWriteError(f"segment {segment.path(FileKind.LOG)} already exists")
        segment.path(FileKind.LOG).touch()
        segment.preallocate_indexes(self.config.segment_index_bytes)
        self._segments.append(segment)

    def _open_log_file(self):  # type: ignore[no-untyped-def]
        if self._log_file is None:
            self._log_file = open(self._active.path(FileKind.LOG), "ab", buffering=0)
        return self._log_file

    def _close_log_file(self) -> None:
        if self._log_file is not None:
            self._log_file.close()  # type: ignore[attr-defined]
            self._log_file = None

    # -- retention -------------------------------------------------------------------------
    def delete_records(self, offset: int) -> int:
        """Move the log start offset up to ``offset`` (DeleteRecords); returns the new log start.

        Raises LogWriteError when ``offset`` is past the high watermark. Segments wholly below
        the new log start are deleted by the next ``apply_retention``.
        """
        if offset > self.log_end_offset:
            raise LogWriteError(f"cannot delete records up to {offset}: past the high watermark {self.log_end_offset}")
        self._log_start_offset = max(self._log_start_offset, offset)
        return self._log_start_offset

    def apply_retention(self) -> list[int]:
        """One retention check (the broker's ``log.retention.check.interval.ms`` task).

        Deletes segments breaching retention.ms, retention.bytes or the log start offset, then
        removes ``.deleted`` files whose file.delete.delay.ms has passed. Returns the base
        offsets of the segments deleted by this call.
        """
        now = self.clock()
        deleted: list[int] = []
        if self.config.retention_ms >= 0:
            deleted += self._delete_segments_while(lambda s, _: now - s.largest_timestamp() > self.config.retention_ms)
        if self.config.retention_bytes >= 0:
            excess = self.size - self.config.retention_bytes

            def over_size(segment: Segment, _next: Segment | None) -> bool:
                nonlocal excess
                if excess - segment.size >= 0:
                    excess -= segment.size
                    return True
                return False

            deleted += self._delete_segments_while(over_size)
        deleted += self._delete_segments_while(
            lambda _, nxt: nxt is not None and nxt.base_offset <= self._log_start_offset
        )
        self.delete_expired_files()
        return deleted

    def _delete_segments_while(self, predicate: Callable[[Segment, Segment | None], bool]) -> list[int]:
        doomed: list[Segment] = []
        for i, segment in enumerate(self._segments):
            nxt = self._segments[i + 1] if i + 1 < len(self._segments) else None
            if nxt is None and segment.size == 0:
                break
            if not predicate(segment, nxt):
                break
            doomed.append(segment)
        if not doomed:
            return []
        if len(doomed) == len(self._segments):
            self.roll()
        now = self.clock()
        for segment in doomed:
            renamed = []
            for path in segment.files():
                target = path.with_name(path.name + "." + Suffix.DELETED.value)
                path.rename(target)
                renamed.append(target)
            self._pending_deletes.append((now + self.config.file_delete_delay_ms, renamed))
            self._segments.remove(segment)
            log.info("scheduled deletion of segment %d of %s", segment.base_offset, self.directory)
        self._log_start_offset = max(self._log_start_offset, self._segments[0].base_offset)
        return [s.base_offset for s in doomed]

    def delete_expired_files(self) -> int:
        """Remove ``.deleted`` files whose delay has passed; returns how many were removed."""
        now, removed, keep = self.clock(), 0, []
        for due, paths in self._pending_deletes:
            if due > now:
                keep.append((due, paths))
                continue
            for path in paths:
                path.unlink(missing_ok=True)
                removed += 1
        self._pending_deletes = keep
        return removed

