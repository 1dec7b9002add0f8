"""Record batches: the contents of a segment's ``.log`` file and of Fetch/Produce payloads.

A ``.log`` file is a plain concatenation of record batches. Java: ``org.apache.kafka.common.record``
(``DefaultRecordBatch`` for magic 2, ``AbstractLegacyRecordBatch`` for magic 0/1), KIP-98.

Magic 2 batch header (``DefaultRecordBatch``), big-endian, 61 bytes::

    baseOffset           int64   first offset of the batch          } the "log overhead":
    batchLength          int32   bytes after this field             } same place in every magic
    partitionLeaderEpoch int32   set by the broker on append
    magic                int8    2
    crc                  uint32  CRC-32C of attributes .. end of batch
    attributes           int16   see ATTR_* below
    lastOffsetDelta      int32   last offset - baseOffset
    baseTimestamp        int64   timestamp of the first record
    maxTimestamp         int64   largest timestamp in the batch
    producerId           int64   -1 unless idempotent/transactional
    producerEpoch        int16
    baseSequence         int32
    recordCount          int32
    records              ...     varint-framed; one compressed block when codec != 0

The CRC starts at ``attributes`` so that the broker can rewrite ``baseOffset`` and
``partitionLeaderEpoch`` on append without recomputing it (the log.dir writer relies on that).

Magic 0/1 "message sets" share the first 12 bytes (offset int64, messageSize int32), then
``crc uint32`` (CRC-32 of magic .. end), ``magic int8``, ``attributes int8``, ``timestamp int64``
(magic 1 only), key and value (int32 length-prefixed). A compressed legacy message wraps an
inner message set in its value; its offset is the offset of the last inner message.

This module owns the framing: where each batch starts and ends, its header fields, and every
validation that must produce a clear error naming the batch offset and file position. Two
implementations, measured in ``bench/bench_decode.py`` and tested to yield identical records:

* compiled (the default): ``tiered_kafka.format._native`` frames a buffer and checks its CRC-32Cs
  in one call per chunk of batches, and decodes a magic 2 batch's varint records into C record
  objects (the same checks as ``tiered_kafka.format.columnar``, which shares that C code);
* reference (``TIERED_KAFKA_PURE_PYTHON=1``): the framing in Python, magic 2 records decoded by
  ``tiered_kafka.format.default_record`` (the compiled path's checks, written again in Python; its
  docstring states where both are stricter than Java). Magic 0/1 records always go through aiokafka's
  ``LegacyRecordBatch``.

Both raise the same error type with the same message for every corrupt batch (a test mutates
valid batches at random to hold them to that), and return equal records otherwise.

Decompression, in both, uses aiokafka's codec functions over cramjam (:func:`decompress`),
including the xerial snappy framing Java producers write and Kafka's lz4 frame. A missing build
of the extension is an ImportError naming ``make install``, never a silent fall-back.
"""

from __future__ import annotations

import contextlib
import enum
import os
import struct
import zlib
from collections.abc import Iterator
from typing import Protocol

import crc32c
from aiokafka.record.default_records import DefaultRecordBatch as _AioDefaultRecordBatch
from aiokafka.record.legacy_records import LegacyRecordBatch as _AioLegacyRecordBatch

from tiered_kafka.errors import CorruptRecordError, TruncatedRecordError, UnsupportedCodecError
from tiered_kafka.format.codecs import decompress_bounded
from tiered_kafka.format.default_record import BatchHeader
from tiered_kafka.format.default_record import decode_records as decode_default_records

#: Set to "1" to use the pure-Python reference paths here and in ``columnar``.
PURE_PYTHON_ENV = "TIERED_KAFKA_PURE_PYTHON"


