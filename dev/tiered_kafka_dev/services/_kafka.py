"""Apache Kafka itself, from Maven Central, on free 127.0.0.1 ports: one KRaft node, a three-node
KRaft cluster, or a ZooKeeper-mode broker on the 3.9 line.

Where the jars come from: ``dev/install.sh`` resolves ``dev/kafka/<line>/pom.xml`` with Maven
(``mvn dependency:copy-dependencies``) into a cache outside the repository,
``$TIERED_KAFKA_JAVA_CACHE/kafka-<version>/`` (default ``~/.cache/tiered-kafka/java``), which a second
run reuses. :func:`kafka_classpath` finds them there and raises :class:`MissingBinaryError` naming the
install script when they are missing. Two lines are pinned:

- :data:`KAFKA_VERSION` (4.x): KRaft only; the node is formatted with Kafka's storage tool
  (``kafka.tools.StorageTool format``) before its first start.
- :data:`KAFKA_ZK_VERSION` (3.9.x): the last line with ZooKeeper mode (``zookeeper.connect``), beside
  Debian's ZooKeeper (:class:`~tiered_kafka_dev.services.ZooKeeperServer`).

Settings pass through under Kafka's own names (``config={"log.retention.check.interval.ms": "500"}``);
:data:`LOCAL_DEFAULTS` are the few we change from Kafka's defaults for a one-machine run (replication
factors of the internal topics, no initial rebalance delay, retention checked every second).

Readiness is "a client can produce": the node's listener answers a Metadata request that lists the
node as a broker (in KRaft a fenced broker is not listed), and then one record written with
``acks=all`` to the internal topic :data:`READY_TOPIC` is acknowledged. Internal (``__``) topics are
skipped by the agent unless named explicitly, so the probe's records are never uploaded.

Lifecycle beyond :class:`LocalService`: :meth:`KafkaServer.restart` stops the JVM (SIGTERM: Kafka's
controlled shutdown) and starts it again on the same ports and log.dir; :meth:`LocalService.kill`
then :meth:`KafkaServer.restart` is a crash and a log recovery. A log.dir the caller passes is kept;
one the launcher made is removed by :meth:`KafkaServer.stop`.

Test-only segment sizes: Kafka 4.x refuses ``segment.bytes`` below 1 MiB; Kafka's own tests use the
topic config ``internal.segment.bytes`` for smaller segments, and so do ours
(:func:`topic_configs` translates).
"""

from __future__ import annotations

import base64
import os
import shutil
import subprocess
import tempfile
import time
import uuid
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import TracebackType
from typing import Any, ClassVar, Self

from ._process import LOOPBACK, LocalService, MissingBinaryError, ServiceError, ServiceStartError, find_executable, free_ports, log_tail

__all__ = [
    "KAFKA_VERSION",
    "KAFKA_ZK_VERSION",
    "LOCAL_DEFAULTS",
    "READY_TOPIC",
    "KafkaCluster",
    "KafkaServer",
    "java_cache_dir",
    "kafka_classpath",
    "topic_configs",
]

KAFKA_VERSION = "4.4.0"
"""The 4.x line (KRaft): the newest release that resolves from Maven Central and starts here."""

KAFKA_ZK_VERSION = "3.9.2"
"""The 3.9.x line: the last with ZooKeeper mode."""

READY_TOPIC = "__tiered_kafka_ready"
"""The internal topic the readiness probe produces to (one partition)."""

MIN_SEGMENT_BYTES_4X = 1_048_576
"""Kafka 4.x's lower bound on ``segment.bytes`` (``internal.segment.bytes`` goes below it)."""

