"""Fault injection for the crash-recovery tests: SIGKILL the agent at a named step.

Inert unless ``TIERED_KAFKA_AGENT_TEST_CRASH_AT`` names a step; then the first time the agent
reaches that step it kills itself with SIGKILL (no cleanup, no flush: a real crash). ``step@N``
kills it the N-th time instead (e.g. ``adopt_before_register@3``: two segments adopted, the third
not). Steps, in the order a new partition and then one segment go through them:

    after_coverage_start  the partition's coverage start is recorded (registry, S3); nothing uploaded
    during_part           while a multipart .log upload is sending its parts
    after_log             the .log object is complete (conditional PUT); its indexes are not uploaded yet
    before_register       every object is uploaded, the Redis registration has not happened
    before_watermark      registered in Redis, offset.wm not yet moved
"""

from __future__ import annotations

import os
import signal
import threading

CRASH_ENV = "TIERED_KAFKA_AGENT_TEST_CRASH_AT"
STEPS = ("after_coverage_start", "during_part", "after_log", "before_register", "before_watermark")
ADOPT_STEPS = ("adopt_before_register",)  # ``tiered-kafka-agent adopt``: a segment's .batchindex written, not registered yet


_reached: dict[str, int] = {}
_lock = threading.Lock()


def crash_point(step: str) -> None:
    if step not in STEPS and step not in ADOPT_STEPS:
        raise ValueError(f"unknown crash step {step!r}")
    wanted = os.environ.get(CRASH_ENV)
    if not wanted:
        return
    name, _, nth = wanted.partition("@")
    if name != step:
        return
    with _lock:
        _reached[step] = _reached.get(step, 0) + 1
        reached = _reached[step]
    if reached >= int(nth or 1):
        os.kill(os.getpid(), signal.SIGKILL)
