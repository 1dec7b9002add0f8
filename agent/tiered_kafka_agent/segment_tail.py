"""A segment's tail as a segment of its own: when its base offset's object key is another leader's.

After a leadership move both replicas may hold a segment with the same base offset but different
ends (replicas roll independently: ``log.roll.jitter.ms``, ``segment.ms``). The old leader's
object owns the key ``{base:020d}.log`` (the conditional PUT, ``remote_store``); the new leader's
offsets past it would then have no key to go under. Their batches are copied out of the local
segment, from the batch holding the first offset still missing on, into a segment of their own
named by that batch's base offset (Kafka's rule too: a segment is named by its first batch's
base offset), in a private directory, and uploaded and registered like any rotated segment:

- ``{t:020d}.log``: the local ``.log``'s bytes from that batch's position to its end (whole
  batches, unchanged: their CRCs and offsets hold; a reader cannot tell the copy from a segment
  the broker rolled at ``t``);
- ``.index`` and ``.timeindex``: empty (valid: Kafka's own for a segment smaller than
  ``index.interval.bytes``); readers plan from the ``.batchindex`` the scan builds;
- ``.txnindex``: the local entries (``AbortedTxn``) whose ``lastOffset`` (the ABORT marker) is at
  or past ``t``, the ones whose marker the tail holds (Kafka puts an entry in the segment holding
  the marker); none left: no file;
- the producer snapshot: the local one, unchanged (the state after the same last offset).

Only for magic 2 segments (the batch index locates the batch); others cannot be split here and
their missing offsets are a recorded gap (``partition_uploader``).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

from tiered_kafka.format import txn_index
from tiered_kafka.format.batch_index import BatchIndex
from tiered_kafka.format.segment_names import FileKind, segment_file_name
from tiered_kafka_agent.errors import LocalSegmentError
from tiered_kafka_agent.local_segments import LocalSegment, OpenSegment

COPY_CHUNK = 8 * 1024 * 1024


class TailUnavailableError(LocalSegmentError):
    """The segment has no batch index (not magic 2 throughout), or no batch at or past the offset."""


@contextlib.contextmanager
def segment_tail(opened: OpenSegment, batch_index: bytes | None, first_offset: int, next_base: int | None) -> Iterator[tuple[LocalSegment, int | None]]:
    """The tail of ``opened`` from the batch holding ``first_offset``, as files of a segment in a
    temporary directory (module doc), removed on exit. Yields (that segment, the base offset its
    snapshot is named by: ``next_base``)."""
    if batch_index is None:
        raise TailUnavailableError(f"segment {opened.segment.base_offset} has no batch index (not magic 2 throughout)")
    index = BatchIndex.from_bytes(batch_index)
    try:
        batch = index.holding(first_offset)
    except KeyError as err:
        raise TailUnavailableError(f"segment {opened.segment.base_offset}: {err}") from None
    tail_base, position = batch.base_offset, batch.position
    root = Path(tempfile.mkdtemp(prefix="tk-tail-"))
    try:
        directory = root / opened.segment.directory.name
        directory.mkdir()
        _copy_from(opened.files[FileKind.LOG], position, directory / segment_file_name(tail_base, FileKind.LOG))
        for kind in (FileKind.INDEX, FileKind.TIMEINDEX):
            (directory / segment_file_name(tail_base, kind)).write_bytes(b"")
        fd = opened.files.get(FileKind.TXNINDEX)
        if fd is not None:
            name = str(opened.names[FileKind.TXNINDEX])
            kept = [e for e in txn_index.parse(os.pread(fd, os.fstat(fd).st_size, 0), name=name) if e.last_offset >= tail_base]
            if kept:
                (directory / segment_file_name(tail_base, FileKind.TXNINDEX)).write_bytes(b"".join(e.to_bytes() for e in kept))
        fd = opened.files.get(FileKind.SNAPSHOT)
        if fd is not None and next_base is not None:
            _copy_from(fd, 0, directory / segment_file_name(next_base, FileKind.SNAPSHOT))
        yield LocalSegment(tail_base, directory), next_base
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _copy_from(fd: int, position: int, target: Path) -> None:
    """Copy the open file ``fd`` from ``position`` to its end into ``target``."""
    size = os.fstat(fd).st_size
    with open(target, "wb") as out:
        while position < size:
            chunk = os.pread(fd, min(COPY_CHUNK, size - position), position)
            if not chunk:
                break
            out.write(chunk)
            position += len(chunk)
