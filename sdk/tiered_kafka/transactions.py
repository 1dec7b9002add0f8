"""read_committed: which records of a partition a read_committed reader sees (KIP-98), in one place.

Every reader of remote data calls this module: the gateway's records endpoint and offsets for a
timestamp, ``TieredConsumer`` (and so the CLI), and the Spark source and its backfill.

**The rule** (Kafka's ``isolation.level=read_committed``):

1. A record of a *transactional* batch (``RecordBatch.isTransactional``) of producer P belongs to
   the transaction that P's next control batch after it ends (the *transaction marker*, written
   by the coordinator's ``WriteTxnMarkers``): a COMMIT marker delivers the transaction's records,
   an ABORT marker drops them.
2. Control records (``RecordBatch.isControlBatch``: the markers themselves) are never delivered.
3. Non-transactional records are always delivered.
4. Order is kept and nothing undecided is delivered: a read_committed fetch returns nothing at or
   past the partition's *last stable offset* (LSO), the first offset of the earliest transaction
   still open. Here the remote analogue: a transactional record whose marker is not (yet) in the
   data read is *undecided*; it and every record after it wait, so a non-transactional record
   behind an open transaction waits too.

**Two ways to know a transaction's fate**, and this module takes both:

- *Markers in order* (a streaming reader: ``TieredConsumer`` reading ranges, a Spark task): P's
  marker decides every held batch of P before it.
- *Aborted transactions known in advance*: the ``.txnindex`` entries (``format.txn_index.AbortedTxn``:
  producer id, first offset, last offset = the ABORT marker's offset) of the segments read, as a
  broker sends them in a Fetch response's ``AbortedTransactions`` list. This follows Kafka's
  consumer (Java ``CompletedFetch.nextFetchedRecord``/``consumeAbortedTransactionsUpTo``, librdkafka
  ``rd_kafka_aborted_txns``): aborted transactions are kept sorted by first offset; before a batch
  of producer P whose last offset is at or past an aborted transaction's first offset is handled,
  that transaction's producer becomes *aborting*; a transactional batch of an aborting producer is
  dropped; P's ABORT marker ends it. Such a batch is decided at once, without waiting for the
  marker. A batch no entry aborts still needs its COMMIT marker, in the
  data read or read ahead (a Kafka broker only sends data below the LSO, so its consumer never
  waits; the remote LSO below only bounds what is delivered, it does not decide a batch).
- *Look-ahead*: a reader whose window ends with undecided records reads on for markers only
  (``look_ahead``); a marker seen there decides the held batches of its producer before it, and
  batches pushed later (a look-ahead marker decides them as if it had been pushed).
  How far every reader reads on, and how, is one rule in one module: ``tiered_kafka.read_on``.

Both inputs give the same answer on a well-formed log (a property test checks the streaming and
the index-driven paths against a reference model on random interleavings of producers).

**API**: ``CommittedFilter(aborted=...)`` for one partition, read from some offset in offset order.

- ``push(batch) -> records`` (every batch read, control ones included, in offset order): the
  records now decided and delivered, in offset order;
- ``push_decisions(batch) -> [(batch, Fate)]``: the same, batch by batch, with the fate of each
  (for readers that count what they drop, e.g. the backfill);
- ``add_aborted(entries)``: ``.txnindex`` entries, at any time (held batches they cover are
  dropped at once);
- ``look_ahead(batch)``: a batch past the data delivered, read only for its marker;
- ``first_held_offset``: the first offset still held (the remote LSO of this read: a cursor reader
  resumes, or hands over to Kafka, there); ``undecided``: whether a held transaction is still open;
- ``drain()``: at the end of a bounded read, every held batch with its fate, ``Fate.UNDECIDED`` for
  a transaction still open.

Records are counted as they are decided: ``delivered_records``, ``aborted_records``,
``control_records`` (the batches' record counts; a compacted batch may hold fewer records than
its offset range).

**The remote last stable offset** (``remote_last_stable_offset``): a read that starts at offset S
only knows the transactions whose records or markers it reads, so a transaction opened before S
and still open would not hold back the records at and after S, while a broker's LSO does. The
registry closes that: each segment entry records ``open_txn_first_offset``, the smallest
``currentTxnFirstOffset`` of Kafka's producer snapshot taken at the segment's end (Java
``ProducerStateManager.writeSnapshot`` at roll; the agent ships it with the segment and
cross-checks it with the batches). The remote LSO of a partition is that value for its *last*
registered segment when a transaction is open there, else (none open) the end of remote data
(last offset + 1): exactly what a broker's LSO would be if its log ended where remote storage
ends. Every remote reader under read_committed delivers nothing at or past it, from whatever
offset it starts: ``CommittedFilter(stable_end=...)`` holds every batch whose base offset is at or
past it (``set_stable_end`` raises it as more segments are uploaded; held batches then go through
the rule above). The LSO only grows as segments are added (a new segment's open transactions
began at or after the previous LSO, or were already open), so a reader may use a value read
earlier: it is then only more conservative. When the last segment's value is unknown (no
snapshot, e.g. a broker before 0.11 or a bucket written by Pinterest's uploader, a snapshot
contradicting the batches, an entry from before the field) the remote LSO is unknown (None) and
readers keep the behaviour without it: a transaction opened before S and still open does not hold
back the records at and after S. Those records are final either way (non-transactional, or
decided by their own markers); only when they are delivered differs, never whether.
"""

