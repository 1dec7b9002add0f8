"""The transaction index: a segment's ``.txnindex`` file (Java ``TransactionIndex`` and ``AbortedTxn``).

One 34-byte entry per *aborted* transaction whose ABORT marker was appended to the segment::

    version          int16   0 (the only version Kafka writes; any other is refused)
    producerId       int64   the transaction's producer
    firstOffset      int64   offset of the transaction's first record in this partition
    lastOffset       int64   offset of its ABORT control batch (the marker)
    lastStableOffset int64   the partition's last stable offset (LSO) once the abort completed:
                             the first offset of the earliest transaction of *another* producer
                             still open then, or lastOffset + 1 when none was

Kafka's rules (``TransactionIndex.append``, ``LogSegment.updateTxnIndex``):
- an entry goes into the segment that receives the ABORT marker, so a transaction's records may
  lie in earlier segments than its entry;
- entries are appended in marker order: ``lastOffset`` strictly increases within a file;
- committed transactions are not indexed (their records are simply delivered);
- the file exists only for segments that received at least one ABORT (Kafka creates it lazily
  and deletes an empty one).

Readers collect entries the way ``LocalLog.collectAbortedTransactions`` does: start at the segment
holding the fetch offset and walk later segments, keeping entries with ``lastOffset >= fetchOffset``
and ``firstOffset < upperBoundOffset``, until an entry's ``lastStableOffset >= upperBoundOffset``
(every transaction that could touch the range is then known): see ``collect_aborted``.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from dataclasses import dataclass

from tiered_kafka.errors import CorruptIndexError

VERSION = 0
ENTRY_STRUCT = struct.Struct(
    ">h"  # version
    "q"  # producerId
    "q"  # firstOffset
    "q"  # lastOffset
    "q"  # lastStableOffset
)
ENTRY_SIZE = ENTRY_STRUCT.size  # 34


@dataclass(frozen=True, slots=True)
class AbortedTxn:
    """One ``.txnindex`` entry (Java ``AbortedTxn``)."""

    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int

    def to_bytes(self) -> bytes:
        return ENTRY_STRUCT.pack(VERSION, self.producer_id, self.first_offset, self.last_offset, self.last_stable_offset)


def parse(data: bytes | memoryview, *, name: str = ".txnindex") -> list[AbortedTxn]:
    """Every entry of a ``.txnindex``, validated.

    Raises CorruptIndexError (naming ``name`` and the byte position) for a size that is not a
    multiple of 34, a version other than 0, ``lastOffset < firstOffset``, a last stable offset
    past the marker's next offset, or ``lastOffset`` not strictly increasing.
    """
    if len(data) % ENTRY_SIZE:
        raise CorruptIndexError(f"{name}: size {len(data)} is not a multiple of the {ENTRY_SIZE}-byte AbortedTxn entry")
    entries: list[AbortedTxn] = []
    previous_last = -1
    for position in range(0, len(data), ENTRY_SIZE):
        version, producer_id, first, last, lso = ENTRY_STRUCT.unpack_from(data, position)
        if version != VERSION:
            raise CorruptIndexError(f"{name}: entry at byte {position} has version {version}; only {VERSION} exists")
        if first < 0 or last < first:
            raise CorruptIndexError(f"{name}: entry at byte {position} has first offset {first} and last offset {last}")
        if lso < 0 or lso > last + 1:
            raise CorruptIndexError(f"{name}: entry at byte {position} has last stable offset {lso} past its marker {last}")
        if last <= previous_last:
            raise CorruptIndexError(f"{name}: entry at byte {position} does not follow the previous marker ({last} <= {previous_last})")
        previous_last = last
        entries.append(AbortedTxn(producer_id, first, last, lso))
    return entries


def serialize(entries: Iterable[AbortedTxn]) -> bytes:
    """The file's bytes for ``entries`` (checked with the same rules as ``parse``)."""
    data = b"".join(entry.to_bytes() for entry in entries)
    parse(data, name="entries to write")
    return data


def collect_aborted(entries: Iterable[AbortedTxn], fetch_offset: int, upper_bound_offset: int) -> tuple[list[AbortedTxn], bool]:
    """Java ``TransactionIndex.collectAbortedTxns``: the entries of one segment that can abort a
    record in ``[fetch_offset, upper_bound_offset)``, and whether the search is complete (an entry's
    last stable offset reached the upper bound, so no later segment can add one)."""
    found = []
    for entry in entries:
        if entry.last_offset >= fetch_offset and entry.first_offset < upper_bound_offset:
            found.append(entry)
        if entry.last_stable_offset >= upper_bound_offset:
            return found, True
    return found, False
