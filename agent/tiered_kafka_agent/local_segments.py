"""A broker's partition directory, seen by the agent: which segments are rotated, and their facts.

Kafka's rule: in ``{log.dir}/{topic}-{partition}/`` the segment with the largest base offset is
active; every other one is rotated and immutable. Retention may rename a rotated segment's
files with a ``.deleted`` suffix at any moment, and delete them ``file.delete.delay.ms`` later.

The agent opens a segment's files before reading them (``open_segment``): an open descriptor
keeps the data readable through a rename or an unlink, and a file already renamed is found
under its ``.deleted`` name. Only a segment whose files are all gone is lost (a gap).

A segment's files are ``{base}.log``, ``.index``, ``.timeindex`` and, when the broker wrote one,
``{base}.txnindex`` (entries for the aborted transactions whose ABORT marker is in this segment;
Kafka creates it lazily, so absent means none). Its producer-state snapshot is the one named by
the *next* segment's base offset: Kafka's ``UnifiedLog.roll`` takes a snapshot named by the new
segment's base offset (the producer state at the end of the rolled segment), and its
``RemoteLogManager`` uploads ``fetchSnapshot(nextSegmentBaseOffset)`` with the rolled segment. We
do the same: segment B followed by segment N ships ``{N}.snapshot``, stored remotely under B's
stem (``{B}.snapshot``: the producer state after B's last offset). Kafka writes it just after
creating ``{N}.log`` (in place, not by a rename), so it can be missing or half-written when the
agent opens B: ``snapshot_ready`` checks it is there and whole (its CRC), and the uploader waits
briefly for it after the roll. It is optional all the same: a broker older than 0.11 never writes one, and B is then uploaded
without it.

The snapshot also gives the segment's ``open_txn_first_offset`` (registry): the smallest
``currentTxnFirstOffset`` among its producers, i.e. the first offset of the earliest transaction
still open after B (-1: none). The scan of B's batches cross-checks it: a producer whose
transaction the batches show open at B's end must be open in the snapshot, from the same first
offset when the transaction began in B (at or before it when it may have begun earlier); a
producer the snapshot shows open from inside B must have begun it there, and one whose marker is
in B may only be open from a transactional batch after that marker. A contradiction is logged
(WARNING) and the value recorded as unknown (-2), as without a snapshot: never trusted.

**Symlinks are refused** (issue 29): the agent reads only a broker's own files, never what a link
in log.dir points to (another partition's data, /etc, a file of another user). A partition
directory that is a symbolic link is skipped (the uploader's ``directory``,
``agent.directory_partitions``); a segment file that is one is never opened: every file is opened
with ``O_NOFOLLOW``, so its open fails (``LocalSegmentError``), and so does the upload pass, retried
and counted as a failure; the partition waits at that segment (decision: a gap would claim the data
lost; the operator replaces the link and the upload goes on). Each is logged once per path at
WARNING and counted in ``tiered_kafka_agent_symlinks_refused_total{kind}`` on every pass that meets
it (``refuse_symlink``, called by ``list_segments`` for files). The configured log.dir
itself may be a link (a mount point's usual alias): only what lies in it is checked.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import mmap
import os
from collections.abc import Iterator
from typing import TYPE_CHECKING
from dataclasses import dataclass, field
from pathlib import Path

import crc32c
import pyarrow.compute as pc

from tiered_kafka.errors import CorruptCheckpointError, FormatError, UnsupportedCodecError
from tiered_kafka_agent.log_dir_files import open_in_dir, open_partition_dir
from tiered_kafka.format import producer_snapshot
from tiered_kafka.format.batch_index import BatchIndexBuilder, UnsupportedFormatError
from tiered_kafka.format.sparse_index import SparseIndex
from tiered_kafka.format.offset_index import ENTRY_SIZE as INDEX_ENTRY_SIZE
from tiered_kafka.format.columnar import decode_columnar
from tiered_kafka.format.record_batch import NO_PARTITION_LEADER_EPOCH, NO_TIMESTAMP, RecordBatch, TimestampType, iter_batches
from tiered_kafka.format.segment_names import FileKind, SegmentFileName, Suffix, segment_file_name
from tiered_kafka.format.time_index import ENTRY_SIZE as TIME_ENTRY_SIZE
from tiered_kafka.format.txn_index import parse as parse_txn_index
from tiered_kafka.registry import NO_OPEN_TXN, OPEN_TXN_UNKNOWN, SegmentEntry
from tiered_kafka_agent.errors import LocalSegmentError

if TYPE_CHECKING:
    from tiered_kafka_agent.metrics import AgentMetrics

log = logging.getLogger(__name__)
_refused_logged: set[str] = set()  # symlinks already logged (module doc), bounded


def refuse_symlink(path: Path, kind: str, metrics: AgentMetrics | None) -> None:
    """Refuse a symlinked ``kind`` ("partition_dir" or "segment_file") in log.dir: counted, logged once per path (module doc)."""
    if metrics is not None:
        metrics.symlinks_refused.labels(kind).inc()
    key = str(path)
    if key not in _refused_logged:
        if len(_refused_logged) >= 10_000:
            _refused_logged.clear()
        _refused_logged.add(key)
        log.warning("refusing %s %s: it is a symbolic link, and the agent reads only the broker's own files in log.dir", kind.replace("_", " "), path)

#: Kinds uploaded for every segment, and the optional ones uploaded when present.
REQUIRED_KINDS = (FileKind.LOG, FileKind.INDEX, FileKind.TIMEINDEX)
OPTIONAL_KINDS = (FileKind.TXNINDEX, FileKind.SNAPSHOT)


class SegmentGoneError(LocalSegmentError):
    """Every name of a segment's .log is gone: retention deleted it before it was read."""


