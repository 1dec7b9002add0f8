"""``columnar_read``: the columnar path keeps exactly the rows the per-record path
(``remote_read.decode_range`` + ``CommittedFilter``) delivers, on the same bytes: offset bounds,
read_committed over committed and aborted transactions, control batches, a transaction still open
at the end, the remote last stable offset, ranges cut anywhere on batch boundaries."""

from __future__ import annotations

import itertools
import logging
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from tests.support.batches import Rec, build_control, build_v2
from tests.support.transactions import write_transactional_log
from tiered_kafka.client.columnar_read import ColumnarSelector, decode_planned, finish_read
from tiered_kafka.read_on import FIRST_PLAN_BYTES
from tiered_kafka.errors import CorruptRecordError, OffsetNotRemoteError
from tiered_kafka.format.record_batch import iter_batches
from tiered_kafka.client.gateway import Plan, PlannedRange
from tiered_kafka.client.remote_read import decode_range
from tiered_kafka.transactions import CommittedFilter, Fate

Row = tuple[int, bytes | None, bytes | None, int | None, list[tuple[str, bytes | None]]]


@pytest.fixture(scope="module")
def segments(tmp_path_factory: pytest.TempPathFactory) -> list[tuple[bytes, list[tuple[int, int, int]]]]:
    """The hand-built transactional log (tests/support/transactions.py): each segment's bytes and
    its batches (position, base offset, last offset), the active segment's marker included."""
    directory = tmp_path_factory.mktemp("columnar") / "txn-0"
    plog = write_transactional_log(directory)
    plog.close()
    out = []
    for path in sorted(directory.glob("*.log")):
        data = path.read_bytes()
        out.append((data, [(b.position, b.base_offset, b.last_offset) for b in iter_batches(data)]))
    return out


def ranges_of(segments: list[tuple[bytes, list[tuple[int, int, int]]]], cut_every: int) -> list[tuple[bytes, PlannedRange]]:
    """Every segment cut into ranges of ``cut_every`` batches (batch-aligned, as plans are)."""
    out = []
    for data, batches in segments:
        for i in range(0, len(batches), cut_every):
            group = batches[i : i + cut_every]
            start = group[0][0]
            end = batches[i + cut_every][0] if i + cut_every < len(batches) else len(data)
            planned = PlannedRange(start, end, group[0][1], group[-1][2], "http://s3/o", f"bytes={start}-{end - 1}")
            out.append((data[start:end], planned))
    return out


def reference(pieces: list[tuple[bytes, PlannedRange]], start: int, end: int, read_committed: bool, stable_end: int | None) -> tuple[list[Row], dict[int, str]]:
    """The per-record path: delivered rows and the reason of every left-out offset in [start, end)."""
    rule: CommittedFilter[Any] | None = CommittedFilter(stable_end=stable_end) if read_committed else None
    rows: list[Row] = []
    skipped: dict[int, str] = {}

    def take(decisions: list[tuple[Any, Fate]]) -> None:
        for batch, fate in decisions:
            if fate is Fate.CONTROL:
                skipped.update({o: "control" for o in range(max(start, batch.base_offset), min(end, batch.last_offset + 1))})
            elif fate is Fate.DELIVER:
                rows.extend((r.offset, r.key, r.value, r.timestamp, list(r.headers)) for r in batch.records if start <= r.offset < end)
            else:
                skipped.update({r.offset: fate.value for r in batch.records if start <= r.offset < end})

    for data, planned in pieces:
        for batch in decode_range(data, planned, object_key="o"):
            if rule is None:
                take([(batch, Fate.CONTROL if batch.control is not None else Fate.DELIVER)])
            elif batch.base_offset < end:
                take(rule.push_decisions(batch))
            else:
                rule.look_ahead(batch)
                take(rule.take_released())
    if rule is not None:  # held at the end: behind an open transaction, so not delivered (spark.reading does the same)
        take(rule.take_released())
        take([(b, Fate.UNDECIDED if f is Fate.DELIVER else f) for b, f in rule.drain()])
    return rows, skipped


def columnar(pieces: list[tuple[bytes, PlannedRange]], start: int, end: int, read_committed: bool, stable_end: int | None, report: bool) -> tuple[ColumnarSelector, list[pa.RecordBatch]]:
    selector = ColumnarSelector(start, end, committed=CommittedFilter(stable_end=stable_end) if read_committed else None, report_skipped=report)
    out = []
    for data, planned in pieces:
        out.extend(selector.add(decode_planned(data, planned, object_key="o"), planned.first_offset, planned.last_offset))
    out.extend(selector.finish())
    return selector, out


