"""A standalone ZooKeeper 3.8 (Debian's ``zookeeper`` package) on a free 127.0.0.1 port.

It runs ``org.apache.zookeeper.server.ZooKeeperServerMain`` directly on the jars the Debian package installs
in ``/usr/share/java``, with the AdminServer off and only the ``ruok``/``srvr``/``stat`` four-letter words.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import ClassVar

from ._process import LOOPBACK, LocalService, find_executable, free_ports, require_file

__all__ = ["ZooKeeperServer"]

DEFAULT_JAR_DIR = Path("/usr/share/java")
"""Where Debian installs ``zookeeper.jar`` and the slf4j jars."""

# ZooKeeperServerMain needs only these: the server, its jute records, and slf4j with a backend.
_JARS = ("zookeeper.jar", "zookeeper-jute.jar", "slf4j-api.jar", "slf4j-simple.jar")
_MAIN_CLASS = "org.apache.zookeeper.server.ZooKeeperServerMain"
_JVM_OPTIONS = (
    "-Xmx256m",
    "-XX:+UseSerialGC",
    "-XX:-UsePerfData",  # no /tmp/hsperfdata_<user>/<pid> file
    "-Djava.awt.headless=true",
    "-Dorg.slf4j.simpleLogger.defaultLogLevel=info",
)


class ZooKeeperServer(LocalService):
    """A throwaway standalone ZooKeeper server; connect with :attr:`hosts`."""

    name: ClassVar[str] = "ZooKeeper"
    stop_grace_s: ClassVar[float] = 10.0
    default_startup_timeout_s: ClassVar[float] = 30.0

    def __init__(
        self,
        *,
        java: str | os.PathLike[str] | None = None,
        jar_dir: str | os.PathLike[str] = DEFAULT_JAR_DIR,
        startup_timeout_s: float | None = None,
    ) -> None:
        """``java`` overrides the search for ``java`` ($JAVA_HOME/bin, then PATH); ``jar_dir`` holds the jars."""
        super().__init__(startup_timeout_s=startup_timeout_s)
        self._java = java
        self._jar_dir = Path(jar_dir)
        self.host: str = LOOPBACK
        self.port: int = 0

    @property
    def hosts(self) -> str:
        """The connection string, ``127.0.0.1:PORT`` (kazoo's ``hosts``, Kafka's ``zookeeper.connect``)."""
        return f"{self.host}:{self.port}"

    def _java_executable(self) -> str:
        java = self._java
        if java is None and "JAVA_HOME" in os.environ:
            candidate = Path(os.environ["JAVA_HOME"], "bin", "java")
            java = candidate if candidate.is_file() else None
        return find_executable(self.name, "java", java)

    def _classpath(self) -> str:
        return os.pathsep.join(str(require_file(self.name, self._jar_dir / jar)) for jar in _JARS)

    def _check_installed(self) -> None:
        self._java_executable()
        self._classpath()

    def _prepare(self, workdir: Path) -> list[str]:
        (self.port,) = free_ports(1)
        data_dir = workdir / "data"
        data_dir.mkdir()
        config = workdir / "zoo.cfg"
        config.write_text(
            "tickTime=2000\n"
            f"dataDir={data_dir}\n"
            f"clientPort={self.port}\n"
            f"clientPortAddress={self.host}\n"
            "admin.enableServer=false\n"
            "4lw.commands.whitelist=ruok,srvr,stat\n"
            "maxClientCnxns=0\n"
        )
        return [
            self._java_executable(),
            *_JVM_OPTIONS,
            f"-Dzookeeper.log.dir={workdir}",
            "-cp", self._classpath(),
            _MAIN_CLASS,
            str(config),
        ]  # fmt: skip

    def _four_letter_word(self, word: bytes) -> bytes:
        with socket.create_connection((self.host, self.port), timeout=2.0) as sock:
            sock.sendall(word)
            chunks = []
            while chunk := sock.recv(4096):
                chunks.append(chunk)
            return b"".join(chunks)

    def _probe(self) -> bool:
        # "ruok" answers "imok" as soon as the port is open; "srvr" reports a mode only once the server
        # is serving requests ("This ZooKeeper instance is not currently serving requests" before).
        return self._four_letter_word(b"ruok") == b"imok" and b"Mode: " in self._four_letter_word(b"srvr")
