"""What every local service launcher shares: free ports, binaries, the child process and its log.

A launcher subclasses :class:`LocalService` and supplies three things: the command line (written into a
fresh temporary directory, with free 127.0.0.1 ports it picks), a readiness probe, and how long the
process gets between SIGTERM and SIGKILL. The base class starts the process in its own session, keeps its
stdout/stderr in ``service.log`` in that directory, polls the probe until it succeeds, and on stop ends the
process group it started, by its id, then removes the directory.

Exceptions::

    ServiceError                 root of this package's errors
     +-- MissingBinaryError      a program or jar the service needs is not installed (run dev/install.sh)
     +-- ServiceStartError       the process exited or did not become ready in time (carries the log tail)
"""

from __future__ import annotations

import abc
import contextlib
import logging
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import weakref
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import ClassVar, Self

from tiered_kafka_service.processes import pid_exists

__all__ = [
    "LocalService",
    "MissingBinaryError",
    "ServiceError",
    "ServiceStartError",
    "find_executable",
    "free_ports",
    "log_tail",
    "pid_alive",
    "require_file",
]

logger = logging.getLogger(__name__)

LOOPBACK = "127.0.0.1"
"""Every service binds here and only here."""

INSTALL_SCRIPT = Path(__file__).resolve().parents[2] / "install.sh"
"""``dev/install.sh``, which installs every program the launchers need."""

_LOG_FILE_NAME = "service.log"
_PORT_IN_USE_MARKER = "address already in use"  # Redis, the JVM's BindException and Go all say this.
_START_ATTEMPTS = 3  # Ports are picked free but can be taken before the service binds them: retry then.
_POLL_INTERVAL_S = 0.1


class ServiceError(RuntimeError):
    """Root of the errors raised by the local service launchers."""


class MissingBinaryError(ServiceError):
    """A program or file a service needs is not installed."""

    def __init__(self, service: str, what: str, looked_in: Sequence[str]) -> None:
        self.service = service
        self.what = what
        self.looked_in = tuple(looked_in)
        places = ", ".join(self.looked_in) or "nowhere"
        super().__init__(
            f"{service}: {what} is not installed (looked in: {places}). "
            f"Run {INSTALL_SCRIPT} (dev/install.sh in the repository) to install the local services."
        )


class ServiceStartError(ServiceError):
    """A service process exited during startup or did not become ready in time."""

    def __init__(self, service: str, reason: str, command: Sequence[str], log_path: Path, tail: str) -> None:
        self.service = service
        self.reason = reason
        self.command = tuple(command)
        self.log_path = log_path
        self.log_tail = tail
        super().__init__(
            f"{service} failed to start: {reason}\n"
            f"  command: {shlex.join(self.command)}\n"
            f"  log: {log_path} (removed with its directory); last lines:\n{_indent(tail) or '    (empty)'}"
        )


def _indent(text: str, prefix: str = "    ") -> str:
    return "\n".join(prefix + line for line in text.splitlines())


def free_ports(count: int) -> list[int]:
    """Return ``count`` distinct TCP ports that are free on 127.0.0.1 right now.

    All sockets stay bound until every port is picked, so the ports differ from one another.
    """
    with contextlib.ExitStack() as stack:
        ports = []
        for _ in range(count):
            sock = stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
            sock.bind((LOOPBACK, 0))
            ports.append(sock.getsockname()[1])
        return ports


def find_executable(service: str, name: str, explicit: str | os.PathLike[str] | None = None) -> str:
    """Locate program ``name`` for ``service``, or raise :class:`MissingBinaryError`.

    An ``explicit`` path is used as given. Otherwise the directory of the running Python (a virtualenv's
    ``bin``, where pip puts console programs) is searched first, then ``PATH``.
    """
    if explicit is not None:
        path = Path(explicit)
        if path.is_file() and os.access(path, os.X_OK):
            return str(path)
        raise MissingBinaryError(service, name, [str(path)])
    venv_bin = Path(sys.executable).parent
    candidate = venv_bin / name
    if candidate.is_file() and os.access(candidate, os.X_OK):
        return str(candidate)
    found = shutil.which(name)
    if found is None:
        raise MissingBinaryError(service, name, [str(venv_bin), "PATH"])
    return found


