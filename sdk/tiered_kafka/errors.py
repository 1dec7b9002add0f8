"""Exceptions raised by the tiered-kafka SDK and its shared core.

One root, so callers can catch everything of ours in one clause::

    TieredKafkaError
    ├── FormatError                 bytes on disk or from S3 do not follow Kafka's format
    │   ├── CorruptRecordError      a record batch (.log) fails its CRC, length or magic checks
    │   │   └── TruncatedRecordError    the buffer ends inside a batch
    │   ├── CorruptIndexError       an .index or .timeindex file is malformed
    │   ├── InvalidSegmentNameError a file name is not a Kafka segment file name
    │   └── CorruptCheckpointError  offset.wm, leader-epoch-checkpoint, ... malformed
    ├── UnsupportedCodecError       a batch uses a compression codec we cannot decode
    ├── LogWriteError               the log.dir writer refused an append (offsets, sizes, ...)
    ├── OffsetOutOfRangeError       an offset below the log start offset or past the log end
    └── ConfigError                 a configuration value is invalid

Corrupt local or remote bytes get their own classes (never a Kafka broker error code),
and each carries the context needed to find the bad bytes: file position, batch offset,
path or object key. ``retriable`` tells retry loops whether trying again can help.
"""

from __future__ import annotations


class TieredKafkaError(Exception):
    """Root of every exception raised by tiered-kafka."""

    retriable: bool = False


class FormatError(TieredKafkaError):
    """Bytes that should follow one of Kafka's on-disk formats do not."""


class CorruptRecordError(FormatError):
    """A record batch failed validation.

    ``position`` is the byte position of the batch's first byte in the file or object
    (the region's start position plus the offset inside the buffer) and ``base_offset``
    the batch's base offset when it could be read (None when the header itself is bad).
    """

    def __init__(self, message: str, *, position: int, base_offset: int | None = None) -> None:
        where = f"at file position {position}"
        if base_offset is not None:
            where = f"in batch with base offset {base_offset} {where}"
        super().__init__(f"{message} ({where})")
        self.position = position
        self.base_offset = base_offset


class TruncatedRecordError(CorruptRecordError):
    """The buffer ends inside a record batch (a torn write or a short read)."""


class CorruptIndexError(FormatError):
    """An offset index (.index) or time index (.timeindex) is malformed."""


class InvalidSegmentNameError(FormatError):
    """A file name is not one of Kafka's segment file names."""


class CorruptCheckpointError(FormatError):
    """A checkpoint file (offset.wm, leader-epoch-checkpoint, ...) is malformed."""


class UnsupportedCodecError(TieredKafkaError):
    """A record batch uses a compression codec id outside Kafka's 0-4."""


class LogWriteError(TieredKafkaError):
    """The log.dir writer refused an append or a retention step."""


class OffsetOutOfRangeError(TieredKafkaError):
    """An offset lies below the log start offset or past the log end offset (Kafka's OFFSET_OUT_OF_RANGE)."""


class ConfigError(TieredKafkaError):
    """A configuration value is missing or invalid."""
