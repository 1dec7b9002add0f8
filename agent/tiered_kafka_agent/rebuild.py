"""Rebuild a cluster's Redis registry from S3 alone: ``tiered-kafka-agent rebuild-registry``.

Every fact the agent registers is also in S3: a segment's entry in its ``.log`` object's
``tk-*`` metadata (``remote_store``), each gap in a marker object (``keyspace.gap_key``), and the
coverage start in ``coverage.json`` (``keyspace.coverage_start_key``). The
rebuild lists every prefix of the cluster (all 2**N entropy prefixes), reads those, and for each
partition replaces its registry keys with exactly what S3 holds. A ``.log`` whose listed files
are not all present (an upload cut short) is left out, as the agent would not have registered it.
The result equals what the agent registered (``Registry.dump`` compares them in the tests).

A ``.log`` object with no ``tk-*`` metadata at all was not uploaded by this project's agent (Pinterest's
ts-segment-uploader writes the same keys, without metadata): the rebuild cannot vouch for its range, epoch or
checksum, so it registers nothing for it and counts it as ``foreign``; the gateway serves such segments by
listing the partition's prefix (``tiered_kafka_gateway.s3_listing``, ``remote.ClusterReader._list``). Once
adopted (``tiered-kafka-agent adopt``, ``adopt``), such a segment's entry is in the ``tk-*`` metadata of the
``.batchindex`` adoption wrote beside it (its own object is never rewritten): the rebuild restores it from there.

The coverage's ``expired_until`` (offsets remote retention deleted) comes from ``expired.json``,
which remote retention writes before it deletes anything (``retention``).

First offsets (``SegmentEntry.first_offset``): ``tk-first-offset`` is where the uploader meant to
register from, a lower bound of where it did (registration starts later when the other leader
registered more meanwhile). Segments are taken in order of that offset (then upload time, then
base offset), each from the higher of its ``tk-first-offset`` and the offset after the segment
kept before it; one holding nothing past that (an object a refused or superseded registration
left behind) is left out with a warning. So the rebuilt ranges never overlap and every offset the kept objects
hold stays covered. They can still differ from the registered ones when two leaders' objects
overlap: e.g. B uploads its straddling [150..349] (tk-first-offset 200) before A uploads
[200..299], A registers first, and B's registration is refused or moves to 300; rebuild, taking
B's by its tk-first-offset 200, keeps B's object for 200..349 and leaves A's out: the same
offsets, from other objects. A segment kept from later than its ``tk-first-offset`` has unknown
range counts (``SegmentEntry.range_records`` -1; the Spark backfill's check names it).
"""

from __future__ import annotations

import logging
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from tiered_kafka.errors import InvalidSegmentNameError
from tiered_kafka.format.segment_names import FileKind
from tiered_kafka.keyspace import EXPIRED
from tiered_kafka.registry import Registry, SegmentEntry
from tiered_kafka_agent.progress import Progress
from tiered_kafka_agent.remote_store import META_PREFIX, MetadataError, RemoteStore, adopted_entry, entry_from_metadata, registered_from

log = logging.getLogger(__name__)


@dataclass
class RebuildReport:
    partitions: int = 0
    segments: int = 0
    gaps: int = 0
    coverage_starts: int = 0
    skipped: int = 0
    foreign: int = 0  # .log objects without tk-* metadata (module doc): left to the listing path


HEAD_THREADS = 32
"""HEADs of ``.log`` objects in flight at once: the rebuild's cost is its S3 round trips, not CPU."""
CHUNK_SEGMENTS = 4096
CHUNK_PARTITIONS = 1000
"""Partitions rebuilt together (``_rebuild_chunk``): up to this many, or this many ``.log`` objects."""


