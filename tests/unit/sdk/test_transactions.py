"""read_committed, the one rule (tiered_kafka.transactions): markers in order, .txnindex entries, look-ahead."""

from __future__ import annotations

from dataclasses import dataclass, field

from hypothesis import given, settings
from hypothesis import strategies as st

from tiered_kafka.format.record_batch import ControlRecordType
from tiered_kafka.format.txn_index import AbortedTxn
from tiered_kafka.transactions import CommittedFilter, Fate

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


def run(batches: list[B], aborted: list[AbortedTxn] = ()) -> tuple[list[int], int | None]:  # type: ignore[assignment]
    f: CommittedFilter[int] = CommittedFilter(aborted)
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


def test_an_index_entry_drops_an_aborted_transaction_before_its_marker_is_read() -> None:
    batches = [data(0, 1, pid=7), data(2, 2), data(3, 4, pid=8)]
    # without the index p7 holds everything; with p7's abort known in advance, 2 is delivered at once
    assert run(batches) == ([], 0)
    assert run(batches, [AbortedTxn(7, 0, 9, 3)]) == ([2], 3)


def test_look_ahead_markers_decide_held_batches_and_later_pushes() -> None:
    f: CommittedFilter[int] = CommittedFilter()
    assert f.push(data(0, 1, pid=7)) == [] and f.push(data(2, 2)) == []
    f.look_ahead(data(10, 11, pid=8))  # data read ahead is ignored
    assert f.undecided
    f.look_ahead(marker(12, 7, COMMIT))
    assert not f.undecided
    assert [(b.base_offset, fate) for b, fate in f.take_released()] == [(0, Fate.DELIVER), (2, Fate.DELIVER)]
    assert f.push(data(3, 4, pid=7)) == [3, 4]  # decided by the marker seen ahead
    assert f.first_held_offset is None


def test_drain_returns_undecided_batches_and_counts() -> None:
    f: CommittedFilter[int] = CommittedFilter([AbortedTxn(8, 3, 6, 7)])
    for batch in (data(0, 1, pid=7), marker(2, 7, COMMIT), data(3, 4, pid=8), data(5, 5, pid=9), data(6, 6)):
        f.push_decisions(batch)
    assert [(b.base_offset, fate) for b, fate in f.drain()] == [(5, Fate.UNDECIDED), (6, Fate.DELIVER)]
    assert (f.delivered_records, f.aborted_records, f.control_records) == (3, 2, 1)
    assert f.first_held_offset is None


# -- property: streaming, index-driven and look-ahead paths against a reference model -----------------


def random_log(draw: st.DrawFn) -> list[B]:
    """A partition log: plain batches and transactions of up to 4 producers, interleaved; some left open."""
    batches: list[B] = []
    offset = 0
    open_txn: dict[int, bool] = {}
    for _ in range(draw(st.integers(0, 40))):
        kind = draw(st.sampled_from(["plain", "txn", "txn", "end"]))
        pid = draw(st.integers(0, 3))
        if kind == "plain":
            n = draw(st.integers(1, 3))
            batches.append(data(offset, offset + n - 1))
            offset += n
        elif kind == "txn":
            n = draw(st.integers(1, 3))
            batches.append(data(offset, offset + n - 1, pid))
            open_txn[pid] = True
            offset += n
        elif open_txn.pop(pid, False):
            batches.append(marker(offset, pid, draw(st.sampled_from([COMMIT, ABORT]))))
            offset += 1
    return batches


def reference(batches: list[B]) -> tuple[list[int], int | None]:
    """The rule stated plainly: each transactional batch's fate is its producer's next marker;
    nothing at or after the first undecided batch is delivered."""
    out: list[int] = []
    for i, batch in enumerate(batches):
        if batch.control is not None:
            continue
        if batch.transactional:
            nxt = next((b for b in batches[i + 1 :] if b.control is not None and b.producer_id == batch.producer_id), None)
            if nxt is None:
                return out, batch.base_offset
            if nxt.control is ABORT:
                continue
        out.extend(batch.records)
    return out, None


def txn_index(batches: list[B]) -> list[AbortedTxn]:
    """The .txnindex entries a broker writes for ``batches`` (LSO: first offset of the earliest other open transaction, else marker + 1)."""
    first_of: dict[int, int] = {}
    entries = []
    for batch in batches:
        pid = batch.producer_id
        if batch.control is None:
            if batch.transactional:
                first_of.setdefault(pid, batch.base_offset)
            continue
        first = first_of.pop(pid)
        if batch.control is ABORT:
            others = [f for p, f in first_of.items() if p != pid]
            entries.append(AbortedTxn(pid, first, batch.base_offset, min(others) if others else batch.base_offset + 1))
    return entries


@st.composite
def logs(draw: st.DrawFn) -> tuple[list[B], int]:
    batches = random_log(draw)
    return batches, draw(st.integers(0, len(batches)))


@settings(max_examples=400, deadline=None)
@given(logs())
def test_streaming_and_index_paths_agree_with_the_reference(case: tuple[list[B], int]) -> None:
    batches, cut = case
    expected = reference(batches)
    assert run(batches) == expected
    entries = txn_index(batches)
    assert run(batches, entries) == expected
    # entries added per segment as a reader reaches them (segments cut at ``cut``)
    f: CommittedFilter[int] = CommittedFilter()
    out: list[int] = []
    f.add_aborted(e for e in entries if e.last_offset < (batches[cut].base_offset if cut < len(batches) else 1 << 62))
    for i, batch in enumerate(batches):
        if i == cut:
            f.add_aborted(entries)
        out.extend(f.push(batch))
    assert (out, f.first_held_offset) == expected


@settings(max_examples=400, deadline=None)
@given(logs(), st.booleans())
def test_a_window_with_look_ahead_delivers_the_reference_up_to_its_end(case: tuple[list[B], int], with_index: bool) -> None:
    batches, cut = case
    window, rest = batches[:cut], batches[cut:]
    end = rest[0].base_offset if rest else 1 << 62
    f: CommittedFilter[int] = CommittedFilter(txn_index(batches) if with_index else ())
    out: list[int] = []
    for batch in window:
        out.extend(f.push(batch))
    for batch in rest:
        f.look_ahead(batch)
    out.extend(r for b, fate in f.take_released() if fate is Fate.DELIVER for r in b.records)
    expected, first_undecided = reference(batches)
    assert out == [o for o in expected if o < end]
    held = f.first_held_offset
    assert held == (first_undecided if first_undecided is not None and first_undecided < end else None)


@settings(max_examples=300, deadline=None)
@given(logs())
def test_drain_counts_every_record_exactly_once(case: tuple[list[B], int]) -> None:
    batches, _ = case
    f: CommittedFilter[int] = CommittedFilter(txn_index(batches))
    fates: list[tuple[B, Fate]] = []
    for batch in batches:
        fates.extend(f.push_decisions(batch))  # type: ignore[arg-type]
    fates.extend(f.drain())  # type: ignore[arg-type]
    assert [b.base_offset for b, _ in fates] == [b.base_offset for b in batches]
    undecided = sum(len(b.records) for b, fate in fates if fate is Fate.UNDECIDED)
    total = sum(b.last_offset - b.base_offset + 1 for b in batches)
    assert f.delivered_records + f.aborted_records + f.control_records + undecided == total