class SegmentNotReadyError(LocalSegmentError):
    """A rotated segment whose indexes the broker has not finished trimming yet; retry shortly."""


@dataclass(frozen=True, order=True)
class LocalSegment:
    base_offset: int
    directory: Path = field(compare=False)

    def path(self, kind: FileKind, suffix: Suffix = Suffix.NONE) -> Path:
        return self.directory / segment_file_name(self.base_offset, kind, suffix)


@dataclass(frozen=True)
class SegmentStats:
    """Facts read from a segment's batches while computing its checksum.

    ``min_timestamp`` is the smallest record timestamp, exact (:class:`MinTimestamp`: every record
    counts, compressed batches included; -1 when no record has one, e.g. magic 0), and
    ``max_timestamp`` the largest (the batches' maxTimestamp, -1 likewise). ``control_records`` counts the
    records of control batches (COMMIT/ABORT markers, attribute bit 5) and ``aborted_txns`` the
    entries of the segment's ``.txnindex`` (0 without one). ``open_txn_first_offset``: the
    module doc (-2 unknown)."""

    last_offset: int
    record_count: int
    min_timestamp: int
    max_timestamp: int
    leader_epoch: int
    size: int
    checksum: str  # "crc32c:xxxxxxxx" of the whole .log
    min_timestamp_exact: bool = True  # False: a batch could not be decompressed (MinTimestamp)
    control_records: int = 0
    aborted_txns: int = 0
    open_txn_first_offset: int = OPEN_TXN_UNKNOWN
    batch_index: bytes | None = None  # the .batchindex file (format.batch_index); None: not magic 2 throughout
    sparse_index: bytes | None = None  # the registry entry's sparse plan index (format.sparse_index), from the batch index

    def entry(self, topic: str, partition: int, object_key: str, base_offset: int, kinds: list[FileKind], upload_time_ms: int, *, aborted_txns: int | None = None) -> SegmentEntry:
        """The registry entry of the segment these facts are of, whole (from its base offset), its
        ``.log`` at ``object_key`` beside the files ``kinds`` (in upload order; the batch index
        added when there is one). ``aborted_txns``: when the ``.txnindex`` was not read (another
        uploader's segment), what is known instead (-1 unknown)."""
        return SegmentEntry(
            topic=topic,
            partition=partition,
            object_key=object_key,
            base_offset=base_offset,
            last_offset=self.last_offset,
            size=self.size,
            record_count=self.record_count,
            min_timestamp=self.min_timestamp,
            max_timestamp=self.max_timestamp,
            checksum=self.checksum,
            leader_epoch=self.leader_epoch,
            upload_time_ms=upload_time_ms,
            files=tuple(k.value for k in kinds) + ((FileKind.BATCHINDEX.value,) if self.batch_index is not None else ()),
            aborted_txns=self.aborted_txns if aborted_txns is None else aborted_txns,
            control_records=self.control_records,
            open_txn_first_offset=self.open_txn_first_offset,
            sparse_index=self.sparse_index,
            min_timestamp_exact=self.min_timestamp_exact,  # MinTimestamp
        )


