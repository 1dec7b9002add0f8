"""A crash hook for the exactly-once tests: ``TIERED_KAFKA_ICEBERG_FAULT=<point>`` SIGKILLs the writer there.

Points of a PyIceberg export's commit (``export``), in order:

- ``before-commit``: every data file is written, no metadata yet;
- ``during-commit``: the new table metadata file is written, the catalog does not point to it yet
  (armed by wrapping the catalog's ``_write_metadata``, the step of PyIceberg's ``commit_table``
  before its catalog update);
- ``after-commit``: the catalog points to the new snapshot; nothing reported yet.

Unset (the normal case), nothing happens. The process kills itself with SIGKILL, as the OOM
killer or ``kill -9`` would: no ``finally``, no atexit, no flush.
"""

from __future__ import annotations

import os
import signal
from typing import Any

FAULT_ENV = "TIERED_KAFKA_ICEBERG_FAULT"
POINTS = ("before-commit", "during-commit", "after-commit")


def fault_point(point: str) -> None:
    """SIGKILL this process when ``TIERED_KAFKA_ICEBERG_FAULT`` names ``point``."""
    if os.environ.get(FAULT_ENV) == point:
        os.kill(os.getpid(), signal.SIGKILL)


def arm_catalog(catalog: Any) -> None:
    """With ``during-commit`` set: make ``catalog`` die right after writing a commit's metadata file."""
    if os.environ.get(FAULT_ENV) != "during-commit" or not hasattr(catalog, "_write_metadata"):
        return
    write = catalog._write_metadata

    def write_then_die(*args: Any, **kwargs: Any) -> None:
        write(*args, **kwargs)
        fault_point("during-commit")

    catalog._write_metadata = write_then_die