LOCAL_DEFAULTS: Mapping[str, str] = {
    "num.partitions": "1",
    "offsets.topic.num.partitions": "4",  # Kafka: 50 partition directories per log.dir
    "transaction.state.log.num.partitions": "4",
    "group.initial.rebalance.delay.ms": "0",  # Kafka: 3000
    "log.retention.check.interval.ms": "1000",  # Kafka: 300000
    "log.initial.task.delay.ms": "0",  # Kafka: 30000 before the first retention pass
    "replica.high.watermark.checkpoint.interval.ms": "500",  # Kafka: 5000; the agent uploads only below the checkpointed high watermark
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": "1000",
    "transaction.remove.expired.transaction.cleanup.interval.ms": "3600000",
    "auto.create.topics.enable": "true",
    # A SIGKILLed KRaft broker restarting is refused (DUPLICATE_BROKER_REGISTRATION) until the controller
    # fences its previous incarnation after broker.session.timeout.ms (Kafka: 9000, heartbeat 2000).
    "broker.session.timeout.ms": "3000",
    "broker.heartbeat.interval.ms": "500",
}
"""Broker settings changed from Kafka's defaults for local runs; any of them can be overridden."""

QUICK_JVM_OPTIONS = ("-XX:TieredStopAtLevel=1",)
"""JVM flags for short-lived brokers (the test session's): the C1 compiler only, no C2. A broker and its
storage-format run here took ~35 % less CPU to start (3.8 s against 5.7 s, 1.4 s against 2.3 s) at the
cost of peak speed no test needs. Not for benchmarks, which compare against Kafka at full speed:
:attr:`KafkaServer.quick_jvm` is off unless the pytest plugin turns it on."""

_CLUSTER_READY_S = 180.0
_JVM_OPTIONS = (
    "-XX:+UseSerialGC",
    "-XX:-UsePerfData",  # no /tmp/hsperfdata_<user>/<pid> file
    "-Xss512k",
    "-Djava.awt.headless=true",
)
_LOG4J2 = """\
status = warn
appender.out.type = Console
appender.out.name = out
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = info
rootLogger.appenderRef.out.ref = out
logger.request.name = kafka.request.logger
logger.request.level = warn
logger.cleaner.name = kafka.log.LogCleaner
logger.cleaner.level = info
"""


def java_cache_dir() -> Path:
    """Where ``dev/install.sh`` puts the jars it resolves from Maven Central."""
    explicit = os.environ.get("TIERED_KAFKA_JAVA_CACHE")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "tiered-kafka" / "java"


def kafka_classpath(version: str = KAFKA_VERSION) -> str:
    """The classpath of Kafka ``version`` (every jar of its cache directory), or
    :class:`MissingBinaryError` naming dev/install.sh."""
    lib = java_cache_dir() / f"kafka-{version}"
    jars = sorted(lib.glob("*.jar")) if lib.is_dir() else []
    if not any(jar.name.startswith("kafka_2.13-") for jar in jars):
        raise MissingBinaryError(f"Kafka {version}", f"kafka_2.13-{version}.jar and its dependencies", [str(lib)])
    return os.pathsep.join(str(jar) for jar in jars)


def topic_configs(configs: Mapping[str, str], version: str = KAFKA_VERSION) -> dict[str, str]:
    """Topic configs under Kafka's names, with a ``segment.bytes`` below 1 MiB moved to
    ``internal.segment.bytes`` on 4.x (Kafka's own test override; 3.9 takes small values as they are)."""
    out = dict(configs)
    if version.split(".")[0] != "3" and "segment.bytes" in out and int(out["segment.bytes"]) < MIN_SEGMENT_BYTES_4X:
        out["internal.segment.bytes"] = out.pop("segment.bytes")
    return out


def new_cluster_id() -> str:
    """A cluster id as Kafka's ``Uuid.randomUuid().toString()`` writes it: 16 bytes, URL-safe base64, no padding,
    and, as Kafka's ``Uuid.randomUuid`` loops for, not starting with ``-`` (the storage tool's ``-t <id>`` would
    read such an id as an option: "argument --cluster-id/-t: expected one argument")."""
    while True:
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
        if not cluster_id.startswith("-"):
            return cluster_id


def _java() -> str:
    home = os.environ.get("JAVA_HOME")
    candidate = Path(home, "bin", "java") if home else None
    return find_executable("Kafka", "java", candidate if candidate is not None and candidate.is_file() else None)