class MinTimestamp:
    """A segment's exact smallest record timestamp, fed its batches in order (``read_stats``).

    Kafka's rule (``DefaultRecordBatch``): a record's timestamp is baseTimestamp + its
    timestampDelta, a signed varlong, so a later record of a batch may be older than the first
    (CreateTime is the producer's clock; a compacted batch's baseTimestamp may be its delete
    horizon, KIP-534): the batch header bounds only the maximum. Batches are read as follows:

    - magic 2, LogAppendTime (attribute bit 3): every record's timestamp is the batch's
      maxTimestamp (Java ``DefaultRecordBatch``); a batch of one record (control batches: one
      marker): its timestamp is maxTimestamp (which the broker computes from the records,
      Java ``LogValidator.assignOffsetsNonCompressed`` / ``validateMessagesAndAssignOffsetsCompressed``).
      Header only.
    - magic 2, CreateTime with several records: decoded, in spans of consecutive batches of about
      :data:`SPAN_BYTES`, by the columnar decoder (``format.columnar.decode_columnar``, compiled,
      decompressing compressed batches; no headers), and the smallest non-null timestamp taken.
    - magic 1 (a message, or a compressed wrapper of several): its records' timestamps, one by one
      (rare: logs from before 0.11); magic 0 has none.
    - a batch whose codec cannot be decoded (``UnsupportedCodecError``): the segment is uploaded
      all the same, its span's smallest baseTimestamp taken and :attr:`exact` False (the registry's
      ``min_timestamp_exact``), so pruning keeps it.

    Decision: decode rather than take baseTimestamp as a bound: the registry's ``min_timestamp``
    is read as a bound by the gateway's pruning (``tiered_kafka_gateway.routes.time_ranges``), and a
    wrong bound loses records silently. The cost, measured by ``bench/bench_spark_pushdown.py``
    (``--agent-mib``; 16 × 1 KiB records per batch): ``read_stats`` 0.92 CPU s/GiB against 0.56
    with base timestamps only, uncompressed; 4.51 against 0.87 zstd (decompression), once per
    segment. ``value``: -1 when no record has a
    timestamp (magic 0, or the value -1, Java ``RecordBatch.NO_TIMESTAMP``).

    Decision: a negative timestamp other than -1 is a real one, before 1970. Kafka has only -1
    for "none" (``RecordBatch.NO_TIMESTAMP``); Java ``LogValidator.validateTimestamp`` checks a
    CreateTime only against ``now`` ± the topic's ``message.timestamp.before/after.max.ms``
    (unbounded by default), so a client other than Java's ``ProducerRecord`` (which refuses
    negatives) can store -5, and the columnar decoder hands it to Spark as 1969-12-31T23:59:59.995.
    It counts in the minimum (which is then negative, so an upper bound never prunes the segment).
    Kafka's maxTimestamp starts at -1 (Java ``LogValidator.assignOffsetsNonCompressed``), so a
    batch whose records are all stamped below -1 says -1 in its header: a one-record CreateTime
    batch is read from its header only when maxTimestamp is not -1, else decoded."""

    SPAN_BYTES = 8 * 1024 * 1024

    def __init__(self) -> None:
        self._min: int | None = None
        self._span: tuple[int, int] | None = None  # [start, end) positions still to decode
        self._span_base: int | None = None  # the span's smallest baseTimestamp (the fallback below)
        self.exact = True

    def _take(self, timestamp: int | None) -> None:
        if timestamp is not None and timestamp != NO_TIMESTAMP and (self._min is None or timestamp < self._min):
            self._min = timestamp

    def add(self, view: memoryview, batch: RecordBatch) -> None:
        """One batch of the .log mapped as ``view`` (positions are ``view``'s)."""
        if batch.magic < 2:
            self.flush(view)
            if batch.magic == 1:
                try:
                    for record in batch:
                        self._take(record.timestamp)
                except UnsupportedCodecError as err:
                    log.warning("%s; the segment's min_timestamp is recorded as not exact", err)
                    self.exact = False
                    self._take(batch.max_timestamp)
            return
        from_header = (
            batch.is_control
            or batch.timestamp_type == TimestampType.LOG_APPEND_TIME
            or (batch.record_count <= 1 and batch.max_timestamp != NO_TIMESTAMP)  # -1: its record may be stamped below -1 (class doc)
        )
        if from_header and batch.record_count:
            self._take(batch.max_timestamp)
        if self._span is not None:  # spans stay contiguous: a header-only batch inside one is decoded too (harmless)
            self._span = (self._span[0], batch.next_position)
        elif not from_header:
            self._span = (batch.position, batch.next_position)
        if self._span is not None:
            self._span_base = batch.base_timestamp if self._span_base is None else min(self._span_base, batch.base_timestamp)
        if self._span is not None and self._span[1] - self._span[0] >= self.SPAN_BYTES:
            self.flush(view)

    def flush(self, view: memoryview) -> None:
        """Decode the pending span (call at the end of the .log)."""
        if self._span is None:
            return
        start, end = self._span
        base, self._span, self._span_base = self._span_base, None, None
        try:
            with view[start:end] as part:
                timestamps = decode_columnar(part, position=start, include_headers=False).records.column("timestamp")
        except UnsupportedCodecError as err:  # Decision: upload it all the same, its minimum marked inexact (kept by pruning)
            log.warning("bytes %d..%d: %s; the segment's min_timestamp is recorded as not exact", start, end, err)
            self.exact = False
            self._take(base)
            return
        self._take(pc.min(timestamps).as_py())

    @property
    def value(self) -> int:
        return -1 if self._min is None else self._min