def rows_of(batches: list[pa.RecordBatch]) -> list[Row]:
    rows = []
    for batch in batches:
        for r in batch.to_pylist():
            if r.get("skipped") is None:
                rows.append((r["offset"], r["key"], r["value"], r["timestamp"], [(h["key"], h["value"]) for h in r["headers"]]))
    return rows


@pytest.mark.parametrize("read_committed", [pytest.param(False, id="read_uncommitted"), pytest.param(True, id="read_committed")])
@pytest.mark.parametrize("stable_end", [pytest.param(None, id="lso-unknown"), pytest.param(19, id="lso-19"), pytest.param(12, id="lso-12")])
@pytest.mark.parametrize("cut_every", [1, 2, 3, 100])
def test_same_rows_as_the_per_record_path_for_every_bound(segments: Any, read_committed: bool, stable_end: int | None, cut_every: int) -> None:
    pieces = ranges_of(segments, cut_every)
    for start, end in itertools.combinations(range(0, 24, 1), 2):
        expected, expected_skipped = reference(pieces, start, end, read_committed, stable_end)
        selector, batches = columnar(pieces, start, end, read_committed, stable_end, report=False)
        assert rows_of(batches) == expected, (start, end)
        offsets = [o for o, *_ in expected]
        assert offsets == sorted(offsets) and all(start <= o < end for o in offsets)
        undecided = sorted(o for o, why in expected_skipped.items() if why == "undecided")
        assert selector.undecided_records == len(undecided) and selector.first_undecided == (undecided[0] if undecided else None), (start, end)
        # reporting what is left out changes nothing of the delivered rows and names each left-out offset once
        _selector, reported = columnar(pieces, start, end, read_committed, stable_end, report=True)
        assert rows_of(reported) == expected
        got_skipped = {r["offset"]: r["skipped"] for b in reported for r in b.to_pylist() if r["skipped"] is not None}
        assert got_skipped == expected_skipped, (start, end)
        assert all(r["key"] is None and r["value"] is None and r["timestamp"] is None for b in reported for r in b.to_pylist() if r["skipped"])


def test_read_committed_of_the_whole_log_is_the_documented_answer(segments: Any) -> None:
    pieces = ranges_of(segments, 2)[:-1]  # the active segment's COMMIT of p11 is not in remote storage
    selector, batches = columnar(pieces, 0, 22, True, None, report=False)
    assert [o for o, *_ in rows_of(batches)] == [0, 1, 2, 3, 4, 8, 13, 17]
    assert selector.first_undecided == 19 and selector.undecided_records == 3  # p11 (19, 20) and 21 behind it
    assert selector.committed is not None and selector.committed.aborted_records == 7  # p8 (3), p9 (2), p10 (2)


def test_plain_ranges_take_every_row_with_one_push(segments: Any) -> None:
    """The fast path: a range without transactional or control batches is one view for the rule."""
    data = b"".join(build_v2([Rec(b"k", b"v%d" % i, 1_700_000_000_000 + i)] * 3, base_offset=3 * i) for i in range(4))
    planned = PlannedRange(0, len(data), 0, 11, "u", f"bytes=0-{len(data) - 1}")
    rule: CommittedFilter[Any] = CommittedFilter()
    selector = ColumnarSelector(2, 12, committed=rule)
    out = selector.add(decode_planned(data, planned, object_key="o"), 0, 11) + selector.finish()
    assert [b.num_rows for b in out] == [10] and out[0].column("offset").to_pylist() == list(range(2, 12))
    assert rule.delivered_records == 12  # the rule counted the whole range, pushed once


def test_a_range_holding_other_offsets_than_planned_names_the_object(segments: Any) -> None:
    data, batches = segments[0]
    end = batches[2][0]
    wrong = PlannedRange(0, end, 0, 5, "u", f"bytes=0-{end - 1}")  # holds 0..4
    with pytest.raises(CorruptRecordError, match=r"seg-0\.log: range bytes=0-\d+ should hold offsets 0\.\.5, holds 0\.\.4"):
        decode_planned(data[:end], wrong, object_key="seg-0.log")
    torn = PlannedRange(0, end - 1, 0, 4, "u", f"bytes=0-{end - 2}")
    with pytest.raises(CorruptRecordError, match=r"^seg-0\.log: "):
        decode_planned(data[: end - 1], torn, object_key="seg-0.log")