class KafkaServer(LocalService):
    """One Kafka node: KRaft (broker and controller in one JVM) by default, a ZooKeeper-mode broker
    when ``zookeeper_connect`` is given (on the 3.9 line).

    ``bootstrap_servers`` is ``127.0.0.1:PORT``; ``log_dir`` is the broker's one log.dir. ``config``
    holds broker settings under Kafka's names (over :data:`LOCAL_DEFAULTS`); ``extra_classpath`` adds
    jars (a RemoteStorageManager plugin, for KIP-405) and ``jvm_options`` JVM flags.
    """

    name: ClassVar[str] = "Kafka"
    stop_grace_s: ClassVar[float] = 30.0  # controlled shutdown moves leadership first
    default_startup_timeout_s: ClassVar[float] = 180.0  # generous: 2 CPUs shared with every other JVM
    quick_jvm: ClassVar[bool] = False  # QUICK_JVM_OPTIONS for every broker (and its format run); the pytest plugin sets it

    def __init__(
        self,
        *,
        log_dir: str | os.PathLike[str] | None = None,
        node_id: int = 1,
        config: Mapping[str, object] | None = None,
        version: str | None = None,
        zookeeper_connect: str | None = None,
        cluster_id: str | None = None,
        heap: str = "768m",
        extra_classpath: Sequence[str | os.PathLike[str]] = (),
        jvm_options: Sequence[str] = (),
        startup_timeout_s: float | None = None,
        _quorum: KafkaQuorum | None = None,
    ) -> None:
        super().__init__(startup_timeout_s=startup_timeout_s)
        self.zookeeper_connect = zookeeper_connect
        self.version = version or (KAFKA_ZK_VERSION if zookeeper_connect else KAFKA_VERSION)
        if zookeeper_connect and self.version.split(".")[0] != "3":
            raise ServiceError(f"Kafka {self.version} has no ZooKeeper mode: use {KAFKA_ZK_VERSION}")
        self.node_id = node_id
        self.config: dict[str, str] = {name: str(value) for name, value in (config or {}).items()}
        self.cluster_id = cluster_id or new_cluster_id()
        self.heap = heap
        self.extra_classpath = [str(p) for p in extra_classpath]
        self.jvm_options = list(jvm_options)
        self._owned_log_root: Path | None = None
        if log_dir is None:
            self._owned_log_root = Path(tempfile.mkdtemp(prefix="tiered-kafka-logs-"))
            log_dir = self._owned_log_root / "kafka-logs"
        self.log_dir = Path(log_dir)
        self._quorum = _quorum
        self.host = LOOPBACK
        self.port = 0
        self.controller_port = 0
        self._wait_for_quorum = True

    # -- addresses ------------------------------------------------------------------------------------

    @property
    def bootstrap_servers(self) -> str:
        """``127.0.0.1:PORT`` of the PLAINTEXT listener."""
        return f"{self.host}:{self.port}"

    @property
    def kraft(self) -> bool:
        return self.zookeeper_connect is None

    def broker_properties(self) -> dict[str, str]:
        """The ``server.properties`` of the next start, under Kafka's names."""
        props: dict[str, str] = {**LOCAL_DEFAULTS}
        replication = "1" if self._quorum is None else str(min(3, len(self._quorum.voters)))
        props.update({
            "offsets.topic.replication.factor": replication,
            "transaction.state.log.replication.factor": replication,
            "transaction.state.log.min.isr": "1",
            "log.dirs": str(self.log_dir),
        })  # fmt: skip
        if self.kraft:
            voters = self._quorum.voters if self._quorum else {self.node_id: self.controller_port}
            props.update({
                "process.roles": "broker,controller",
                "node.id": str(self.node_id),
                "controller.quorum.voters": ",".join(f"{n}@{self.host}:{p}" for n, p in sorted(voters.items())),
                "listeners": f"PLAINTEXT://{self.host}:{self.port},CONTROLLER://{self.host}:{self.controller_port}",
                "advertised.listeners": f"PLAINTEXT://{self.host}:{self.port}",
                "controller.listener.names": "CONTROLLER",
                "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
                "inter.broker.listener.name": "PLAINTEXT",
            })  # fmt: skip
        else:
            props.update({
                "broker.id": str(self.node_id),
                "zookeeper.connect": str(self.zookeeper_connect),
                "listeners": f"PLAINTEXT://{self.host}:{self.port}",
                "advertised.listeners": f"PLAINTEXT://{self.host}:{self.port}",
                "zookeeper.session.timeout.ms": "18000",
            })  # fmt: skip
        props.update(self.config)
        return props

    # -- LocalService ---------------------------------------------------------------------------------

    def _check_installed(self) -> None:
        _java()
        kafka_classpath(self.version)

    def _prepare(self, workdir: Path) -> list[str]:
        if self.port == 0:
            if self._quorum is not None:
                self.port, self.controller_port = self._quorum.ports[self.node_id]
            else:
                self.port, self.controller_port = free_ports(2)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        properties = workdir / "server.properties"
        properties.write_text("".join(f"{name}={value}\n" for name, value in self.broker_properties().items()))
        log4j = workdir / "log4j2.properties"
        log4j.write_text(_LOG4J2)
        quick = QUICK_JVM_OPTIONS if self.quick_jvm else ()
        java = [_java(), f"-Xmx{self.heap}", *_JVM_OPTIONS, *quick, *self.jvm_options, f"-Dlog4j2.configurationFile={log4j}", f"-Dkafka.logs.dir={workdir}"]
        classpath = os.pathsep.join([kafka_classpath(self.version), *self.extra_classpath])
        if self.kraft and not (self.log_dir / "meta.properties").exists():
            self._format(java, classpath, properties, workdir)
        return [*java, "-cp", classpath, "kafka.Kafka", str(properties)]

    def _format(self, java: Sequence[str], classpath: str, properties: Path, workdir: Path) -> None:
        """``kafka-storage.sh format``: writes meta.properties and the bootstrap checkpoint. A refusal
        (a bad setting is found here first) is a :class:`ServiceStartError` with the tool's output."""
        command = [*java, "-cp", classpath, "kafka.tools.StorageTool", "format", "-t", self.cluster_id, "-c", str(properties), "--ignore-formatted"]
        log_path = workdir / "format.log"
        with log_path.open("wb") as log_file:
            done = subprocess.run(command, cwd=workdir, stdout=log_file, stderr=subprocess.STDOUT, timeout=180, check=False)
        if done.returncode != 0:
            reason = f"formatting {self.log_dir} with Kafka's storage tool failed (exit {done.returncode})"
            raise ServiceStartError(self.name, reason, command, log_path, log_tail(log_path))

    def _probe(self) -> bool:
        return _ready(self.bootstrap_servers, self.node_id, produce=self._wait_for_quorum)

    # -- lifecycle ------------------------------------------------------------------------------------

    def restart(self) -> Self:
        """Stop the JVM (SIGTERM, controlled shutdown; nothing to do after :meth:`kill`) and start it
        again on the same ports and log.dir."""
        super().stop()
        return self.start()

    def stop(self) -> None:
        """Stop the JVM and remove its directory, and the log.dir if this launcher made it."""
        super().stop()
        if self._owned_log_root is not None:
            shutil.rmtree(self._owned_log_root, ignore_errors=True)

    def __repr__(self) -> str:
        mode = "kraft" if self.kraft else "zookeeper"
        return f"<KafkaServer {self.version} {mode} node {self.node_id} {self.bootstrap_servers} pid={self.pid}>"


