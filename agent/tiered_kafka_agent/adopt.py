"""``tiered-kafka-agent adopt``: register the segments another uploader wrote in our keyspace (issue 37).

Pinterest's ts-segment-uploader writes the keys this project reads (``tiered_kafka.keyspace``: the agent's
``s3.prefix``, ``s3.entropy_bits`` and ``cluster`` set to theirs) but no ``tk-*`` metadata and no registry
entry. Adoption gives each of its ``.log`` objects the entry our agent would have registered, from its bytes:

1. list the cluster's prefixes (all 2**N entropy prefixes); a ``.log`` whose key the registry already names
   is *present* (an earlier run, or the agent's hand-over) and costs no more; one with ``tk-*`` metadata is
   ours (``rebuild-registry``'s business); the rest, per partition in offset order, are adopted:
2. GET the ``.log`` (and its ``.txnindex`` when one is there) to a temporary file and scan it as the agent
   scans a broker's segment (``local_segments.read_stats``: every batch's CRC-32C verified; offsets, record
   and control record counts, exact timestamps, the leader epoch of its last batch, CRC-32C of the whole
   object, the batch and sparse indexes). Without a ``.txnindex`` object a segment holding control records has
   ``aborted_txns`` -1 (unknown) and, without a producer snapshot, ``open_txn_first_offset`` -2 (unknown);
   ``upload_time_ms`` is the object's LastModified;
3. PUT ``{base}.batchindex`` beside it carrying the entry as ``tk-*`` metadata: a new key of our own, so no
   object of theirs is rewritten or uploaded again; readers plan from it as from any batch index, and
   ``rebuild-registry`` restores the entry from it (``object_metadata.adopted_entry``). Decision: computed
   once at adoption and stored, rather than computed on every read (readers would scan the whole ``.log``
   for each first read). A segment that is not magic 2 throughout gets no batch index (readers plan from
   its ``.index``) and a rebuilt registry loses it: run ``adopt`` again after ``rebuild-registry``;
4. register it (``Registry.register``). Offsets another entry holds already are left to it: the segment is
   registered from the offset after them (``SegmentEntry.first_offset``), or not at all.

Before the partition's first registration, its coverage start (``coverage``) is set to the first adopted
segment's base offset when none is recorded yet (registry, then ``coverage.json``).

Holes between two of their segments (offsets in no object of theirs, e.g. deleted by retention while their
uploader was behind, or an upload that failed while later ones succeeded): when a log dir of this host
still holds the partition from at or before the hole, the partition's adoption stops there: the agent,
started next, uploads the hole from the broker and then meets their later segments under our keys with the
same bytes, and registers them where they are (``remote_store``). Otherwise the hole is recorded as a gap
with its reason (neither uploader has those offsets), and adoption goes on. So run ``adopt`` on the broker
hosts (each with its ``log.dirs`` in ``log_dirs``) for the partitions they lead.

Idempotent and resumable: a present segment is skipped before any GET, a gap recorded already is not
recorded again, and a run killed anywhere leaves at most a ``.batchindex`` without a registration, which
the next run writes again with the same bytes. ``--dry-run`` reads and prints everything it would register
or record, and writes nothing. A line per segment goes to ``out``, and the agent's progress bar
(``tiered_kafka_agent.progress``, on stderr) counts the segments. A run that finds every segment registered
already says "nothing left to adopt" and succeeds (the command exits 0); one that finds no ``.log`` without
``tk-*`` metadata at all (``AdoptReport.segments`` 0) was asked for data and got none: the command exits 1
naming the prefixes searched (``tiered_kafka_agent.__main__``).
"""

from __future__ import annotations

import logging
import os
import tempfile
import time
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from tiered_kafka.errors import FormatError, InvalidSegmentNameError
from tiered_kafka.format.segment_names import FileKind, partition_dir_name, segment_file_name
from tiered_kafka.registry import Registry, RegistryConflictError, SegmentEntry, SegmentOverlapError
from tiered_kafka_agent.faults import crash_point
from tiered_kafka_agent.local_segments import LocalSegment, OpenSegment, list_segments, read_stats
from tiered_kafka_agent.progress import Progress
from tiered_kafka_agent.remote_store import META_PREFIX, UPLOAD_ORDER, RemoteStore, entry_metadata, registered_from