def rebuild_registry(store: RemoteStore, registry: Registry, progress: Progress | None = None) -> RebuildReport:
    """Rebuild the registry from S3 (module doc): partitions in chunks (``_rebuild_chunk``), ``.log``
    objects HEADed ``HEAD_THREADS`` at a time across the chunk's partitions, clears and registrations
    pipelined (``Registry.clear_partitions``, ``register_many``); ``progress`` counts ``.log`` objects."""
    report = RebuildReport()
    keys_by_partition: dict[tuple[str, int], dict[str, int]] = defaultdict(dict)
    gap_keys: dict[tuple[str, int], list[str]] = defaultdict(list)
    covered: set[tuple[str, int]] = set()
    for prefix in store.keyspace.cluster_prefixes():
        for key, size in store.list_keys(prefix):
            try:
                parsed = store.keyspace.parse(key)
            except InvalidSegmentNameError:
                try:
                    topic, partition, _, _ = store.keyspace.parse_gap_key(key)
                    gap_keys[(topic, partition)].append(key)
                except InvalidSegmentNameError:
                    try:
                        covered.add(store.keyspace.parse_coverage_start_key(key))
                    except InvalidSegmentNameError:
                        if not key.endswith("/" + EXPIRED):  # read with its partition's coverage start
                            log.warning("rebuild: ignoring %s (not in the keyspace)", key)
                continue
            if parsed.segment is not None and parsed.segment.suffix.value == "":
                keys_by_partition[(parsed.topic, parsed.partition)][key] = size

    if progress is not None:
        progress.update(0, sum(1 for present in keys_by_partition.values() for key in present if key.endswith("." + FileKind.LOG.value)))
    pool = ThreadPoolExecutor(HEAD_THREADS, thread_name_prefix="rebuild-head")
    chunk: list[tuple[str, int]] = []
    heads = 0
    for topic_partition in sorted(set(keys_by_partition) | set(gap_keys) | covered):
        chunk.append(topic_partition)
        heads += sum(1 for key in keys_by_partition.get(topic_partition, {}) if key.endswith("." + FileKind.LOG.value))
        if heads >= CHUNK_SEGMENTS or len(chunk) >= CHUNK_PARTITIONS:
            _rebuild_chunk(store, registry, pool, chunk, keys_by_partition, gap_keys, covered, report, progress)
            chunk, heads = [], 0
    if chunk:
        _rebuild_chunk(store, registry, pool, chunk, keys_by_partition, gap_keys, covered, report, progress)
    pool.shutdown()
    if progress is not None:
        progress.close()
    if report.foreign:
        log.info("rebuild: %d segment(s) without tk-* metadata (not uploaded by this agent: e.g. Pinterest's uploader) left to the gateway's listing path", report.foreign)
    log.info("rebuilt the registry of cluster %s: %s", store.keyspace.cluster, report)
    return report


def _rebuild_chunk(store: RemoteStore, registry: Registry, pool: ThreadPoolExecutor, chunk: list[tuple[str, int]],
                   keys_by_partition: dict[tuple[str, int], dict[str, int]], gap_keys: dict[tuple[str, int], list[str]],
                   covered: set[tuple[str, int]], report: RebuildReport, progress: Progress | None) -> None:
    """Rebuild the partitions of ``chunk``: their ``.log`` objects HEADed together (a partition of one
    segment does not wait for the previous one's HEAD), their keys cleared and their entries registered
    in pipelined round trips, then each one's gaps and coverage."""
    logs = {tp: [(key, size) for key, size in sorted(keys_by_partition.get(tp, {}).items()) if key.endswith("." + FileKind.LOG.value)] for tp in chunk}
    futures = {tp: [pool.submit(_read, store, tp[0], tp[1], item, keys_by_partition.get(tp, {})) for item in logs[tp]] for tp in chunk}
    entries: list[SegmentEntry] = []
    for tp in chunk:
        found_entries = []
        for future in futures[tp]:
            found = future.result()
            if found == "foreign":
                report.foreign += 1
            elif found == "skipped":
                report.skipped += 1
            else:
                assert isinstance(found, SegmentEntry)
                found_entries.append(found)
        kept = _without_overlaps(found_entries, report)
        entries += kept
        report.partitions += 1
        report.segments += len(kept)
        if progress is not None:
            progress.advance(len(logs[tp]))
    registry.clear_partitions(chunk)
    registry.register_many(entries)  # lists each partition it registers in
    for topic, partition in chunk:
        for key in sorted(gap_keys.get((topic, partition), [])):
            marker = store.read_gap_marker(key)
            registry.record_gap(topic, partition, marker["start_offset"], marker["end_offset"], marker["reason"], detected_ms=marker["detected_ms"])
            report.gaps += 1
        if (topic, partition) in covered:
            _restore_coverage(store, registry, topic, partition)
            report.coverage_starts += 1