def require_file(service: str, path: Path) -> Path:
    """Return ``path`` if it is an existing file, else raise :class:`MissingBinaryError`."""
    if not path.is_file():
        raise MissingBinaryError(service, path.name, [str(path.parent)])
    return path


def log_tail(path: Path, lines: int = 40) -> str:
    """Return the last ``lines`` lines of the text file at ``path`` ("" if it does not exist)."""
    try:
        with path.open("rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 64 * 1024))
            data = f.read()
    except FileNotFoundError:
        return ""
    return "\n".join(data.decode("utf-8", "replace").splitlines()[-lines:])


def pid_alive(pid: int) -> bool:
    """Whether a process with id ``pid`` exists (``tiered_kafka_service.processes.pid_exists``) and is not a zombie."""
    if not pid_exists(pid):
        return False
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True  # No procfs: the kill(0) answer is all we have.
    return stat.rpartition(")")[2].split()[0] != "Z"


def _end_process(proc: subprocess.Popen[bytes], grace_s: float) -> None:
    """End ``proc`` and its process group: SIGTERM, then SIGKILL after ``grace_s`` (at once if 0).

    ``proc`` was started with ``start_new_session=True``, so its id is also its process-group id; that id
    cannot be reused while ``proc`` is unreaped or any member of its group lives, so signalling it reaches
    only what we started. A ``proc`` already reaped on entry (ended by :meth:`LocalService.kill`, or
    seen exited by a ``poll``) is not signalled: its id may belong to another session by now. (A child
    it left behind then lives on; our services are single processes, and ``kill`` ends the group.)
    """
    pgid = proc.pid
    if proc.returncode is not None:
        return
    if grace_s > 0 and proc.poll() is None:
        _signal_group(pgid, signal.SIGTERM)
        try:
            proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            logger.warning("pid %d did not exit within %.1f s of SIGTERM; sending SIGKILL", pgid, grace_s)
    _signal_group(pgid, signal.SIGKILL)  # Also ends any child left behind by a leader that already exited.
    proc.wait()


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, sig)


