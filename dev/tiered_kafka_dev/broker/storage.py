"""The broker's log.dir: topics, their partitions' logs, and the files Kafka keeps beside them.

Layout (as a ZooKeeper-mode Kafka broker leaves it)::

    {log.dir}/meta.properties                   version=0, broker.id, cluster.id
    {log.dir}/recovery-point-offset-checkpoint  "{topic} {partition} {offset}" per partition
    {log.dir}/replication-offset-checkpoint     high watermarks
    {log.dir}/log-start-offset-checkpoint       log start offsets (moved by retention, DeleteRecords)
    {log.dir}/{topic}-{partition}/              segments, leader-epoch-checkpoint, partition.metadata

Kafka keeps topic metadata (partition count, topic id, configs) in ZooKeeper or the KRaft
metadata log; the development broker keeps it in ``{log.dir}/dev-broker-topics.json`` so that
a restart without ZooKeeper finds its topics again (ZooKeeper mode mirrors it there too).
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import re
import shutil
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from tiered_kafka.errors import ConfigError, CorruptCheckpointError
from tiered_kafka.format.checkpoints import (
    LOG_START_OFFSET_CHECKPOINT,
    RECOVERY_POINT_CHECKPOINT,
    REPLICATION_OFFSET_CHECKPOINT,
    format_offset_checkpoint,
    parse_offset_checkpoint,
    write_atomically,
)
from tiered_kafka.format.log_config import TOPIC_CONFIG_NAMES, LogConfig
from tiered_kafka.format.log_writer import PartitionLog
from tiered_kafka.format.segment_names import partition_dir_name

log = logging.getLogger(__name__)

TOPICS_FILE = "dev-broker-topics.json"
META_PROPERTIES = "meta.properties"
PARTITION_METADATA = "partition.metadata"
#: Topic configs accepted and reported but not acted upon by the development broker.
PASSTHROUGH_CONFIGS = frozenset(
    {
        "cleanup.policy",
        "compression.type",
        "min.insync.replicas",
        "message.timestamp.type",
        "unclean.leader.election.enable",
        "remote.storage.enable",
        "local.retention.ms",
        "local.retention.bytes",
    }
)
_TOPIC_NAME_RE = re.compile(r"^[a-zA-Z0-9._-]{1,249}$")


class TopicError(Exception):
    """A topic operation refused; ``kind`` names the Kafka error (e.g. 'topic_already_exists')."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


@dataclass
class Topic:
    name: str
    topic_id: uuid.UUID
    partitions: int
    configs: dict[str, str] = field(default_factory=dict)

    def log_config(self, defaults: LogConfig) -> LogConfig:
        return LogConfig.from_topic_configs({k: v for k, v in self.configs.items() if k in TOPIC_CONFIG_NAMES}, defaults)


def validate_topic_name(name: str) -> None:
    """Kafka's ``Topic.validate``: 1-249 chars of [a-zA-Z0-9._-], not '.' or '..'."""
    if name in (".", "..") or not _TOPIC_NAME_RE.match(name):
        raise TopicError("invalid_topic_exception", f"invalid topic name {name!r}: use 1-249 of [a-zA-Z0-9._-]")


def validate_topic_configs(configs: dict[str, str], defaults: LogConfig) -> None:
    unknown = set(configs) - set(TOPIC_CONFIG_NAMES) - PASSTHROUGH_CONFIGS
    if unknown:
        raise TopicError("invalid_config", f"unsupported topic configs: {', '.join(sorted(unknown))}")
    try:
        LogConfig.from_topic_configs({k: v for k, v in configs.items() if k in TOPIC_CONFIG_NAMES}, defaults)
    except ConfigError as err:
        raise TopicError("invalid_config", str(err)) from err


