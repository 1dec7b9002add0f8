"""Reading remote batches on from an offset, under one budget rule: the read_committed look-ahead.

``tiered_kafka.transactions`` decides which records a read_committed reader sees; a reader whose
window ends while the rule holds an open transaction reads *on* for markers only (KIP-98: the
transaction's COMMIT or ABORT control batch, written by the coordinator's ``WriteTxnMarkers``,
decides it). Every reader of remote data reads on here, and only here: the gateway's records
endpoint and offsets-for-timestamp (``tiered_kafka_gateway.records.committed_batches``), the
columnar readers (``columnar_read.finish_read``: bulk, export, Spark) and the CLI's end-of-read
check (``remote_read.visible_until``, which walks its window with the same loop).

**The walk** (``walk``): plan from ``offset``, read each planned range's batches, hand each to
``visit``; the first plan asks ``FIRST_PLAN_BYTES`` (markers are usually close), each later one
twice the last, at most ``plan_bytes``, and never more than the budget left. It stops when
``done()`` (checked before each range and after each batch), when the budget is spent (bytes of
the ranges read), when remote storage ends (``plan`` answers None), at ``until``, or when a plan
does not advance (``Walked.reason`` says which).

**The budget rule** (``read_on_budget``): a reader that may stop at its first held offset and
resume there later (the records endpoint: its response ends there and names it; the end-of-read
check: it then concludes nothing) reads on at most ``limit`` bytes (the gateway's
``max_bytes_limit``, 64 MiB by default: ``LOOKAHEAD_MAX_BYTES``). A reader whose end is fixed (a
Spark slice, a bulk read) cannot resume: with the remote last stable offset known every
transaction it holds began below it, so its marker is in remote storage and the read goes on until
it is found (unbounded: a bound would change a fate); with it unknown, ``limit`` bytes too.
Remote storage ending first leaves what is open undecided, and the reader says so.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

from tiered_kafka.transactions import CommittedFilter

FIRST_PLAN_BYTES = 64 * 1024
"""The first plan of a walk (doubling from there)."""
LOOKAHEAD_BYTES = 4 * 1024 * 1024
"""The largest plan of an SDK reader's walk (the gateway's: its ``range_bytes``)."""
LOOKAHEAD_MAX_BYTES = 64 * 1024 * 1024
"""How far a reader reads on at most when the budget is bounded (the gateway's default ``max_bytes_limit``)."""


class SizedRange(Protocol):
    """A planned, batch-aligned byte range (``read_plan.ByteRange``, ``gateway_client.PlannedRange``)."""

    @property
    def size(self) -> int: ...


Rng = TypeVar("Rng", bound=SizedRange)


@dataclass(frozen=True)
class Step(Generic[Rng]):
    """One plan as the walk sees it: its ranges, in offset order, and the offset the next plan starts at."""

    ranges: Sequence[Rng]
    next_offset: int


class End(enum.Enum):
    DONE = "done"  # the visitor has what it wanted
    BUDGET = "budget"  # the budget is spent
    REMOTE_END = "remote_end"  # remote storage holds nothing further (plan answered None)
    UNTIL = "until"  # the walk reached ``until``
    STUCK = "stuck"  # a plan did not advance


@dataclass(frozen=True)
class Walked:
    offset: int  # where the walk stopped: the next offset not read
    reason: End


def read_on_budget(stable_end: int | None, *, resumable: bool, limit: int = LOOKAHEAD_MAX_BYTES) -> int | None:
    """How many bytes a read reads on at most (None: until decided): the module docstring's rule.

    >>> read_on_budget(None, resumable=False), read_on_budget(42, resumable=False), read_on_budget(42, resumable=True, limit=10)
    (67108864, None, 10)
    """
    return None if stable_end is not None and not resumable else limit


def walk(
    plan: Callable[[int, int], Step[Rng] | None],
    read: Callable[[Rng], Iterable[Any]],
    offset: int,
    *,
    visit: Callable[[Any], None],
    done: Callable[[], bool],
    budget: int | None,
    plan_bytes: int = LOOKAHEAD_BYTES,
    until: int | None = None,
) -> Walked:
    """Walk remote batches from ``offset`` (module docstring). ``plan(offset, max_bytes)``: the
    next plan, None when remote storage holds nothing from ``offset`` on; ``read(range)``: its
    batches, in offset order."""
    ask = FIRST_PLAN_BYTES
    while True:
        if done():
            return Walked(offset, End.DONE)
        if until is not None and offset >= until:
            return Walked(offset, End.UNTIL)
        if budget is not None and budget <= 0:
            return Walked(offset, End.BUDGET)
        found = plan(offset, max(1, min(ask, plan_bytes) if budget is None else min(ask, plan_bytes, budget)))
        if found is None:
            return Walked(offset, End.REMOTE_END)
        ask *= 2
        for byte_range in found.ranges:
            if done():
                return Walked(offset, End.DONE)
            for batch in read(byte_range):
                visit(batch)
                if done():
                    return Walked(offset, End.DONE)
            if budget is not None:
                budget -= byte_range.size
        if found.next_offset <= offset:
            return Walked(offset, End.STUCK)
        offset = found.next_offset


def read_on_for_markers(
    rule: CommittedFilter[Any],
    offset: int,
    plan: Callable[[int, int], Step[Rng] | None],
    read: Callable[[Rng], Iterable[Any]],
    *,
    budget: int | None,
    plan_bytes: int = LOOKAHEAD_BYTES,
    look_ahead: Callable[[Any], None] | None = None,
) -> Walked:
    """Read on from ``offset`` for markers only while ``rule`` holds an open transaction (``read``
    should decode batches without their records), each batch handed to ``look_ahead`` (default:
    ``rule.look_ahead``); ``budget``: ``read_on_budget``'s answer."""
    return walk(plan, read, offset, visit=look_ahead or rule.look_ahead, done=lambda: not rule.undecided, budget=budget, plan_bytes=plan_bytes)