def _ready(bootstrap: str, node_id: int | None, *, produce: bool = True) -> bool:
    """Whether a Metadata request lists ``node_id`` as a broker (unfenced) and, with ``produce``, one
    record to :data:`READY_TOPIC` (auto-created) is acknowledged with acks=all.

    One producer handle, destroyed before returning (no librdkafka thread outlives a probe), and
    silent: refused connections while the JVM starts are expected.
    """
    from confluent_kafka import Producer

    outcome: list[Any] = []
    producer = Producer({
        "bootstrap.servers": bootstrap, "acks": "all", "message.timeout.ms": 5000, "enable.idempotence": False,
        "log_level": 0, "reconnect.backoff.max.ms": 200, "topic.metadata.refresh.interval.ms": 200,
    })  # fmt: skip
    try:
        metadata = producer.list_topics(timeout=2)
        if node_id is not None and node_id not in metadata.brokers:
            return False
        if not produce:
            return True
        producer.produce(READY_TOPIC, b"ready", on_delivery=lambda err, _msg: outcome.append(err))
        producer.flush(6)
        return outcome == [None]
    finally:
        producer.purge()
        producer.flush(0)
        del producer


class KafkaQuorum:
    """The ports of a KRaft cluster's nodes, picked before any starts (each names every voter)."""

    def __init__(self, node_ids: Sequence[int]) -> None:
        ports = free_ports(2 * len(node_ids))
        self.ports: dict[int, tuple[int, int]] = {n: (ports[2 * i], ports[2 * i + 1]) for i, n in enumerate(node_ids)}
        self.voters: dict[int, int] = {n: controller for n, (_broker, controller) in self.ports.items()}


