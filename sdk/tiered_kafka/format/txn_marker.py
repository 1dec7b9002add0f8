"""Transaction markers: the COMMIT/ABORT control batches a coordinator writes into every partition of a
transaction (Java ``EndTransactionMarker``, ``MemoryRecords.withEndTransactionMarker``, KIP-98).

A marker is a magic 2 batch (layout in ``record_batch``) with the transactional and control
attribute bits set, the producer's id and epoch, baseSequence -1, and exactly one record::

    record    length varint, attributes int8 0, timestampDelta varint 0, offsetDelta varint 0,
              key length varint, key, value length varint, value, header count varint 0
    key       version int16 0, type int16 (0 ABORT, 1 COMMIT: ``ControlRecordType``)
    value     version int16 0, coordinatorEpoch int32

Varints are zigzag-encoded (Kafka's ``ByteUtils.writeVarint``); every length here is below 64,
so each varint is one byte.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import crc32c

from tiered_kafka.errors import CorruptRecordError
from tiered_kafka.format.record_batch import (
    ATTR_CONTROL,
    ATTR_TRANSACTIONAL,
    ATTRIBUTES_OFFSET,
    CONTROL_KEY_STRUCT,
    CRC_OFFSET,
    HEADER_V2_STRUCT,
    LOG_OVERHEAD,
    ControlRecordType,
    RecordBatch,
)

CONTROL_VALUE_STRUCT = struct.Struct(
    ">h"  # version
    "i"  # coordinatorEpoch
)
CURRENT_VERSION = 0
NO_SEQUENCE = -1


@dataclass(frozen=True, slots=True)
class EndTxnMarker:
    """What a marker says (Java ``EndTransactionMarker``)."""

    control_type: ControlRecordType
    coordinator_epoch: int


def _varint(value: int) -> bytes:
    """A one-byte zigzag varint (``value`` in [0, 63]), all a marker needs."""
    if not 0 <= value < 64:
        raise ValueError(f"marker field length {value} does not fit one varint byte")
    return bytes([value << 1])


def build(control_type: ControlRecordType, *, producer_id: int, producer_epoch: int, coordinator_epoch: int, timestamp: int) -> bytes:
    """The bytes of one marker batch at base offset 0 (the log assigns its offset on append)."""
    key = CONTROL_KEY_STRUCT.pack(CURRENT_VERSION, control_type)
    value = CONTROL_VALUE_STRUCT.pack(CURRENT_VERSION, coordinator_epoch)
    body = b"\0" + _varint(0) + _varint(0) + _varint(len(key)) + key + _varint(len(value)) + value + _varint(0)
    record = _varint(len(body)) + body
    batch = bytearray(
        HEADER_V2_STRUCT.pack(
            0,  # baseOffset
            HEADER_V2_STRUCT.size - LOG_OVERHEAD + len(record),  # batchLength
            -1,  # partitionLeaderEpoch, set by the log on append
            2,  # magic
            0,  # crc, computed below
            ATTR_TRANSACTIONAL | ATTR_CONTROL,  # attributes
            0,  # lastOffsetDelta
            timestamp,  # baseTimestamp
            timestamp,  # maxTimestamp
            producer_id,
            producer_epoch,
            NO_SEQUENCE,  # baseSequence
            1,  # recordCount
        )
    )
    batch += record
    struct.pack_into(">I", batch, CRC_OFFSET, crc32c.crc32c(bytes(batch[ATTRIBUTES_OFFSET:])))
    return bytes(batch)


def parse(batch: RecordBatch) -> EndTxnMarker:
    """The marker of a control batch; CorruptRecordError when its record is not one."""
    control_type = batch.control_type()
    for record in batch:
        if record.value is not None and len(record.value) >= CONTROL_VALUE_STRUCT.size:
            _version, coordinator_epoch = CONTROL_VALUE_STRUCT.unpack_from(record.value)
            return EndTxnMarker(control_type, coordinator_epoch)
    raise CorruptRecordError("control batch without an end transaction marker value", position=batch.position, base_offset=batch.base_offset)
