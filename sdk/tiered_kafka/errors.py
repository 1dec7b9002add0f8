"""Exceptions of tiered-kafka: the SDK, the agent and the gateway, under one root.

One root, so callers can catch everything of ours in one clause. The whole tree, with the module
of each class defined outside this one in brackets (a unit test, tests/unit/sdk/test_error_tree.py,
walks every module and fails when a class is missing here, sits under another parent, or does not
derive from ``TieredKafkaError``)::

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
    ├── UnsupportedFormatError      [format.batch_index] batches not magic 2: no batch index, no plan from headers
    ├── LogWriteError               the log.dir writer refused an append (offsets, sizes, ...)
    │   └── AppendRefusedError      refused by one of Kafka's append rules; names Kafka's error
    ├── OffsetOutOfRangeError       an offset below the log start offset or past the log end
    │   └── OffsetNotRemoteError    remote storage does not hold the offset (the gateway's 416)
    ├── RemoteReadError             reading through the gateway or a presigned URL failed
    │   ├── GatewayRequestError     the gateway answered an error (status, stable code, message)
    │   │   └── TopicAuthorizationError  403 topic_authorization_failed (Kafka's TOPIC_AUTHORIZATION_FAILED)
    │   ├── PresignedUrlError       S3 refused a presigned GET (expired or invalid signature): re-plan
    │   ├── TransientReadError      S3 answered 5xx/429 or a short body to a presigned GET (retriable)
    │   ├── RemoteGapError          remote storage lacks an offset range (recorded gap)
    │   ├── KafkaReadError          a hybrid read could not read Kafka's part exactly
    │   │   ├── KafkaMetadataError  ListOffsets failed
    │   │   └── KafkaDataLossError  offsets in neither Kafka nor remote storage (also OffsetOutOfRangeError)
    │   └── StreamDataLossError     [spark.stream_planning] a micro-batch cannot read what its offsets name
    ├── ConfigError                 a configuration value is invalid
    │   ├── OptionError             [spark.options] a data source option (also ValueError)
    │   ├── StreamOffsetError       [spark.stream_planning] a stream offset's JSON (also ValueError)
    │   └── ConditionalWritesUnsupportedError  [tiered_kafka_agent.conditional_writes] S3 ignores If-None-Match
    ├── RegistryError               [registry._errors] the Redis registry (its docstring has the details)
    │   ├── RegistryUnavailableError    [registry._errors] Redis unreachable or "try again" (retriable; also ConnectionError)
    │   ├── RegistryValueError      [registry._errors] a value handed to the registry (also ValueError)
    │   ├── MalformedRegistryDataError  [registry._errors] what Redis holds does not follow the layout
    │   ├── SegmentOverlapError     [registry._errors] a new segment overlaps a registered one
    │   └── RegistryConflictError   [registry._errors] a base offset registered with other content
    ├── BackfillCheckError          [spark.backfill] the Parquet written differs from the registry
    ├── Refused                     [cli] nothing (more) of what the CLI was asked can be read (exit 1)
    ├── GatewayError                [tiered_kafka_gateway.errors] an answer the gateway decides (its ErrorCode)
    ├── KafkaProtocolError          [tiered_kafka_gateway.kafka_listener.codec] a Kafka-protocol frame the listener cannot read
    │   └── UnsupportedRequest      [tiered_kafka_gateway.kafka_listener.framing] an API key or version the listener does not serve
    ├── KafkaUpstreamError          [tiered_kafka_gateway.kafka_listener.upstream] the listener's Kafka connection failed (retriable)
    └── AgentError                  [tiered_kafka_agent.errors] the agent's own work failed
        ├── LeadershipError         [tiered_kafka_agent.leadership.watcher] no initial leadership view (retriable)
        ├── AuditError              [tiered_kafka_agent.audit] the audit could not be carried out
        ├── LocalSegmentError       [tiered_kafka_agent.errors] a broker's segment cannot be read as the upload needs
        │   ├── SegmentGoneError    [tiered_kafka_agent.local_segments] retention deleted it before it was read
        │   ├── SegmentNotReadyError    [tiered_kafka_agent.local_segments] indexes not trimmed yet
        │   └── TailUnavailableError    [tiered_kafka_agent.segment_tail] no batch index, or no batch at the offset
        ├── RemoteObjectError       [tiered_kafka_agent.errors] an S3 object is not what the upload expects
        │   ├── MetadataError       [tiered_kafka_agent.object_metadata] a .log object's tk-* metadata is malformed
        │   ├── ObjectKeyTakenError [tiered_kafka_agent.remote_store] the key holds another leader's bytes
        │   │   └── ForeignObjectError  [tiered_kafka_agent.remote_store] ... another uploader's, without tk-* metadata
        │   └── ObjectKeyBusyError  [tiered_kafka_agent.two_leaders] the key holds an upload in flight
        └── ReplicaDivergedError    [tiered_kafka_agent.two_leaders] registering would splice two histories

Corrupt local or remote bytes get their own classes (never a Kafka broker error code),
and each carries the context needed to find the bad bytes: file position, batch offset,
path or object key.

``retriable`` tells retry loops whether sending the same request again can help: it is what
``tiered_kafka.retry`` (the one retry policy) reads for our own exceptions. The agent's
``SegmentNotReadyError`` and ``ObjectKeyBusyError`` are not retriable in that sense: the uploader's
next pass looks at the partition afresh. ``PresignedUrlError`` is not either: the same URL cannot
succeed, the caller re-plans. Exceptions that never leave their module are not part of the tree:
those named with a leading underscore, and those of a private module no public one exports (a
parser's or a listing's control flow; the C decoder's ``LegacyMagic``, which sends its callers to
the Python path for a magic 0/1 batch).
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


#: HTTP answers a later attempt may get right: rate limited, or no (live) server behind a proxy
TRANSIENT_STATUSES = frozenset({429, 502, 503, 504})
#: codes of the gateway's error envelope that trying again cannot fix, whatever their status: a bug,
#: bytes in S3 that are not Kafka's, a KIP-405 chunk or key that does not decrypt
PERMANENT_CODES = frozenset({"internal_error", "corrupt_remote_data", "rsm_decryption_failed"})


def transient_answer(status: int, code: str | None) -> bool:
    """Whether a gateway answer with ``status`` and envelope ``code`` (None: not the gateway's
    envelope, e.g. a load balancer's page) is worth asking again: 429, 502, 503 or 504, unless the
    code is one of ``PERMANENT_CODES``. A 500 (a bug), every 4xx and every other status are final.

    >>> transient_answer(503, "registry_unavailable"), transient_answer(502, None), transient_answer(502, "corrupt_remote_data")
    (True, True, False)
    >>> transient_answer(500, "internal_error"), transient_answer(404, None)
    (False, False)
    """
    return status in TRANSIENT_STATUSES and code not in PERMANENT_CODES


class GatewayRequestError(RemoteReadError):
    """The gateway answered an error: HTTP ``status``, its stable ``code`` and ``message``;
    ``retriable`` by ``transient_answer``."""

    def __init__(self, message: str, *, status: int, code: str, details: dict[str, object] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.details = details or {}
        self.retriable = transient_answer(status, code)


class PresignedUrlError(RemoteReadError):
    """S3 refused a presigned GET: 403 (the URL expired or its signature is not accepted) or 404
    (the object was removed after it was planned). Not ``retriable``: the same URL cannot succeed;
    the caller asks the gateway for a new plan."""


class TransientReadError(RemoteReadError):
    """A presigned GET failed in a way a later attempt may not: S3 answered 5xx or 429, or sent
    fewer bytes than the range. Retried by the gateway client, which raises ``RemoteReadError``
    when its attempts are spent."""

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
