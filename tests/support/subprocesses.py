"""Commands run by tests in a session of their own, so a timeout ends everything they started.

``subprocess.run(timeout=...)`` kills only the direct child: a ``spark-submit`` (a shell script
starting a JVM, which starts Python workers) or a ``tiered-kafka-agent`` with its threads' children
would be left running. :func:`run_in_session` starts the command with ``start_new_session=True``
(its PID is its process group's id) and, on a timeout, SIGKILLs that group while the leader is still
unreaped (so the id is still ours), then reaps it and raises ``subprocess.TimeoutExpired`` with the
output so far.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import Sequence
from typing import Any


def run_in_session(command: Sequence[str], *, timeout_s: float, **popen: Any) -> subprocess.CompletedProcess[str]:
    """Run ``command`` (text output captured) in a new session; its whole group is SIGKILLed on timeout.

    ``popen`` are further ``subprocess.Popen`` arguments (``env``, ``cwd``)."""
    with subprocess.Popen(
        list(command), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True, **popen
    ) as proc:
        try:
            stdout, stderr = proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)  # the leader is unreaped: the group id is still ours
            stdout, stderr = proc.communicate()
            raise subprocess.TimeoutExpired(proc.args, timeout_s, output=stdout, stderr=stderr) from None
        except BaseException:  # interrupted: end the group too
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            raise
    return subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)
