"""The consumption modes (DESIGN.md, contract 4): every rule about which tier serves an offset.

This module is the one place for them. ``TieredConsumer`` applies them through its per-partition
handoff (``tiered_kafka.consumer.handoff``, which the CLI uses through the consumer), and the
gateway's records route through ``decide``. Nobody else re-derives them.

    mode              reads                  at remote storage's end     Kafka OFFSET_OUT_OF_RANGE below its log start
    REMOTE_ONLY       remote only            wait for new uploads        (never reads Kafka)
    KAFKA_ONLY        Kafka only             (never reads remote)        auto.offset.reset
    REMOTE_PREFERRED  remote while it holds  Kafka, at the exact offset  remote if it holds the offset, until its end
                      the offset, then Kafka
    KAFKA_PREFERRED   Kafka                  Kafka, at the exact offset  remote if it holds the offset, back to Kafka
                                                                         at the log start Kafka reported

Every handoff happens at an exact offset. A read returns records of one source, ending at its
next offset, and the next read starts exactly there, so there is no gap and no duplicate.

What each mode does where remote storage cannot serve an offset:

- *Remote retention removed it* (below remote storage's earliest offset): REMOTE_ONLY applies
  auto.offset.reset. The other modes ask Kafka, unless Kafka already refused the offset (it is
  below the log start Kafka reported), in which case auto.offset.reset applies, forward only.
- *A recorded gap* (the agent could not upload the offsets, and says why): a mode that reads Kafka
  hands over to Kafka at the position when Kafka may still hold the gap (its log start is unknown or
  at most the gap's first offset). A gap that Kafka cannot fill either is handled by
  ``tiered.remote.gap.policy``: ``error`` raises ``RemoteGapError``, ``skip`` logs it and goes on
  with the first offset after it that a tier holds.
- *Between the tiers* (remote storage ends below Kafka's log start, so neither holds the offsets
  in between): a gap, handled the same way.
- *auto.offset.reset moves forward* (from a position no tier the mode reads holds, to the first
  offset after it that one holds): offsets that some tier holds all the same (remote storage under
  KAFKA_ONLY, say) are never passed silently: the partition gets an OFFSET_OUT_OF_RANGE error
  message naming them and their tier, then reading goes on. A position a tier the mode reads holds
  is never reset: a refusal there was stale. Kafka's OFFSET_OUT_OF_RANGE about an offset that is
  not the position is stale and changes nothing (``consumer/handoff.py``).
- *TOPIC_AUTHORIZATION_FAILED* (the gateway's 403 ``topic_authorization_failed``): in every mode
  the partition gets an error, with Kafka's code, and makes no further progress until the
  application seeks or changes the mode. It never waits silently. It never falls back to Kafka
  past data it could not read: in REMOTE_PREFERRED and KAFKA_PREFERRED, Kafka's records after
  remote data the caller may not see are not delivered either.
"""

from __future__ import annotations

import enum
from collections.abc import Callable


class Mode(str, enum.Enum):
    REMOTE_ONLY = "REMOTE_ONLY"
    KAFKA_ONLY = "KAFKA_ONLY"
    REMOTE_PREFERRED = "REMOTE_PREFERRED"
    KAFKA_PREFERRED = "KAFKA_PREFERRED"


class Source(str, enum.Enum):
    REMOTE = "remote"
    KAFKA = "kafka"


class Action(enum.Enum):
    """What a reader does when its current source cannot go on (the rules in the module docstring)."""

    READ_REMOTE = "read_remote"  # read remote storage from the position
    READ_KAFKA = "read_kafka"  # read Kafka from the position
    WAIT = "wait"  # stay on remote storage and wait for new uploads
    RESET = "reset"  # no tier the mode reads holds the position: auto.offset.reset, forward
    GAP = "gap"  # offsets no tier holds, with data before them: tiered.remote.gap.policy
    FAIL = "fail"  # an error for the partition, which stops there


def reads_remote(mode: Mode) -> bool:
    return mode is not Mode.KAFKA_ONLY


def reads_kafka(mode: Mode) -> bool:
    return mode is not Mode.REMOTE_ONLY


def tails_remote(mode: Mode) -> bool:
    """REMOTE_ONLY waits at remote storage's end for new uploads; the others go on with Kafka."""
    return mode is Mode.REMOTE_ONLY


