"""A Spark standalone cluster (one master, N workers) from the pyspark installation, on 127.0.0.1.

Each daemon is Spark's own launcher script run on pyspark's package directory as ``SPARK_HOME``::

    $SPARK_HOME/bin/spark-class org.apache.spark.deploy.master.Master --host 127.0.0.1 --port P --webui-port Q
    $SPARK_HOME/bin/spark-class org.apache.spark.deploy.worker.Worker spark://127.0.0.1:P \\
        --cores 1 --memory 1g --host 127.0.0.1 --webui-port R --work-dir DIR

``spark-class`` ends in ``exec java ...``, so the process this launcher starts *is* the daemon's JVM; a
worker starts each application's executor (``CoarseGrainedExecutorBackend``) as its own child JVM, and
the executor its Python workers (``pyspark.daemon``), all in the worker's process group, which stop
ends by its id (SIGTERM, then SIGKILL).

Readiness: the master is ready when its web UI's ``/json/`` (``JsonProtocol.writeMasterState``) says
``"status": "ALIVE"``; a worker when that list holds it (matched by its web UI address) as ``ALIVE``,
i.e. registered with the master. Spark would silently move to the next port when one is taken
(``spark.port.maxRetries``); the daemons get ``spark.port.maxRetries=0`` instead, so a taken port is a
BindException ("Address already in use") and :class:`LocalService` retries with new free ports.

Memory: the machine runs many processes on 2 CPUs, so the daemons get ``SPARK_DAEMON_MEMORY`` (256m
by default, plenty for a master or a worker) and a worker offers ``--memory 1g``; the application asks
for small executors (``spark.executor.memory``, see ``tiered_kafka.spark.cluster_session``).
"""

from __future__ import annotations

import json
import sys
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import TracebackType
from typing import Any, ClassVar, Self

from ._process import LOOPBACK, LocalService, MissingBinaryError, ServiceError, free_ports, require_file

__all__ = ["SparkMaster", "SparkStandaloneCluster", "SparkWorker", "spark_home"]

_MASTER_CLASS = "org.apache.spark.deploy.master.Master"
_WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"
DAEMON_MEMORY = "256m"
"""``SPARK_DAEMON_MEMORY`` of the master and the workers (their JVM's -Xmx)."""


def spark_home() -> Path:
    """pyspark's package directory: a complete ``SPARK_HOME`` (``bin/spark-class``, ``jars/``)."""
    try:
        import pyspark
    except ImportError as err:
        raise MissingBinaryError("Spark standalone", "pyspark", [sys.executable]) from err
    return Path(pyspark.__file__).resolve().parent


def _master_state(web_url: str) -> dict[str, Any]:
    with urllib.request.urlopen(f"{web_url}/json/", timeout=5) as response:
        state: dict[str, Any] = json.load(response)
    return state


class _SparkDaemon(LocalService):
    """What the master and a worker share: the environment, the command prefix, the installation check."""

    stop_grace_s: ClassVar[float] = 15.0
    default_startup_timeout_s: ClassVar[float] = 120.0  # a JVM on a busy 2-CPU machine

    def __init__(self, *, daemon_memory: str = DAEMON_MEMORY, startup_timeout_s: float | None = None) -> None:
        super().__init__(startup_timeout_s=startup_timeout_s)
        self.daemon_memory = daemon_memory
        self.host: str = LOOPBACK
        self.web_ui_port: int = 0

    @property
    def web_url(self) -> str:
        """The daemon's web UI, ``http://127.0.0.1:PORT``."""
        return f"http://{self.host}:{self.web_ui_port}"

    def _check_installed(self) -> None:
        require_file(self.name, spark_home() / "bin" / "spark-class")

    def _command_prefix(self, workdir: Path) -> list[str]:
        """``env VAR=... spark-class`` with a properties file; ``env`` execs, so the pid stays the JVM's."""
        home = spark_home()
        properties = workdir / "spark-defaults.conf"
        # spark.master.rest.enabled: the REST submission server (cluster deploy mode, unused here) binds
        # the fixed port 6066, which a second master on the machine (another test worker's) then lacks
        properties.write_text("spark.port.maxRetries 0\nspark.ui.reverseProxy false\nspark.master.rest.enabled false\n")
        environment = {
            "SPARK_HOME": str(home),
            "SPARK_CONF_DIR": str(workdir),  # nothing from the user's or pyspark's conf directory
            "SPARK_DAEMON_MEMORY": self.daemon_memory,
            "SPARK_LOCAL_IP": self.host,
            "SPARK_LOCAL_DIRS": str(workdir / "local"),
            "SPARK_LOG_DIR": str(workdir),
            "SPARK_PID_DIR": str(workdir),
            "SPARK_NO_DAEMONIZE": "1",
            "PYSPARK_PYTHON": sys.executable,
        }
        return ["env", *(f"{key}={value}" for key, value in environment.items()), str(home / "bin" / "spark-class")]

    def _properties_args(self, workdir: Path) -> list[str]:
        return ["--properties-file", str(workdir / "spark-defaults.conf")]


