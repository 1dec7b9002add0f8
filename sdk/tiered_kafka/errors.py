"""Exceptions raised by the tiered-kafka SDK and its shared core.

One root, so callers can catch everything of ours in one clause::

    TieredKafkaError
    ├── FormatError                 bytes on disk or from S3 do not follow Kafka's format
    │   ├── CorruptRecordError      a record batch (.log) fails its CRC, length or magic checks
    │   │   └── TruncatedRecordError    the buffer ends inside a batch
    │   ├── CorruptIndexError       an .index or .timeindex file is malformed
    │   ├── InvalidSegmentNameError a file name is not a Kafka segment file name
    │   ├── CorruptCheckpointError  offset.wm, leader-epoch-checkpoint, ... malformed
    │   └── RsmFormatError          an Aiven RSM object (key, manifest, chunk index, metadata record) is malformed
    │       └── RsmDecryptionError  an RSM chunk or data key does not decrypt (wrong key, tampered tag, truncated)
    ├── UnsupportedCodecError       a batch uses a compression codec we cannot decode
    ├── LogWriteError               the log.dir writer refused an append (offsets, sizes, ...)
    │   └── AppendRefusedError      refused by one of Kafka's append rules; names Kafka's error
    ├── OffsetOutOfRangeError       an offset below the log start offset or past the log end
    │   └── OffsetNotRemoteError    remote storage does not hold the offset (the gateway's 416)
    ├── RemoteReadError             reading through the gateway or a presigned URL failed
    │   ├── GatewayRequestError     the gateway answered an error (status, stable code, message)
    │   │   └── TopicAuthorizationError  403 topic_authorization_failed (Kafka's TOPIC_AUTHORIZATION_FAILED)
    │   ├── PresignedUrlError       S3 refused a presigned GET (expired or invalid signature)
    │   └── RemoteGapError          remote storage lacks an offset range (recorded gap)
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


class RsmFormatError(FormatError):
    """An object written by Aiven's RemoteStorageManager (KIP-405) is malformed: its key, its
    ``.rsm-manifest``, its chunk index, a chunk, or a ``__remote_log_metadata`` record (tiered_kafka.rsm)."""


class RsmDecryptionError(RsmFormatError):
    """An RSM data key or chunk does not decrypt: no or the wrong RSA key, a tampered AES-GCM tag, a truncated chunk."""


class UnsupportedCodecError(TieredKafkaError):
    """A record batch uses a compression codec id outside Kafka's 0-4."""


class LogWriteError(TieredKafkaError):
    """The log.dir writer refused an append or a retention step."""


class AppendRefusedError(LogWriteError):
    """An append broke one of Kafka's rules (batch size, producer epoch, sequence, transaction state).

    ``kafka_error`` is the Kafka error a broker answers, in snake case, as Kafka's ``Errors`` enum names
    it: ``message_too_large``, ``record_list_too_large`` (Java's RecordBatchTooLargeException),
    ``invalid_producer_epoch``, ``out_of_order_sequence_number``, ``invalid_txn_state``,
    ``transaction_coordinator_fenced``.
    """

    def __init__(self, kafka_error: str, message: str) -> None:
        super().__init__(message)
        self.kafka_error = kafka_error


class OffsetOutOfRangeError(TieredKafkaError):
    """An offset lies below the log start offset or past the log end offset (Kafka's OFFSET_OUT_OF_RANGE)."""


class ConfigError(TieredKafkaError):
    """A configuration value is missing or invalid."""


class OffsetNotRemoteError(OffsetOutOfRangeError):
    """Remote storage does not hold the offset: ``earliest``/``latest`` are its range (None if empty)."""

    def __init__(self, message: str, *, offset: int, earliest: int | None, latest: int | None) -> None:
        super().__init__(message)
        self.offset = offset
        self.earliest = earliest
        self.latest = latest

    @property
    def past_the_end(self) -> bool:
        """True when the offset is newer than everything remote (it may still be uploaded)."""
        return self.latest is None or self.offset > self.latest


class RemoteReadError(TieredKafkaError):
    """A read through the gateway or a presigned S3 URL failed (after the configured retries)."""


class GatewayRequestError(RemoteReadError):
    """The gateway answered an error: HTTP ``status``, its stable ``code`` and ``message``."""

    def __init__(self, message: str, *, status: int, code: str, details: dict[str, object] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.details = details or {}
        self.retriable = status >= 500 or status == 429


class PresignedUrlError(RemoteReadError):
    """S3 refused a presigned GET: 403 (the URL expired or its signature is not accepted) or 404
    (the object was removed after it was planned)."""

    retriable = True


class RemoteGapError(RemoteReadError):
    """Remote storage lacks ``start_offset..end_offset`` of a partition (a gap the agent recorded)."""

    def __init__(self, message: str, *, topic: str, partition: int, start_offset: int, end_offset: int, reason: str) -> None:
        super().__init__(message)
        self.topic = topic
        self.partition = partition
        self.start_offset = start_offset
        self.end_offset = end_offset
        self.reason = reason


class KafkaReadError(RemoteReadError):
    """A hybrid-mode read (``tiered.mode`` REMOTE_PREFERRED / KAFKA_PREFERRED) could not read
    Kafka's part exactly: a Kafka error, a timeout (``kafkaConsumer.pollTimeoutMs``)."""


class KafkaMetadataError(KafkaReadError):
    """The driver could not learn a partition's log start or end from Kafka (ListOffsets failed)."""


class KafkaDataLossError(KafkaReadError, OffsetOutOfRangeError):
    """Offsets of a hybrid read are in neither Kafka nor remote storage and ``failOnDataLoss`` is true."""


class TopicAuthorizationError(GatewayRequestError):
    """The caller is authenticated but may not read ``topic``: the gateway's 403
    ``topic_authorization_failed``, Kafka's TOPIC_AUTHORIZATION_FAILED (error code 29). Never retriable."""

    KAFKA_ERROR_CODE = 29

    def __init__(self, message: str, *, topic: str, details: dict[str, object] | None = None) -> None:
        super().__init__(message, status=403, code="topic_authorization_failed", details=details)
        self.topic = topic
        self.retriable = False
