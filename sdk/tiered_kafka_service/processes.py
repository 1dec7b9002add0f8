"""Whether a process id is in use: the one rule the gateway (its metrics drop the gauges of dead uvicorn
workers) and the development services (``tiered_kafka_dev.services``: they end what they started) share.

POSIX ``kill(pid, 0)`` sends nothing and reports: ``ESRCH`` (ProcessLookupError) when no process has the id,
``EPERM`` (PermissionError) when one exists that this user may not signal; both other outcomes mean it exists.
A zombie (exited, not yet reaped by its parent) still has its id: callers that must treat it as gone look at
``/proc`` too (``tiered_kafka_dev.services._process.pid_alive``).
"""

from __future__ import annotations

import os


def pid_exists(pid: int) -> bool:
    """Whether a process (possibly a zombie, possibly another user's) has the id ``pid``."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