def list_segments(directory: Path, metrics: AgentMetrics | None = None) -> tuple[list[LocalSegment], int | None]:
    """(rotated segments oldest first, active segment base offset) of a partition directory.

    Segments already renamed ``.deleted`` count as rotated: they can still be uploaded.
    """
    bases: set[int] = set()
    live: set[int] = set()
    try:
        dir_fd = open_partition_dir(directory)  # the open is the check: no link followed (log_dir_files)
    except FileNotFoundError:
        dir_fd = None
    except OSError as err:
        if err.errno not in (errno.ELOOP, errno.ENOTDIR):
            raise
        refuse_symlink(directory, "partition_dir", metrics)
        raise LocalSegmentError(f"{directory} is a symbolic link: refused (the agent reads only the broker's own files)") from None
    with contextlib.ExitStack() as held:
        if dir_fd is not None:
            held.callback(os.close, dir_fd)
        for entry in os.scandir(dir_fd) if dir_fd is not None else ():
            name = SegmentFileName.try_parse(entry.name)
            if name is not None and entry.is_symlink():  # module doc: refused; a .log stays listed, so its open refuses it
                refuse_symlink(directory / entry.name, "segment_file", metrics)
            if name is None or name.kind != FileKind.LOG or name.suffix not in (Suffix.NONE, Suffix.DELETED):
                continue
            bases.add(name.base_offset)
            if name.suffix == Suffix.NONE:
                live.add(name.base_offset)
    if not live:
        return [LocalSegment(b, directory) for b in sorted(bases)], None
    active = max(live)
    return [LocalSegment(b, directory) for b in sorted(bases) if b < active], active


def _open_either(segment: LocalSegment, kind: FileKind) -> tuple[int, Path] | None:
    """Open the file under its live or ``.deleted`` name; None when both are gone. The partition
    directory is opened first without following a link, and the file relative to it
    (``log_dir_files``: no check-then-open race)."""
    try:
        dir_fd = open_partition_dir(segment.directory)
    except FileNotFoundError:
        return None
    except OSError as err:
        if err.errno in (errno.ELOOP, errno.ENOTDIR):
            raise LocalSegmentError(f"{segment.directory} is a symbolic link: refused (the agent reads only the broker's own files)") from err
        raise
    try:
        for suffix in (Suffix.NONE, Suffix.DELETED):
            path = segment.path(kind, suffix)
            try:
                return open_in_dir(dir_fd, path.name), path
            except FileNotFoundError:
                continue
            except OSError as err:
                if err.errno == errno.ELOOP:  # a symbolic link (module doc)
                    raise LocalSegmentError(f"{path} is a symbolic link: refused (the agent reads only the broker's own files)") from err
                raise
        return None
    finally:
        os.close(dir_fd)


