"""Process hygiene of the test services and commands. A killed service's process group is signalled once, while its leader is unreaped: ``stop()`` after
``kill()`` (or after the process was seen exited) signals no group, whose id another session may
have by now (``_process._end_process``). A test command that times out is ended with its children."""

from __future__ import annotations

import os
import signal
import subprocess
import time

import pytest

from tests.support.subprocesses import run_in_session
from tiered_kafka_dev.services import RedisServer
from tiered_kafka_dev.services import _process
from tiered_kafka_dev.services._process import pid_alive

pytestmark = pytest.mark.integration


def test_kill_ends_the_group_and_stop_then_signals_nothing(monkeypatch) -> None:
    signalled: list[tuple[int, int]] = []
    real_killpg = os.killpg

    def recording_killpg(pgid: int, sig: int) -> None:
        signalled.append((pgid, sig))
        real_killpg(pgid, sig)

    monkeypatch.setattr(_process.os, "killpg", recording_killpg)
    service = RedisServer().start()
    pid, workdir = service.pid, service.workdir
    assert pid is not None and workdir is not None and os.getpgid(pid) == pid
    service.kill()
    assert signalled == [(pid, signal.SIGKILL)]
    assert not service.running and not pid_alive(pid)
    service.stop()
    assert signalled == [(pid, signal.SIGKILL)], "stop() signalled the group of a process already reaped"
    assert not workdir.exists()


def test_stop_signals_no_group_of_a_process_seen_exited(monkeypatch) -> None:
    service = RedisServer().start()
    pid = service.pid
    assert pid is not None
    os.kill(pid, signal.SIGKILL)  # it dies on its own, as far as the launcher knows
    while service.running:  # running polls: the process is reaped here
        time.sleep(0.01)
    signalled: list[tuple[int, int]] = []
    monkeypatch.setattr(_process.os, "killpg", lambda pgid, sig: signalled.append((pgid, sig)))
    service.stop()
    assert signalled == []


def test_a_command_timing_out_is_ended_with_everything_it_started() -> None:
    """``run_in_session``: the shell's background child is killed with it (``subprocess.run`` would leave it)."""
    with pytest.raises(subprocess.TimeoutExpired) as caught:
        run_in_session(["sh", "-c", "sleep 300 & echo $!; wait"], timeout_s=2)
    child = int(str(caught.value.output).strip())
    deadline = time.monotonic() + 10
    while pid_alive(child):
        assert time.monotonic() < deadline, f"pid {child}, started by the command, outlived it"
        time.sleep(0.05)