class LocalService(abc.ABC):
    """A real service run as a child process on 127.0.0.1, in its own temporary directory.

    Use as a context manager, or call :meth:`start` and :meth:`stop`. Subclasses implement
    :meth:`_check_installed`, :meth:`_prepare` and :meth:`_probe`.
    """

    name: ClassVar[str]
    """Human-readable service name, used in errors and logs."""

    stop_grace_s: ClassVar[float] = 10.0
    """Seconds between SIGTERM and SIGKILL on stop; 0 sends SIGKILL at once."""

    default_startup_timeout_s: ClassVar[float] = 30.0
    """Seconds :meth:`start` waits for readiness unless the constructor says otherwise."""

    def __init__(self, *, startup_timeout_s: float | None = None) -> None:
        self.startup_timeout_s = self.default_startup_timeout_s if startup_timeout_s is None else startup_timeout_s
        self._proc: subprocess.Popen[bytes] | None = None
        self._workdir: Path | None = None
        self._command: list[str] = []
        self._finalizer: weakref.finalize[[subprocess.Popen[bytes], float], LocalService] | None = None

    # -- what a subclass provides -------------------------------------------------------------------

    @abc.abstractmethod
    def _check_installed(self) -> None:
        """Raise :class:`MissingBinaryError` if a program or file the service needs is missing."""

    @abc.abstractmethod
    def _prepare(self, workdir: Path) -> list[str]:
        """Pick ports, write any config files into ``workdir`` and return the command line."""

    @abc.abstractmethod
    def _probe(self) -> bool:
        """Whether the service answers like a ready one. Exceptions count as "not yet"."""

    def _cleanup_after_exit(self) -> None:
        """Remove anything the process left outside its directory (called after it has ended)."""
        return None

    # -- state --------------------------------------------------------------------------------------

    @property
    def running(self) -> bool:
        """Whether the process this launcher started is still running."""
        return self._proc is not None and self._proc.poll() is None

    @property
    def pid(self) -> int | None:
        """Process id of the started service (also its process-group id), or ``None``."""
        return None if self._proc is None else self._proc.pid

    @property
    def workdir(self) -> Path | None:
        """The service's temporary directory while started, else ``None``."""
        return self._workdir

    @property
    def log_path(self) -> Path | None:
        """The file holding the service's stdout and stderr while started, else ``None``."""
        return None if self._workdir is None else self._workdir / _LOG_FILE_NAME

    @property
    def command(self) -> list[str]:
        """The command line of the last start."""
        return list(self._command)

    def log_tail(self, lines: int = 40) -> str:
        """The last ``lines`` lines of the service's log."""
        return "" if self.log_path is None else log_tail(self.log_path, lines)

    # -- lifecycle ----------------------------------------------------------------------------------

    def start(self) -> Self:
        """Start the service and wait until it is ready; return ``self``.

        Raises :class:`MissingBinaryError` before doing anything if the service is not installed, and
        :class:`ServiceStartError` (after cleaning up) if it exits or is not ready within the timeout.
        """
        if self._proc is not None:
            raise ServiceError(f"{self.name} is already started (pid {self._proc.pid})")
        self._check_installed()
        attempt = 1
        while True:
            try:
                self._start_once()
                return self
            except ServiceStartError as err:
                if attempt >= _START_ATTEMPTS or _PORT_IN_USE_MARKER not in err.log_tail.lower():
                    raise
                logger.info("%s: a picked port was taken meanwhile; retrying with new ports", self.name)
            attempt += 1

    def _start_once(self) -> None:
        slug = "-".join(self.name.lower().split())
        self._workdir = Path(tempfile.mkdtemp(prefix=f"tiered-kafka-{slug}-"))
        try:
            self._command = self._prepare(self._workdir)
            log_path = self._workdir / _LOG_FILE_NAME
            logger.debug("%s: starting %s", self.name, shlex.join(self._command))
            with log_path.open("wb") as log_file:
                self._proc = subprocess.Popen(
                    self._command,
                    cwd=self._workdir,
                    stdin=subprocess.DEVNULL,
                    stdout=log_file,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            # Safety net: if the launcher is dropped or the interpreter exits without stop(), still end it.
            self._finalizer = weakref.finalize(self, _end_process, self._proc, 0)
            self._wait_ready()
        except BaseException:
            self.stop()
            raise
        logger.info("%s: ready (pid %d, dir %s)", self.name, self._proc.pid, self._workdir)

    def _wait_ready(self) -> None:
        proc, log_path = self._proc, self.log_path
        if proc is None or log_path is None:
            raise ServiceError(f"{self.name}: no process to wait for")
        deadline = time.monotonic() + self.startup_timeout_s
        last_error: Exception | None = None
        while True:
            code = proc.poll()
            if code is not None:
                reason = f"the process exited with code {code} during startup"
                raise ServiceStartError(self.name, reason, self._command, log_path, log_tail(log_path))
            try:
                if self._probe() and proc.poll() is None:
                    return
            except Exception as err:  # Any failure of the probe means "not ready yet".
                last_error = err
            if time.monotonic() >= deadline:
                reason = f"not ready within {self.startup_timeout_s:g} s"
                if last_error is not None:
                    reason += f" (last probe error: {last_error!r})"
                raise ServiceStartError(self.name, reason, self._command, log_path, log_tail(log_path))
            time.sleep(_POLL_INTERVAL_S)

    def stop(self) -> None:
        """End the process this launcher started (SIGTERM, then SIGKILL) and remove its directory.

        Safe to call more than once, and on a launcher that never started.
        """
        proc, self._proc = self._proc, None
        if self._finalizer is not None:
            self._finalizer.detach()
            self._finalizer = None
        if proc is not None:
            logger.debug("%s: stopping pid %d", self.name, proc.pid)
            _end_process(proc, self.stop_grace_s)
            self._cleanup_after_exit()
            logger.info("%s: stopped (pid %d, exit code %s)", self.name, proc.pid, proc.returncode)
        workdir, self._workdir = self._workdir, None
        if workdir is not None:
            shutil.rmtree(workdir, ignore_errors=True)

    def kill(self) -> None:
        """SIGKILL the process group now, as a crash ends it (no shutdown), and reap the process.

        :meth:`stop` then only removes the directory: it signals no group of a process reaped here.
        """
        proc = self._proc
        if proc is None:
            raise ServiceError(f"{self.name} is not started")
        if proc.returncode is None:  # unreaped: the id is still ours
            _signal_group(proc.pid, signal.SIGKILL)
        proc.wait()
        logger.info("%s: killed (pid %d)", self.name, proc.pid)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        state = f"pid={self._proc.pid}" if self._proc is not None else "stopped"
        return f"<{type(self).__name__} {state}>"