@dataclass
class OpenSegment:
    """A rotated segment's files, held open so retention cannot take them mid-upload.

    ``files`` maps each present kind to an open descriptor; ``fd_path`` gives a path that reads
    through the descriptor (``/proc/self/fd/N``) whatever happened to the name since.
    """

    segment: LocalSegment
    files: dict[FileKind, int]
    names: dict[FileKind, Path]

    def fd_path(self, kind: FileKind) -> str:
        return f"/proc/self/fd/{self.files[kind]}"

    def size(self, kind: FileKind) -> int:
        return os.fstat(self.files[kind]).st_size

    def drop(self, kind: FileKind) -> None:
        """Leave out an optional file (it will not be uploaded)."""
        fd = self.files.pop(kind, None)
        self.names.pop(kind, None)
        if fd is not None:
            with contextlib.suppress(OSError):
                os.close(fd)

    def close(self) -> None:
        for fd in self.files.values():
            with contextlib.suppress(OSError):
                os.close(fd)
        self.files.clear()


@contextlib.contextmanager
def open_segment(segment: LocalSegment, next_base: int | None = None) -> Iterator[OpenSegment]:
    """Open every file of a rotated segment (live or ``.deleted`` names).

    ``next_base`` is the base offset of the segment after it: its producer-state snapshot is
    ``{next_base}.snapshot`` (module doc); without it no snapshot is opened.

    Raises SegmentGoneError when the .log is gone under both names, and SegmentNotReadyError
    when an index is still preallocated (the broker is between rolling and trimming it).
    """
    opened = OpenSegment(segment, {}, {})
    try:
        for kind in (*REQUIRED_KINDS, *OPTIONAL_KINDS):
            if kind == FileKind.SNAPSHOT:
                found = None if next_base is None else _open_either(LocalSegment(next_base, segment.directory), kind)
            else:
                found = _open_either(segment, kind)
            if found is None:
                if kind == FileKind.LOG:
                    raise SegmentGoneError(f"{segment.path(FileKind.LOG)} is gone (also as .deleted)")
                if kind in REQUIRED_KINDS:
                    raise SegmentGoneError(f"{segment.path(kind)} is gone while its .log remains")
                continue
            opened.files[kind], opened.names[kind] = found
        _check_trimmed(opened)
        yield opened
    finally:
        opened.close()


def snapshot_ready(opened: OpenSegment) -> bool:
    """True when the segment's producer snapshot was opened and is whole (its CRC-32C checks)."""
    fd = opened.files.get(FileKind.SNAPSHOT)
    if fd is None:
        return False
    try:
        producer_snapshot.parse(os.pread(fd, os.fstat(fd).st_size, 0), name=str(opened.names[FileKind.SNAPSHOT]))
    except CorruptCheckpointError:
        return False
    return True


def _check_trimmed(opened: OpenSegment) -> None:
    """A rotated segment's indexes are trimmed to their entries; a preallocated one ends in zeros.

    An all-zero offset-index entry is never real (position 0 is never indexed). A time-index
    entry (timestamp 0, relative offset 0) can be real, but only as the first entry, so the time
    index counts as preallocated only when its last two entries are both zero."""
    for kind, entry_size, zero_entries in ((FileKind.INDEX, INDEX_ENTRY_SIZE, 1), (FileKind.TIMEINDEX, TIME_ENTRY_SIZE, 2)):
        size = opened.size(kind)
        if size == 0:
            continue
        if size % entry_size:
            raise SegmentNotReadyError(f"{opened.names[kind]}: size {size} is not a multiple of {entry_size}")
        tail = min(size, zero_entries * entry_size)
        if tail == zero_entries * entry_size and not any(os.pread(opened.files[kind], tail, size - tail)):
            raise SegmentNotReadyError(f"{opened.names[kind]} still has a zero-filled preallocated tail")


