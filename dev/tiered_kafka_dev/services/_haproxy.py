"""HAProxy (Debian's ``haproxy``) on a free 127.0.0.1 port, balancing HTTP over given backends.

The configuration written (``haproxy.cfg`` in the service's directory; ``config_text`` builds it,
and ``docs/gateway-replicas.md`` shows it) puts N gateway replicas behind one frontend:

* ``balance roundrobin`` over ``server gwI 127.0.0.1:PORT check``;
* active health checks: ``option httpchk GET /healthz`` (the gateway's liveness route, answered
  from its event loop), every ``check_interval_ms``, a server DOWN after ``fall`` failures and UP
  again after ``rise`` successes;
* ``retries 3`` with ``option redispatch 1``: a request whose connection to a server fails is
  retried on *another* server; ``retry-on conn-failure empty-response junk-response`` extends that
  to a server that accepted the request and then died without answering (SIGKILL mid-request:
  the connection is reset or closed with no response). HAProxy keeps a copy of the request to
  replay it (only requests without a body, which all of the gateway's API are: idempotent GETs).
  Answers of a live gateway (4xx, 5xx) are passed to the client unchanged: whether to retry
  them is the client's decision (``tiered_kafka.client.gateway``);
* ``timeout server`` bounds a request (default 60 s: a plan or a records page is far shorter).

The process runs in the foreground (``haproxy -f haproxy.cfg -db``) and is stopped by its PID like
every launcher here. A stats socket in the directory (``show stat``) gives each server's state
and counts (``server_states()``, ``wait_servers(...)``, ``requests_total()``,
``server_requests()``) and takes a server out of the rotation (``set_enabled``).
"""

from __future__ import annotations

import csv
import io
import os
import socket
import time
from collections.abc import Sequence
from pathlib import Path
from typing import ClassVar

from ._process import LOOPBACK, LocalService, ServiceError, find_executable, free_ports

__all__ = ["HAProxyServer", "config_text"]

_SOCKET_NAME = "admin.sock"
_BACKEND = "gateways"


def config_text(
    backends: Sequence[tuple[str, int]],
    *,
    bind: str,
    stats_socket: str | None = None,
    health_path: str = "/healthz",
    check_interval_ms: int = 200,
    fall: int = 2,
    rise: int = 2,
    server_timeout_s: float = 60.0,
) -> str:
    """The HAProxy configuration for ``backends`` (host, port) behind ``bind`` (``host:port``)."""
    if not backends:
        raise ValueError("HAProxy needs at least one backend")
    lines = [
        "global",
        "    maxconn 4096",
        *([f"    stats socket {stats_socket} mode 600 level admin"] if stats_socket else []),
        "",
        "defaults",
        "    mode http",
        "    timeout connect 2s",
        "    timeout client 60s",
        f"    timeout server {int(server_timeout_s * 1000)}ms",
        "    timeout http-keep-alive 60s",
        "    # a failed connection, or a server dying before it answers: replay the request (bodiless GETs) on another server",
        "    retries 3",
        "    option redispatch 1",
        "    retry-on conn-failure empty-response junk-response",
        "",
        "frontend gateway",
        f"    bind {bind}",
        f"    default_backend {_BACKEND}",
        "",
        f"backend {_BACKEND}",
        "    balance roundrobin",
        f"    option httpchk GET {health_path}",
        "    http-check expect status 200",
        f"    default-server inter {check_interval_ms}ms fall {fall} rise {rise}",
    ]
    lines += [f"    server gw{i} {host}:{port} check" for i, (host, port) in enumerate(backends)]
    return "\n".join(lines) + "\n"


