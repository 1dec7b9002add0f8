"""Redis (Debian's ``redis-server``) on a free 127.0.0.1 port, without persistence."""

from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import ClassVar

from ._process import LOOPBACK, LocalService, find_executable, free_ports

__all__ = ["RedisServer"]

_PING = b"*1\r\n$4\r\nPING\r\n"


class RedisServer(LocalService):
    """A throwaway Redis server.

    >>> with RedisServer() as redis_server:          # doctest: +SKIP
    ...     redis.Redis.from_url(redis_server.url).ping()
    True
    """

    name: ClassVar[str] = "Redis"
    stop_grace_s: ClassVar[float] = 5.0
    default_startup_timeout_s: ClassVar[float] = 15.0

    def __init__(
        self,
        *,
        executable: str | os.PathLike[str] | None = None,
        startup_timeout_s: float | None = None,
    ) -> None:
        """``executable`` overrides the search for ``redis-server`` next to Python and on PATH."""
        super().__init__(startup_timeout_s=startup_timeout_s)
        self._executable = executable
        self.host: str = LOOPBACK
        self.port: int = 0

    @property
    def url(self) -> str:
        """``redis://127.0.0.1:PORT/0``."""
        return f"redis://{self.host}:{self.port}/0"

    def _check_installed(self) -> None:
        find_executable(self.name, "redis-server", self._executable)

    def _prepare(self, workdir: Path) -> list[str]:
        (self.port,) = free_ports(1)
        return [
            find_executable(self.name, "redis-server", self._executable),
            "--bind", self.host,
            "--port", str(self.port),
            "--dir", str(workdir),
            "--save", "",
            "--appendonly", "no",
            "--daemonize", "no",
            "--protected-mode", "yes",
            "--logfile", "",  # stdout, which goes to our log file
        ]  # fmt: skip

    def _probe(self) -> bool:
        with socket.create_connection((self.host, self.port), timeout=1.0) as sock:
            sock.sendall(_PING)
            return sock.recv(64).startswith(b"+PONG")