log = logging.getLogger(__name__)


@dataclass
class AdoptReport:
    partitions: int = 0
    segments: int = 0  # .log objects without tk-* metadata found
    adopted: int = 0  # registered by this run (dry run: would be)
    present: int = 0  # registered already (an earlier run, or the agent's hand-over)
    covered: int = 0  # every offset registered already from other objects, or empty
    gaps: int = 0  # holes recorded (dry run: would be)
    left: int = 0  # left to the agent: after a hole this host's log still holds
    failed: int = 0  # corrupt, or refused by the registry: the partition stops there

    @property
    def ok(self) -> bool:
        return self.failed == 0


@dataclass(frozen=True)
class _Object:
    key: str
    base: int
    size: int
    modified_ms: int


class _Lines:
    """One line per segment to ``out`` (what was, or would be, registered), and the bar advanced (``progress``)."""

    def __init__(self, out: TextIO, progress: Progress | None) -> None:
        self.out, self.progress = out, progress

    def step(self, text: str, count: int = 1) -> None:
        print(text, file=self.out, flush=True)
        if self.progress is not None:
            self.progress.advance(count)


def adopt_segments(
    store: RemoteStore,
    registry: Registry,
    out: TextIO,
    *,
    log_dirs: Sequence[Path] = (),
    topics: Iterable[str] | None = None,
    dry_run: bool = False,
    progress: Progress | None = None,
) -> AdoptReport:
    """Register every ``.log`` object without ``tk-*`` metadata in ``store``'s keyspace (module doc); a line per
    segment to ``out``, and ``progress`` (the agent's bar, ``tiered_kafka_agent.progress``) counts segments."""
    wanted = set(topics) if topics else None
    report = AdoptReport()
    objects, present_keys = _list(store, wanted)
    logs: dict[tuple[str, int], list[_Object]] = {}
    registered = 0
    for (topic, partition), found in sorted(objects.items()):
        foreign = []
        for obj in sorted(found, key=lambda o: o.base):
            holder = registry.find(topic, partition, obj.base)
            if holder is not None and holder.object_key == obj.key:
                foreign.append(obj)  # present (theirs adopted before, or ours): counted as such below, without a HEAD
                registered += 1
                continue
            _, metadata = store.head_metadata(obj.key)
            if not any(name.startswith(META_PREFIX) for name in metadata):
                foreign.append(obj)
        if foreign:
            logs[(topic, partition)] = foreign
    report.segments = sum(len(v) for v in logs.values())
    mode = "dry run: nothing is written" if dry_run else "adopting"
    print(f"{report.segments - registered} segment(s) without tk-* metadata and {registered} registered already in {len(logs)} partition(s) "
          f"of cluster {store.keyspace.cluster} ({mode})", file=out, flush=True)
    if progress is not None:
        progress.update(0, report.segments)
    lines = _Lines(out, progress)
    for (topic, partition), found in logs.items():
        report.partitions += 1
        _adopt_partition(store, registry, topic, partition, found, present_keys[(topic, partition)], log_dirs, dry_run, report, lines)
    if progress is not None:
        progress.close()
    verb = "would be " if dry_run else ""
    print(
        f"adopted: {report.adopted} {verb}registered, {report.present} registered already, {report.covered} covered by other segments or empty, "
        f"{report.gaps} gap(s) {verb}recorded, {report.left} left to the agent, {report.failed} failed, of {report.segments} in {report.partitions} partition(s)",
        file=out,
        flush=True,
    )
    if report.segments and report.present + report.covered == report.segments:
        also = f" ({report.covered} with every offset registered from other objects, or empty)" if report.covered else ""
        print(f"nothing left to adopt: every one of the {report.segments} segment(s) is registered already{also}", file=out, flush=True)
    return report