def _read(store: RemoteStore, topic: str, partition: int, item: tuple[str, int], present: dict[str, int]) -> SegmentEntry | str:
    """The entry one ``.log`` object vouches for (its ``tk-*`` metadata, or its adopted batch index's);
    "foreign" (no metadata, not adopted) or "skipped" (unreadable metadata, an upload cut short)."""
    key, size = item
    _, metadata = store.head_metadata(key)
    if not any(name.startswith(META_PREFIX) for name in metadata):
        adopted = _adopted(store, topic, partition, key, size, present)
        return "foreign" if adopted is None else adopted
    entry = _entry(topic, partition, key, size, metadata)
    return "skipped" if entry is None or not _complete(store, entry, present) else entry


def _restore_coverage(store: RemoteStore, registry: Registry, topic: str, partition: int) -> None:
    """The coverage start from coverage.json, and the remote retention mark from expired.json."""
    start = store.read_coverage_start(topic, partition)
    if start is not None:  # else deleted since the listing
        registry.set_coverage_start(topic, partition, start.offset, observed_ms=start.observed_ms)
    expired_until = store.read_expired(topic, partition)
    if expired_until is not None:
        registry.record_expired(topic, partition, expired_until)


def _without_overlaps(entries: list[SegmentEntry], report: RebuildReport) -> list[SegmentEntry]:
    """Entries in offset order, each from the offset after the one kept before it (module doc);
    one holding nothing past it is dropped with a warning, so the rebuild never fails halfway."""
    kept: list[SegmentEntry] = []
    for entry in sorted(entries, key=lambda e: (e.first, e.upload_time_ms, e.base_offset)):
        first = entry.first if not kept else max(entry.first, kept[-1].last_offset + 1)
        if first > entry.last_offset:
            log.warning("rebuild: skipping %s (offsets %d..%d are all in %s)", entry.object_key, entry.first, entry.last_offset, kept[-1].object_key)
            report.skipped += 1
            continue
        kept.append(entry if first == entry.first else registered_from(entry, first, None))  # its range's counts: unknown (-1) past tk-first-offset
    return kept


def _adopted(store: RemoteStore, topic: str, partition: int, key: str, size: int, present: dict[str, int]) -> SegmentEntry | None:
    """The entry of another uploader's ``.log`` that ``adopt`` (or the agent's hand-over) registered: kept in
    the ``tk-*`` metadata of the ``.batchindex`` written beside it (``remote_store.adopted_entry``); None when
    it was never adopted (or its batch index has no metadata)."""
    index_key = key[: -len(FileKind.LOG.value)] + FileKind.BATCHINDEX.value
    if index_key not in present:
        return None
    try:
        return adopted_entry(topic, partition, key, size, store.head_metadata(index_key)[1])
    except MetadataError as err:
        log.warning("rebuild: %s beside %s: %s", index_key, key, err)
        return None


def _entry(topic: str, partition: int, key: str, size: int, metadata: dict[str, str]) -> SegmentEntry | None:
    try:
        return entry_from_metadata(topic, partition, key, size, metadata)
    except MetadataError as err:
        log.warning("rebuild: skipping %s: %s", key, err)
        return None


def _complete(store: RemoteStore, entry: SegmentEntry, present: dict[str, int]) -> bool:
    for kind in entry.files:
        key = store.keyspace.segment_key(entry.topic, entry.partition, entry.base_offset, FileKind(kind))
        if key not in present:
            log.warning("rebuild: skipping segment %s: %s is missing (an upload cut short)", entry.object_key, key)
            return False
    return True
