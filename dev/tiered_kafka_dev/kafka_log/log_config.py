"""Per-topic log configuration, under Kafka's topic config names (Java ``LogConfig``).

Only the settings that shape the files on disk, and the batch size limit an append checks, are
modelled; defaults are Kafka's.

>>> LogConfig.from_topic_configs({"segment.bytes": "1048576", "retention.ms": "-1"}).segment_bytes
1048576
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass

from tiered_kafka.errors import ConfigError

#: Kafka topic config name -> LogConfig field.
TOPIC_CONFIG_NAMES = {
    "segment.bytes": "segment_bytes",
    "segment.ms": "segment_ms",
    "segment.index.bytes": "segment_index_bytes",
    "index.interval.bytes": "index_interval_bytes",
    "retention.ms": "retention_ms",
    "retention.bytes": "retention_bytes",
    "file.delete.delay.ms": "file_delete_delay_ms",
    "max.message.bytes": "max_message_bytes",
}


@dataclass(frozen=True, slots=True)
class LogConfig:
    """How a partition's log rolls, indexes and retains (Kafka's defaults).

    ``retention_ms`` and ``retention_bytes`` of -1 mean unlimited, as in Kafka.
    """

    segment_bytes: int = 1024 * 1024 * 1024
    segment_ms: int = 7 * 24 * 60 * 60 * 1000
    segment_index_bytes: int = 10 * 1024 * 1024
    index_interval_bytes: int = 4096
    retention_ms: int = 7 * 24 * 60 * 60 * 1000
    retention_bytes: int = -1
    file_delete_delay_ms: int = 60_000
    #: the largest record batch an append takes (Kafka's topic max.message.bytes, defaulting to the
    #: broker's message.max.bytes): above it MESSAGE_TOO_LARGE
    max_message_bytes: int = 1_048_588

    def __post_init__(self) -> None:
        minimums = {
            "segment_bytes": 14,  # Kafka: at least one legacy record overhead
            "segment_ms": 1,
            "segment_index_bytes": 12,  # room for one time index entry
            "index_interval_bytes": 0,
            "retention_ms": -1,
            "retention_bytes": -1,
            "file_delete_delay_ms": 0,
            "max_message_bytes": 0,
        }
        for field, minimum in minimums.items():
            value = getattr(self, field)
            if not isinstance(value, int) or isinstance(value, bool):
                raise ConfigError(f"{_kafka_name(field)} must be an integer, got {value!r}")
            if value < minimum:
                raise ConfigError(f"{_kafka_name(field)} must be >= {minimum}, got {value}")
        if self.segment_bytes > 2**31 - 1:
            raise ConfigError(f"segment.bytes must fit an int32 position, got {self.segment_bytes}")

    @classmethod
    def from_topic_configs(cls, configs: Mapping[str, str | int], base: LogConfig | None = None) -> LogConfig:
        """Build from Kafka topic config names; unknown names and non-integers raise ConfigError."""
        values: dict[str, int] = {}
        for name, raw in configs.items():
            field = TOPIC_CONFIG_NAMES.get(name)
            if field is None:
                raise ConfigError(f"unsupported topic config {name!r}; supported: {', '.join(TOPIC_CONFIG_NAMES)}")
            try:
                values[field] = int(raw)
            except (TypeError, ValueError):
                raise ConfigError(f"topic config {name} must be an integer, got {raw!r}") from None
        return dataclasses.replace(base or cls(), **values)

    def to_topic_configs(self) -> dict[str, str]:
        return {name: str(getattr(self, field)) for name, field in TOPIC_CONFIG_NAMES.items()}


def _kafka_name(field: str) -> str:
    return next(name for name, f in TOPIC_CONFIG_NAMES.items() if f == field)
