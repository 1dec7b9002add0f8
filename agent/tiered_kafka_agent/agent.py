"""The agent process: leadership → one uploader per led partition, woken by filesystem events.

- Leadership (``leadership``): ZooKeeper watches, KRaft Admin API polling, or ``static``
  (every partition directory found in the log dirs; for local runs and tests).
- watchdog (inotify) on every log dir: a new ``.log`` (a roll) or a ``.deleted`` rename wakes
  that partition's uploader at once; the broker rewriting the log dir's
  ``replication-offset-checkpoint`` wakes the uploaders of the partitions whose high watermark
  changed (a segment is uploaded only below it: ``high_watermark``); a periodic rescan covers
  missed events.
- Uploads are bounded across partitions by ``upload.max_concurrent_segments`` and, within a
  multipart file, by ``s3.part_concurrency``. Each partition has its own thread, so a slow or
  failing S3 call (retried with backoff) holds only its own partition and one upload slot.
- Losing leadership stops a partition's uploader after the segment in flight. Leadership
  callbacks only schedule: they never wait for an uploader. When leadership comes back before
  the stopped uploader has finished, the new uploader waits for it in its own thread
  (``PartitionUploader._await_predecessor``), so one slow partition never delays another's change.
- Remote retention runs every ``remote_retention.interval_s`` (``retention``).
- Health (``Agent.health()``, and ``tiered_kafka_agent_leadership_healthy`` on /metrics): not ok
  while the leadership watcher retries a failure (a failed ZooKeeper watch or KRaft poll, a lost
  session), during which the agent keeps uploading the partitions of the last map.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError
from watchdog.events import FileSystemEvent, FileSystemEventHandler
from watchdog.observers import Observer

from tiered_kafka.format.checkpoints import REPLICATION_OFFSET_CHECKPOINT
from tiered_kafka.format.segment_names import SegmentFileName, parse_partition_dir_name, partition_dir_name
from tiered_kafka.errors import InvalidSegmentNameError
from tiered_kafka.keyspace import Keyspace
from tiered_kafka.registry import Registry, connect
from tiered_kafka_service.support import s3_client as shared_s3_client
from tiered_kafka.retry import RetryPolicy
from tiered_kafka_agent.config import AgentSettings
from tiered_kafka_agent.high_watermark import HighWatermarks
from tiered_kafka_agent.leadership import (
    KRaftLeadershipWatcher,
    Leadership,
    LeadershipHealth,
    LeadershipWatcher,
    StaticLeadership,
    TopicFilter,
    TopicPartition,
    ZooKeeperLeadershipWatcher,
)
from tiered_kafka_agent.local_segments import refuse_symlink
from tiered_kafka_agent.metrics import AgentMetrics
from tiered_kafka_agent.partition_uploader import PartitionUploader
from tiered_kafka_agent.remote_store import RemoteStore, transfer_config
from tiered_kafka_agent.retention import RemoteRetention

log = logging.getLogger(__name__)


def s3_client(settings: AgentSettings) -> Any:
    return shared_s3_client(
        settings.s3,
        connect_timeout_s=5,
        read_timeout_s=max(30, settings.upload.timeout_s),
        # every upload slot: its .log's parts plus its small files, plus offset.wm and gap markers
        max_pool_connections=max(10, settings.upload.max_concurrent_segments * (settings.s3.part_concurrency + 4) + 4),
    )


def directory_partitions(log_dirs: list[Path], topic_filter: TopicFilter, metrics: AgentMetrics | None = None) -> dict[TopicPartition, Leadership]:
    """Every ``{topic}-{partition}`` directory in the log dirs (static leadership); a symbolic link
    is refused (``local_segments`` module doc)."""
    found: dict[TopicPartition, Leadership] = {}
    for log_dir in log_dirs:
        if not log_dir.is_dir():
            continue
        for child in log_dir.iterdir():
            try:
                topic, partition = parse_partition_dir_name(child.name)
            except InvalidSegmentNameError:
                continue
            if not topic_filter.accepts(topic):
                continue
            if child.is_symlink():
                refuse_symlink(child, "partition_dir", metrics)
                continue
            if child.is_dir():
                found[TopicPartition(topic, partition)] = Leadership(leader_epoch=-1)
    return found


class _LogDirEvents(FileSystemEventHandler):
    def __init__(self, agent: Agent) -> None:
        self.agent = agent

    def on_any_event(self, event: FileSystemEvent) -> None:
        for raw in (event.src_path, getattr(event, "dest_path", "")):
            path = Path(raw if isinstance(raw, str) else raw.decode()) if raw else None
            if path is None:
                continue
            if path.name == REPLICATION_OFFSET_CHECKPOINT:
                self.agent.high_watermarks_checkpointed(path.parent)
            elif SegmentFileName.try_parse(path.name) is not None:
                self.agent.wake(path.parent.name)


@dataclass(frozen=True)
class AgentHealth:
    """``Agent.health()``: ``ok`` when the leadership map can be trusted (``leadership`` says why
    not, and how many failures were counted), and the partitions being uploaded."""

    ok: bool
    leadership: LeadershipHealth
    led_partitions: int


class Agent:
    """One agent beside one broker. ``start()``, then ``stop()``."""

    def __init__(
        self,
        settings: AgentSettings,
        *,
        leadership: LeadershipWatcher | None = None,
        s3: Any = None,
        redis_client: Any = None,
    ) -> None:
        self.settings = settings
        self.metrics = AgentMetrics()
        self.topic_filter = TopicFilter(settings.topics.include, settings.topics.exclude)
        self.keyspace = Keyspace(settings.s3.prefix, settings.cluster, settings.s3.entropy_bits)
        self.retry = RetryPolicy(attempts=settings.upload.max_attempts, base_s=settings.upload.backoff_base_s, cap_s=settings.upload.backoff_max_s)
        transfer = transfer_config(settings.s3.multipart_threshold_bytes, settings.s3.multipart_chunk_bytes, settings.s3.part_concurrency)
        self.store = RemoteStore(s3 or s3_client(settings), settings.s3.bucket, self.keyspace, transfer, self.retry)
        self.metrics.observe_s3_client(self.store.client)
        self.registry = Registry(redis_client or connect(settings.redis.url, socket_timeout=10), settings.cluster)
        self.leadership = leadership or self._leadership_watcher()
        self.metrics.observe_leadership(self.leadership)
        self.high_watermarks = HighWatermarks()
        self.upload_slots = threading.BoundedSemaphore(settings.upload.max_concurrent_segments)
        self.retention = RemoteRetention(self.registry, self.store, settings.remote_retention, self.retry, self._led_topic_partitions)
        self._uploaders: dict[str, PartitionUploader] = {}
        self._retiring: dict[str, PartitionUploader] = {}  # stopped on lost leadership, maybe still finishing
        self._lock = threading.Lock()
        self._observer: Any = None
        self._stopped = threading.Event()
        self._background: list[threading.Thread] = []

    def _leadership_watcher(self) -> LeadershipWatcher:
        mode = self.settings.leadership
        if mode.mode == "zookeeper":
            assert mode.zookeeper_connect is not None
            return ZooKeeperLeadershipWatcher(mode.zookeeper_connect, self.settings.broker_id, self.topic_filter)
        if mode.mode == "kraft":
            assert mode.bootstrap_servers is not None
            return KRaftLeadershipWatcher(mode.bootstrap_servers, self.settings.broker_id, self.topic_filter, poll_interval_s=mode.poll_interval_s)
        return StaticLeadership(directory_partitions(self.settings.log_dirs, self.topic_filter, self.metrics))

    # -- lifecycle -------------------------------------------------------------------------
    def start(self) -> None:
        log.info("agent for broker %d of cluster %s starting: %s", self.settings.broker_id, self.settings.cluster, self.settings.redacted())
        try:  # two leaders rely on If-None-Match (remote_store): a store ignoring it is refused
            self.store.check_conditional_writes(self.keyspace.cluster_prefixes()[0])
        except (BotoCoreError, ClientError) as err:  # unreachable or refusing us now: checked again before the first upload
            log.error("could not check that the S3 store honours conditional writes (checked again before the first upload): %s", err)
        self.metrics.serve(self.settings.metrics.host, self.settings.metrics.port)
        self._observer = Observer()
        for log_dir in self.settings.log_dirs:
            log_dir.mkdir(parents=True, exist_ok=True)
            self._observer.schedule(_LogDirEvents(self), str(log_dir), recursive=True)
        self._observer.start()
        self.leadership.start(self._on_leadership)
        self._every(self.settings.remote_retention.interval_s, self.retention.run_once, "remote-retention")
        if isinstance(self.leadership, StaticLeadership):
            self._every(self.settings.upload.rescan_interval_s, self._rescan_directories, "static-leadership")

    def stop(self) -> None:
        self._stopped.set()
        self.leadership.stop()
        if self._observer is not None:
            self._observer.stop()
            self._observer.join(10)
        with self._lock:
            uploaders = list(self._uploaders.values()) + list(self._retiring.values())
            self._uploaders.clear()
            self._retiring.clear()
        for uploader in uploaders:
            uploader.stop()
        for uploader in uploaders:
            uploader.join(60)
        for thread in self._background:
            thread.join(10)
        log.info("agent stopped")

    def __enter__(self) -> Agent:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- leadership and events -------------------------------------------------------------
    def _on_leadership(self, led: dict[TopicPartition, Leadership]) -> None:
        wanted = {f"{tp.topic}-{tp.partition}": tp for tp in led}
        with self._lock:
            if self._stopped.is_set():
                return
            for name in [n for n, u in self._retiring.items() if not u.thread.is_alive()]:
                del self._retiring[name]  # finished: nothing left to wait for
            for name in list(self._uploaders):
                if name not in wanted:
                    log.info("leadership of %s moved away: finishing the upload in flight, then stopping", name)
                    retiring = self._uploaders.pop(name)
                    retiring.stop()
                    self._retiring[name] = retiring
                    self.metrics.forget_partition(*_split(name))
            for name, tp in wanted.items():
                if name not in self._uploaders:
                    # leadership came back while the stopped uploader may still finish its segment in
                    # flight: the new one waits for it in its own thread (never here, under the lock)
                    previous = self._retiring.pop(name, None)
                    uploader = PartitionUploader(
                        tp.topic,
                        tp.partition,
                        self.settings.log_dirs,
                        self.store,
                        self.registry,
                        self.metrics,
                        self.upload_slots,
                        self.retry,
                        self.settings.upload.rescan_interval_s,
                        self.settings.upload.max_concurrent_segments,
                        predecessor=previous,
                        high_watermarks=self.high_watermarks,
                    )
                    self._uploaders[name] = uploader
                    uploader.start()
            self.metrics.led_partitions.set(len(self._uploaders))

    def wake(self, partition_dir: str) -> None:
        with self._lock:
            uploader = self._uploaders.get(partition_dir)
        if uploader is not None:
            uploader.wake()

    def high_watermarks_checkpointed(self, log_dir: Path) -> None:
        """The broker rewrote ``log_dir``'s ``replication-offset-checkpoint`` (every
        ``replica.high.watermark.checkpoint.interval.ms``, changed or not): wake the uploaders of
        the partitions whose high watermark moved."""
        try:
            changed = self.high_watermarks.refresh(log_dir)
        except OSError as err:  # the rescans read it again
            log.debug("could not read the high watermarks of %s: %s", log_dir, err)
            return
        for topic, partition in changed:
            self.wake(partition_dir_name(topic, partition))

    def _led_topic_partitions(self) -> list[tuple[str, int]]:
        """(topic, partition) of each partition led now: remote retention's scope (``retention``)."""
        return [parse_partition_dir_name(name) for name in self.led_partitions()]

    def led_partitions(self) -> list[str]:
        with self._lock:
            return sorted(self._uploaders)

    def health(self) -> AgentHealth:
        leadership = self.leadership.health()
        return AgentHealth(ok=leadership.ok, leadership=leadership, led_partitions=len(self.led_partitions()))

    def _rescan_directories(self) -> None:
        assert isinstance(self.leadership, StaticLeadership)
        self.leadership.set(directory_partitions(self.settings.log_dirs, self.topic_filter, self.metrics))

    def _every(self, interval_s: float, action: Any, name: str) -> None:
        def loop() -> None:
            while not self._stopped.wait(interval_s):
                try:
                    action()
                except Exception:
                    log.exception("%s failed", name)

        thread = threading.Thread(target=loop, name=name, daemon=True)
        thread.start()
        self._background.append(thread)


def _split(name: str) -> tuple[str, int]:
    return parse_partition_dir_name(name)
