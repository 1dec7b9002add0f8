"""Pinterest's tiered storage 1.0.1 (https://github.com/pinterest/tiered-storage), the system this project's
S3 layout comes from, run for real: its segment uploader beside a ZooKeeper-mode Kafka broker, and its consumer.

The uploader (``ts-segment-uploader``, :class:`PinterestUploader`) is the jar from Maven Central
(``dev/java/pinterest-ts-uploader-1.0.1.pom.xml``), unchanged, with the two plug-ins it asks of whoever runs
it: a ``KafkaEnvironmentProvider`` and a ``StorageServiceEndpointProvider``, both in
``dev/java/pinterest/DevKafkaEnvironmentProvider.java`` (its class comment says why the S3 endpoint needs it:
the uploader has no endpoint setting). It watches the broker's log.dir, polls ZooKeeper for the partitions the
broker leads (``ZookeeperLeadershipWatcher``: ``/brokers/topics/*/partitions/*/state``, every
``leadership_poll_s``), and uploads each rotated segment's ``.log``, ``.index`` and ``.timeindex`` and then
``offset.wm`` to ``{prefix}/{entropy}/{cluster}/{topic}-{partition}/`` (``tiered_kafka.keyspace``).

The uploader keeps its lock and watermark files in ``/tmp/tieredstorage/`` (a constant in its code,
``WatermarkFileHandler.BASE_TS_DIRECTORY``), takes an exclusive lock there and clears the watermark
directory when it starts: two uploaders on one machine exclude each other. So each one runs in a mount
namespace of its own (``unshare --mount``) with a directory of its own bind-mounted over /tmp/tieredstorage;
where namespaces are not allowed it runs as is, one at a time (a second fails with "Another process is
holding the lock").

The consumer (``ts-consumer``) is driven by ``dev/java/pinterest/TsConsumerHarness.java``
(:func:`ts_consumer_command`, :func:`read_with_ts_consumer`): one partition's offsets [from, to) in its
remote-storage mode (``TIERED_STORAGE_ONLY``), printed one record a line.

Both Java sources are compiled on first use with the machine's ``javac`` into
``$TIERED_KAFKA_JAVA_CACHE/pinterest-classes-<hash of both sources>/`` (:func:`compiled_classes`); ts-common,
which Maven Central does not serve, comes out of the uploader's shaded jar for the consumer's classpath.

For benchmarks::

    uploader = PinterestUploader(log_dir=broker.log_dir, zookeeper_connect=zk_connect, broker_id=1,
                                 endpoint_url=s3.endpoint_url, access_key=s3.access_key, secret_key=s3.secret_key,
                                 bucket=bucket, cluster="pinterestCluster", prefix="pinterest", entropy_bits=3)
    with uploader:                       # started: its PID is uploader.pid; stopped and its directory removed on exit
        uploader.wait_watching(topic, 0) # then produce; rotated segments go up, then offset.wm
        ...                              # wait until every rotated segment's 3 objects are listed
    records = read_with_ts_consumer(bootstrap, s3, bucket, uploader.keyspace, topic, 0, 0, end)   # list[TsRecord]
    command = ts_consumer_command(bootstrap, s3.endpoint_url, bucket, uploader.keyspace, topic, 0, 0, end,
                                  print_records=False)   # a timed run: counts, prints only "records=N elapsed_ms=T"
                                                         # on stderr (env: AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY)

Wait for the objects, not for ``offset.wm`` alone: when several segments roll at once, the uploader's
``offset.wm`` PUTs race and it can stay on an earlier segment until the next roll (docs/design-notes.md,
"Issue 25"). ts-consumer does not read ``offset.wm``; our gateway's listing path serves up to it.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
import time
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from tiered_kafka.keyspace import Keyspace

from ._kafka import _java, java_cache_dir
from ._process import LocalService, MissingBinaryError, ServiceError, find_executable

__all__ = [
    "PINTEREST_TS_VERSION",
    "PinterestUploader",
    "TsRecord",
    "compiled_classes",
    "consumer_classpath",
    "parse_ts_record",
    "read_with_ts_consumer",
    "ts_consumer_command",
    "uploader_classpath",
]

PINTEREST_TS_VERSION = "1.0.1"
_UPLOADER_SET = f"pinterest-ts-uploader-{PINTEREST_TS_VERSION}"
_CONSUMER_SET = f"pinterest-ts-consumer-{PINTEREST_TS_VERSION}"
_SOURCES = Path(__file__).resolve().parents[2] / "java" / "pinterest"
_PROVIDER_SOURCE = _SOURCES / "DevKafkaEnvironmentProvider.java"
_HARNESS_SOURCE = _SOURCES / "TsConsumerHarness.java"
_UPLOADER_PACKAGE = "com.pinterest.kafka.tieredstorage.uploader"
_PROVIDER_CLASS = f"{_UPLOADER_PACKAGE}.DevKafkaEnvironmentProvider"
_HARNESS_CLASS = "com.pinterest.kafka.tieredstorage.consumer.TsConsumerHarness"
_TS_COMMON = "com/pinterest/kafka/tieredstorage/common/"
_LOCK_DIR = Path("/tmp/tieredstorage")  # WatermarkFileHandler.BASE_TS_DIRECTORY
_STARTED = "KafkaSegmentUploader started."  # KafkaSegmentUploader.main, once its watchers run
_LOG4J = """\
log4j.rootLogger=WARN, out
log4j.logger.com.pinterest=INFO
log4j.appender.out=org.apache.log4j.ConsoleAppender
log4j.appender.out.target=System.err
log4j.appender.out.layout=org.apache.log4j.PatternLayout
log4j.appender.out.layout.ConversionPattern=[%d] %p %m (%c)%n
"""


def _jars(name: str, what: str) -> list[Path]:
    directory = java_cache_dir() / name
    jars = sorted(directory.glob("*.jar")) if directory.is_dir() else []
    if not jars:
        raise MissingBinaryError(what, f"the jars of dev/java/{name}.pom.xml (run dev/install.sh)", [str(directory)])
    return jars


def _uploader_jar() -> Path:
    return next(j for j in _jars(_UPLOADER_SET, "Pinterest's ts-segment-uploader") if j.name.startswith("ts-segment-uploader-"))


def compiled_classes() -> tuple[Path, Path]:
    """The classes directories (uploader plug-ins, consumer harness) of ``dev/java/pinterest/*.java``, compiled
    once per version of the two sources; concurrent first uses each compile aside and the first rename wins."""
    digest = hashlib.sha256(_PROVIDER_SOURCE.read_bytes() + b"\0" + _HARNESS_SOURCE.read_bytes()).hexdigest()[:12]
    target = java_cache_dir() / f"pinterest-classes-{digest}"
    if (target / ".complete").is_file():
        return target / "uploader", target / "consumer"
    javac = find_executable("javac (a JDK, for Pinterest's uploader plug-ins and consumer harness)", "javac")
    uploader_jar = _uploader_jar()
    consumer_jars = _jars(_CONSUMER_SET, "Pinterest's ts-consumer")
    target.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="pinterest-classes-", dir=target.parent))
    try:
        (work / "uploader").mkdir()
        (work / "consumer").mkdir()
        with zipfile.ZipFile(uploader_jar) as jar:  # ts-common (not on Maven Central) for the consumer's classpath
            jar.extractall(work / "consumer", [n for n in jar.namelist() if n.startswith(_TS_COMMON) and n.endswith(".class")])
        for source, classpath, out in (
            (_PROVIDER_SOURCE, [uploader_jar], work / "uploader"),
            (_HARNESS_SOURCE, [*consumer_jars, work / "consumer"], work / "consumer"),
        ):
            done = subprocess.run([javac, "--release", "17", "-nowarn", "-cp", os.pathsep.join(map(str, classpath)), "-d", str(out), str(source)],
                                  capture_output=True, text=True, timeout=180, check=False)
            if done.returncode != 0:
                raise ServiceError(f"javac {source} failed (exit {done.returncode}):\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
        (work / "consumer" / "log4j-warn.properties").write_text(_LOG4J.replace("com.pinterest=INFO", "com.pinterest=WARN"))
        (work / ".complete").write_text(digest)
        try:
            work.rename(target)
        except OSError:  # another process renamed its copy first
            if not (target / ".complete").is_file():
                raise
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return target / "uploader", target / "consumer"


def uploader_classpath() -> str:
    """The uploader's shaded jar and the plug-ins (:func:`compiled_classes`)."""
    return os.pathsep.join([str(compiled_classes()[0]), str(_uploader_jar())])


def consumer_classpath() -> str:
    """ts-consumer, its dependencies, ts-common's classes and the harness (:func:`compiled_classes`)."""
    return os.pathsep.join([str(compiled_classes()[1]), *map(str, _jars(_CONSUMER_SET, "Pinterest's ts-consumer"))])


def _private_lock_dir(command: list[str], private: Path) -> list[str]:
    """``command`` in a mount namespace where ``private`` is mounted over /tmp/tieredstorage (module doc); as is
    where that cannot be done (no ``unshare``, or namespaces not allowed)."""
    unshare = shutil.which("unshare")
    if unshare is None:
        return command
    namespace = [unshare, "--mount", "--propagation", "private"] if os.geteuid() == 0 else [unshare, "--user", "--map-root-user", "--mount"]
    probe = subprocess.run([*namespace, "true"], capture_output=True, timeout=30, check=False)
    if probe.returncode != 0:
        return command
    _LOCK_DIR.mkdir(parents=True, exist_ok=True)  # the mount point
    script = 'mount --bind "$0" "$1" && shift && exec "$@"'  # $0: private, $1: the mount point, then the command
    return [*namespace, "sh", "-c", script, str(private), str(_LOCK_DIR), *command]


class PinterestUploader(LocalService):
    """Pinterest's ts-segment-uploader for one ZooKeeper-mode broker, uploading to an S3 endpoint (SeaweedFS).

    ``log_dir``, ``zookeeper_connect`` (the broker's, chroot included) and ``broker_id`` name the broker;
    ``bucket``, ``prefix``, ``cluster`` and ``entropy_bits`` the keyspace (:attr:`keyspace`, this project's
    :class:`~tiered_kafka.keyspace.Keyspace` for the same keys); ``topics`` is a regex of the topics to upload
    (``ts.segment.uploader.kafka.topics.include``). Started when its log says "KafkaSegmentUploader started."; it
    uploads what the broker leads from its first ZooKeeper poll, ``leadership_poll_s`` later, on.
    """

    name: ClassVar[str] = "Pinterest uploader"
    stop_grace_s: ClassVar[float] = 5.0
    default_startup_timeout_s: ClassVar[float] = 120.0

    def __init__(
        self,
        *,
        log_dir: str | os.PathLike[str],
        zookeeper_connect: str,
        endpoint_url: str,
        access_key: str,
        secret_key: str,
        bucket: str,
        cluster: str,
        prefix: str = "pinterest",
        entropy_bits: int = 0,
        broker_id: int = 1,
        region: str = "us-east-1",
        topics: str = ".*",
        leadership_poll_s: int = 1,
        upload_threads: int = 3,
        heap: str = "256m",
        startup_timeout_s: float | None = None,
    ) -> None:
        super().__init__(startup_timeout_s=startup_timeout_s)
        if not prefix.strip("/"):
            raise ServiceError("Pinterest's uploader needs a non-empty prefix (S3StorageServiceEndpoint's key pattern)")
        self.log_dir = Path(log_dir)
        self.zookeeper_connect = zookeeper_connect
        self.endpoint_url = endpoint_url
        self._access_key = access_key
        self._secret_key = secret_key
        self.bucket = bucket
        self.region = region
        self.broker_id = broker_id
        self.topics = topics
        self.leadership_poll_s = leadership_poll_s
        self.upload_threads = upload_threads
        self.heap = heap
        self.keyspace = Keyspace(prefix=prefix.strip("/"), cluster=cluster, entropy_bits=entropy_bits)

    def properties(self) -> dict[str, str]:
        """The uploader's ``<cluster>.properties`` (names from SegmentUploaderConfiguration)."""
        return {
            "storage.service.endpoint.provider.class": f"{_PROVIDER_CLASS}$Endpoints",
            "ts.segment.uploader.leadership.watcher.class": f"{_UPLOADER_PACKAGE}.leadership.ZookeeperLeadershipWatcher",
            "ts.segment.uploader.leadership.watcher.poll.interval.seconds": str(self.leadership_poll_s),
            "ts.segment.uploader.kafka.topics.include": self.topics,
            "ts.segment.uploader.kafka.topics.exclude": "__.*",
            "ts.segment.uploader.s3.prefix.entropy.bits": str(self.keyspace.entropy_bits or -1),
            "ts.segment.uploader.upload.thread.count": str(self.upload_threads),
            "ts.segment.uploader.offset.reset.strategy": "EARLIEST",
        }

    def _check_installed(self) -> None:
        _java()
        _uploader_jar()

    def _prepare(self, workdir: Path) -> list[str]:
        config_dir = workdir / "config"
        config_dir.mkdir()
        (config_dir / f"{self.keyspace.cluster}.properties").write_text("".join(f"{k}={v}\n" for k, v in self.properties().items()))
        (workdir / "log4j.properties").write_text(_LOG4J)
        private = workdir / "tieredstorage"
        private.mkdir()
        system = {
            "kafkaEnvironmentProviderClass": _PROVIDER_CLASS,
            "tieredkafka.cluster": self.keyspace.cluster,
            "tieredkafka.broker.id": str(self.broker_id),
            "tieredkafka.zookeeper.connect": self.zookeeper_connect,
            "tieredkafka.log.dir": str(self.log_dir),
            "tieredkafka.s3.endpoint": self.endpoint_url,
            "tieredkafka.s3.region": self.region,
            "tieredkafka.s3.bucket": self.bucket,
            "tieredkafka.s3.prefix": self.keyspace.prefix,
            "log4j.configuration": (workdir / "log4j.properties").as_uri(),
        }
        # the keys go in through a file only the JVM reads, not on its command line (visible to every user)
        secrets_file = workdir / "s3.args"
        secrets_file.write_text(f"-Dtieredkafka.s3.access.key={self._access_key}\n-Dtieredkafka.s3.secret.key={self._secret_key}\n")
        secrets_file.chmod(0o600)
        java = [_java(), f"-Xmx{self.heap}", "-XX:+UseSerialGC", f"@{secrets_file}", *(f"-D{k}={v}" for k, v in system.items())]
        command = [*java, "-cp", uploader_classpath(), f"{_UPLOADER_PACKAGE}.KafkaSegmentUploader", str(config_dir)]
        return _private_lock_dir(command, private)

    def _probe(self) -> bool:
        path = self.log_path
        return path is not None and _STARTED in path.read_text(errors="replace")

    def wait_watching(self, topic: str, partition: int, timeout_s: float = 60) -> None:
        """Until the uploader watches ``topic``-``partition``'s directory (its log says "Registered watcher for
        DIR"; it queued the segments already there then). Segments that roll before are uploaded on that
        first scan all at once, and their offset.wm PUTs race (docs/design-notes.md, issue 25)."""
        marker = f"Registered watcher for {self.log_dir / f'{topic}-{partition}'}"
        deadline = time.monotonic() + timeout_s
        while self.log_path is None or marker not in self.log_path.read_text(errors="replace"):
            if not self.running:
                raise ServiceError(f"{self.name} exited (code {self._proc.returncode if self._proc else None}):\n{self.log_tail()}")
            if time.monotonic() > deadline:
                raise ServiceError(f"{self.name} does not watch {topic}-{partition} after {timeout_s:g} s:\n{self.log_tail()}")
            time.sleep(0.1)

    def __repr__(self) -> str:
        state = f"pid={self.pid}" if self.pid is not None else "stopped"
        return f"<PinterestUploader {state} bucket={self.bucket} keyspace={self.keyspace}>"


@dataclass(frozen=True)
class TsRecord:
    """One record as ts-consumer returned it (TsConsumerHarness's output line): offset, timestamp (ms), key,
    value and headers (name, value), None for null. Tests compare other clients' records in the same shape."""

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]


def _unhex(text: str) -> bytes | None:
    return None if text == "-" else bytes.fromhex(text)


def parse_ts_record(line: str) -> TsRecord:
    """A TsConsumerHarness output line (its class comment)."""
    offset, timestamp, key, value, headers = line.rstrip("\n").split("\t")
    pairs = []
    for item in headers.split(",") if headers else ():
        name, _, data = item.partition("=")
        pairs.append((bytes.fromhex(name).decode(), _unhex(data)))
    return TsRecord(int(offset), int(timestamp), _unhex(key), _unhex(value), tuple(pairs))


def ts_consumer_command(bootstrap: str, endpoint_url: str, bucket: str, keyspace: Keyspace, topic: str, partition: int, start: int, end: int, *,
                        idle_ms: int = 30_000, print_records: bool = True, heap: str = "512m", jvm_options: Sequence[str] = ()) -> list[str]:
    """The command reading ``topic``-``partition`` offsets [start, end) with ts-consumer (TsConsumerHarness); run
    it with AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY in its environment. ``bootstrap``: any broker (the consumer
    inside needs one for its group, even in remote-storage mode)."""
    if not keyspace.prefix:
        raise ServiceError("ts-consumer needs a non-empty prefix (storage.service.endpoint.s3.prefix)")
    args = {
        "bootstrap": bootstrap, "cluster": keyspace.cluster, "bucket": bucket, "prefix": keyspace.prefix,
        "entropy.bits": keyspace.entropy_bits or -1, "topic": topic, "partition": partition, "from": start, "to": end,
        "endpoint": endpoint_url, "idle.ms": idle_ms, "print": str(print_records).lower(),
    }  # fmt: skip
    log4j = compiled_classes()[1] / "log4j-warn.properties"
    return [_java(), f"-Xmx{heap}", f"-Dlog4j.configuration={log4j.as_uri()}", *jvm_options, "-cp", consumer_classpath(), _HARNESS_CLASS, *(f"{k}={v}" for k, v in args.items())]


_QUICK_JVM = ("-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1")  # a short run: less JIT and GC work on shared CPUs


def read_with_ts_consumer(bootstrap: str, s3: Any, bucket: str, keyspace: Keyspace, topic: str, partition: int, start: int, end: int,
                          timeout_s: float = 180, jvm_options: Sequence[str] = _QUICK_JVM) -> list[TsRecord]:
    """Offsets [start, end) of ``topic``-``partition`` read by ts-consumer from ``bucket`` of ``s3`` (an
    :class:`~tiered_kafka_dev.services.S3Server`: endpoint_url, access_key, secret_key); :class:`ServiceError`
    with its output when it stops short."""
    command = ts_consumer_command(bootstrap, s3.endpoint_url, bucket, keyspace, topic, partition, start, end, jvm_options=jvm_options)
    env = {**os.environ, "AWS_ACCESS_KEY_ID": s3.access_key, "AWS_SECRET_ACCESS_KEY": s3.secret_key, "AWS_REGION": s3.region}
    done = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s, env=env, check=False)
    if done.returncode != 0:
        raise ServiceError(f"ts-consumer read of {topic}-{partition} [{start}, {end}) failed (exit {done.returncode}):\n{done.stderr[-3000:]}")
    return [parse_ts_record(line) for line in done.stdout.splitlines() if line]