class HAProxyServer(LocalService):
    """A throwaway HAProxy in front of HTTP servers on 127.0.0.1.

    >>> with HAProxyServer([8081, 8082]) as lb:        # doctest: +SKIP
    ...     lb.wait_servers(up=2)
    ...     httpx.get(f"{lb.url}/healthz")
    """

    name: ClassVar[str] = "HAProxy"
    stop_grace_s: ClassVar[float] = 5.0
    default_startup_timeout_s: ClassVar[float] = 15.0

    def __init__(
        self,
        backend_ports: Sequence[int],
        *,
        health_path: str = "/healthz",
        check_interval_ms: int = 200,
        fall: int = 2,
        rise: int = 2,
        executable: str | os.PathLike[str] | None = None,
        startup_timeout_s: float | None = None,
    ) -> None:
        """``backend_ports``: the HTTP servers on 127.0.0.1 (server ``gw0``, ``gw1``, ... in order)."""
        super().__init__(startup_timeout_s=startup_timeout_s)
        if not backend_ports:
            raise ValueError("HAProxyServer needs at least one backend port")
        self.backend_ports = list(backend_ports)
        self.health_path = health_path
        self.check_interval_ms = check_interval_ms
        self.fall = fall
        self.rise = rise
        self._executable = executable
        self.host: str = LOOPBACK
        self.port: int = 0

    @property
    def url(self) -> str:
        """``http://127.0.0.1:PORT``: the load balancer's frontend."""
        return f"http://{self.host}:{self.port}"

    @property
    def config_path(self) -> Path | None:
        return None if self.workdir is None else self.workdir / "haproxy.cfg"

    def _find(self) -> str:
        if self._executable is None and not _on_path("haproxy") and Path("/usr/sbin/haproxy").is_file():
            return "/usr/sbin/haproxy"  # Debian's place, not on a non-root PATH
        return find_executable(self.name, "haproxy", self._executable)

    def _check_installed(self) -> None:
        self._find()

    def _prepare(self, workdir: Path) -> list[str]:
        (self.port,) = free_ports(1)
        config = workdir / "haproxy.cfg"
        config.write_text(
            config_text(
                [(LOOPBACK, port) for port in self.backend_ports],
                bind=f"{self.host}:{self.port}",
                stats_socket=str(workdir / _SOCKET_NAME),
                health_path=self.health_path,
                check_interval_ms=self.check_interval_ms,
                fall=self.fall,
                rise=self.rise,
            )
        )
        return [self._find(), "-f", str(config), "-db"]

    def _probe(self) -> bool:
        self._admin("show info")
        with socket.create_connection((self.host, self.port), timeout=1.0):
            return True

    # -- the stats socket ---------------------------------------------------------------------------

    def _admin(self, command: str) -> str:
        if self.workdir is None:
            raise ServiceError("HAProxy is not started")
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(2.0)
            sock.connect(str(self.workdir / _SOCKET_NAME))
            sock.sendall(command.encode() + b"\n")
            chunks = []
            while chunk := sock.recv(65536):
                chunks.append(chunk)
        return b"".join(chunks).decode()

    def _stats(self) -> list[dict[str, str]]:
        """The backend's rows of ``show stat`` (HAProxy's CSV: one per server, then ``BACKEND``)."""
        text = self._admin("show stat").lstrip("# ")
        return [row for row in csv.DictReader(io.StringIO(text)) if row["pxname"] == _BACKEND]

    def server_states(self) -> dict[str, str]:
        """Each backend server's status as HAProxy's checks see it: ``{"gw0": "UP", "gw1": "DOWN", ...}``."""
        return {row["svname"]: row["status"].split()[0] for row in self._stats() if row["svname"] != "BACKEND"}

    def requests_total(self) -> int:
        """HTTP requests the backend has received from clients (``req_tot``; health checks not counted)."""
        return next(int(row["req_tot"] or 0) for row in self._stats() if row["svname"] == "BACKEND")

    def set_enabled(self, server: str, enabled: bool) -> None:
        """Take a server out of the rotation (``disable server``: MAINT) or put it back (``enable server``:
        its state is then what the health checks find)."""
        answer = self._admin(f"{'enable' if enabled else 'disable'} server {_BACKEND}/{server}").strip()
        if answer:
            raise ServiceError(f"HAProxy refused to {'enable' if enabled else 'disable'} {server}: {answer}")

    def server_requests(self) -> dict[str, int]:
        """HTTP requests each server has answered so far (``req_tot`` of its row)."""
        return {row["svname"]: int(row["req_tot"] or 0) for row in self._stats() if row["svname"] != "BACKEND"}

    def wait_servers(self, *, up: int, timeout_s: float = 30.0) -> dict[str, str]:
        """Until exactly ``up`` servers are UP (checks passed ``rise`` times); the states."""
        deadline = time.monotonic() + timeout_s
        while True:
            states = self.server_states()
            if sum(state == "UP" for state in states.values()) == up:
                return states
            if time.monotonic() > deadline:
                raise ServiceError(f"HAProxy: expected {up} servers UP within {timeout_s:g} s, states {states}")
            time.sleep(0.05)


def _on_path(name: str) -> bool:
    return any(os.access(os.path.join(d, name), os.X_OK) for d in os.environ.get("PATH", "").split(os.pathsep) if d)
