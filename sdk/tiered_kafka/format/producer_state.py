"""Producer state of one partition: idempotence, fencing and open transactions (Java
``ProducerStateManager``, ``ProducerAppendInfo``, ``ProducerStateEntry``; KIP-98, KIP-360).

Per producer id the log keeps its epoch, its last few data batches (sequence range and offsets, for
duplicate detection), the coordinator epoch of its last marker, and the first offset of its open
transaction. The rules, checked per batch of an append before anything is written:

Epoch (``checkProducerEpoch``): a batch whose producer epoch is below the producer's current epoch
    is refused with INVALID_PRODUCER_EPOCH (a zombie of a fenced producer).
Sequence (``checkSequence``, producer appends only): with the same epoch, the batch's first sequence
    must follow the last one (``last + 1``, wrapping after 2**31 - 1); with a new epoch it must be 0.
    A producer the log has no epoch for may start anywhere. Else OUT_OF_ORDER_SEQUENCE_NUMBER.
Duplicates (``findDuplicateBatch``): a batch whose epoch and sequence range equal one of the
    producer's last 5 batches is not written again; the append answers that batch's offsets.
Transactions (``appendDataBatch``): the first transactional batch of a producer opens its
    transaction at the batch's base offset; a non-transactional batch while one is open is refused
    with INVALID_TXN_STATE.
Markers (``appendEndTxnMarker``): a COMMIT/ABORT closes the producer's open transaction (a marker
    without one closes nothing); a coordinator epoch below the producer's last one is refused with
    TRANSACTION_COORDINATOR_FENCED.

Last stable offset (``firstUnstableOffset``): the first offset of the earliest open transaction, else
the high watermark. When a transaction completes, the LSO recorded in the ``.txnindex`` is that of
the earliest transaction of *another* producer still open, else the marker's offset + 1
(``lastStableOffset(completedTxn)``), computed before the completed transaction is removed.

Appends from a producer (``AppendOrigin.CLIENT``) get every check; the coordinator's markers
(``COORDINATOR``) the epoch and coordinator epoch checks; ``REPLICATION`` (replaying a log already
written, recovery) none. Producer ids never expire here (Kafka: ``producer.id.expiration.ms``).
"""

from __future__ import annotations

import collections
import enum
from collections.abc import Iterable
from dataclasses import dataclass, field

from tiered_kafka.errors import AppendRefusedError
from tiered_kafka.format import txn_marker
from tiered_kafka.format.producer_snapshot import ProducerSnapshotEntry
from tiered_kafka.format.record_batch import NO_PRODUCER_ID, ControlRecordType, RecordBatch

NO_EPOCH = -1
NO_SEQUENCE = -1
MAX_SEQUENCE = 2**31 - 1
#: Kafka's ProducerStateEntry.NUM_BATCHES_TO_RETAIN: the batches kept for duplicate detection.
BATCHES_TO_RETAIN = 5


class AppendOrigin(enum.Enum):
    """Who appends (Java ``AppendOrigin``): decides which producer-state checks apply."""

    CLIENT = "client"
    COORDINATOR = "coordinator"
    REPLICATION = "replication"


@dataclass(frozen=True, slots=True)
class BatchMetadata:
    """A data batch remembered for duplicate detection (Java ``BatchMetadata``)."""

    last_seq: int
    last_offset: int
    offset_delta: int
    timestamp: int

    @property
    def first_seq(self) -> int:
        return _increment(self.last_seq, -self.offset_delta)

    @property
    def first_offset(self) -> int:
        return self.last_offset - self.offset_delta


@dataclass(slots=True)
class ProducerEntry:
    """One producer's state (Java ``ProducerStateEntry``)."""

    producer_id: int
    epoch: int = NO_EPOCH
    coordinator_epoch: int = -1
    last_timestamp: int = -1
    current_txn_first_offset: int | None = None
    batches: collections.deque[BatchMetadata] = field(default_factory=lambda: collections.deque(maxlen=BATCHES_TO_RETAIN))

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else NO_SEQUENCE

    def copy(self) -> ProducerEntry:
        batches = collections.deque(self.batches, maxlen=BATCHES_TO_RETAIN)
        return ProducerEntry(self.producer_id, self.epoch, self.coordinator_epoch, self.last_timestamp, self.current_txn_first_offset, batches)

    def _set_epoch(self, epoch: int) -> None:
        if epoch != self.epoch:
            self.batches.clear()
            self.epoch = epoch

    def to_snapshot(self) -> ProducerSnapshotEntry:
        last = self.batches[-1] if self.batches else None
        return ProducerSnapshotEntry(
            self.producer_id,
            self.epoch,
            last.last_seq if last else NO_SEQUENCE,
            last.last_offset if last else -1,
            last.offset_delta if last else 0,
            self.last_timestamp,
            self.coordinator_epoch,
            -1 if self.current_txn_first_offset is None else self.current_txn_first_offset,
        )

    @classmethod
    def from_snapshot(cls, e: ProducerSnapshotEntry) -> ProducerEntry:
        entry = cls(e.producer_id, e.epoch, e.coordinator_epoch, e.timestamp, e.current_txn_first_offset if e.current_txn_first_offset >= 0 else None)
        if e.last_offset >= 0:
            entry.batches.append(BatchMetadata(e.last_sequence, e.last_offset, e.offset_delta, e.timestamp))
        return entry


