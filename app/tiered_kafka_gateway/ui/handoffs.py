"""Where each consumption mode would switch tiers on a partition, for the coverage page.

Nothing here restates a rule of ``tiered_kafka.modes``: a consumer reading the partition from its
beginning (``modes.earliest``, auto.offset.reset=earliest) is replayed through the SDK's own
per-partition state machine (``tiered_kafka.consumer.handoff.Handoff``, gap policy ``skip``), fed
the events the partition's layout would produce (remote storage's end, a recorded gap, Kafka's
OFFSET_OUT_OF_RANGE below its log start), and each decision it answers becomes a mark:

    start     the first read: its tier and offset
    remote    a switch to remote storage (Kafka refused an offset below its log start)
    kafka     a switch to Kafka (remote storage's end, a gap Kafka may still hold, KAFKA_PREFERRED's return)
    wait      REMOTE_ONLY at remote storage's end, waiting for uploads
    skip      offsets no tier the mode reads holds (``Skip``), with the reason
    reset     no tier the mode reads holds the position: auto.offset.reset

``tiered_kafka.consumer.handoff`` is imported when a replay runs, not with the gateway: importing
it imports the SDK's consumer package (``TieredConsumer``), which the gateway needs for nothing else.

The replay stops once the reader is on Kafka at or above its log start (it then reads Kafka to its
end) or waits or resets; a layout is what the page knows now, so the marks say where a reader
starting now would switch, not where an existing consumer group is.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tiered_kafka import modes
from tiered_kafka.modes import Mode, Source
from tiered_kafka.registry import Gap

if TYPE_CHECKING:
    from tiered_kafka.consumer.handoff import Decision, Handoff, ReadFrom


@dataclass(frozen=True, slots=True)
class Layout:
    """What a partition holds where: remote storage's (earliest, latest) offsets, its recorded gaps
    (by start), and Kafka's (log start offset, high watermark); None where unknown or empty."""

    remote: tuple[int, int] | None
    gaps: Sequence[Gap]
    kafka: tuple[int, int] | None

    def remote_holds(self, offset: int) -> bool:
        if self.remote is None or not self.remote[0] <= offset <= self.remote[1]:
            return False
        return not any(g.contains(offset) for g in self.gaps)


@dataclass(frozen=True, slots=True)
class Mark:
    """One decision of a mode's replay (module docstring: ``kind``); ``end`` is a skip's last offset."""

    mode: Mode
    kind: str
    offset: int
    text: str
    end: int | None = None


def marks(mode: Mode, layout: Layout) -> list[Mark]:
    """The decisions a consumer reading from the beginning under ``mode`` would meet (module docstring)."""
    from tiered_kafka.consumer.handoff import Handoff, ReadFrom, Reset, Skip, Wait

    kafka_log_start = None if layout.kafka is None else layout.kafka[0]
    first = modes.earliest(mode, kafka_log_start, None if layout.remote is None else layout.remote[0])
    if first is None:
        return []
    handoff = Handoff(mode, kafka_configured=layout.kafka is not None, gap_skip=True)
    decision: Decision | None = handoff.start(first, lambda: layout.remote_holds(first))
    out: list[Mark] = []
    for _ in range(8 + 4 * len(layout.gaps)):  # every step passes a gap or ends; the bound only guards a broken layout
        if isinstance(decision, ReadFrom):
            kind = "start" if not out else decision.source.value
            out.append(Mark(mode, kind, decision.offset, f"{_tier(decision.source)} from offset {decision.offset}"))
            if decision.source is Source.REMOTE:
                decision = _read_remote(handoff, layout, decision.offset)
                continue
            if layout.kafka is None or decision.offset >= layout.kafka[0]:
                return out  # Kafka from here to its end (or no Kafka to read)
            decision = handoff.kafka_out_of_range(decision.offset, layout.kafka[0], layout.remote)
        elif isinstance(decision, Skip):
            out.append(Mark(mode, "skip", decision.start, f"skips {decision.start}..{decision.end} ({decision.reason})", decision.end))
            if decision.read is not None:
                decision = decision.read
            elif handoff.source is Source.REMOTE and handoff.position is not None:
                decision = _read_remote(handoff, layout, handoff.position)
            else:
                return out
        elif isinstance(decision, Wait):
            out.append(Mark(mode, "wait", decision.offset, f"waits for uploads at {decision.offset} (remote storage's end)"))
            return out
        elif isinstance(decision, Reset):
            out.append(Mark(mode, "reset", decision.offset, f"auto.offset.reset at {decision.offset}: no tier the mode reads holds it"))
            return out
        else:
            return out
    return out


def _read_remote(handoff: Handoff, layout: Layout, at: int) -> Decision | None:
    """The remote reader at ``at``: the event that ends its run (a gap, remote storage's end, its start)."""
    if layout.remote is None or at > layout.remote[1]:
        return handoff.remote_end()
    if at < layout.remote[0]:
        return handoff.remote_below_start()
    for gap in layout.gaps:
        if gap.end_offset < at:
            continue
        if gap.start_offset > at:
            moved = _deliver(handoff, min(gap.start_offset, layout.remote[1] + 1))
            if moved is not None or gap.start_offset > layout.remote[1]:
                return moved if moved is not None else handoff.remote_end()
        return handoff.gap(gap.start_offset, gap.end_offset, gap.reason)
    moved = _deliver(handoff, layout.remote[1] + 1)
    return moved if moved is not None else handoff.remote_end()


def _deliver(handoff: Handoff, stop: int) -> ReadFrom | None:
    """Remote records up to ``stop`` (exclusive) delivered, or up to KAFKA_PREFERRED's return point."""
    back = handoff.switch_back_at
    if back is not None and handoff.position is not None and handoff.position <= back < stop:
        stop = back
    return handoff.delivered(Source.REMOTE, stop)


def _tier(source: Source) -> str:
    return "remote storage" if source is Source.REMOTE else "Kafka"
