"""tiered-kafka: broker-decoupled tiered reads for Apache Kafka (SDK and shared core)."""

from tiered_kafka.errors import (
    ConfigError,
    CorruptCheckpointError,
    CorruptIndexError,
    CorruptRecordError,
    FormatError,
    InvalidSegmentNameError,
    LogWriteError,
    OffsetOutOfRangeError,
    TieredKafkaError,
    TruncatedRecordError,
    UnsupportedCodecError,
)

__version__ = "0.1.0"

__all__ = [
    "ConfigError",
    "CorruptCheckpointError",
    "CorruptIndexError",
    "CorruptRecordError",
    "FormatError",
    "InvalidSegmentNameError",
    "LogWriteError",
    "OffsetOutOfRangeError",
    "TieredKafkaError",
    "TruncatedRecordError",
    "UnsupportedCodecError",
    "__version__",
]