from __future__ import annotations

import bisect
import enum
from collections import deque
from collections.abc import Iterable
from typing import Any, Final, Generic, Protocol, TypeVar

from tiered_kafka.format.record_batch import ControlRecordType
from tiered_kafka.format.txn_index import AbortedTxn

R = TypeVar("R")

NO_PRODUCER_ID = -1
NO_OPEN_TXN: Final = -1
"""``open_txn_first_offset`` (a segment's producer snapshot, registry and ``tk-`` metadata): no transaction is open at its end."""
OPEN_TXN_UNKNOWN: Final = -2
"""``open_txn_first_offset``: unknown (no producer snapshot, a snapshot contradicting the batches, an old entry)."""


class BatchLike(Protocol[R]):  # type: ignore[misc]
    """What the rule needs of a batch (``remote_read.DecodedBatch`` has it; records may be any type)."""

    base_offset: int
    last_offset: int
    producer_id: int
    transactional: bool
    control: ControlRecordType | None
    records: list[R]


class Fate(enum.Enum):
    """What read_committed does with a batch."""

    DELIVER = "deliver"  # non-transactional, or its transaction committed
    ABORTED = "aborted"  # its transaction was aborted: dropped
    CONTROL = "control"  # a marker: never delivered
    UNDECIDED = "undecided"  # its transaction's marker is not in the data read (only from drain())


def remote_last_stable_offset(last_segment_last_offset: int, open_txn_first_offset: int) -> int | None:
    """The remote LSO (module doc) from the partition's last registered segment: its
    ``open_txn_first_offset`` when a transaction is open there, ``last_segment_last_offset + 1``
    when none is (``NO_OPEN_TXN``), None when unknown (any other value: ``OPEN_TXN_UNKNOWN``).

    >>> remote_last_stable_offset(99, 40), remote_last_stable_offset(99, -1), remote_last_stable_offset(99, -2)
    (40, 100, None)
    """
    if open_txn_first_offset >= 0:
        return min(open_txn_first_offset, last_segment_last_offset + 1)
    if open_txn_first_offset == NO_OPEN_TXN:
        return last_segment_last_offset + 1
    return None


def decided_by(segment_last_offset: int, open_txn_first_offset: int, last: int) -> bool:
    """Whether every transaction with a record at or below ``last`` has its marker (COMMIT or ABORT)
    at or before the end of a segment (its ``last_offset`` and ``open_txn_first_offset``): the
    segment reaches ``last`` and no transaction still open after it began at or below ``last``. A
    reader listing the aborted transactions over offsets up to ``last`` (Kafka's Fetch answer) reads
    the ``.txnindex`` of segments up to the first such one and no further; unknown
    (``OPEN_TXN_UNKNOWN``) proves nothing.

    >>> decided_by(99, -1, 50), decided_by(99, 60, 50), decided_by(99, 40, 50), decided_by(99, -2, 50), decided_by(40, -1, 50)
    (True, True, False, False, False)
    """
    if segment_last_offset < last or open_txn_first_offset == OPEN_TXN_UNKNOWN:
        return False
    return open_txn_first_offset == NO_OPEN_TXN or open_txn_first_offset > last


_MARKER_FATE = {ControlRecordType.COMMIT: Fate.DELIVER, ControlRecordType.ABORT: Fate.ABORTED}


class _Held:
    __slots__ = ("batch", "fate")

    def __init__(self, batch: Any, fate: Fate | None) -> None:
        self.batch = batch
        self.fate = fate  # None while undecided