def _load_native():  # noqa: ANN202 - the extension module, or None when the reference is forced
    if os.environ.get(PURE_PYTHON_ENV) == "1":
        return None
    try:
        from tiered_kafka.format import _native as module
    except ImportError as err:
        raise ImportError(
            "tiered_kafka.format._native (the compiled record decoder) is not built: run `make install` "
            f"(or `pip install -e .`), or set {PURE_PYTHON_ENV}=1 for the pure-Python reference ({err})"
        ) from err
    return module


_native = _load_native()

#: Which record decoder loaded: "c" (our extension, and aiokafka's Cython extension for magic 0/1)
#: or "python" (forced by TIERED_KAFKA_PURE_PYTHON=1, or AIOKAFKA_NO_EXTENSIONS=1 for aiokafka's).
DECODER_IMPLEMENTATION = (
    "c" if _native is not None and "._crecords." in _AioDefaultRecordBatch.__module__ else "python"
)

# -- layout -------------------------------------------------------------------------------

#: baseOffset int64, batchLength int32: the prefix shared by every magic ("LOG_OVERHEAD").
LOG_OVERHEAD_STRUCT = struct.Struct(">qi")
LOG_OVERHEAD = LOG_OVERHEAD_STRUCT.size  # 12

#: The magic 2 header, one field per format character (names as in the docstring above).
HEADER_V2_STRUCT = struct.Struct(
    ">q"  # baseOffset
    "i"  # batchLength
    "i"  # partitionLeaderEpoch
    "b"  # magic
    "I"  # crc
    "h"  # attributes
    "i"  # lastOffsetDelta
    "q"  # baseTimestamp
    "q"  # maxTimestamp
    "q"  # producerId
    "h"  # producerEpoch
    "i"  # baseSequence
    "i"  # recordCount
)
HEADER_V2_SIZE = HEADER_V2_STRUCT.size  # 61
PARTITION_LEADER_EPOCH_OFFSET = struct.calcsize(">qi")  # 12
MAGIC_OFFSET = struct.calcsize(">qii")  # 16
CRC_OFFSET = MAGIC_OFFSET + struct.calcsize(">b")  # 17
ATTRIBUTES_OFFSET = CRC_OFFSET + struct.calcsize(">I")  # 21: the CRC covers from here on
LAST_OFFSET_DELTA_OFFSET = ATTRIBUTES_OFFSET + struct.calcsize(">h")  # 23
MAX_TIMESTAMP_OFFSET = LAST_OFFSET_DELTA_OFFSET + struct.calcsize(">iq")  # 35
RECORD_COUNT_OFFSET = HEADER_V2_SIZE - struct.calcsize(">i")  # 57

#: Magic 0/1 message header after the log overhead: crc uint32, magic int8, attributes int8,
#: then timestamp int64 (magic 1 only), key length int32, value length int32.
LEGACY_CRC_OFFSET = LOG_OVERHEAD  # 12
LEGACY_MAGIC_OFFSET = LOG_OVERHEAD + struct.calcsize(">I")  # 16, as in magic 2
LEGACY_ATTRIBUTES_OFFSET = LEGACY_MAGIC_OFFSET + 1
LEGACY_TIMESTAMP_OFFSET = LEGACY_ATTRIBUTES_OFFSET + 1  # magic 1 only
LEGACY_MIN_SIZE = {0: struct.calcsize(">Ibbii"), 1: struct.calcsize(">Ibbqii")}  # 14, 22

#: batchLength of a magic 2 batch with no records: the header minus the log overhead.
V2_MIN_BATCH_LENGTH = HEADER_V2_SIZE - LOG_OVERHEAD  # 49

#: Kafka refuses batches above message.max.bytes; nothing legitimate exceeds 2 GiB - 1, and a
#: length beyond the buffer is reported as truncation. This bound only catches absurd values.
MAX_BATCH_LENGTH = 2**31 - 1 - LOG_OVERHEAD

#: Batches at least this large are CRC-checked with the ``crc32c`` package (hardware, ~20 GB/s);
#: smaller ones with aiokafka's C routine, whose per-call overhead is lower. Measured crossover
#: about 500 B (aiokafka 576 ns vs crc32c 821 ns at 79 B; 11.1 us vs 1.4 us at 15 KB).
_LARGE_BATCH_CRC_THRESHOLD = 512

