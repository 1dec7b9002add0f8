"""KIP-405 (tiered storage) in Apache Kafka itself, for tests: a broker whose ``RemoteLogManager`` copies
rolled segments to a RemoteStorageManager, publishes their metadata in ``__remote_log_metadata``
(Kafka's ``TopicBasedRemoteLogMetadataManager``) and, once local retention (``local.retention.ms`` /
``local.retention.bytes``) has deleted them from its log.dir, serves fetches of those offsets from the
RemoteStorageManager.

Which RemoteStorageManager, and why not Aiven's. The plan was Aiven's RSM from Maven Central
(``io.aiven:tiered-storage-for-apache-kafka-core`` and ``-storage-s3``) writing into SeaweedFS. The Maven
registry this project reaches answers "not found" for every version of those artifacts (1.0.0, 1.1.0,
1.1.1, and ``-s3`` / ``-storage-core`` / ``-commons``), and building it from source is not an install step
the project may have. So the storage side is a plain directory, one per Kafka line
(:data:`KIP405_LINES`):

- **3.9.2** (KRaft): Kafka's own test RemoteStorageManager, :data:`LOCAL_TIERED_STORAGE`, from the
  ``kafka-storage`` *test* jar that Maven Central serves for the 3.9 line only
  (``dev/java/kafka-local-tiered-storage-3.9.2.pom.xml``, fetched by ``dev/install.sh`` into
  ``$TIERED_KAFKA_JAVA_CACHE/kafka-local-tiered-storage-3.9.2/``);
- **4.4.0** (KRaft): Kafka 4.x publishes no test jars, and the 3.9 class does not load in 4.4
  (``org.apache.kafka.common.utils.LogContext`` moved to ``...utils.internals``), so
  :data:`DIRECTORY_RSM`, ``dev/java/DirectoryRemoteStorageManager.java`` (ours, 150 lines: it stores and
  serves the files as they come), compiled on first use with ``javac`` against Kafka's jars into
  ``$TIERED_KAFKA_JAVA_CACHE/directory-rsm-<source hash>/``.

Both store, per copied segment, exactly the ``LogSegmentData`` the broker hands any RemoteStorageManager
(what Aiven's ``copyLogSegmentData`` receives): the segment, its offset, time and (when present)
transaction indexes, the producer snapshot and the leader-epoch checkpoint Kafka cut for the segment, under
``{dir}/kafka-tiered-storage/{topic}-{partition}-{topicId}/{startOffset:020d}-{segmentId}.{suffix}``
(:func:`remote_filesets` reads it back). The tests lay those real files out the way Aiven's RSM would
(``tests/support/rsm_writer.py``) in S3 and compare our gateway's ``kip405`` reads, with segments from the
real ``__remote_log_metadata``, with what the broker serves through its RemoteStorageManager.

Settings, under Kafka's names (:func:`kip405_broker_config`): ``remote.log.storage.system.enable``,
``remote.log.storage.manager.class.name`` (+ its ``rsm.config.`` prefix, ``rsm.config.dir``),
``remote.log.metadata.manager.listener.name`` (the RLMM's clients connect to this broker),
``rlmm.config.remote.log.metadata.topic.{replication.factor,num.partitions}`` (Kafka: 3 and 50) and
``remote.log.manager.task.interval.ms`` (Kafka: 30000; how often a partition's copy and remote-expiry
tasks run). Topics opt in with ``remote.storage.enable=true`` (:data:`TIERED_TOPIC_DEFAULTS`). The jars
go on the broker with ``KafkaServer(version=..., extra_classpath=rsm_classpath(version))``.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from ._kafka import KAFKA_VERSION, KAFKA_ZK_VERSION, java_cache_dir, kafka_classpath
from ._process import MissingBinaryError, ServiceError, find_executable

__all__ = [
    "DIRECTORY_RSM",
    "KIP405_LINES",
    "LOCAL_TIERED_STORAGE",
    "TIERED_TOPIC_DEFAULTS",
    "RemoteFileset",
    "kip405_broker_config",
    "remote_filesets",
    "rsm_classpath",
]

LOCAL_TIERED_STORAGE = "org.apache.kafka.server.log.remote.storage.LocalTieredStorage"
"""Kafka's own RemoteStorageManager for tests (``kafka-storage`` test jar, 3.9 line)."""

DIRECTORY_RSM = "tieredkafka.dev.DirectoryRemoteStorageManager"
"""Ours, for 4.x (``dev/java/DirectoryRemoteStorageManager.java``)."""

KIP405_LINES: Mapping[str, str] = {KAFKA_ZK_VERSION: LOCAL_TIERED_STORAGE, KAFKA_VERSION: DIRECTORY_RSM}
"""Kafka version (KRaft) -> the RemoteStorageManager class it runs here."""

_JAR_SET = f"kafka-local-tiered-storage-{KAFKA_ZK_VERSION}"
_DIRECTORY_RSM_SOURCE = Path(__file__).resolve().parents[2] / "java" / "DirectoryRemoteStorageManager.java"
_ROOT_DIR = "kafka-tiered-storage"  # LocalTieredStorage.ROOT_STORAGE_DIR_NAME
_FILE = re.compile(r"(\d{20})-([A-Za-z0-9_-]{22})\.([a-z_]+)")  # RemoteLogSegmentFileset's file names