def test_segment_files_exist(tmp_path: Path, segments: Any) -> None:
    assert len(segments) == 3 and [b[0][1] for _d, b in segments] == [0, 14, 22]


def test_a_control_batch_of_unknown_type_is_corrupt_as_in_the_per_record_path() -> None:
    data = build_v2([Rec(b"k", b"v", 1)]) + build_control(5, base_offset=1, producer_id=3)
    planned = PlannedRange(0, len(data), 0, 1, "u", f"bytes=0-{len(data) - 1}")
    with pytest.raises(CorruptRecordError, match="control batch without a valid control record key"):
        decode_range(data, planned, object_key="o")
    with pytest.raises(CorruptRecordError, match=r"^o: control batch without a valid control record key \(type 5\) \(in batch with base offset 1"):
        decode_planned(data, planned, object_key="o")


class MarkerGateway:
    """The client ``finish_read`` reads on with: remote storage holds ``pieces`` (one plan of them
    all) and ends after them; ``plans`` records each plan's (offset, max_bytes)."""

    def __init__(self, pieces: list[tuple[bytes, PlannedRange]]) -> None:
        self.pieces = pieces
        self.plans: list[tuple[int, int]] = []

    def plan(self, topic: str, partition: int, offset: int, max_bytes: int, **_: Any) -> Plan:
        self.plans.append((offset, max_bytes))
        ranges = tuple(planned for _data, planned in self.pieces if planned.last_offset >= offset)
        if not ranges:
            raise OffsetNotRemoteError("past the end", offset=offset, earliest=0, latest=offset - 1)
        return Plan(topic, partition, offset, "o", ranges[0].first_offset, ranges[-1].last_offset, ranges, ranges[-1].last_offset + 1, 0, None)

    def fetch(self, planned: PlannedRange) -> bytes:
        return next(data for data, p in self.pieces if p == planned)


@pytest.mark.parametrize("stable_end", [pytest.param(None, id="lso-unknown"), pytest.param(19, id="lso-19")])
def test_finish_read_reads_on_for_the_marker_else_warns_once(segments: Any, stable_end: int | None, caplog: pytest.LogCaptureFixture) -> None:
    """A read ending inside p11's open transaction (at 22): with p11's COMMIT in remote storage the
    look-ahead finds it and 19..21 are delivered; without it, one warning names where read_committed stopped."""
    pieces = ranges_of(segments, 2)
    remote, marker = pieces[:-1], pieces[-1:]  # the active segment's COMMIT of p11 (offset 22)
    caplog.set_level(logging.WARNING, logger="tiered_kafka")

    def read(gateway: MarkerGateway) -> tuple[ColumnarSelector, list[int]]:
        selector = ColumnarSelector(0, 22, committed=CommittedFilter(stable_end=stable_end))
        out = []
        for data, planned in remote:
            out.extend(selector.add(decode_planned(data, planned, object_key="o"), planned.first_offset, planned.last_offset))
        out.extend(finish_read(gateway, "txn", 0, selector))  # type: ignore[arg-type]
        return selector, [o for b in out for o in b.column("offset").to_pylist()]

    warning = ("txn-0: read_committed stopped at offset 19: 3 records from there on are held back (a transaction there or before is still "
               "open in remote storage: at or past its last stable offset, or its marker is not uploaded yet)")
    found = MarkerGateway(marker)
    selector, offsets = read(found)
    looked_ahead = [(22, FIRST_PLAN_BYTES)] if stable_end is None else []  # read_on's first plan
    assert found.plans == looked_ahead  # at or past a known stable end nothing is read on: no marker could deliver it
    if stable_end is None:  # the marker decides p11
        assert offsets == [0, 1, 2, 3, 4, 8, 13, 17, 19, 20, 21] and selector.undecided_records == 0 and not caplog.records
    else:
        assert offsets == [0, 1, 2, 3, 4, 8, 13, 17] and [r.getMessage() for r in caplog.records] == [warning]
    caplog.clear()
    missing = MarkerGateway([])
    selector, offsets = read(missing)
    assert offsets == [0, 1, 2, 3, 4, 8, 13, 17] and (selector.first_undecided, selector.undecided_records) == (19, 3)
    assert missing.plans == looked_ahead
    assert [r.getMessage() for r in caplog.records] == [warning]  # once