NO_PRODUCER_ID = -1
NO_PARTITION_LEADER_EPOCH = -1
NO_TIMESTAMP = -1


class Codec(enum.IntEnum):
    """Compression codec ids, attributes bits 0-2 (Java ``CompressionType``)."""

    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4


class TimestampType(enum.IntEnum):
    """Attributes bit 3 (Java ``TimestampType``); magic 0 has no timestamps."""

    NO_TIMESTAMP_TYPE = -1
    CREATE_TIME = 0
    LOG_APPEND_TIME = 1


class ControlRecordType(enum.IntEnum):
    """Key of a control record: version int16, type int16 (Java ``ControlRecordType``)."""

    ABORT = 0
    COMMIT = 1


ATTR_CODEC_MASK = 0x07
ATTR_TIMESTAMP_TYPE = 0x08
ATTR_TRANSACTIONAL = 0x10
ATTR_CONTROL = 0x20
ATTR_DELETE_HORIZON = 0x40  # KIP-534: baseTimestamp holds the delete horizon
CONTROL_KEY_STRUCT = struct.Struct(">hh")  # version, type

_LENGTH = struct.Struct(">i").unpack_from
_INT64 = struct.Struct(">q").unpack_from
_INT32 = struct.Struct(">i").unpack_from
_UINT32 = struct.Struct(">I").unpack_from
_INT16 = struct.Struct(">h").unpack_from


def decompress(codec_id: int, payload: bytes | memoryview) -> bytes:
    """The records block of a compressed batch, uncompressed (the extension calls this once per batch).

    At most ``codecs.MAX_DECOMPRESSED_BATCH_BYTES`` (256 MiB; the decision is in ``codecs``), else
    ValueError (the decoders raise it as CorruptRecordError with the batch's position). Snappy: raw blocks (librdkafka) or xerial framing (Java); lz4: Kafka's lz4
    frame (KIP-57)."""
    if Codec.GZIP <= codec_id <= Codec.ZSTD:
        return decompress_bounded(codec_id, payload)
    raise UnsupportedCodecError(f"unknown compression codec id {codec_id}")


if _native is not None:
    _native.set_decompress(decompress)  # BatchView iteration decodes magic 2 records in C from now on


@contextlib.contextmanager
def reference_paths() -> Iterator[None]:
    """Within the block, this module and ``columnar`` take their pure-Python reference paths, as
    TIERED_KAFKA_PURE_PYTHON=1 selects them at import: for tests and benchmarks comparing both in one
    process. (RecordBatch iteration takes the Python decoders while no codec function is registered.)"""
    global _native
    saved = _native
    if saved is None:
        yield
        return
    _native = None
    saved.set_decompress(None)
    try:
        yield
    finally:
        _native = saved
        saved.set_decompress(decompress)


class Record(Protocol):
    """One record as decoded from a batch (``_native.Record`` and aiokafka's record objects satisfy this).

    ``timestamp_type`` is 0 (CreateTime), 1 (LogAppendTime) or None (magic 0).
    ``headers`` is empty for magic 0/1.
    """

    @property
    def offset(self) -> int: ...
    @property
    def timestamp(self) -> int | None: ...
    @property
    def timestamp_type(self) -> int | None: ...
    @property
    def key(self) -> bytes | None: ...
    @property
    def value(self) -> bytes | None: ...
    @property
    def headers(self) -> list[tuple[str, bytes | None]]: ...


