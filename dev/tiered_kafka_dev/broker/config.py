"""The development broker's configuration, under Kafka's broker config names.

It reads a Java-style ``server.properties`` file and ``--override name=value`` pairs, like
``kafka-server-start.sh``. Supported names (defaults in brackets; Kafka's unless noted):

    node.id / broker.id               [0]
    listeners                         [PLAINTEXT://127.0.0.1:0]  port 0 = a free port
    log.dirs / log.dir                (required) one directory
    zookeeper.connect                 [none]  register in ZooKeeper as a ZK-mode broker does
    cluster.id                        [generated, then kept in meta.properties]
    num.partitions                    [1]
    auto.create.topics.enable         [true]
    log.segment.bytes, log.roll.ms, log.index.size.max.bytes, log.index.interval.bytes,
    log.retention.ms, log.retention.bytes, file.delete.delay.ms      topic defaults
    message.max.bytes                 [1048588]  default of the topic config max.message.bytes
    log.retention.check.interval.ms   [1000]  (Kafka: 300000; short for local runs)
    log.checkpoint.interval.ms        [1000]  checkpoint files (Kafka: 60000)
    group.initial.rebalance.delay.ms  [0]     (Kafka: 3000; 0 keeps tests fast)
    socket.request.max.bytes          [104857600]
    transaction.max.timeout.ms        [900000]  the largest transaction.timeout.ms a producer may ask
    transaction.abort.timed.out.transaction.cleanup.interval.ms
                                      [1000]  how often abandoned transactions are aborted (Kafka: 10000)
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from tiered_kafka.errors import ConfigError
from tiered_kafka.format.log_config import LogConfig
from tiered_kafka.properties import read_properties

__all__ = ["BrokerConfig", "read_properties"]

_LISTENER_RE = re.compile(r"^PLAINTEXT://(?P<host>[^:/]+):(?P<port>\d+)$")
_TOPIC_DEFAULTS = {
    "log.segment.bytes": "segment.bytes",
    "log.roll.ms": "segment.ms",
    "log.index.size.max.bytes": "segment.index.bytes",
    "log.index.interval.bytes": "index.interval.bytes",
    "log.retention.ms": "retention.ms",
    "log.retention.bytes": "retention.bytes",
    "file.delete.delay.ms": "file.delete.delay.ms",
    "message.max.bytes": "max.message.bytes",
}


@dataclass(frozen=True)
class BrokerConfig:
    log_dir: Path
    node_id: int = 0
    host: str = "127.0.0.1"
    port: int = 0
    zookeeper_connect: str | None = None
    cluster_id: str | None = None
    num_partitions: int = 1
    auto_create_topics: bool = True
    log_defaults: LogConfig = field(default_factory=LogConfig)
    retention_check_interval_ms: int = 1000
    checkpoint_interval_ms: int = 1000
    group_initial_rebalance_delay_ms: int = 0
    socket_request_max_bytes: int = 104_857_600
    transaction_max_timeout_ms: int = 900_000
    transaction_abort_interval_ms: int = 1000

    @classmethod
    def from_properties(cls, properties: Mapping[str, str]) -> BrokerConfig:
        """Build from Kafka broker config names; unknown names raise ConfigError."""
        values: dict[str, object] = {}
        topic_defaults: dict[str, str] = {}
        for name, raw in properties.items():
            value = raw.strip()
            match name:
                case "node.id" | "broker.id":
                    values["node_id"] = _int(name, value)
                case "listeners":
                    match = _LISTENER_RE.match(value)
                    if match is None:
                        raise ConfigError(f"listeners must be PLAINTEXT://host:port, got {value!r}")
                    values["host"], values["port"] = match["host"], int(match["port"])
                case "log.dirs" | "log.dir":
                    if "," in value:
                        raise ConfigError("the development broker supports a single log directory")
                    values["log_dir"] = Path(value)
                case "zookeeper.connect":
                    values["zookeeper_connect"] = value or None
                case "cluster.id":
                    values["cluster_id"] = value
                case "num.partitions":
                    values["num_partitions"] = _int(name, value)
                case "auto.create.topics.enable":
                    values["auto_create_topics"] = _bool(name, value)
                case "log.retention.check.interval.ms":
                    values["retention_check_interval_ms"] = _int(name, value)
                case "log.checkpoint.interval.ms":
                    values["checkpoint_interval_ms"] = _int(name, value)
                case "group.initial.rebalance.delay.ms":
                    values["group_initial_rebalance_delay_ms"] = _int(name, value)
                case "socket.request.max.bytes":
                    values["socket_request_max_bytes"] = _int(name, value)
                case "transaction.max.timeout.ms":
                    values["transaction_max_timeout_ms"] = _int(name, value)
                case "transaction.abort.timed.out.transaction.cleanup.interval.ms":
                    values["transaction_abort_interval_ms"] = _int(name, value)
                case _ if name in _TOPIC_DEFAULTS:
                    topic_defaults[_TOPIC_DEFAULTS[name]] = value
                case _:
                    raise ConfigError(f"unsupported broker config {name!r}")
        if "log_dir" not in values:
            raise ConfigError("log.dirs is required")
        values["log_defaults"] = LogConfig.from_topic_configs(topic_defaults)
        config = cls(**values)  # type: ignore[arg-type]
        config.validate()
        return config

    def validate(self) -> None:
        if self.num_partitions < 1:
            raise ConfigError(f"num.partitions must be >= 1, got {self.num_partitions}")
        if not 0 <= self.port <= 65535:
            raise ConfigError(f"listener port {self.port} is out of range")
        for name in ("retention_check_interval_ms", "checkpoint_interval_ms", "socket_request_max_bytes", "transaction_max_timeout_ms", "transaction_abort_interval_ms"):
            if getattr(self, name) <= 0:
                raise ConfigError(f"{name} must be positive")

    def replace(self, **changes: object) -> BrokerConfig:
        return dataclasses.replace(self, **changes)  # type: ignore[arg-type]


def _int(name: str, value: str) -> int:
    try:
        return int(value)
    except ValueError:
        raise ConfigError(f"{name} must be an integer, got {value!r}") from None


def _bool(name: str, value: str) -> bool:
    if value.lower() not in ("true", "false"):
        raise ConfigError(f"{name} must be true or false, got {value!r}")
    return value.lower() == "true"