class CommittedFilter(Generic[R]):
    """The rule of the module doc for one partition read in offset order (not thread-safe)."""

    def __init__(self, aborted: Iterable[AbortedTxn] = (), *, stable_end: int | None = None) -> None:
        """``stable_end``: the remote LSO (``remote_last_stable_offset``); None: unknown, no limit."""
        self._stable_end = stable_end
        self._beyond: deque[Any] = deque()  # batches pushed at or past stable_end, in offset order, not yet ruled on
        self._held: deque[_Held] = deque()
        self._open: dict[int, list[_Held]] = {}  # producer id -> its undecided held batches
        self._pending: list[tuple[int, int, int]] = []  # aborted txns not reached yet: (first, last, producer), sorted
        self._known: set[tuple[int, int]] = set()  # (producer, last offset) of every entry added
        self._aborting: dict[int, int] = {}  # producer -> last offset (ABORT marker) of its aborted txn in progress
        self._ahead: dict[int, list[tuple[int, ControlRecordType]]] = {}  # markers seen by look_ahead, per producer
        self._position = -1  # one past the last offset pushed
        self._released: list[tuple[Any, Fate]] = []  # decided outside push (add_aborted, look_ahead)
        self.delivered_records = 0
        self.aborted_records = 0
        self.control_records = 0
        if aborted:
            self.add_aborted(aborted)

    # -- state ---------------------------------------------------------------------------------
    @property
    def first_held_offset(self) -> int | None:
        """The first offset still held (behind an undecided transaction, or at or past the
        stable end), or None when nothing is."""
        if self._held:
            return self._held[0].batch.base_offset
        return self._beyond[0].base_offset if self._beyond else None

    @property
    def stable_end(self) -> int | None:
        return self._stable_end

    def set_stable_end(self, stable_end: int | None) -> None:
        """A new remote LSO (None: unknown, no limit). It never moves back: a smaller value is
        ignored. Batches held at or past the old one and below the new one go through the rule
        (decided ones are returned by the next push, or ``take_released``)."""
        if stable_end is not None and self._stable_end is not None and stable_end <= self._stable_end:
            return
        self._stable_end = stable_end
        beyond = self._beyond
        while beyond and (stable_end is None or beyond[0].base_offset < stable_end):
            self._released.extend(self._rule(beyond.popleft()))

    @property
    def undecided(self) -> bool:
        """True while some held transactional batch has no fate yet."""
        return bool(self._open)

    # -- inputs --------------------------------------------------------------------------------
    def add_aborted(self, entries: Iterable[AbortedTxn]) -> None:
        """Aborted transactions (``.txnindex`` entries); duplicates are ignored.

        A held batch an entry covers is dropped now; an entry starting past what was pushed waits
        for its first offset (Kafka's sorted aborted-transactions queue)."""
        changed = False
        for entry in entries:
            key = (entry.producer_id, entry.last_offset)
            if key in self._known:
                continue
            self._known.add(key)
            if entry.first_offset < self._position:
                changed |= self._decide(entry.producer_id, entry.last_offset, Fate.ABORTED, entry.first_offset)
                if entry.last_offset >= self._position:
                    self._aborting[entry.producer_id] = entry.last_offset
            else:
                bisect.insort(self._pending, (entry.first_offset, entry.last_offset, entry.producer_id))
        if changed:
            self._stash(self._release())

    def look_ahead(self, batch: BatchLike[Any]) -> None:
        """A batch past the data delivered, read for its marker only (data batches are ignored)."""
        if batch.control is None:
            return
        markers = self._ahead.setdefault(batch.producer_id, [])
        if not markers or markers[-1][0] < batch.base_offset:
            markers.append((batch.base_offset, batch.control))
        if self._decide(batch.producer_id, batch.base_offset, _MARKER_FATE[batch.control]):
            self._stash(self._release())

    def push(self, batch: BatchLike[R]) -> list[R]:
        """The next batch in offset order; returns the records now delivered, in offset order."""
        if (
            batch.control is None
            and not batch.transactional
            and not self._held
            and not self._released
            and (self._stable_end is None or batch.base_offset < self._stable_end)
        ):
            self._position = batch.last_offset + 1
            self.delivered_records += len(batch.records)
            return batch.records  # the common case: nothing waits
        out: list[R] = []
        for decided, fate in self.push_decisions(batch):
            if fate is Fate.DELIVER:
                out.extend(decided.records)
        return out

    def push_decisions(self, batch: BatchLike[R]) -> list[tuple[BatchLike[R], Fate]]:
        """Like ``push``: the batches now decided, in offset order, each with its fate (never UNDECIDED).
        A batch at or past the stable end is held, undecided, until ``set_stable_end`` passes it."""
        out = self._released
        self._released = []
        if self._beyond or (self._stable_end is not None and batch.base_offset >= self._stable_end):
            self._beyond.append(batch)
            return out
        out.extend(self._rule(batch))
        return out

    def _rule(self, batch: BatchLike[R]) -> list[tuple[BatchLike[R], Fate]]:
        """The rule for the next batch below the stable end: the batches it decides, in offset order."""
        out: list[tuple[BatchLike[R], Fate]] = []
        self._position = max(self._position, batch.last_offset + 1)
        producer = batch.producer_id
        if producer != NO_PRODUCER_ID and self._pending:
            self._consume_aborted_up_to(batch.last_offset)
        if batch.control is not None:
            fate = Fate.CONTROL
            if batch.control is ControlRecordType.ABORT:
                self._aborting.pop(producer, None)
            self._decide(producer, batch.base_offset, _MARKER_FATE[batch.control])
        elif not batch.transactional:
            fate = Fate.DELIVER
        elif producer in self._aborting and batch.base_offset < self._aborting[producer]:
            fate = Fate.ABORTED
        else:
            fate = self._fate_ahead(producer, batch.base_offset)  # type: ignore[assignment]
        held = _Held(batch, fate)
        if fate is None:
            self._open.setdefault(producer, []).append(held)
        if not self._held and fate is not None:
            self._count(batch, fate)
            out.append((batch, fate))
            return out
        self._held.append(held)
        out.extend(self._release())
        return out

    def drain(self) -> list[tuple[BatchLike[R], Fate]]:
        """End of a bounded read: every held batch in offset order, ``Fate.UNDECIDED`` for those whose
        transaction is still open or that are at or past the stable end (not counted as delivered
        or aborted; a control batch there is ``Fate.CONTROL``); the filter is empty after."""
        out = self._released
        self._released = []
        while self._held:
            held = self._held.popleft()
            if held.fate is None:
                out.append((held.batch, Fate.UNDECIDED))
            else:
                self._count(held.batch, held.fate)
                out.append((held.batch, held.fate))
        for batch in self._beyond:  # at or past the stable end: markers are still markers, the rest waits
            fate = Fate.UNDECIDED if batch.control is None else Fate.CONTROL
            if fate is Fate.CONTROL:
                self._count(batch, fate)
            out.append((batch, fate))
        self._beyond.clear()
        self._open.clear()
        return out

    # -- internals -----------------------------------------------------------------------------
    def _consume_aborted_up_to(self, offset: int) -> None:
        """Kafka's ``consumeAbortedTransactionsUpTo``: aborted txns starting at or before ``offset`` begin."""
        pending = self._pending
        i = 0
        while i < len(pending) and pending[i][0] <= offset:
            _first, last, producer = pending[i]
            self._aborting[producer] = last
            i += 1
        if i:
            del pending[:i]

    def _fate_ahead(self, producer: int, offset: int) -> Fate | None:
        markers = self._ahead.get(producer)
        if not markers:
            return None
        i = bisect.bisect_right(markers, (offset, ControlRecordType.COMMIT))
        return _MARKER_FATE[markers[i][1]] if i < len(markers) else None

    def _decide(self, producer: int, marker_offset: int, fate: Fate, first_offset: int = -1) -> bool:
        """Give ``fate`` to the undecided held batches of ``producer`` in [first_offset, marker_offset)."""
        waiting = self._open.get(producer)
        if not waiting:
            return False
        keep = []
        changed = False
        for held in waiting:
            if first_offset <= held.batch.base_offset < marker_offset:
                held.fate = fate
                changed = True
            else:
                keep.append(held)
        if keep:
            self._open[producer] = keep
        else:
            del self._open[producer]
        return changed

    def _release(self) -> list[tuple[Any, Fate]]:
        out = []
        held = self._held
        while held and held[0].fate is not None:
            first = held.popleft()
            self._count(first.batch, first.fate)  # type: ignore[arg-type]
            out.append((first.batch, first.fate))
        return out

    def _stash(self, decided: list[tuple[Any, Fate]]) -> None:
        """Batches decided outside ``push`` (by an index entry or a look-ahead marker): returned by the next push or drain."""
        self._released.extend(decided)

    def _count(self, batch: Any, fate: Fate) -> None:
        if fate is Fate.DELIVER:
            self.delivered_records += len(batch.records)
        elif fate is Fate.ABORTED:
            self.aborted_records += len(batch.records)
        elif fate is Fate.CONTROL:
            self.control_records += batch.last_offset - batch.base_offset + 1

    def take_released(self) -> list[tuple[BatchLike[R], Fate]]:
        """Batches decided by ``add_aborted`` or ``look_ahead`` since the last push (they are also
        returned by the next ``push``/``push_decisions``/``drain`` if not taken here)."""
        out = self._released
        self._released = []
        return out