class LogManager:
    """Every partition log of one broker, with Kafka's checkpoint files and retention."""

    def __init__(self, log_dir: Path, node_id: int, defaults: LogConfig, cluster_id: str | None = None) -> None:
        self.log_dir = log_dir
        self.node_id = node_id
        self.defaults = defaults
        self.topics: dict[str, Topic] = {}
        self.logs: dict[tuple[str, int], PartitionLog] = {}
        self._appended = asyncio.Event()
        log_dir.mkdir(parents=True, exist_ok=True)
        self.cluster_id = self._load_meta_properties(cluster_id)
        self._load_topics()

    # -- startup ---------------------------------------------------------------------------
    def _load_meta_properties(self, cluster_id: str | None) -> str:
        path = self.log_dir / META_PROPERTIES
        if path.exists():
            props = dict(line.split("=", 1) for line in path.read_text().splitlines() if "=" in line and not line.startswith("#"))
            stored = props.get("cluster.id")
            if stored is None or (cluster_id is not None and stored != cluster_id):
                raise ConfigError(f"{path}: cluster.id {stored!r} does not match the configured {cluster_id!r}")
            if int(props.get("broker.id", self.node_id)) != self.node_id:
                raise ConfigError(f"{path}: broker.id {props.get('broker.id')} does not match node.id {self.node_id}")
            return stored
        cluster_id = cluster_id or kafka_uuid(uuid.uuid4())
        text = f"#\n#{time.strftime('%a %b %d %H:%M:%S UTC %Y', time.gmtime())}\ncluster.id={cluster_id}\nversion=0\nbroker.id={self.node_id}\n"
        write_atomically(path, text.encode())
        return cluster_id

    def _load_topics(self) -> None:
        path = self.log_dir / TOPICS_FILE
        if not path.exists():
            return
        try:
            stored = json.loads(path.read_text())
            topics = [Topic(t["name"], uuid.UUID(t["topic_id"]), int(t["partitions"]), dict(t["configs"])) for t in stored["topics"]]
        except (ValueError, KeyError, TypeError) as err:
            raise CorruptCheckpointError(f"{path}: cannot read the topic list: {err}") from err
        log_starts = self._read_checkpoint(LOG_START_OFFSET_CHECKPOINT)
        for topic in topics:
            self.topics[topic.name] = topic
            config = topic.log_config(self.defaults)
            for p in range(topic.partitions):
                directory = self.log_dir / partition_dir_name(topic.name, p)
                if directory.is_dir() and any(directory.glob("*.log")):
                    plog = PartitionLog.open(directory, config, log_start_offset=log_starts.get((topic.name, p)))
                else:
                    plog = PartitionLog.create(directory, config)
                self.logs[(topic.name, p)] = plog
        log.info("loaded %d topics, %d partitions from %s", len(self.topics), len(self.logs), self.log_dir)

    def _read_checkpoint(self, name: str) -> dict[tuple[str, int], int]:
        path = self.log_dir / name
        return parse_offset_checkpoint(path.read_text(), str(path)) if path.exists() else {}

    # -- topics ----------------------------------------------------------------------------
    def create_topic(self, name: str, partitions: int, configs: dict[str, str], *, validate_only: bool = False) -> Topic:
        validate_topic_name(name)
        if name in self.topics:
            raise TopicError("topic_already_exists", f"topic {name!r} already exists")
        if partitions < 1:
            raise TopicError("invalid_partitions", f"number of partitions must be >= 1, got {partitions}")
        validate_topic_configs(configs, self.defaults)
        topic = Topic(name, uuid.uuid4(), partitions, dict(configs))
        if validate_only:
            return topic
        config = topic.log_config(self.defaults)
        for p in range(partitions):
            directory = self.log_dir / partition_dir_name(name, p)
            self.logs[(name, p)] = PartitionLog.create(directory, config)
            _write_partition_metadata(directory, topic.topic_id)
        self.topics[name] = topic
        self._save_topics()
        log.info("created topic %s with %d partitions", name, partitions)
        return topic

    def add_partitions(self, name: str, count: int, *, validate_only: bool = False) -> Topic:
        """Grow ``name`` to ``count`` partitions (Kafka's ``ReplicationControlManager.createPartitions``):
        the new partitions are numbered after the existing ones and start empty at offset 0;
        a count that is not larger is INVALID_PARTITIONS, as partitions are never removed."""
        topic = self.topics.get(name)
        if topic is None:
            raise TopicError("unknown_topic_or_partition", f"topic {name!r} does not exist")
        if count == topic.partitions:
            raise TopicError("invalid_partitions", f"Topic already has {topic.partitions} partition(s).")
        if count < topic.partitions:
            raise TopicError(
                "invalid_partitions",
                f"The topic {name} currently has {topic.partitions} partition(s); {count} would not be an increase.",
            )
        if validate_only:
            return topic
        config = topic.log_config(self.defaults)
        for p in range(topic.partitions, count):
            directory = self.log_dir / partition_dir_name(name, p)
            self.logs[(name, p)] = PartitionLog.create(directory, config)
            _write_partition_metadata(directory, topic.topic_id)
        old, topic.partitions = topic.partitions, count
        self._save_topics()
        log.info("topic %s grown from %d to %d partitions", name, old, count)
        return topic

    def delete_topic(self, name: str) -> None:
        """Kafka renames the directories ``{topic}-{p}.{uuid}-delete`` and removes them later;
        here they are removed at once."""
        topic = self.topics.pop(name, None)
        if topic is None:
            raise TopicError("unknown_topic_or_partition", f"topic {name!r} does not exist")
        for p in range(topic.partitions):
            plog = self.logs.pop((name, p))
            plog.close()
            doomed = plog.directory.with_name(f"{plog.directory.name}.{topic.topic_id.hex}-delete")
            plog.directory.rename(doomed)
            shutil.rmtree(doomed)
        self._save_topics()
        log.info("deleted topic %s", name)

    def _save_topics(self) -> None:
        data = {
            "version": 1,
            "topics": [
                {"name": t.name, "topic_id": str(t.topic_id), "partitions": t.partitions, "configs": t.configs}
                for t in self.topics.values()
            ],
        }
        write_atomically(self.log_dir / TOPICS_FILE, json.dumps(data, indent=1).encode())

    def partition(self, topic: str, partition: int) -> PartitionLog | None:
        return self.logs.get((topic, partition))

    # -- appends and waiting ---------------------------------------------------------------
    def notify_appended(self) -> None:
        """Wake every fetch waiting for new data (the long-poll of Fetch's max_wait/min_bytes)."""
        self._appended.set()
        self._appended = asyncio.Event()

    async def wait_for_append(self, timeout_s: float) -> None:
        try:
            await asyncio.wait_for(self._appended.wait(), timeout_s)
        except TimeoutError:
            pass

    # -- periodic tasks --------------------------------------------------------------------
    def apply_retention(self) -> int:
        deleted = 0
        for (topic, p), plog in self.logs.items():
            removed = plog.apply_retention()
            if removed:
                log.info("retention deleted segments %s of %s-%d", removed, topic, p)
            deleted += len(removed)
        return deleted

    def write_checkpoints(self) -> None:
        """recovery-point-offset-checkpoint, replication-offset-checkpoint and log-start-offset-checkpoint."""
        ends = {key: plog.log_end_offset for key, plog in self.logs.items()}
        starts = {key: plog.log_start_offset for key, plog in self.logs.items()}
        write_atomically(self.log_dir / RECOVERY_POINT_CHECKPOINT, format_offset_checkpoint(ends).encode())
        write_atomically(self.log_dir / REPLICATION_OFFSET_CHECKPOINT, format_offset_checkpoint(ends).encode())
        write_atomically(self.log_dir / LOG_START_OFFSET_CHECKPOINT, format_offset_checkpoint(starts).encode())

    def close(self) -> None:
        for plog in self.logs.values():
            plog.close()
        self.write_checkpoints()


def kafka_uuid(value: uuid.UUID) -> str:
    """Kafka's ``Uuid.toString``: URL-safe base64 of the 16 bytes, without padding."""
    return base64.urlsafe_b64encode(value.bytes).decode().rstrip("=")


def _write_partition_metadata(directory: Path, topic_id: uuid.UUID) -> None:
    """Kafka's ``PartitionMetadataFile``: 'version: 0' and the topic id."""
    write_atomically(directory / PARTITION_METADATA, f"version: 0\ntopic_id: {kafka_uuid(topic_id)}\n".encode())