class SparkMaster(_SparkDaemon):
    """A standalone master; applications connect to :attr:`url` (``spark://127.0.0.1:PORT``)."""

    name: ClassVar[str] = "Spark master"

    def __init__(self, *, daemon_memory: str = DAEMON_MEMORY, startup_timeout_s: float | None = None) -> None:
        super().__init__(daemon_memory=daemon_memory, startup_timeout_s=startup_timeout_s)
        self.port: int = 0

    @property
    def url(self) -> str:
        """The master URL applications and workers connect to."""
        return f"spark://{self.host}:{self.port}"

    def state(self) -> dict[str, Any]:
        """The master's ``/json/`` document (``workers``, ``aliveworkers``, ``activeapps``, ``status``...)."""
        return _master_state(self.web_url)

    def _prepare(self, workdir: Path) -> list[str]:
        self.port, self.web_ui_port = free_ports(2)
        prefix = self._command_prefix(workdir)
        return [*prefix, _MASTER_CLASS, "--host", self.host, "--port", str(self.port), "--webui-port", str(self.web_ui_port), *self._properties_args(workdir)]

    def _probe(self) -> bool:
        return self.state().get("status") == "ALIVE"


class SparkWorker(_SparkDaemon):
    """A standalone worker registered with ``master``, offering ``cores`` cores and ``memory``."""

    name: ClassVar[str] = "Spark worker"

    def __init__(
        self,
        master: SparkMaster,
        *,
        cores: int = 1,
        memory: str = "1g",
        daemon_memory: str = DAEMON_MEMORY,
        startup_timeout_s: float | None = None,
    ) -> None:
        super().__init__(daemon_memory=daemon_memory, startup_timeout_s=startup_timeout_s)
        self.master = master
        self.cores = cores
        self.memory = memory
        self.port: int = 0

    def _prepare(self, workdir: Path) -> list[str]:
        if not self.master.running:
            raise ServiceError(f"{self.name}: its master is not running")
        self.port, self.web_ui_port = free_ports(2)
        work_dir = workdir / "work"  # executors' directories: app-*/N/{stdout,stderr}
        work_dir.mkdir()
        prefix = self._command_prefix(workdir)
        return [
            *prefix, _WORKER_CLASS, self.master.url,
            "--cores", str(self.cores), "--memory", self.memory,
            "--host", self.host, "--port", str(self.port), "--webui-port", str(self.web_ui_port),
            "--work-dir", str(work_dir),
            *self._properties_args(workdir),
        ]  # fmt: skip

    def registration(self) -> dict[str, Any] | None:
        """This worker's entry in the master's ``/json/`` ``workers`` list, or ``None``."""
        for worker in self.master.state().get("workers", []):
            if worker.get("webuiaddress") == self.web_url:
                return dict(worker)
        return None

    def _probe(self) -> bool:
        entry = self.registration()
        return entry is not None and entry.get("state") == "ALIVE"


class SparkStandaloneCluster:
    """A master and ``workers`` workers (``cores`` cores, ``memory`` each), started and stopped together.

    ::

        with SparkStandaloneCluster() as cluster:
            spark = cluster_session(cluster.master_url)  # tiered_kafka.spark.cluster_session
    """

    def __init__(
        self,
        workers: int = 2,
        *,
        cores: int = 1,
        memory: str = "1g",
        daemon_memory: str = DAEMON_MEMORY,
        startup_timeout_s: float | None = None,
    ) -> None:
        if workers < 1:
            raise ValueError(f"a standalone cluster needs at least one worker, got {workers}")
        self.master = SparkMaster(daemon_memory=daemon_memory, startup_timeout_s=startup_timeout_s)
        self.workers = [
            SparkWorker(self.master, cores=cores, memory=memory, daemon_memory=daemon_memory, startup_timeout_s=startup_timeout_s)
            for _ in range(workers)
        ]

    @property
    def master_url(self) -> str:
        """``spark://127.0.0.1:PORT``."""
        return self.master.url

    @property
    def worker_pids(self) -> list[int]:
        """The workers' JVM process ids (their executors are their children)."""
        return [pid for worker in self.workers if (pid := worker.pid) is not None]

    @property
    def running(self) -> bool:
        """Whether the master and every worker this launcher started are running."""
        return self.master.running and all(worker.running for worker in self.workers)

    def start(self) -> Self:
        """Start the master, then the workers side by side; return once every worker is registered."""
        try:
            self.master.start()
            with ThreadPoolExecutor(max_workers=len(self.workers)) as pool:
                for future in [pool.submit(worker.start) for worker in self.workers]:
                    future.result()
            alive = self.master.state().get("aliveworkers")
            if alive != len(self.workers):
                raise ServiceError(f"Spark standalone: the master counts {alive} alive workers, expected {len(self.workers)}")
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Stop the workers (and with them their executors), then the master. Safe to call twice."""
        for worker in self.workers:
            worker.stop()
        self.master.stop()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()

    def __repr__(self) -> str:
        state = self.master_url if self.master.running else "stopped"
        return f"<SparkStandaloneCluster {state}, {len(self.workers)} workers>"