def _list(store: RemoteStore, wanted: set[str] | None) -> tuple[dict[tuple[str, int], list[_Object]], dict[tuple[str, int], set[str]]]:
    """The ``.log`` objects of every partition, and every segment file key present, by partition."""
    objects: dict[tuple[str, int], list[_Object]] = defaultdict(list)
    present: dict[tuple[str, int], set[str]] = defaultdict(set)
    paginator = store.client.get_paginator("list_objects_v2")
    for prefix in store.keyspace.cluster_prefixes():
        for page in paginator.paginate(Bucket=store.bucket, Prefix=prefix):
            for item in page.get("Contents", ()):
                key = item["Key"]
                try:
                    parsed = store.keyspace.parse(key)
                except InvalidSegmentNameError:
                    continue  # gap markers, coverage.json, ...
                if parsed.segment is None or parsed.segment.suffix.value != "" or (wanted is not None and parsed.topic not in wanted):
                    continue
                where = (parsed.topic, parsed.partition)
                present[where].add(key)
                if parsed.segment.kind == FileKind.LOG:
                    modified = item.get("LastModified")
                    modified_ms = int(modified.timestamp() * 1000) if modified is not None else 0
                    objects[where].append(_Object(key, parsed.segment.base_offset, int(item["Size"]), modified_ms))
    return objects, present


def _adopt_partition(
    store: RemoteStore,
    registry: Registry,
    topic: str,
    partition: int,
    found: list[_Object],
    present: set[str],
    log_dirs: Sequence[Path],
    dry_run: bool,
    report: AdoptReport,
    progress: _Lines,
) -> None:
    name = partition_dir_name(topic, partition)
    after: int | None = None  # the offset after their last segment accounted for
    coverage_checked = False
    for number, obj in enumerate(found):
        holder = registry.find(topic, partition, obj.base)
        if holder is not None and holder.object_key == obj.key:
            report.present += 1
            after = holder.last_offset + 1
            progress.step(f"{name} segment {holder.first}..{holder.last_offset}: registered already")
            continue
        try:
            entry, batch_index = _read(store, topic, partition, obj, present)
        except (FormatError, OSError) as err:
            report.failed += 1
            progress.step(f"{name} segment {obj.base}: FAILED, {obj.key} cannot be read as a segment: {err}; the partition's adoption stops here")
            report.left += len(found) - number - 1
            return
        if entry.record_count == 0:
            report.covered += 1
            progress.step(f"{name} segment {obj.base}: empty, nothing to register")
            continue
        overlapping = registry.segments(topic, partition, from_offset=entry.base_offset, to_offset=entry.last_offset)
        if overlapping:
            if overlapping[0].first > entry.base_offset:
                report.failed += 1
                report.left += len(found) - number - 1
                progress.step(
                    f"{name} segment {entry.base_offset}..{entry.last_offset}: FAILED, offsets {overlapping[0].first}.. are registered from "
                    f"{overlapping[0].object_key} but not the ones before them; the partition's adoption stops here"
                )
                return
            first = max(o.last_offset for o in overlapping) + 1
            if first > entry.last_offset:
                report.covered += 1
                after = entry.last_offset + 1
                progress.step(f"{name} segment {entry.base_offset}..{entry.last_offset}: every offset is registered from other objects")
                continue
            entry = registered_from(entry, first, batch_index)
        if after is not None and entry.first > after and not _gap_recorded(registry, topic, partition, after, entry.first - 1):
            if _local_holds(log_dirs, topic, partition, after):
                report.left += len(found) - number
                progress.step(
                    f"{name}: offsets {after}..{entry.first - 1} are in none of its objects but still in this broker's log: left to the agent, "
                    f"which uploads them and registers the {len(found) - number} later segment(s) where they are",
                    len(found) - number,
                )
                return
            reason = f"in no object of the previous uploader and no longer in the broker's log (adoption, before segment {entry.base_offset})"
            if not dry_run:
                store.write_gap_marker(topic, partition, after, entry.first - 1, reason, _now_ms())
                store.retry.call(lambda: registry.record_gap(topic, partition, after, entry.first - 1, reason), what=f"gap of {name}")
            report.gaps += 1
            log.error("%s: GAP offsets %d..%d: %s", name, after, entry.first - 1, reason)
        if not coverage_checked:
            coverage_checked = True
            if not dry_run and registry.coverage_start(topic, partition) is None:
                stored = registry.set_coverage_start(topic, partition, entry.first)
                store.write_coverage_start(topic, partition, stored)
        if not dry_run:
            if batch_index is not None:
                index_key = store.keyspace.segment_key(topic, partition, entry.base_offset, FileKind.BATCHINDEX)
                store.put_bytes(index_key, batch_index, metadata=entry_metadata(entry))
            crash_point("adopt_before_register")
            try:
                store.retry.call(lambda: registry.register(entry), what=f"registration of {name} segment {entry.base_offset}")
            except (SegmentOverlapError, RegistryConflictError) as err:
                report.failed += 1
                report.left += len(found) - number - 1
                progress.step(f"{name} segment {entry.base_offset}..{entry.last_offset}: FAILED, refused by the registry: {err}")
                return
        report.adopted += 1
        after = entry.last_offset + 1
        progress.step(f"{name} segment {entry.first}..{entry.last_offset}: {'would register' if dry_run else 'registered'} {_describe(entry)}")