def decide(mode: Mode, *, remote_holds: Callable[[], bool], kafka_configured: bool, kafka_below_log_start: bool = False) -> Source:
    """The source of a read at an offset under ``mode``.

    ``remote_holds()`` says whether remote storage holds the offset (asked only when needed);
    ``kafka_below_log_start`` is set on the second call of KAFKA_PREFERRED, after Kafka answered
    OFFSET_OUT_OF_RANGE for an offset below its log start. A REMOTE source for an offset remote
    storage does not hold yields the remote reader's 416, which is REMOTE_ONLY's answer.
    """
    if mode is Mode.KAFKA_ONLY:
        return Source.KAFKA
    if mode is Mode.KAFKA_PREFERRED:
        return Source.REMOTE if kafka_below_log_start or not kafka_configured else Source.KAFKA
    if mode is Mode.REMOTE_ONLY:
        return Source.REMOTE
    return Source.REMOTE if (not kafka_configured or remote_holds()) else Source.KAFKA


def at_remote_end(mode: Mode) -> Action:
    """Remote storage holds nothing at or after the position (yet)."""
    return Action.WAIT if tails_remote(mode) else Action.READ_KAFKA


def below_remote_start(mode: Mode, offset: int, kafka_log_start: int | None) -> Action:
    """Remote retention removed ``offset``; ``kafka_log_start`` is the log start Kafka last reported
    with OFFSET_OUT_OF_RANGE (None when Kafka never refused this partition)."""
    if not reads_kafka(mode) or (kafka_log_start is not None and offset < kafka_log_start):
        return Action.RESET
    return Action.READ_KAFKA


def at_gap(mode: Mode, offset: int, gap_start: int, gap_end: int, kafka_log_start: int | None) -> Action:
    """Remote storage lacks ``gap_start..gap_end`` (a recorded gap) and the position ``offset`` is in it."""
    if reads_kafka(mode) and offset <= gap_end and (kafka_log_start is None or kafka_log_start <= max(offset, gap_start)):
        return Action.READ_KAFKA  # Kafka may still hold what remote storage lacks
    return Action.GAP


def gap_kafka_rest(mode: Mode, offset: int, gap_end: int, kafka_log_start: int | None) -> int | None:
    """Where ``at_gap`` answered GAP for the position ``offset`` in a recorded gap ending at
    ``gap_end``: the offset from which Kafka holds the rest of the gap (its log start, inside the
    gap), None when it holds none of it. The offsets from the position up to it are lost."""
    if kafka_log_start is not None and reads_kafka(mode) and offset < kafka_log_start <= gap_end:
        return kafka_log_start
    return None


def earliest(mode: Mode, kafka_log_start: int | None, remote_earliest: int | None) -> int | None:
    """The first offset a tier the mode reads holds (``auto.offset.reset=earliest`` with no
    position); None when no tier the mode reads reported one."""
    firsts = [o for o, read in ((kafka_log_start, reads_kafka(mode)), (remote_earliest, reads_remote(mode))) if read and o is not None]
    return min(firsts, default=None)


def kafka_out_of_range(mode: Mode, offset: int, log_start: int, remote: tuple[int, int] | None) -> Action:
    """Kafka answered OFFSET_OUT_OF_RANGE at ``offset`` with its log start ``log_start``;
    ``remote`` is remote storage's (earliest, latest) offsets, None when it holds nothing."""
    if offset < log_start and mode in (Mode.KAFKA_PREFERRED, Mode.REMOTE_PREFERRED) and remote is not None:
        earliest, latest = remote
        if earliest <= offset <= latest:
            return Action.READ_REMOTE
        if earliest <= offset:  # remote storage ends below Kafka's log start
            return Action.GAP
    return Action.RESET


def switch_back_at(mode: Mode, kafka_log_start: int) -> int | None:
    """Where a read that fell back to remote storage returns to Kafka (None: at remote's end)."""
    return kafka_log_start if mode is Mode.KAFKA_PREFERRED else None


def on_authorization_failed(mode: Mode) -> Action:
    """TOPIC_AUTHORIZATION_FAILED from the gateway: the same in every mode (module docstring)."""
    return Action.FAIL
