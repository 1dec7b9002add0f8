"""``read_on``: the one walk and budget rule every reader reads on for markers with.

Plans over a fake partition of one-offset "batches" of 1000 bytes each; the rule under test is the loop."""

from __future__ import annotations

from dataclasses import dataclass

from tiered_kafka.format.record_batch import ControlRecordType
from tiered_kafka.read_on import FIRST_PLAN_BYTES, LOOKAHEAD_MAX_BYTES, End, Step, read_on_budget, read_on_for_markers, walk
from tiered_kafka.client.remote_read import DecodedBatch
from tiered_kafka.transactions import CommittedFilter

SIZE = 1000


@dataclass(frozen=True)
class R:
    offset: int
    size: int = SIZE


class Partition:
    """Offsets 0..end-1, one per range; ``marker_at``: a COMMIT of producer 7 there; ``stuck``: plans never advance."""

    def __init__(self, end: int, marker_at: int | None = None, stuck: bool = False) -> None:
        self.end, self.marker_at, self.stuck = end, marker_at, stuck
        self.asked: list[tuple[int, int]] = []

    def plan(self, offset: int, max_bytes: int) -> Step[R] | None:
        self.asked.append((offset, max_bytes))
        if offset >= self.end:
            return None
        ranges = [R(o) for o in range(offset, min(self.end, offset + max(1, max_bytes // SIZE)))]
        return Step(ranges, offset if self.stuck else ranges[-1].offset + 1)

    def read(self, r: R) -> list[DecodedBatch]:
        marker = r.offset == self.marker_at
        return [DecodedBatch(r.offset, r.offset, 7, True, ControlRecordType.COMMIT if marker else None)]


def held_rule() -> CommittedFilter[DecodedBatch]:
    rule: CommittedFilter[DecodedBatch] = CommittedFilter()
    rule.push(DecodedBatch(0, 0, 7, True, None))  # producer 7's transaction, undecided
    assert rule.undecided
    return rule


def test_the_budget_rule() -> None:
    assert read_on_budget(None, resumable=True) == read_on_budget(None, resumable=False) == LOOKAHEAD_MAX_BYTES
    assert read_on_budget(19, resumable=False) is None  # a fixed end and a known LSO: until the marker
    assert read_on_budget(19, resumable=True, limit=5) == 5


def test_plans_double_from_the_first_size_up_to_the_cap_and_stop_at_the_marker() -> None:
    partition = Partition(10_000, marker_at=300)
    rule = held_rule()
    walked = read_on_for_markers(rule, 1, partition.plan, partition.read, budget=None, plan_bytes=4 * FIRST_PLAN_BYTES)
    assert walked.reason is End.DONE and not rule.undecided
    assert [b for _, b in partition.asked] == [FIRST_PLAN_BYTES, 2 * FIRST_PLAN_BYTES, 4 * FIRST_PLAN_BYTES]  # the third holds 300
    capped = Partition(10_000, marker_at=900)
    read_on_for_markers(held_rule(), 1, capped.plan, capped.read, budget=None, plan_bytes=4 * FIRST_PLAN_BYTES)
    assert [b for _, b in capped.asked] == [FIRST_PLAN_BYTES, 2 * FIRST_PLAN_BYTES] + [4 * FIRST_PLAN_BYTES] * 3  # capped; 721..982 holds 900


def test_a_spent_budget_remote_end_and_a_stuck_plan_each_stop_the_walk() -> None:
    far = Partition(10_000, marker_at=9_000)
    rule = held_rule()
    spent = read_on_for_markers(rule, 1, far.plan, far.read, budget=3 * SIZE)
    assert spent.reason is End.BUDGET and rule.undecided and spent.offset == 4 and far.asked == [(1, 3 * SIZE)]
    short = Partition(50)
    assert read_on_for_markers(held_rule(), 1, short.plan, short.read, budget=None).reason is End.REMOTE_END
    stuck = Partition(50, stuck=True)
    assert read_on_for_markers(held_rule(), 1, stuck.plan, stuck.read, budget=None).reason is End.STUCK
    seen: list[int] = []
    until = walk(far.plan, far.read, 0, visit=lambda b: seen.append(b.base_offset), done=lambda: False, budget=None, until=100)
    assert until.reason is End.UNTIL and until.offset == 196 and seen == list(range(196))  # checked between plans: 65 + 131 offsets
