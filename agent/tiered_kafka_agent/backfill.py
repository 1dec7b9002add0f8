"""``tiered-kafka-agent backfill-batch-index``: batch indexes for segments uploaded without one.

Segments uploaded before the agent wrote batch indexes (``tiered_kafka.format.batch_index``) are
planned by the gateway from their ``.index`` and batch headers read from S3. This command gives
them one, segment by segment, oldest first per partition:

1. skip a segment whose registry entry already lists ``batchindex``, so a second run does nothing
   (the registry keeps no sparse plan index since its layout 2: the gateway derives it from the
   batch index, ``tiered_kafka.registry``);
2. otherwise download its ``.log`` to a temporary file, check its size and whole-file checksum
   against the registry entry, and build the index from a scan that verifies every batch's CRC-32C;
   upload ``{base}.batchindex`` beside it, then add ``batchindex`` to the entry's ``files``
   (``Registry.add_files``, only while the registry still holds that very segment).

The crash order is the upload's: an index object nobody lists is harmless and the next run
overwrites it. A segment that is not magic 2 throughout gets none (the gateway keeps planning it
from headers); a corrupt one is reported and left as it is. The ``.log`` object's ``tk-files``
metadata is not rewritten (that would copy the object): a registry rebuilt from S3 lists only the
files named there, so run this command again after ``rebuild-registry`` (it rebuilds and uploads
the same bytes).

One progress line per segment goes to ``out``; the report counts what happened.
"""

from __future__ import annotations

import mmap
import os
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TextIO

import crc32c

from tiered_kafka.errors import FormatError
from tiered_kafka.format.batch_index import UnsupportedFormatError, build
from tiered_kafka.format.segment_names import FileKind
from tiered_kafka.registry import Registry, SegmentEntry
from tiered_kafka_agent.remote_store import RemoteStore


@dataclass
class BackfillReport:
    segments: int = 0  # registered segments looked at
    added: int = 0  # batch indexes uploaded and registered
    present: int = 0  # already had one
    unsupported: int = 0  # not magic 2 throughout: none possible
    gone: int = 0  # deleted from the registry (remote retention) while being indexed
    failed: int = 0  # corrupt or mismatched .log: reported, left alone

    @property
    def ok(self) -> bool:
        return self.failed == 0


def backfill_batch_indexes(store: RemoteStore, registry: Registry, out: TextIO, topics: Iterable[str] | None = None) -> BackfillReport:
    """Add a batch index to every registered segment lacking one (module doc); idempotent."""
    wanted = set(topics) if topics else None
    report = BackfillReport()
    partitions = [(t, p) for t, p in registry.partitions() if wanted is None or t in wanted]
    for number, (topic, partition) in enumerate(partitions, 1):
        entries = registry.segments(topic, partition)
        missing = [e for e in entries if FileKind.BATCHINDEX.value not in e.files]
        report.segments += len(entries)
        report.present += len(entries) - len(missing)
        print(f"[{number}/{len(partitions)}] {topic}-{partition}: {len(missing)} of {len(entries)} segments lack a batch index", file=out, flush=True)
        for i, entry in enumerate(missing, 1):
            outcome = _backfill_one(store, registry, entry, report)
            print(f"  [{i}/{len(missing)}] segment {entry.base_offset}..{entry.last_offset} ({entry.size} bytes): {outcome}", file=out, flush=True)
    print(
        f"batch indexes: {report.added} added, {report.present} already present, {report.unsupported} not possible (not magic 2), "
        f"{report.gone} deleted meanwhile, {report.failed} failed, of {report.segments} segments",
        file=out,
        flush=True,
    )
    return report


def _backfill_one(store: RemoteStore, registry: Registry, entry: SegmentEntry, report: BackfillReport) -> str:
    with tempfile.TemporaryFile(prefix="tk-backfill-") as tmp:
        store.retry.call(lambda: (tmp.seek(0), tmp.truncate(), store.client.download_fileobj(store.bucket, entry.object_key, tmp)), what=f"download of {entry.object_key}")
        tmp.flush()
        size = os.fstat(tmp.fileno()).st_size
        if size != entry.size:
            report.failed += 1
            return f"FAILED: the object holds {size} bytes, the registry says {entry.size}"
        if size == 0:
            report.unsupported += 1
            return "empty: nothing to index"
        with mmap.mmap(tmp.fileno(), size, prot=mmap.PROT_READ) as mapped:
            view = memoryview(mapped)
            try:
                problem = _checksum_problem(view, entry.checksum)
                if problem is not None:
                    report.failed += 1
                    return f"FAILED: {problem}"
                try:
                    index = build(view, entry.base_offset)
                except UnsupportedFormatError as err:
                    report.unsupported += 1
                    return f"skipped: {err}"
                except FormatError as err:
                    report.failed += 1
                    return f"FAILED: corrupt .log: {str(err)}"
            finally:
                view.release()
    if index.last_offset != entry.last_offset:
        report.failed += 1
        return f"FAILED: the batches end at offset {index.last_offset}, the registry says {entry.last_offset}"
    body = index.to_bytes()
    store.put_bytes(store.keyspace.segment_key(entry.topic, entry.partition, entry.base_offset, FileKind.BATCHINDEX), body)
    if not store.retry.call(
        lambda: registry.add_files(entry, [FileKind.BATCHINDEX.value]), what=f"registration of {entry.object_key}'s batch index"
    ):
        report.gone += 1
        return "deleted from the registry meanwhile: index uploaded, not registered"
    report.added += 1
    return f"{len(index)} batches, batch index of {len(body)} bytes ({len(body) / entry.size:.3%})"


def _checksum_problem(data: memoryview, checksum: str) -> str | None:
    """Why the bytes do not match the registry's checksum (None when they do, or when its algorithm is not ours)."""
    algorithm, _, value = checksum.partition(":")
    if algorithm != "crc32c":
        return None
    actual = f"{crc32c.crc32c(data):08x}"
    return None if actual == value else f"checksum crc32c:{actual} differs from the registry's {checksum}"
