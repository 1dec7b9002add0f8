"""tiered-kafka: broker-decoupled tiered reads for Apache Kafka (SDK and shared core).

What users need is here (a test pins the list, tests/unit/sdk/test_packaging.py)::

    from tiered_kafka import TieredConsumer, Mode            # confluent-kafka's Consumer, reading remote storage too
    from tiered_kafka import BulkReader, read_table, read_arrow   # the bulk API (Arrow)
    from tiered_kafka import TieredKafkaDataSource           # the PySpark data source (needs the spark extra)
    from tiered_kafka import TieredKafkaError, RemoteReadError, ...   # the SDK's whole error tree

The errors are imported at once (they import nothing); the readers on first use (PEP 562), so
that ``import tiered_kafka.format`` in the agent or the gateway does not load confluent-kafka,
httpx or pyarrow, and ``TieredKafkaDataSource`` loads pyspark only when asked for.
The implementation modules stay where they are (``tiered_kafka.consumer``, ``tiered_kafka.bulk``,
``tiered_kafka.spark``): importing from them keeps working.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from tiered_kafka.errors import (
    AppendRefusedError,
    ConfigError,
    CorruptCheckpointError,
    CorruptIndexError,
    CorruptRecordError,
    FormatError,
    GatewayRequestError,
    InvalidSegmentNameError,
    KafkaDataLossError,
    KafkaMetadataError,
    KafkaReadError,
    LogWriteError,
    OffsetNotRemoteError,
    OffsetOutOfRangeError,
    PresignedUrlError,
    RemoteGapError,
    RemoteReadError,
    RsmDecryptionError,
    RsmFormatError,
    TieredKafkaError,
    TopicAuthorizationError,
    TransientReadError,
    TruncatedRecordError,
    UnsupportedCodecError,
)

if TYPE_CHECKING:
    from tiered_kafka.bulk import BulkReader, read_arrow, read_table
    from tiered_kafka.consumer import TieredConsumer
    from tiered_kafka.modes import Mode
    from tiered_kafka.spark import TieredKafkaDataSource

__version__ = "0.1.0"

#: the readers' entry points, imported on first use: name -> module
_LAZY = {
    "TieredConsumer": "tiered_kafka.consumer",
    "Mode": "tiered_kafka.modes",
    "BulkReader": "tiered_kafka.bulk",
    "read_table": "tiered_kafka.bulk",
    "read_arrow": "tiered_kafka.bulk",
    "TieredKafkaDataSource": "tiered_kafka.spark",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'tiered_kafka' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # once: later lookups do not come here
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


__all__ = [
    "AppendRefusedError",
    "BulkReader",
    "ConfigError",
    "CorruptCheckpointError",
    "CorruptIndexError",
    "CorruptRecordError",
    "FormatError",
    "GatewayRequestError",
    "InvalidSegmentNameError",
    "KafkaDataLossError",
    "KafkaMetadataError",
    "KafkaReadError",
    "LogWriteError",
    "Mode",
    "OffsetNotRemoteError",
    "OffsetOutOfRangeError",
    "PresignedUrlError",
    "RemoteGapError",
    "RemoteReadError",
    "RsmDecryptionError",
    "RsmFormatError",
    "TieredConsumer",
    "TieredKafkaDataSource",
    "TieredKafkaError",
    "TopicAuthorizationError",
    "TransientReadError",
    "TruncatedRecordError",
    "UnsupportedCodecError",
    "__version__",
    "read_arrow",
    "read_table",
]