class KafkaCluster:
    """Kafka brokers that form one cluster: by default three KRaft nodes (each a broker and one of three
    controller voters), for leadership moves and broker failures: losing one node keeps both a
    controller majority and two brokers. With ``zookeeper_connect``, ZooKeeper-mode brokers of the 3.9
    line registered under that connection string (a chroot of its own: Kafka creates it).

    ``brokers[i]`` is a :class:`KafkaServer` (``restart``, ``kill``, ``log_dir``), node ids 1..size;
    ``bootstrap_servers`` names all of them.
    """

    def __init__(
        self,
        size: int = 3,
        *,
        root: str | os.PathLike[str] | None = None,
        config: Mapping[str, object] | None = None,
        version: str | None = None,
        zookeeper_connect: str | None = None,
    ) -> None:
        if size < 1:
            raise ServiceError("a Kafka cluster needs at least one node")
        self._owned_root = None if root is not None else Path(tempfile.mkdtemp(prefix="tiered-kafka-cluster-"))
        self.root = Path(root) if root is not None else self._owned_root
        assert self.root is not None
        self.zookeeper_connect = zookeeper_connect
        node_ids = list(range(1, size + 1))
        if zookeeper_connect is not None:
            self.brokers = [
                KafkaServer(log_dir=self.root / f"broker-{n}", node_id=n, config=config, version=version, zookeeper_connect=zookeeper_connect)
                for n in node_ids
            ]  # fmt: skip
        else:
            quorum, cluster_id = KafkaQuorum(node_ids), new_cluster_id()
            self.brokers = [
                KafkaServer(log_dir=self.root / f"broker-{n}", node_id=n, config=config, version=version, cluster_id=cluster_id, _quorum=quorum)
                for n in node_ids
            ]  # fmt: skip

    @property
    def bootstrap_servers(self) -> str:
        return ",".join(b.bootstrap_servers for b in self.brokers)

    def broker(self, node_id: int) -> KafkaServer:
        return next(b for b in self.brokers if b.node_id == node_id)

    def start(self) -> Self:
        """Start every node at once (a KRaft voter waits for the others), then wait until a client can
        produce to the cluster."""
        for broker in self.brokers:
            broker._wait_for_quorum = False
        try:
            with ThreadPoolExecutor(len(self.brokers)) as pool:
                for future in [pool.submit(b.start) for b in self.brokers]:
                    future.result()
            deadline = time.monotonic() + _CLUSTER_READY_S
            while not _ready(self.bootstrap_servers, None):
                if time.monotonic() > deadline:
                    raise ServiceError(f"Kafka cluster: no record acknowledged within {_CLUSTER_READY_S:g} s\n" + self.brokers[0].log_tail())
                time.sleep(0.2)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Stop every node (in parallel: a controlled shutdown waits for the controller) and remove the root it made."""
        with ThreadPoolExecutor(len(self.brokers)) as pool:
            list(pool.map(lambda b: b.stop(), self.brokers))
        if self._owned_root is not None:
            shutil.rmtree(self._owned_root, ignore_errors=True)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()
