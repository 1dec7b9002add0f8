"""Interleaved timing for a noisy, shared machine.

Each round times every candidate once, in an order rotated round by round, so that a burst
of noise hits all candidates alike instead of one candidate's whole series. A sample repeats
the candidate enough times to last about ``min_sample_seconds`` (each candidate's repeat count
is calibrated on its warm-up call, so a slow reference does not stretch the run) and runs
with the garbage collector paused, as ``timeit`` does; the objects alive beforehand
(datasets, modules) are collected once and frozen, so no sample pays for them.
"""

from __future__ import annotations

import gc
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class Timing:
    """Seconds per call of one candidate, one sample per round (in round order)."""

    samples: tuple[float, ...]

    @property
    def best(self) -> float:
        return min(self.samples)


def time_interleaved(
    candidates: Mapping[str, Callable[[], object]], *, rounds: int, min_sample_seconds: float
) -> dict[str, Timing]:
    """Warm every candidate up once, then time ``rounds`` interleaved rounds of all of them."""
    gc.collect()
    gc.freeze()
    try:
        return _time_rounds(candidates, rounds, min_sample_seconds)
    finally:
        gc.unfreeze()


def _time_rounds(
    candidates: Mapping[str, Callable[[], object]], rounds: int, min_sample_seconds: float
) -> dict[str, Timing]:
    repeat = {
        name: max(1, math.ceil(min_sample_seconds / max(_time_calls(call, 1), 1e-9)))
        for name, call in candidates.items()
    }
    names = list(candidates)
    samples: dict[str, list[float]] = {name: [] for name in names}
    for round_index in range(rounds):
        shift = round_index % len(names)
        for name in names[shift:] + names[:shift]:
            samples[name].append(_time_calls(candidates[name], repeat[name]) / repeat[name])
    return {name: Timing(tuple(values)) for name, values in samples.items()}


def _time_calls(call: Callable[[], object], repeat: int) -> float:
    """Wall time of ``repeat`` calls, garbage collector paused."""
    gc.disable()
    try:
        start = time.perf_counter()
        for _ in range(repeat):
            call()
        return time.perf_counter() - start
    finally:
        gc.enable()
