"""The remote last stable offset (tiered_kafka.transactions): computed from the last segment's
``open_txn_first_offset``, and no read_committed reader delivers anything at or past it, from
whatever offset it starts."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tiered_kafka.format.record_batch import ControlRecordType
from tiered_kafka.registry import NO_OPEN_TXN, OPEN_TXN_UNKNOWN
from tiered_kafka.transactions import CommittedFilter, Fate, remote_last_stable_offset

from tests.unit.sdk.test_transactions import B, data, marker

COMMIT = ControlRecordType.COMMIT


def test_remote_lso_from_the_last_segment() -> None:
    assert remote_last_stable_offset(99, 40) == 40  # a transaction open since 40
    assert remote_last_stable_offset(99, NO_OPEN_TXN) == 100  # none open: the end of remote data
    assert remote_last_stable_offset(99, OPEN_TXN_UNKNOWN) is None  # no snapshot: unknown


def push_all(f: CommittedFilter[int], batches: list[B]) -> list[int]:
    return [r for b in batches for r in f.push(b)]


def test_a_read_starting_past_an_open_transaction_delivers_nothing_at_or_past_the_lso() -> None:
    # p7 opened a transaction at 2 (before the read's start, 10) and it is still open: LSO = 2
    after_start = [data(10, 12), data(13, 14, pid=8), marker(15, 8, COMMIT), data(16, 20)]
    unlimited: CommittedFilter[int] = CommittedFilter()
    assert push_all(unlimited, after_start) == list(range(10, 15)) + list(range(16, 21))  # without the LSO: the hole
    limited: CommittedFilter[int] = CommittedFilter(stable_end=2)
    assert push_all(limited, after_start) == []
    assert limited.first_held_offset == 10  # a reader hands over at max(position, 10): Kafka's LSO rules from there
    drained = limited.drain()
    assert [fate for _b, fate in drained] == [Fate.UNDECIDED, Fate.UNDECIDED, Fate.CONTROL, Fate.UNDECIDED]
    assert limited.delivered_records == 0 and limited.control_records == 1


def test_a_read_before_the_lso_stops_there() -> None:
    f: CommittedFilter[int] = CommittedFilter(stable_end=5)
    assert push_all(f, [data(0, 4), data(5, 6, pid=7), data(7, 9)]) == [0, 1, 2, 3, 4]
    assert f.first_held_offset == 5


def test_raising_the_lso_releases_through_the_rule() -> None:
    f: CommittedFilter[int] = CommittedFilter(stable_end=5)
    assert push_all(f, [data(0, 4), data(5, 6, pid=7), data(7, 9)]) == [0, 1, 2, 3, 4]
    f.set_stable_end(3)  # never moves back
    assert f.stable_end == 5 and f.take_released() == []
    f.set_stable_end(11)  # p7's marker was uploaded at 10: the LSO moved past it
    assert [b.base_offset for b, _fate in f.take_released()] == []  # 5-6 still wait for p7's marker
    assert f.push(marker(10, 7, COMMIT)) == [5, 6, 7, 8, 9]
    assert f.first_held_offset is None


def test_unknown_lso_releases_everything_held_by_it() -> None:
    f: CommittedFilter[int] = CommittedFilter(stable_end=0)
    assert push_all(f, [data(0, 1), data(2, 3)]) == []
    f.set_stable_end(None)
    assert [r for b, fate in f.take_released() if fate is Fate.DELIVER for r in b.records] == [0, 1, 2, 3]


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 40), st.integers(0, 40), st.lists(st.booleans(), min_size=1, max_size=30))
def test_nothing_at_or_past_the_lso_whatever_the_start(lso: int, start: int, plain: list[bool]) -> None:
    batches = [data(i + start, i + start) if p else data(i + start, i + start, pid=9) for i, p in enumerate(plain)]
    batches.append(marker(start + len(plain), 9, COMMIT))
    f: CommittedFilter[int] = CommittedFilter(stable_end=lso)
    out = push_all(f, batches)
    assert all(r < lso for r in out)
    below = [b for b in batches if b.base_offset < lso and b.control is None]
    if all(not b.transactional for b in below):  # nothing below the LSO waits for the marker
        assert out == [r for b in below for r in b.records]


@pytest.mark.parametrize("value", [-1, 0, 7])
def test_lso_is_never_past_the_end_of_remote_data(value: int) -> None:
    lso = remote_last_stable_offset(9, value)
    assert lso is not None and lso <= 10