class _PyBatchView:
    """The reference base of RecordBatch; the compiled one is ``_native.BatchView`` (same members)."""

    __slots__ = ("buffer", "position", "magic")

    def __init__(self, buffer: memoryview, position: int, magic: int) -> None:
        self.buffer = buffer
        self.position = position
        self.magic = magic

    @property
    def is_control(self) -> bool:
        """A control batch holds transaction markers (COMMIT/ABORT), not user records."""
        # attributes is a big-endian int16: its low byte, holding the flag, is the second one
        return self.magic >= 2 and bool(self.buffer[ATTRIBUTES_OFFSET + 1] & ATTR_CONTROL)

    def __iter__(self) -> Iterator[Record]:
        return self._decode_python()  # type: ignore[attr-defined]


class RecordBatch(_native.BatchView if _native is not None else _PyBatchView):  # type: ignore[misc]
    """A zero-copy view of one record batch (any magic) and where it sits in its file.

    ``RecordBatch(buffer, position, magic)``: ``buffer`` is a memoryview of exactly the batch's
    bytes; header fields are read from it on access. For magic 0/1 a "batch" is one top-level
    message (a compressed wrapper holds several records). ``buffer``, ``position``, ``magic``,
    ``is_control`` and iteration (records in offset order, decompressed if needed, errors raised
    on the first ``iter()``) come from the base class, compiled unless TIERED_KAFKA_PURE_PYTHON=1.
    """

    # a decoder built by verify_crc, kept for the first iteration (decoders are single-use), and the
    # offset and length bytes it was built from: reference path only, unset until verify_crc sets them
    __slots__ = ("_pending_decoder", "_pending_for")

    def __repr__(self) -> str:
        return (
            f"RecordBatch(magic={self.magic}, base_offset={self.base_offset}, "
            f"last_offset={self.last_offset}, size={self.size}, position={self.position})"
        )

    # -- header fields ------------------------------------------------------------------
    @property
    def size(self) -> int:
        """Bytes of the whole batch, log overhead included (Java ``sizeInBytes``)."""
        return len(self.buffer)

    @property
    def next_position(self) -> int:
        return self.position + len(self.buffer)

    @property
    def base_offset(self) -> int:
        if self.magic >= 2:
            return _INT64(self.buffer, 0)[0]
        if self.codec == Codec.NONE:
            return _INT64(self.buffer, 0)[0]
        return self.last_offset - self.record_count + 1

    @property
    def last_offset(self) -> int:
        base = _INT64(self.buffer, 0)[0]
        if self.magic >= 2:
            return base + _INT32(self.buffer, LAST_OFFSET_DELTA_OFFSET)[0]
        return base  # a legacy wrapper carries the offset of its last inner message

    @property
    def next_offset(self) -> int:
        return self.last_offset + 1

    @property
    def partition_leader_epoch(self) -> int:
        if self.magic < 2:
            return NO_PARTITION_LEADER_EPOCH
        return _INT32(self.buffer, PARTITION_LEADER_EPOCH_OFFSET)[0]

    @property
    def crc(self) -> int:
        return _UINT32(self.buffer, CRC_OFFSET if self.magic >= 2 else LEGACY_CRC_OFFSET)[0]

    @property
    def attributes(self) -> int:
        if self.magic >= 2:
            return _INT16(self.buffer, ATTRIBUTES_OFFSET)[0]
        return self.buffer[LEGACY_ATTRIBUTES_OFFSET]

    @property
    def codec(self) -> Codec:
        codec_id = self.attributes & ATTR_CODEC_MASK
        try:
            return Codec(codec_id)
        except ValueError:
            raise UnsupportedCodecError(
                f"unknown compression codec id {codec_id} in batch at position {self.position}"
            ) from None

    @property
    def timestamp_type(self) -> TimestampType:
        if self.magic == 0:
            return TimestampType.NO_TIMESTAMP_TYPE
        if self.attributes & ATTR_TIMESTAMP_TYPE:
            return TimestampType.LOG_APPEND_TIME
        return TimestampType.CREATE_TIME

    @property
    def is_transactional(self) -> bool:
        return self.magic >= 2 and bool(self.attributes & ATTR_TRANSACTIONAL)

    @property
    def has_delete_horizon(self) -> bool:
        return self.magic >= 2 and bool(self.attributes & ATTR_DELETE_HORIZON)

    @property
    def base_timestamp(self) -> int:
        if self.magic >= 2:
            return _INT64(self.buffer, LAST_OFFSET_DELTA_OFFSET + 4)[0]
        return self.max_timestamp

    @property
    def max_timestamp(self) -> int:
        """The batch's largest timestamp; for magic 0/1 the wrapper's timestamp (-1 for magic 0)."""
        if self.magic >= 2:
            return _INT64(self.buffer, MAX_TIMESTAMP_OFFSET)[0]
        if self.magic == 1:
            return _INT64(self.buffer, LEGACY_TIMESTAMP_OFFSET)[0]
        return NO_TIMESTAMP

    @property
    def producer_id(self) -> int:
        if self.magic < 2:
            return NO_PRODUCER_ID
        return _INT64(self.buffer, MAX_TIMESTAMP_OFFSET + 8)[0]

    @property
    def producer_epoch(self) -> int:
        if self.magic < 2:
            return -1
        return _INT16(self.buffer, MAX_TIMESTAMP_OFFSET + 16)[0]

    @property
    def base_sequence(self) -> int:
        if self.magic < 2:
            return -1
        return _INT32(self.buffer, MAX_TIMESTAMP_OFFSET + 18)[0]

    @property
    def record_count(self) -> int:
        if self.magic >= 2:
            return _INT32(self.buffer, RECORD_COUNT_OFFSET)[0]
        if self.codec == Codec.NONE:
            return 1
        return sum(1 for _ in self._decoder())

    def offset_of_max_timestamp(self) -> int:
        """Offset of the first record holding ``max_timestamp``: the offset a broker puts in the
        time index (Java ``LogValidator``'s offsetOfMaxTimestamp). Decodes the batch when it
        holds several records with CreateTime timestamps."""
        if self.timestamp_type == TimestampType.LOG_APPEND_TIME or (self.magic >= 2 and self.record_count <= 1):
            return self.last_offset
        if self.magic < 2 and self.codec == Codec.NONE:
            return self.last_offset
        target = self.max_timestamp
        for record in self:
            if record.timestamp == target:
                return record.offset
        return self.last_offset

    # -- validation and records ---------------------------------------------------------
    def compute_crc(self) -> int:
        """CRC-32C (magic 2) or CRC-32 (magic 0/1) over the bytes the stored CRC covers."""
        if self.magic >= 2:
            if _native is not None:
                return _native.crc32c(self.buffer[ATTRIBUTES_OFFSET:])
            return crc32c.crc32c(self.buffer[ATTRIBUTES_OFFSET:])
        return zlib.crc32(self.buffer[LEGACY_MAGIC_OFFSET:])

    def verify_crc(self) -> None:
        """Raise CorruptRecordError unless the stored CRC matches the batch's bytes."""
        if _native is not None or self.magic >= 2:
            ok = self.compute_crc() == self.crc
        elif len(self.buffer) >= _LARGE_BATCH_CRC_THRESHOLD:
            ok = self.compute_crc() == self.crc
        else:
            self._pending_decoder = self._decoder()
            self._pending_for = bytes(self.buffer[:LOG_OVERHEAD])
            ok = self._pending_decoder.validate_crc()
        if not ok:
            raise CorruptRecordError(
                f"CRC mismatch: stored {self.crc:#010x}, computed {self.compute_crc():#010x}",
                position=self.position,
                base_offset=_INT64(self.buffer, 0)[0],
            )

    def _decoder(self) -> _AioDefaultRecordBatch | _AioLegacyRecordBatch:
        if self.magic >= 2:
            return _AioDefaultRecordBatch(self.buffer)
        return _AioLegacyRecordBatch(self.buffer, self.magic)

    def _decode_python(self) -> Iterator[Record]:
        """The records on the reference path: magic 2 through ``default_record`` (the compiled path's
        checks, in Python), magic 0/1 through aiokafka's decoders (always)."""
        if self.magic >= 2:
            header = BatchHeader(
                self.position, _INT64(self.buffer, 0)[0], self.attributes,
                _INT32(self.buffer, LAST_OFFSET_DELTA_OFFSET)[0], self.base_timestamp, self.max_timestamp,
                self.record_count,
            )  # fmt: skip
            return iter(decode_default_records(header, self.buffer[HEADER_V2_SIZE:], decompress))
        decoder = getattr(self, "_pending_decoder", None)
        self._pending_decoder = None
        if decoder is None or self._pending_for != bytes(self.buffer[:LOG_OVERHEAD]):
            decoder = self._decoder()  # none kept, or the buffer's offset field was rewritten since
        try:
            return iter(list(decoder))  # decoded eagerly, so errors surface here with context
        except (CorruptRecordError, UnsupportedCodecError):
            raise
        except Exception as err:  # aiokafka raises assorted types for bad payloads
            codec_id = self.attributes & ATTR_CODEC_MASK
            if codec_id > Codec.ZSTD:
                raise UnsupportedCodecError(
                    f"unknown compression codec id {codec_id} in batch with base offset "
                    f"{_INT64(self.buffer, 0)[0]} at position {self.position}"
                ) from err
            raise CorruptRecordError(
                f"cannot decode records ({type(err).__name__}: {err})",
                position=self.position,
                base_offset=_INT64(self.buffer, 0)[0],
            ) from err

    def control_type(self) -> ControlRecordType:
        """The marker type of a control batch (its single record's key: version, type)."""
        if not self.is_control:
            raise ValueError(f"batch at position {self.position} is not a control batch")
        for record in self:
            if record.key is None or len(record.key) < CONTROL_KEY_STRUCT.size:
                break
            _version, marker = CONTROL_KEY_STRUCT.unpack_from(record.key)
            try:
                return ControlRecordType(marker)
            except ValueError:
                break
        raise CorruptRecordError(
            "control batch without a valid control record key",
            position=self.position,
            base_offset=self.base_offset,
        )

    def bytes(self) -> bytes:
        """A copy of the batch's bytes (for writing elsewhere)."""
        return self.buffer.tobytes()


