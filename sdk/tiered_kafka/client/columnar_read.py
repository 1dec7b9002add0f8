"""Reading planned ranges columnar (#14): fetch, check alignment, decode into Arrow with
``format.columnar.decode_columnar``, then keep the rows a reader delivers, with no Python object
per record.

This module is the one place where the columnar path meets the read_committed rule; the bulk API
(``tiered_kafka.bulk``), the ``tiered-kafka export`` command and the PySpark source read through it.
The per-record path (``remote_read.decode_range`` + ``CommittedFilter``) is the reference it is
tested against, batch for batch and row for row.

**Steps for one planned range** (``read_range``):

1. ``remote_read.fetch_range``: one ranged GET (an expired URL is re-planned once);
2. ``decode_planned``: ``decode_columnar`` checks every CRC and decodes every codec; the range must
   hold whole batches from ``planned.first_offset`` to ``planned.last_offset`` (DESIGN.md
   contract 3), else ``CorruptRecordError`` naming the object (the check of ``remote_read.decode_range``);
3. ``ColumnarSelector.add``: the rows with offsets in [start, end) that the isolation level delivers.

**Selection** (``ColumnarSelector``, one per partition read in offset order):

- read_uncommitted: every data row (control batches have no rows in ``records``), bounded by
  [start, end) with one vectorized filter, only when a range runs past a bound.
- read_committed: ``tiered_kafka.transactions.CommittedFilter`` decides; it is fed one light
  ``BatchView`` per Kafka batch (its ``records`` is the ``range`` of its rows in the decoded
  Arrow batch, so ``len()`` counts as the rule needs). Fast path: a range with no transactional
  and no control batch, all below the stable end, is pushed as *one* view covering all its rows
  (the rule delivers such batches as they come, so one push decides them all at once, and counts
  them). Otherwise each batch is a view; the fates are turned into a per-row reason array with one
  run-end-encoded array (one run per batch, ``pyarrow.compute.run_end_decode``) and the rows kept
  with one ``filter``. A batch held by the rule (an open transaction) keeps its range's Arrow data
  until it is decided; output keeps offset order.
- ``report_skipped`` (Spark's internal ``tiered.includeControlRecords``, used by the backfill's row
  counts): each left-out record in [start, end) also becomes a row with null key, value, timestamp
  and headers and a ``skipped`` column naming why: ``control`` (one row per control-batch offset),
  ``aborted``, ``undecided`` (still held at ``finish``: an open transaction, or at or past the
  remote last stable offset). Data rows have ``skipped`` null.

Batches of a range that start at or past ``end`` are not delivered: under read_committed they are
only read for their markers (``CommittedFilter.look_ahead``), as the consumer and the Spark source
did.

**The end of a read** (``finish_read``, one per partition read, or per Spark slice): while the rule
holds an open transaction, the read *reads on* for markers only from one past the last offset read
(``tiered_kafka.read_on``: its walk and its budget rule, for a reader whose end is fixed: until
decided with the remote last stable offset known, so a bound never changes a fate; at most
``LOOKAHEAD_MAX_BYTES`` with it unknown). Remote storage ending first leaves what is open undecided.
Then ``ColumnarSelector.finish``; what is still held is logged as
one warning naming the offset where read_committed stopped (the remote analogue of Kafka's LSO)
and how many records are held back.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc

from tiered_kafka.errors import CorruptRecordError, OffsetNotRemoteError
from tiered_kafka.format.record_batch import ControlRecordType, iter_batches
from tiered_kafka.client.gateway import GatewayClient, PlannedRange
from tiered_kafka import read_on
from tiered_kafka.read_on import LOOKAHEAD_BYTES, LOOKAHEAD_MAX_BYTES, Step, read_on_budget
from tiered_kafka.client.remote_read import DecodedBatch, check_planned_range, decode_batch, fetch_range
from tiered_kafka.transactions import CommittedFilter, Fate

if TYPE_CHECKING:
    from tiered_kafka.format.columnar import ColumnarRange

log = logging.getLogger(__name__)

#: reasons a decoded row has (``skipped`` names them); DELIVER rows are the read's output
DELIVER, ABORTED, UNDECIDED, OUTSIDE, PENDING = 0, 1, 2, 3, 4
_SKIPPED_NAMES = pa.array([None, "aborted", "undecided", None, None], pa.string())
_FATE_REASON = {Fate.DELIVER: DELIVER, Fate.ABORTED: ABORTED, Fate.UNDECIDED: UNDECIDED}


def decode_columnar_impl() -> Any:
    """``format.columnar.decode_columnar`` (imported on first use)."""
    from tiered_kafka.format.columnar import decode_columnar

    return decode_columnar


def decode_planned(data: bytes | bytearray | memoryview, planned: PlannedRange, *, object_key: str, include_headers: bool = True) -> ColumnarRange:
    """Decode a fetched range columnar; it must hold whole batches ``planned.first_offset..last_offset``
    (a torn batch, other offsets, a bad CRC: ``CorruptRecordError`` naming the object)."""
    try:
        decoded = decode_columnar_impl()(data, position=planned.start, include_headers=include_headers)
    except CorruptRecordError as err:
        err.args = (f"{object_key}: {err}",)
        raise
    batches = decoded.batches
    n = batches.num_rows
    unknown = batches.filter(pc.greater(batches.column("control"), int(max(ControlRecordType))))
    check_planned_range(
        planned,
        object_key,
        batches.column("base_offset")[0].as_py() if n else None,
        batches.column("last_offset")[n - 1].as_py() if n else None,
        (unknown.column("position")[0].as_py(), unknown.column("base_offset")[0].as_py(), unknown.column("control")[0].as_py()) if unknown.num_rows else None,
    )
    return decoded


def read_range(client: GatewayClient, topic: str, partition: int, planned: PlannedRange, *, object_key: str, include_headers: bool = True) -> ColumnarRange:
    """Fetch (``remote_read.fetch_range``: re-plans an expired URL) and ``decode_planned`` one range."""
    data = fetch_range(client, topic, partition, planned)
    return decode_planned(data, planned, object_key=object_key, include_headers=include_headers)


class _Chunk:
    """One decoded range waiting for the fates of its batches."""

    __slots__ = ("records", "views", "pending", "controls", "first_offset", "last_offset")

    def __init__(self, records: pa.RecordBatch, first_offset: int, last_offset: int) -> None:
        self.records = records
        self.views: list[BatchView] = []
        self.pending = 0
        self.controls: list[tuple[int, int]] = []  # offsets [lo, hi) of its control batches (report_skipped)
        self.first_offset = first_offset
        self.last_offset = last_offset


@dataclass(slots=True, eq=False)
class BatchView:
    """A Kafka batch (or a run of plain ones) of a decoded range, as ``CommittedFilter`` needs it;
    ``records`` is the range of its rows in the decoded Arrow batch."""

    base_offset: int
    last_offset: int
    producer_id: int
    transactional: bool
    control: ControlRecordType | None
    records: range
    chunk: _Chunk
    reason: int = PENDING


class ColumnarSelector:
    """The rows one partition's read delivers, from its decoded ranges pushed in offset order (module doc).

    ``add`` and ``finish`` return ``pyarrow.RecordBatch`` es of the decoder's ``RECORD_SCHEMA``
    columns (plus ``skipped`` with ``report_skipped``), in offset order; a range held by an open
    transaction comes out once it is decided (or at ``finish``).
    """

    def __init__(self, start: int, end: int, *, committed: CommittedFilter[Any] | None = None, report_skipped: bool = False) -> None:
        self.start = start
        self.end = end
        self.committed = committed
        self.report_skipped = report_skipped
        self._chunks: deque[_Chunk] = deque()
        self.next_offset = start  # one past the last offset added
        self.undecided_records = 0
        self.first_undecided: int | None = None

    def add(self, decoded: ColumnarRange, first_offset: int, last_offset: int) -> list[pa.RecordBatch]:
        """One decoded range (holding ``first_offset..last_offset``); the rows now decided."""
        self.next_offset = max(self.next_offset, last_offset + 1)
        chunk = _Chunk(decoded.records, first_offset, last_offset)
        batches = decoded.batches
        rule = self.committed
        if rule is None:  # read_uncommitted: every data row; control batches have none
            chunk.views.append(BatchView(first_offset, last_offset, -1, False, None, range(chunk.records.num_rows), chunk, DELIVER))
            if self.report_skipped and batches.num_rows:
                controls = batches.filter(pc.greater_equal(batches.column("control"), 0))
                for base, last in zip(controls.column("base_offset").to_pylist(), controls.column("last_offset").to_pylist(), strict=True):
                    self._control(BatchView(base, last, -1, False, ControlRecordType.COMMIT, range(0), chunk))
            self._chunks.append(chunk)
            return self._ready()
        special = batches.num_rows and (pc.any(batches.column("transactional")).as_py() or pc.max(batches.column("control")).as_py() >= 0)
        if not special and last_offset < self.end and (rule.stable_end is None or self._last_base(batches) < rule.stable_end):
            # the fast path: plain batches below the stable end, decided together by one push
            chunk.views.append(BatchView(first_offset, last_offset, -1, False, None, range(chunk.records.num_rows), chunk))
            chunk.pending = 1
            self._chunks.append(chunk)
            self._decided(rule.push_decisions(chunk.views[0]))  # type: ignore[arg-type]
            return self._ready()
        columns = [batches.column(name).to_pylist() for name in ("base_offset", "last_offset", "producer_id", "transactional", "control", "row_start", "row_count")]
        self._chunks.append(chunk)
        for base, last, producer, transactional, control, row_start, row_count in zip(*columns, strict=True):
            view = BatchView(base, last, producer, transactional, None if control < 0 else ControlRecordType(control), range(row_start, row_start + row_count), chunk)
            if view.control is None:
                chunk.views.append(view)
            if base >= self.end:  # past the read: only its marker matters
                view.reason = OUTSIDE
                rule.look_ahead(view)  # type: ignore[arg-type]
                self._decided(rule.take_released())
                continue
            chunk.pending += 1
            self._decided(rule.push_decisions(view))  # type: ignore[arg-type]
        return self._ready()

    def look_ahead(self, batch: Any) -> None:
        """A batch past the read (``remote_read.DecodedBatch`` without records), read for its marker only."""
        if self.committed is not None:
            self.committed.look_ahead(batch)
            self._decided(self.committed.take_released())

    def finish(self) -> list[pa.RecordBatch]:
        """End of the read: what the rule still holds is undecided (counted in ``undecided_records``,
        ``first_undecided``: where a read_committed reader stands, the remote analogue of Kafka's
        LSO), also a non-transactional batch behind an open transaction; the remaining rows are returned."""
        if self.committed is not None:
            self._decided(self.committed.take_released())
            # what drain returns was held behind an open transaction (or the stable end): a fate of
            # DELIVER there is still not delivered (nothing after an undecided record is; Kafka's LSO)
            self._decided((batch, Fate.UNDECIDED if fate is Fate.DELIVER else fate) for batch, fate in self.committed.drain())
        out = self._ready()
        if self._chunks:  # cannot happen: drain decides everything
            raise RuntimeError(f"{len(self._chunks)} decoded ranges left undecided after drain")
        return out

    # -- internals ------------------------------------------------------------------------------
    @staticmethod
    def _last_base(batches: pa.RecordBatch) -> int:
        return int(batches.column("base_offset")[batches.num_rows - 1].as_py()) if batches.num_rows else -1

    def _control(self, view: BatchView) -> None:
        if self.report_skipped:
            lo, hi = max(self.start, view.base_offset), min(self.end, view.last_offset + 1)
            if lo < hi:
                view.chunk.controls.append((lo, hi))

    def _decided(self, decisions: Iterable[tuple[Any, Fate]]) -> None:
        for view, fate in decisions:
            view.chunk.pending -= 1
            if fate is Fate.CONTROL:
                self._control(view)
                continue
            view.reason = _FATE_REASON[fate]
            if fate is Fate.UNDECIDED:
                self._count_undecided(view)

    def _count_undecided(self, view: BatchView) -> None:
        rows = view.chunk.records.column("offset").slice(view.records.start, len(view.records))
        inside = rows if self.start <= view.base_offset and view.last_offset < self.end else rows.filter(self._bounds(rows))
        if len(inside):
            self.undecided_records += len(inside)
            first = inside[0].as_py()
            self.first_undecided = first if self.first_undecided is None else min(self.first_undecided, first)

    def _bounds(self, offsets: pa.Array) -> pa.Array:
        return pc.and_(pc.greater_equal(offsets, self.start), pc.less(offsets, self.end))

    def _ready(self) -> list[pa.RecordBatch]:
        out = []
        chunks = self._chunks
        while chunks and chunks[0].pending == 0:
            out.extend(self._rows(chunks.popleft()))
        return out

    def _rows(self, chunk: _Chunk) -> list[pa.RecordBatch]:
        """The chunk's rows by reason: delivered ones (and, reporting, skipped ones), in bounds."""
        records = chunk.records
        out: list[pa.RecordBatch] = []
        run_ends: list[int] = []
        values: list[int] = []
        for view in chunk.views:
            if not view.records:
                continue
            if values and values[-1] == view.reason:
                run_ends[-1] = view.records.stop
            else:
                run_ends.append(view.records.stop)
                values.append(view.reason)
        if run_ends and run_ends[-1] != records.num_rows:
            raise CorruptRecordError(f"the decoder's batch table covers {run_ends[-1]} of {records.num_rows} rows", position=0)
        inside = chunk.first_offset >= self.start and chunk.last_offset < self.end
        keep_reasons = (DELIVER, ABORTED, UNDECIDED) if self.report_skipped else (DELIVER,)
        if records.num_rows:
            if values == [DELIVER]:  # every row delivered (the fast path)
                selected = records if inside else records.filter(self._bounds(records.column("offset")))
                if self.report_skipped:
                    selected = pa.RecordBatch.from_arrays([*selected.columns, pa.nulls(selected.num_rows, pa.string())],
                                                          schema=_nullable(selected.schema).append(pa.field("skipped", pa.string())))
            else:
                ree = pa.RunEndEncodedArray.from_arrays(pa.array(run_ends, pa.int32()), pa.array(values, pa.int8()))
                reasons = pc.run_end_decode(ree)
                keep = pc.is_in(reasons, pa.array(keep_reasons, pa.int8()))
                if not inside:
                    keep = pc.and_(keep, self._bounds(records.column("offset")))
                selected = records.filter(keep)
                if self.report_skipped:
                    kept_reasons = reasons.filter(keep)
                    selected = _null_skipped(selected, pc.equal(kept_reasons, DELIVER)).append_column("skipped", _SKIPPED_NAMES.take(kept_reasons))
            if selected.num_rows:
                out.append(selected)
        if chunk.controls:  # reporting: the markers' rows, merged in offset order
            out.append(_control_rows(records.schema, chunk.controls))
            merged = pa.Table.from_batches(out).combine_chunks()
            out = merged.take(pc.sort_indices(merged.column("offset"))).to_batches()
        return out