def _read(store: RemoteStore, topic: str, partition: int, obj: _Object, present: set[str]) -> tuple[SegmentEntry, bytes | None]:
    """The entry of one object and its batch index, from its bytes (module doc, step 2)."""
    keyspace = store.keyspace
    with tempfile.TemporaryDirectory(prefix="tk-adopt-") as tmp:
        opened = OpenSegment(LocalSegment(obj.base, Path(tmp)), {}, {})
        try:
            for kind in (FileKind.LOG, FileKind.TXNINDEX):
                key = keyspace.segment_key(topic, partition, obj.base, kind)
                if kind != FileKind.LOG and key not in present:
                    continue
                path = Path(tmp) / segment_file_name(obj.base, kind)
                with open(path, "wb") as sink:
                    store.retry.call(lambda: (sink.seek(0), sink.truncate(), store.client.download_fileobj(store.bucket, key, sink)), what=f"download of {key}")
                opened.files[kind], opened.names[kind] = os.open(path, os.O_RDONLY), path
            if opened.size(FileKind.LOG) != obj.size:
                raise FormatError(f"{obj.key} holds {opened.size(FileKind.LOG)} bytes, its listing said {obj.size}")
            stats = read_stats(opened)
            has_txnindex = FileKind.TXNINDEX in opened.files
        finally:
            opened.close()
    kinds = [k for k in UPLOAD_ORDER if keyspace.segment_key(topic, partition, obj.base, k) in present]
    entry = stats.entry(topic, partition, obj.key, obj.base, kinds, obj.modified_ms,
                        aborted_txns=None if has_txnindex or stats.control_records == 0 else -1)
    return entry, stats.batch_index


def _gap_recorded(registry: Registry, topic: str, partition: int, start: int, end: int) -> bool:
    return any(g.start_offset <= start and g.end_offset >= end for g in registry.gaps(topic, partition))


def _local_holds(log_dirs: Sequence[Path], topic: str, partition: int, offset: int) -> bool:
    """Whether a log dir of this host holds the partition from ``offset`` or before (the broker still has it)."""
    for log_dir in log_dirs:
        segments, active = list_segments(Path(log_dir) / partition_dir_name(topic, partition))
        bases = [s.base_offset for s in segments] + ([active] if active is not None else [])
        if bases and bases[0] <= offset:
            return True
    return False


def _describe(entry: SegmentEntry) -> str:
    return (
        f"({entry.record_count} records, {entry.size} bytes, timestamps {entry.min_timestamp}..{entry.max_timestamp}, "
        f"leader epoch {entry.leader_epoch}, {entry.checksum}, files {','.join(entry.files)})"
    )


def _now_ms() -> int:
    return time.time_ns() // 1_000_000