def iter_batches(
    data: bytes | bytearray | memoryview,
    *,
    position: int = 0,
    verify_crc: bool = True,
    allow_truncated_tail: bool = False,
) -> Iterator[RecordBatch]:
    """Yield every record batch of ``data`` without copying it.

    ``position`` is the file (or object) position of ``data[0]``, so errors and
    ``RecordBatch.position`` name real file positions when ``data`` is a region.

    A buffer that ends inside a batch raises TruncatedRecordError, unless
    ``allow_truncated_tail`` (Fetch responses may end with a partial batch, which Kafka
    clients ignore). An absurd or too small length, an unknown magic or a CRC mismatch
    always raises CorruptRecordError: nothing is skipped silently.
    """
    view = data if isinstance(data, memoryview) else memoryview(data)
    if view.ndim != 1 or view.itemsize != 1:
        view = view.cast("B")
    check_position(position, len(view))
    if _native is not None:
        return _iter_batches_native(view, position, verify_crc, allow_truncated_tail)
    return _iter_batches_python(view, position, verify_crc, allow_truncated_tail)


def check_position(position: int, size: int) -> None:
    """ValueError unless ``position`` (of a buffer's first byte) is >= 0 and position + size fits int64."""
    if position < 0 or position > 2**63 - 1 - size:
        raise ValueError(f"position {position}: must be 0 or more, and position + {size} bytes must fit int64")