TIERED_TOPIC_DEFAULTS: Mapping[str, str] = {
    "remote.storage.enable": "true",
    "retention.ms": "-1",  # remote: keep everything
    "local.retention.ms": "1000",  # local: delete a segment a second after its copy (checked every second)
    "file.delete.delay.ms": "1000",  # Kafka: 60000 between the .deleted rename and the unlink
}
"""Topic configs of a tiered topic whose rolled segments leave the broker's disk quickly once copied."""


def rsm_classpath(version: str) -> list[str]:
    """What ``KafkaServer(extra_classpath=...)`` needs for Kafka ``version``'s RemoteStorageManager
    (:data:`KIP405_LINES`); :class:`MissingBinaryError` naming dev/install.sh when a jar is missing."""
    if version not in KIP405_LINES:
        raise ServiceError(f"no RemoteStorageManager for Kafka {version} here: one of {', '.join(KIP405_LINES)}")
    if KIP405_LINES[version] == DIRECTORY_RSM:
        return [str(_compiled_directory_rsm(version))]
    directory = java_cache_dir() / _JAR_SET
    jars = sorted(directory.glob("kafka-storage-*-test.jar")) if directory.is_dir() else []
    if not jars:
        raise MissingBinaryError("Kafka's LocalTieredStorage", f"kafka-storage-{KAFKA_ZK_VERSION}-test.jar", [str(directory)])
    return [str(jar) for jar in jars]


def _compiled_directory_rsm(version: str) -> Path:
    """The classes directory of :data:`DIRECTORY_RSM`, compiled once per source version (``javac``, against
    Kafka ``version``'s jars); concurrent first uses each compile aside and the first rename wins."""
    source = _DIRECTORY_RSM_SOURCE.read_bytes()
    target = java_cache_dir() / f"directory-rsm-{hashlib.sha256(source).hexdigest()[:12]}"
    if (target / "tieredkafka" / "dev" / "DirectoryRemoteStorageManager.class").is_file():
        return target
    javac = find_executable("javac (a JDK, for the test RemoteStorageManager)", "javac")
    target.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="directory-rsm-", dir=target.parent))
    try:
        done = subprocess.run([javac, "--release", "17", "-nowarn", "-cp", kafka_classpath(version), "-d", str(work), str(_DIRECTORY_RSM_SOURCE)],
                              capture_output=True, text=True, timeout=180, check=False)
        if done.returncode != 0:
            raise ServiceError(f"javac {_DIRECTORY_RSM_SOURCE} failed (exit {done.returncode}):\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
        try:
            work.rename(target)
        except OSError:  # another process renamed its copy first
            if not target.is_dir():
                raise
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return target


def kip405_broker_config(version: str, storage_dir: str | os.PathLike[str], *, metadata_partitions: int = 3, task_interval_ms: int = 500) -> dict[str, str]:
    """Broker settings (Kafka's names) for tiered storage of Kafka ``version`` into its RemoteStorageManager
    (:data:`KIP405_LINES`) under ``storage_dir``, with ``__remote_log_metadata`` of ``metadata_partitions``
    partitions (replication 1) on this broker."""
    return {
        "remote.log.storage.system.enable": "true",
        "remote.log.storage.manager.class.name": KIP405_LINES[version],
        "remote.log.storage.manager.impl.prefix": "rsm.config.",
        "rsm.config.dir": str(storage_dir),
        "rsm.config.delete.on.close": "false",
        "remote.log.metadata.manager.listener.name": "PLAINTEXT",
        "rlmm.config.remote.log.metadata.topic.replication.factor": "1",
        "rlmm.config.remote.log.metadata.topic.num.partitions": str(metadata_partitions),
        "remote.log.manager.task.interval.ms": str(task_interval_ms),
    }


@dataclass(frozen=True)
class RemoteFileset:
    """One copied segment in LocalTieredStorage's layout (``RemoteLogSegmentFileset``; both RemoteStorageManagers here
    write it): the ``LogSegmentData`` the broker handed over.

    ``files`` maps LocalTieredStorage's suffixes to paths: ``log``, ``index``, ``timeindex``, ``snapshot``,
    ``leader_epoch_checkpoint`` and, when the segment has one, ``txnindex``."""

    topic: str
    partition: int
    topic_id: str
    start_offset: int
    segment_id: str
    files: Mapping[str, Path]


def remote_filesets(storage_dir: str | os.PathLike[str]) -> list[RemoteFileset]:
    """Every segment LocalTieredStorage holds under ``storage_dir``, sorted by topic, partition, start offset.

    Directories are ``{topic}-{partition}-{topicId}`` (``RemoteTopicPartitionDirectory``; the topic may hold
    ``-``, the id is the last 22 characters); files ``{startOffset:020d}-{segmentId}.{suffix}``."""
    root = Path(storage_dir) / _ROOT_DIR
    found: dict[tuple[str, int, str, int, str], dict[str, Path]] = {}
    for directory in sorted(root.iterdir()) if root.is_dir() else []:
        topic_partition, topic_id = directory.name[:-23], directory.name[-22:]
        topic, _, partition = topic_partition.rpartition("-")
        for path in directory.iterdir():
            match = _FILE.fullmatch(path.name)
            if match:
                key = (topic, int(partition), topic_id, int(match[1]), match[2])
                found.setdefault(key, {})[match[3]] = path
    return [RemoteFileset(t, p, tid, start, sid, files) for (t, p, tid, start, sid), files in sorted(found.items())]
