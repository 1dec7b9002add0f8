"""The producer-state snapshot: a partition's ``{offset}.snapshot`` file (Java ``ProducerStateManager``).

A broker writes one when it rolls a segment, named by the new segment's base offset: the state of
every idempotent or transactional producer of the partition after the records below that offset
(Java ``ProducerStateManager.writeSnapshot`` / ``readSnapshot``). Layout, big-endian, version 1::

    version        int16   1 (the only version; any other is refused)
    crc            uint32  CRC-32C of everything after this field (the entry count and entries)
    entries        int32   number of producer entries, then per entry (46 bytes):
      producerId            int64  the producer
      epoch                 int16  its current epoch
      lastSequence          int32  sequence of the last record of its last data batch (-1: none)
      lastOffset            int64  offset of the last record of its last data batch (-1: none)
      offsetDelta           int32  lastOffset - first offset of that batch
      timestamp             int64  max timestamp of that batch (or of the last marker)
      coordinatorEpoch      int32  epoch of the coordinator that wrote its last marker (-1: none)
      currentTxnFirstOffset int64  first offset of its open transaction, -1 when none

Kafka's rules followed: a snapshot holds the state *before* the offset it is named by; the CRC
covers from the entry count to the end, so it is computed after the entries are written; entries
are in no particular order (Java writes a HashMap; this module writes them by producer id).
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from dataclasses import dataclass

import crc32c

from tiered_kafka.errors import CorruptCheckpointError

VERSION = 1
HEADER_STRUCT = struct.Struct(
    ">h"  # version
    "I"  # crc
)
COUNT_STRUCT = struct.Struct(">i")  # number of entries
CRC_OFFSET = struct.calcsize(">h")  # 2
ENTRIES_OFFSET = HEADER_STRUCT.size  # 6: the CRC covers from here to the end
ENTRY_STRUCT = struct.Struct(
    ">q"  # producerId
    "h"  # epoch
    "i"  # lastSequence
    "q"  # lastOffset
    "i"  # offsetDelta
    "q"  # timestamp
    "i"  # coordinatorEpoch
    "q"  # currentTxnFirstOffset
)
ENTRY_SIZE = ENTRY_STRUCT.size  # 46


@dataclass(frozen=True, slots=True)
class ProducerSnapshotEntry:
    """One producer of a ``.snapshot`` (Java ``ProducerStateEntry`` as written to disk)."""

    producer_id: int
    epoch: int
    last_sequence: int = -1
    last_offset: int = -1
    offset_delta: int = 0
    timestamp: int = -1
    coordinator_epoch: int = -1
    current_txn_first_offset: int = -1

    def to_bytes(self) -> bytes:
        return ENTRY_STRUCT.pack(
            self.producer_id,
            self.epoch,
            self.last_sequence,
            self.last_offset,
            self.offset_delta,
            self.timestamp,
            self.coordinator_epoch,
            self.current_txn_first_offset,
        )


def serialize(entries: Iterable[ProducerSnapshotEntry]) -> bytes:
    """The file's bytes: version 1, CRC-32C, then the entries ordered by producer id."""
    ordered = sorted(entries, key=lambda e: e.producer_id)
    body = COUNT_STRUCT.pack(len(ordered)) + b"".join(e.to_bytes() for e in ordered)
    return HEADER_STRUCT.pack(VERSION, crc32c.crc32c(body)) + body


def parse(data: bytes | memoryview, *, name: str = ".snapshot") -> list[ProducerSnapshotEntry]:
    """Every entry of a ``.snapshot``, validated (Java ``readSnapshot``).

    Raises CorruptCheckpointError, naming ``name``, for a short file, a version other than 1, a CRC
    mismatch, or a size that does not match the entry count.
    """
    if len(data) < ENTRIES_OFFSET + COUNT_STRUCT.size:
        raise CorruptCheckpointError(f"{name}: {len(data)} bytes are too few for a producer snapshot")
    version, crc = HEADER_STRUCT.unpack_from(data)
    if version != VERSION:
        raise CorruptCheckpointError(f"{name}: snapshot version {version}; only {VERSION} exists")
    computed = crc32c.crc32c(bytes(data[ENTRIES_OFFSET:]))
    if computed != crc:
        raise CorruptCheckpointError(f"{name}: CRC mismatch: stored {crc:#010x}, computed {computed:#010x}")
    (count,) = COUNT_STRUCT.unpack_from(data, ENTRIES_OFFSET)
    start = ENTRIES_OFFSET + COUNT_STRUCT.size
    if count < 0 or len(data) != start + count * ENTRY_SIZE:
        raise CorruptCheckpointError(f"{name}: {len(data)} bytes do not hold {count} entries of {ENTRY_SIZE} bytes")
    return [ProducerSnapshotEntry(*ENTRY_STRUCT.unpack_from(data, start + i * ENTRY_SIZE)) for i in range(count)]