def _null_skipped(records: pa.RecordBatch, delivered: pa.Array) -> pa.RecordBatch:
    """Rows not delivered keep their offset only (and timestamp_type -1)."""
    columns = []
    for field, column in zip(records.schema, records.columns, strict=True):
        if field.name == "offset":
            columns.append(column)
        elif field.name == "timestamp_type":
            columns.append(pc.if_else(delivered, column, pa.scalar(-1, field.type)))
        else:
            columns.append(pc.if_else(delivered, column, pa.scalar(None, field.type)))
    return pa.RecordBatch.from_arrays(columns, schema=_nullable(records.schema))


def _nullable(schema: pa.Schema) -> pa.Schema:
    return pa.schema([field.with_nullable(True) for field in schema])


def _control_rows(schema: pa.Schema, ranges: list[tuple[int, int]]) -> pa.RecordBatch:
    offsets = pa.array([o for lo, hi in ranges for o in range(lo, hi)], pa.int64())
    n = len(offsets)
    columns = []
    for field in schema:
        if field.name == "offset":
            columns.append(offsets)
        elif field.name == "timestamp_type":
            columns.append(pa.repeat(pa.scalar(-1, field.type), n))
        else:
            columns.append(pa.nulls(n, field.type))
    columns.append(pa.repeat(pa.scalar("control", pa.string()), n))
    return pa.RecordBatch.from_arrays(columns, schema=_nullable(schema).append(pa.field("skipped", pa.string())))