@dataclass(frozen=True, slots=True)
class CompletedTxn:
    """A transaction closed by a marker in this partition (Java ``CompletedTxn``)."""

    producer_id: int
    first_offset: int
    last_offset: int
    is_aborted: bool


@dataclass(frozen=True, slots=True)
class StartedTxn:
    """A transaction opened by a batch of this append: its producer and first offset."""

    producer_id: int
    first_offset: int


@dataclass(slots=True)
class PendingAppend:
    """The producer-state changes of one validated append, applied once its bytes are written.

    ``txn_events`` keeps the transactions opened and closed in batch order: one append may hold a
    producer's marker and then the first batch of its next transaction, and the open set (hence
    the LSO) depends on applying them in that order.
    """

    updated: dict[int, ProducerEntry] = field(default_factory=dict)
    txn_events: list[StartedTxn | CompletedTxn] = field(default_factory=list)
    duplicate: BatchMetadata | None = None


class ProducerStateManager:
    """The producer state of one partition (see the module docstring)."""

    def __init__(self) -> None:
        self.entries: dict[int, ProducerEntry] = {}
        self.ongoing: dict[int, int] = {}  # producer id -> first offset of its open transaction

    @classmethod
    def from_snapshot(cls, entries: Iterable[ProducerSnapshotEntry]) -> ProducerStateManager:
        state = cls()
        for e in entries:
            entry = ProducerEntry.from_snapshot(e)
            state.entries[entry.producer_id] = entry
            if entry.current_txn_first_offset is not None:
                state.ongoing[entry.producer_id] = entry.current_txn_first_offset
        return state

    def snapshot(self) -> list[ProducerSnapshotEntry]:
        return [entry.to_snapshot() for entry in self.entries.values()]

    # -- the last stable offset ------------------------------------------------------------
    def first_unstable_offset(self) -> int | None:
        """First offset of the earliest open transaction, None when none is open."""
        return min(self.ongoing.values(), default=None)

    def last_stable_offset(self, completed: CompletedTxn) -> int:
        """The LSO once ``completed`` is done (Java ``lastStableOffset(completedTxn)``)."""
        others = [first for pid, first in self.ongoing.items() if pid != completed.producer_id]
        return min(others) if others else completed.last_offset + 1

    # -- appends ---------------------------------------------------------------------------
    def prepare(self, batches: Iterable[RecordBatch], origin: AppendOrigin) -> PendingAppend:
        """Validate ``batches`` (offsets already assigned) against the state; nothing changes yet.

        Raises AppendRefusedError naming Kafka's error. A duplicate of a recent batch of a producer
        (CLIENT origin) comes back as ``PendingAppend.duplicate`` and nothing must be written.
        """
        pending = PendingAppend()
        for batch in batches:
            pid = batch.producer_id
            if pid == NO_PRODUCER_ID:
                continue
            if origin is AppendOrigin.CLIENT and not batch.is_control:
                duplicate = self._find_duplicate(batch)
                if duplicate is not None:
                    return PendingAppend(duplicate=duplicate)
            current = self.entries.get(pid)
            entry = pending.updated.get(pid) or (current.copy() if current else ProducerEntry(pid))
            self._check_epoch(entry, batch, origin)
            if batch.is_control:
                self._append_marker(entry, batch, origin, pending)
            else:
                if origin is AppendOrigin.CLIENT:
                    self._check_sequence(entry, current, batch)
                self._append_data(entry, batch, origin, pending)
            pending.updated[pid] = entry
        return pending

    def apply(self, pending: PendingAppend) -> list[tuple[CompletedTxn, int]]:
        """Make a written append's changes current; returns each completed transaction with the LSO
        to record for it, computed before it leaves the open set (Kafka's order). Openings and
        completions are applied batch by batch, in the append's order."""
        self.entries.update(pending.updated)
        done = []
        for event in pending.txn_events:
            if isinstance(event, StartedTxn):
                self.ongoing[event.producer_id] = event.first_offset
            else:
                done.append((event, self.last_stable_offset(event)))
                self.ongoing.pop(event.producer_id, None)
        return done

    def _find_duplicate(self, batch: RecordBatch) -> BatchMetadata | None:
        entry = self.entries.get(batch.producer_id)
        if entry is None or entry.epoch != batch.producer_epoch:
            return None
        first, last = batch.base_sequence, _last_sequence(batch)
        return next((b for b in entry.batches if b.first_seq == first and b.last_seq == last), None)

    @staticmethod
    def _check_epoch(entry: ProducerEntry, batch: RecordBatch, origin: AppendOrigin) -> None:
        if batch.producer_epoch < entry.epoch and origin is not AppendOrigin.REPLICATION:
            raise AppendRefusedError(
                "invalid_producer_epoch",
                f"producer {entry.producer_id} epoch {batch.producer_epoch} at offset {batch.base_offset} "
                f"is older than its current epoch {entry.epoch}",
            )

    @staticmethod
    def _check_sequence(entry: ProducerEntry, current: ProducerEntry | None, batch: RecordBatch) -> None:
        first_seq = batch.base_sequence
        if batch.producer_epoch != entry.epoch:
            ok = first_seq == 0 or entry.epoch == NO_EPOCH
            expected = "0 for a new epoch"
        else:
            last = entry.last_seq
            ok = current is None or current.epoch == NO_EPOCH or first_seq == last + 1 or (first_seq == 0 and last == MAX_SEQUENCE)
            expected = str(_increment(last, 1))
        if not ok:
            raise AppendRefusedError(
                "out_of_order_sequence_number",
                f"producer {entry.producer_id} epoch {batch.producer_epoch}: sequence {first_seq} at offset "
                f"{batch.base_offset}, expected {expected}",
            )

    @staticmethod
    def _append_data(entry: ProducerEntry, batch: RecordBatch, origin: AppendOrigin, pending: PendingAppend) -> None:
        entry._set_epoch(batch.producer_epoch)
        entry.batches.append(BatchMetadata(_last_sequence(batch), batch.last_offset, batch.last_offset - batch.base_offset, batch.max_timestamp))
        entry.last_timestamp = batch.max_timestamp
        if entry.current_txn_first_offset is not None and not batch.is_transactional:
            if origin is not AppendOrigin.REPLICATION:
                raise AppendRefusedError(
                    "invalid_txn_state",
                    f"producer {entry.producer_id} wrote a non-transactional batch at offset {batch.base_offset} "
                    f"inside its open transaction (first offset {entry.current_txn_first_offset})",
                )
        elif entry.current_txn_first_offset is None and batch.is_transactional:
            entry.current_txn_first_offset = batch.base_offset
            pending.txn_events.append(StartedTxn(entry.producer_id, batch.base_offset))

    @staticmethod
    def _append_marker(entry: ProducerEntry, batch: RecordBatch, origin: AppendOrigin, pending: PendingAppend) -> None:
        marker = txn_marker.parse(batch)
        if origin is not AppendOrigin.REPLICATION and marker.coordinator_epoch < entry.coordinator_epoch:
            raise AppendRefusedError(
                "transaction_coordinator_fenced",
                f"marker for producer {entry.producer_id} has coordinator epoch {marker.coordinator_epoch}, "
                f"below its last {entry.coordinator_epoch}",
            )
        if entry.current_txn_first_offset is not None:
            aborted = marker.control_type == ControlRecordType.ABORT
            pending.txn_events.append(CompletedTxn(entry.producer_id, entry.current_txn_first_offset, batch.base_offset, aborted))
        entry._set_epoch(batch.producer_epoch)
        entry.current_txn_first_offset = None
        entry.coordinator_epoch = marker.coordinator_epoch
        entry.last_timestamp = batch.max_timestamp


def _increment(sequence: int, increment: int) -> int:
    """Kafka's ``DefaultRecordBatch.incrementSequence``: sequences wrap from 2**31 - 1 to 0."""
    return (sequence + increment) % (MAX_SEQUENCE + 1)


def _last_sequence(batch: RecordBatch) -> int:
    if batch.base_sequence == NO_SEQUENCE:
        return NO_SEQUENCE
    return _increment(batch.base_sequence, batch.last_offset - batch.base_offset)