def read_stats(opened: OpenSegment) -> SegmentStats:
    """Scan the .log once through a read-only mmap: CRC-32C of the whole file, and every batch
    header (each batch's own CRC verified), kept as the segment's batch index.

    Raises FormatError for a corrupt or truncated .log: such a segment must not be registered.
    """
    fd = opened.files[FileKind.LOG]
    size = os.fstat(fd).st_size
    last_offset = opened.segment.base_offset - 1
    record_count = 0
    max_ts = -1
    min_ts = MinTimestamp()
    epoch = NO_PARTITION_LEADER_EPOCH
    checksum = 0
    control_records = 0
    scan_open: dict[int, int] = {}  # producer -> first offset of its transaction open at the end, as far as B shows
    marked: set[int] = set()  # producers with a marker in B
    builder = BatchIndexBuilder(opened.segment.base_offset)
    failure: FormatError | None = None
    if size:
        with mmap.mmap(fd, size, prot=mmap.PROT_READ) as mapped:
            view = memoryview(mapped)
            try:
                checksum = crc32c.crc32c(view)
                for batch in iter_batches(view):
                    builder.add(batch)
                    last_offset = batch.last_offset
                    record_count += batch.record_count
                    min_ts.add(view, batch)
                    max_ts = max(max_ts, batch.max_timestamp)
                    epoch = max(epoch, batch.partition_leader_epoch)
                    if batch.is_control:
                        control_records += batch.record_count
                        scan_open.pop(batch.producer_id, None)
                        marked.add(batch.producer_id)
                    elif batch.is_transactional:
                        scan_open.setdefault(batch.producer_id, batch.base_offset)
                    del batch
                min_ts.flush(view)
            except FormatError as err:
                failure = err.with_traceback(None)  # its frames hold views of the map: drop them before closing it
            finally:
                view.release()
    if failure is not None:
        raise failure
    try:
        index = builder.finish(size)
        batch_index: bytes | None = index.to_bytes()
        sparse_index: bytes | None = SparseIndex.from_batch_index(index).to_bytes()
    except UnsupportedFormatError as err:
        log.debug("segment %d has no batch index: %s", opened.segment.base_offset, err)
        batch_index = sparse_index = None
    return SegmentStats(
        last_offset=last_offset,
        record_count=record_count,
        min_timestamp=min_ts.value,
        min_timestamp_exact=min_ts.exact,
        max_timestamp=max_ts,
        leader_epoch=epoch,
        size=size,
        checksum=f"crc32c:{checksum:08x}",
        control_records=control_records,
        aborted_txns=_count_aborted_txns(opened),
        open_txn_first_offset=_open_txn_first_offset(opened, last_offset, scan_open, marked),
        batch_index=batch_index,
        sparse_index=sparse_index,
    )


def _open_txn_first_offset(opened: OpenSegment, last_offset: int, scan_open: dict[int, int], marked: set[int]) -> int:
    """The smallest ``currentTxnFirstOffset`` of the segment's snapshot, cross-checked (module doc)."""
    fd = opened.files.get(FileKind.SNAPSHOT)
    if fd is None:
        return OPEN_TXN_UNKNOWN
    name = str(opened.names[FileKind.SNAPSHOT])
    try:
        entries = producer_snapshot.parse(os.pread(fd, os.fstat(fd).st_size, 0), name=name)
    except CorruptCheckpointError as err:
        log.warning("%s: %s; the open transactions after segment %d are unknown", name, err, opened.segment.base_offset)
        return OPEN_TXN_UNKNOWN
    base = opened.segment.base_offset
    snap = {e.producer_id: e.current_txn_first_offset for e in entries if e.current_txn_first_offset >= 0}
    problems = []
    for producer, first in scan_open.items():
        got = snap.get(producer)
        if got is None or got > first or (producer in marked and got != first):
            problems.append(f"producer {producer}: batches open a transaction at {first}, snapshot says {got}")
    for producer, got in snap.items():
        if got > last_offset or ((got >= base or producer in marked) and scan_open.get(producer) != got):
            problems.append(f"producer {producer}: snapshot opens a transaction at {got}, batches say {scan_open.get(producer)}")
    if problems:
        log.warning("%s contradicts segment %d's batches (%s): open transactions after it recorded as unknown", name, base, "; ".join(problems[:3]))
        return OPEN_TXN_UNKNOWN
    return min(snap.values(), default=NO_OPEN_TXN)


def _count_aborted_txns(opened: OpenSegment) -> int:
    """Entries in the segment's ``.txnindex`` (0 without one); CorruptIndexError if malformed."""
    fd = opened.files.get(FileKind.TXNINDEX)
    if fd is None:
        return 0
    data = os.pread(fd, os.fstat(fd).st_size, 0)
    return len(parse_txn_index(data, name=str(opened.names[FileKind.TXNINDEX])))
