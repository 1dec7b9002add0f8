"""Migrating a registry in place to layout 2 (package doc, "Layout 2"): resumable, partition by partition.

For each partition of the partitions SET (also added to the partition index):

1. skip it when its ``info`` hash says ``layout`` 2 (migrated, or created by layout 2 code);
2. read its segment hashes (pipelined, ``batch`` at a time) and rewrite each one holding a
   ``sparse_index`` without it (``_REWRITE_LUA``: only while it holds that very segment with
   the same files), so that Redis stores it compactly again;
3. write its time index and summary and set ``layout`` 2 in one script (``_INDEX_LUA``), only if
   its segments did not change meanwhile (else read it again).

An interrupted run is resumed by running it again: migrated partitions are skipped, a half-done one
is redone (both steps are idempotent). Writers keep working during the migration: registrations on a
partition not migrated yet are read and stored as layout 2 entries, without time index upkeep until
step 3 writes the index whole.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tiered_kafka.registry._entries import SegmentEntry
from tiered_kafka.registry._errors import RegistryUnavailableError
from tiered_kafka.registry._layout import LAYOUT_VERSION, STORED_SEGMENT_FIELDS, _decode_mapping, _text, parse_segment_member, time_member_of

if TYPE_CHECKING:
    from tiered_kafka.registry._client import Registry


@dataclass
class MigrationReport:
    partitions: int = 0
    migrated: int = 0
    already: int = 0
    segments: int = 0
    rewritten: int = 0

    def __str__(self) -> str:
        return (f"{self.partitions} partitions: {self.migrated} migrated, {self.already} already at layout {LAYOUT_VERSION}; "
                f"{self.segments} segments read, {self.rewritten} rewritten without their sparse index")


def migrate(registry: Registry, *, batch: int = 1000, progress: Callable[[int, int], None] | None = None) -> MigrationReport:
    """Migrate every listed partition (module doc); ``progress(done, total)`` after each partition."""
    from tiered_kafka.registry._client import _translated

    report = MigrationReport()
    partitions = registry.partitions()
    report.partitions = len(partitions)
    with _translated(f"migrate the registry of {registry.cluster}"):
        for i in range(0, len(partitions), batch):
            pipe = registry.client.pipeline(transaction=False)
            for topic, partition in partitions[i : i + batch]:
                registry._list_in(pipe, topic, partition)
            pipe.execute()
        for done, (topic, partition) in enumerate(partitions, 1):
            if _migrate_partition(registry, topic, partition, batch, report):
                report.migrated += 1
            else:
                report.already += 1
            if progress is not None:
                progress(done, len(partitions))
    return report


def _migrate_partition(registry: Registry, topic: str, partition: int, batch: int, report: MigrationReport) -> bool:
    keys = registry.keys(topic, partition)
    client = registry.client
    if _text(client.hget(keys.info, "layout") or "") == LAYOUT_VERSION:
        return False
    for _ in range(100):
        members = [_text(m) for m in client.zrange(keys.segments, 0, -1)]
        entries: list[SegmentEntry | None] = []
        for start in range(0, len(members), batch):
            chunk = members[start : start + batch]
            pipe = client.pipeline(transaction=False)
            for member in chunk:
                pipe.hgetall(keys.segment(parse_segment_member(member, key=keys.segments)[0]))
            hashes = pipe.execute()
            rewrites: list[tuple[list[str], list[str]]] = []
            for member, raw in zip(chunk, hashes, strict=True):
                if not raw:
                    entries.append(None)
                    continue
                key = keys.segment(parse_segment_member(member, key=keys.segments)[0])
                fields = _decode_mapping(raw, key)
                entries.append(SegmentEntry.from_fields(topic, partition, fields, key=key))
                if "sparse_index" in fields:
                    kept = [part for name in STORED_SEGMENT_FIELDS if name in fields for part in (name, fields[name])]
                    rewrites.append(([key], [fields["checksum"], fields["files"], *kept]))
            if rewrites:
                report.rewritten += sum(int(r) for r in registry._pipelined(registry._rewrite, rewrites))
        if any(e is None for e in entries):  # a segment deleted between the two reads: read again
            continue
        args: list[Any] = [str(sum(max(e.records_in_range, 0) for e in entries if e)), str(len(members)), *members]
        running: int | None = None
        for entry in entries:
            assert entry is not None
            running = entry.max_timestamp if running is None else max(running, entry.max_timestamp)
            args += [str(running), time_member_of(entry)]
        done = int(registry._write(registry._index, [keys.segments, keys.info, keys.times], args))
        if done >= 0:
            report.segments += done
            return True
    raise RegistryUnavailableError(f"migrate {topic}-{partition}: the partition kept changing under concurrent writes")
