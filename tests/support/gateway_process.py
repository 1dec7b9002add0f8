"""Gateways as real processes (``python -m tiered_kafka_gateway``), and HAProxy in front of them.

Each gateway runs in its own session (its PID is its process group: ``kill()`` SIGKILLs exactly
that group, uvicorn's workers included), on a free 127.0.0.1 port, with its settings in a JSON
file (``--config``) in a temporary directory of its own.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import SecretStr

from tiered_kafka_dev.services import HAProxyServer
from tiered_kafka_dev.services._process import free_ports


def _unsecret(value: Any) -> Any:
    if isinstance(value, SecretStr):
        return value.get_secret_value()
    raise TypeError(f"cannot write {type(value).__name__} to the gateway's JSON settings")


class GatewayProcess:
    """One ``tiered-kafka-gateway`` process serving ``settings`` (a ``GatewaySettings``)."""

    def __init__(self, settings: Any, *, workers: int = 1, env: dict[str, str] | None = None) -> None:
        self.workdir = Path(tempfile.mkdtemp(prefix="tiered-kafka-gateway-test-"))
        try:
            config = self.workdir / "gateway.json"
            config.write_text(json.dumps(settings.model_dump(), default=_unsecret))
            (self.port,) = free_ports(1)
            self.url = f"http://127.0.0.1:{self.port}"
            self.log_path = self.workdir / "gateway.log"
            environment = {k: v for k, v in os.environ.items() if not k.startswith("TIERED_KAFKA_GATEWAY_") and k != "PROMETHEUS_MULTIPROC_DIR"}
            with self.log_path.open("wb") as log:
                self.proc = subprocess.Popen(
                    [sys.executable, "-m", "tiered_kafka_gateway", "--config", str(config), "--port", str(self.port), "--workers", str(workers)],
                    env={**environment, **(env or {})}, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                )  # fmt: skip
        except BaseException:
            shutil.rmtree(self.workdir, ignore_errors=True)
            raise

    @property
    def pid(self) -> int:
        return self.proc.pid

    def wait_ready(self, timeout_s: float = 60.0) -> None:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                with urllib.request.urlopen(f"{self.url}/healthz", timeout=2) as answer:
                    if answer.status == 200:
                        return
            except OSError:
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the gateway on port {self.port} did not start (exit code {self.proc.poll()}): {self.log_path.read_text()[-2000:]}")
            time.sleep(0.1)

    def kill(self) -> None:
        """SIGKILL the gateway's process group, as a crash would end it (uvicorn's workers too); reap it."""
        if self.proc.returncode is None:  # unreaped: its id is still its group's (never signal a reaped one's)
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(10)

    def stop(self, grace_s: float = 10.0) -> int:
        """SIGTERM (uvicorn shuts down: lifespan, workers), :meth:`kill` after ``grace_s``; the exit code.
        Removes the directory, log included."""
        try:
            if self.proc.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.proc.pid, signal.SIGTERM)
                try:
                    self.proc.wait(grace_s)
                except subprocess.TimeoutExpired:
                    self.kill()
            return self.proc.wait()
        finally:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def get(self, path: str, timeout_s: float = 60.0) -> tuple[int, Any]:
        """(HTTP status, JSON body) of ``GET path``; (0, error text) when nothing answered within ``timeout_s``."""
        try:
            with urllib.request.urlopen(f"{self.url}{path}", timeout=timeout_s) as answer:
                return answer.status, json.loads(answer.read())
        except urllib.error.HTTPError as err:
            return err.code, json.loads(err.read() or b"null")
        except OSError as err:
            return 0, repr(err)

    def output(self) -> str:
        """What the gateway printed so far."""
        return self.log_path.read_text(errors="replace")

    def children(self) -> list[int]:
        """PIDs of the process's children (uvicorn's workers when ``workers`` > 1)."""
        found = []
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                with contextlib.suppress(OSError):
                    stat = (entry / "stat").read_text()
                    if int(stat.rpartition(")")[2].split()[1]) == self.proc.pid:
                        found.append(int(entry.name))
        return found


@contextlib.contextmanager
def gateway_processes(settings: Any, count: int, *, workers: int = 1) -> Iterator[list[GatewayProcess]]:
    """``count`` gateways serving ``settings``, started together, ready, stopped on exit."""
    started: list[GatewayProcess] = []
    try:
        for _ in range(count):
            started.append(GatewayProcess(settings, workers=workers))
        for gateway in started:
            gateway.wait_ready()
        yield started
    finally:
        for gateway in started:
            gateway.stop()


@dataclass
class Replicas:
    """Gateway replicas behind HAProxy: clients use ``url``."""

    gateways: list[GatewayProcess]
    lb: HAProxyServer

    @property
    def url(self) -> str:
        return self.lb.url


@contextlib.contextmanager
def replicas_behind_haproxy(settings: Any, count: int = 2) -> Iterator[Replicas]:
    """``count`` gateway processes behind a fresh HAProxy, every server UP before yielding."""
    with gateway_processes(settings, count) as gateways, HAProxyServer([g.port for g in gateways]) as lb:
        lb.wait_servers(up=count)
        yield Replicas(gateways, lb)
