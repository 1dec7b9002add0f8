"""read_committed over batches in offset order (tiered_kafka.transactions)."""

from __future__ import annotations

from dataclasses import dataclass, field

from tiered_kafka.format.record_batch import ControlRecordType
from tiered_kafka.transactions import CommittedFilter

COMMIT, ABORT = ControlRecordType.COMMIT, ControlRecordType.ABORT


@dataclass
class B:
    base_offset: int
    last_offset: int
    producer_id: int = -1
    transactional: bool = False
    control: ControlRecordType | None = None
    records: list[int] = field(default_factory=list)


def data(first: int, last: int, pid: int = -1) -> B:
    return B(first, last, pid, pid >= 0, None, list(range(first, last + 1)))


def marker(offset: int, pid: int, kind: ControlRecordType) -> B:
    return B(offset, offset, pid, True, kind)


def run(batches: list[B]) -> tuple[list[int], int | None]:
    f: CommittedFilter[int] = CommittedFilter()
    out: list[int] = []
    for batch in batches:
        out.extend(f.push(batch))
    return out, f.first_held_offset


def test_plain_records_pass_straight_through() -> None:
    assert run([data(0, 2), data(3, 4)]) == ([0, 1, 2, 3, 4], None)


def test_committed_kept_aborted_dropped_order_preserved() -> None:
    batches = [data(0, 1), data(2, 4, pid=7), data(5, 6), data(7, 8, pid=8), marker(9, 7, COMMIT), data(10, 10), marker(11, 8, ABORT), data(12, 12)]
    # 5-6 wait behind p7's open transaction; 10 waits behind p8's; p8's records are dropped
    assert run(batches) == ([0, 1, 2, 3, 4, 5, 6, 10, 12], None)


def test_an_open_transaction_holds_everything_after_it() -> None:
    out, held = run([data(0, 0), data(1, 2, pid=7), data(3, 3), data(4, 5, pid=8), marker(6, 8, COMMIT)])
    assert out == [0] and held == 1  # the handoff offset: Kafka's read_committed takes over from here


def test_a_marker_decides_only_earlier_batches_of_its_producer() -> None:
    batches = [data(0, 1, pid=7), marker(2, 7, ABORT), data(3, 4, pid=7), marker(5, 7, COMMIT)]
    assert run(batches) == ([3, 4], None)