def read_on_for_markers(
    client: GatewayClient, topic: str, partition: int, offset: int, selector: ColumnarSelector, *, max_bytes: int | None, plan_bytes: int = LOOKAHEAD_BYTES
) -> None:
    """Read on from ``offset`` for markers only while the selector's rule holds an open transaction
    (``read_on.read_on_for_markers``: its walk and budget; ``max_bytes`` None: until decided).
    Remote storage ending first leaves what is open undecided."""
    rule = selector.committed
    if rule is None or not rule.undecided:
        return

    def plan(at: int, ask: int) -> Step[PlannedRange] | None:
        try:
            found = client.plan(topic, partition, at, ask)
        except OffsetNotRemoteError as err:
            if err.past_the_end:
                return None  # remote storage ends: what is open stays undecided
            raise
        return Step(found.ranges, found.next_offset)

    def read(planned: PlannedRange) -> Iterable[DecodedBatch]:
        data = fetch_range(client, topic, partition, planned)
        return (decode_batch(batch, with_records=False) for batch in iter_batches(data, position=planned.start))

    read_on.read_on_for_markers(rule, offset, plan, read, budget=max_bytes, plan_bytes=plan_bytes, look_ahead=selector.look_ahead)


def finish_read(client: GatewayClient, topic: str, partition: int, selector: ColumnarSelector) -> list[pa.RecordBatch]:
    """End of a read of ``topic``-``partition`` (module doc): read on for markers while the rule
    holds an open transaction (``read_on.read_on_budget``: unbounded with the stable end known, else ``LOOKAHEAD_MAX_BYTES``),
    then ``selector.finish()``; what is held back (``selector.undecided_records`` from
    ``selector.first_undecided``) is logged once, as a warning. The remaining rows are returned."""
    rule = selector.committed
    if rule is not None and rule.undecided:
        read_on_for_markers(client, topic, partition, selector.next_offset, selector, max_bytes=read_on_budget(rule.stable_end, resumable=False))
    out = selector.finish()
    if selector.undecided_records and selector.first_undecided is not None:
        log.warning(
            "%s-%d: read_committed stopped at offset %d: %d records from there on are held back (a transaction there or "
            "before is still open in remote storage: at or past its last stable offset, or its marker is not uploaded yet)",
            topic, partition, selector.first_undecided, selector.undecided_records,
        )
    return out