#: Batches framed per call of the extension: growing, so that a caller stopping after the first
#: batches of a large buffer does not pay for checking all of it.
_FRAME_CHUNKS = (16, 256, 4096)


def _iter_batches_native(
    view: memoryview, position: int, verify_crc: bool, allow_truncated_tail: bool
) -> Iterator[RecordBatch]:
    """iter_batches through the extension: the same checks, errors and order of errors."""
    start = 0
    chunk = 0
    while start < len(view):
        batches, legacy, start, error = _native.frame(view, start, position, verify_crc, _FRAME_CHUNKS[chunk], RecordBatch)
        chunk = min(chunk + 1, len(_FRAME_CHUNKS) - 1)
        if legacy and verify_crc:
            for batch in batches:
                if batch.magic < 2:
                    batch.verify_crc()  # the extension checks magic 2 CRC-32Cs; legacy CRC-32 here
                yield batch
        else:
            yield from batches
        if error is not None:
            if allow_truncated_tail and isinstance(error, TruncatedRecordError):
                return
            raise error


def _iter_batches_python(
    view: memoryview, position: int, verify_crc: bool, allow_truncated_tail: bool
) -> Iterator[RecordBatch]:
    """The reference framing loop (TIERED_KAFKA_PURE_PYTHON=1)."""
    end_of_data = len(view)
    pos = 0
    while pos < end_of_data:
        remaining = end_of_data - pos
        if remaining < LOG_OVERHEAD:
            if allow_truncated_tail:
                return
            raise TruncatedRecordError(
                f"{remaining} trailing bytes are too few for a batch header", position=position + pos
            )
        base_offset, length = LOG_OVERHEAD_STRUCT.unpack_from(view, pos)
        if length < LEGACY_MIN_SIZE[0] or length > MAX_BATCH_LENGTH:
            raise CorruptRecordError(f"invalid batch length {length}", position=position + pos, base_offset=base_offset)
        end = pos + LOG_OVERHEAD + length
        if end > end_of_data:
            if allow_truncated_tail:
                return
            raise TruncatedRecordError(
                f"batch length {length} runs past the end of the data ({remaining} bytes left)",
                position=position + pos,
                base_offset=base_offset,
            )
        magic = view[pos + MAGIC_OFFSET]
        batch = RecordBatch(view[pos:end], position + pos, magic)
        if magic == 2:
            if length < V2_MIN_BATCH_LENGTH:
                raise CorruptRecordError(
                    f"batch length {length} is below the magic 2 header size",
                    position=position + pos,
                    base_offset=base_offset,
                )
        elif magic > 2:
            raise CorruptRecordError(f"unknown magic {magic}", position=position + pos, base_offset=base_offset)
        elif length < LEGACY_MIN_SIZE[magic]:
            raise CorruptRecordError(
                f"message size {length} is below the magic {magic} minimum",
                position=position + pos,
                base_offset=base_offset,
            )
        if verify_crc:
            batch.verify_crc()
        yield batch
        pos = end


def iter_records(
    data: bytes | bytearray | memoryview, *, position: int = 0, verify_crc: bool = True
) -> Iterator[Record]:
    """Yield every record of every non-control batch of ``data``, in offset order."""
    for batch in iter_batches(data, position=position, verify_crc=verify_crc):
        if not batch.is_control:
            yield from batch


def set_base_offset(batch: bytearray | memoryview, base_offset: int, partition_leader_epoch: int | None = None) -> None:
    """Rewrite a magic 2 batch's baseOffset (and partitionLeaderEpoch) in place.

    Both fields sit before the CRC-covered region, so the CRC stays valid; this is what
    a broker does to every produced batch (Java ``MemoryRecords.setLastOffset`` / ``setPartitionLeaderEpoch``).
    """
    struct.pack_into(">q", batch, 0, base_offset)
    if partition_leader_epoch is not None:
        struct.pack_into(">i", batch, PARTITION_LEADER_EPOCH_OFFSET, partition_leader_epoch)


def set_legacy_offset(message: bytearray | memoryview, offset: int) -> None:
    """Rewrite a magic 0/1 message's offset field (outside its CRC)."""
    struct.pack_into(">q", message, 0, offset)
