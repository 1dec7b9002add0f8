"""Transaction coordinator of the development broker (Kafka's ``TransactionCoordinator`` with
``TransactionMetadata``, KIP-98, KIP-360, KIP-588), for InitProducerId, AddPartitionsToTxn,
AddOffsetsToTxn, TxnOffsetCommit and EndTxn. It knows nothing of the wire protocol; the handlers in
``handlers_txn`` translate kio requests into calls here. Errors are kio ``ErrorCode`` members.

States and transitions (Kafka's ``TransactionState``)::

    Empty / CompleteCommit / CompleteAbort --AddPartitionsToTxn, AddOffsetsToTxn--> Ongoing
    Ongoing --EndTxn(commit)--> PrepareCommit --markers written--> CompleteCommit
    Ongoing --EndTxn(abort), timeout, InitProducerId--> PrepareAbort --markers written--> CompleteAbort

Rules followed:
- InitProducerId: a new transactional.id gets a fresh producer id at epoch 0; each later init bumps
  the epoch (fencing every older instance). An init while a transaction is Ongoing fences the epoch,
  aborts the transaction and answers CONCURRENT_TRANSACTIONS, so that the client retries and gets
  the epoch bumped again (Kafka's ``prepareFenceProducerEpoch``). With KIP-360's producer id and
  epoch (v3+), the epoch must be the current one (bumped) or the last one (a retry, not bumped),
  else PRODUCER_FENCED. An exhausted epoch (32766) gets a new producer id.
- Every other request needs the current producer id (else INVALID_PRODUCER_ID_MAPPING) and epoch
  (else PRODUCER_FENCED; the handlers answer INVALID_PRODUCER_EPOCH to versions older than KIP-588's).
- EndTxn moves the transaction to PrepareCommit/PrepareAbort (saved), then writes a COMMIT or ABORT
  marker into every partition of the transaction, as Kafka's WriteTxnMarkers does. Each partition
  whose marker is written, or which no longer exists, leaves the transaction (Kafka's
  ``TransactionMetadata.removePartition``); the transaction completes when none is left (and only
  then are its TxnOffsetCommit offsets committed). A marker the log refuses or cannot write
  (LogWriteError, AppendRefusedError included) keeps the transaction in its Prepare state:
  ``retry_markers`` (the periodic task) writes the missing ones again until they succeed, as
  Kafka's ``TransactionMarkerChannelManager`` retries WriteTxnMarkers. Meanwhile EndTxn answers
  CONCURRENT_TRANSACTIONS (what Kafka answers an EndTxn during PrepareCommit/PrepareAbort; both
  librdkafka and the Java client retry it) and tries the missing markers again on each retry, as
  InitProducerId does; once complete, a retry with the same result answers NONE. The other result,
  or an Empty transaction, gets INVALID_TXN_STATE. InitProducerId, AddPartitionsToTxn,
  AddOffsetsToTxn and TxnOffsetCommit get CONCURRENT_TRANSACTIONS too while markers are pending
  (Kafka's answers in a Prepare state).
- TxnOffsetCommit keeps the offsets pending; the commit marker makes them the group's committed
  offsets, an abort discards them (Kafka's ``GroupMetadataManager.handleTxnCompletion``).
- A transaction Ongoing longer than its timeout is aborted by ``abort_timed_out`` (Kafka's
  ``abortTimedOutTransactions``, run every transaction.abort.timed.out.transaction.cleanup.interval.ms):
  the epoch is bumped first, so the abandoned producer is fenced; its last epoch is remembered, so
  that it may recover through InitProducerId with KIP-360's producer id and epoch.

Deliberate differences from Kafka: one coordinator for every transactional.id (coordinator epoch 0);
markers are written before EndTxn answers NONE (Kafka answers once PrepareCommit is logged and
writes them asynchronously), so a client's successful commit means every marker is in its log;
transactional ids never expire.

State lives in memory and in ``{log.dir}/dev-broker-transactions.json`` (in Kafka: the compacted
``__transaction_state`` topic), rewritten atomically after every change and read once at startup::

    {"version": 1, "next_producer_id": 1042,
     "transactions": [{"transactional_id": "t", "producer_id": 1001, "producer_epoch": 3,
                       "last_producer_epoch": -1, "timeout_ms": 60000, "state": "Ongoing",
                       "txn_start_ms": 1700000000000, "partitions": [["topic", 0]], "groups": ["g"],
                       "pending_offsets": [{"group": "g", "topic": "t", "partition": 0, "offset": 42,
                                            "leader_epoch": -1, "metadata": ""}]}]}

Producer ids (idempotent ones too) come from ``allocate_producer_id``; ``next_producer_id`` is kept
in the file and never below the largest producer id found in the logs, so ids are never reused.
"""

from __future__ import annotations

import enum
import json
import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kio.schema.errors import ErrorCode

from tiered_kafka.errors import CorruptCheckpointError, LogWriteError
from tiered_kafka.format import txn_marker
from tiered_kafka.format.checkpoints import write_atomically
from tiered_kafka.format.record_batch import ControlRecordType
from tiered_kafka_dev.broker.offset_store import CommittedOffset

log = logging.getLogger(__name__)

TRANSACTIONS_FILE = "dev-broker-transactions.json"
FILE_FORMAT_VERSION = 1
FIRST_PRODUCER_ID = 1000
NO_EPOCH = -1
#: Kafka's TransactionMetadata.isEpochExhausted: Short.MaxValue - 1.
MAX_EPOCH = 2**15 - 2
COORDINATOR_EPOCH = 0
MARKER_LEADER_EPOCH = 0

TopicPartition = tuple[str, int]


class TxnState(enum.Enum):
    EMPTY = "Empty"
    ONGOING = "Ongoing"
    PREPARE_COMMIT = "PrepareCommit"
    PREPARE_ABORT = "PrepareAbort"
    COMPLETE_COMMIT = "CompleteCommit"
    COMPLETE_ABORT = "CompleteAbort"


PREPARE_STATES = (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT)
#: a marker that keeps failing is logged at WARNING on its first failure and every this many retries
MARKER_FAILURE_LOG_EVERY = 60


@dataclass
class TxnMetadata:
    """One transactional.id (Kafka's ``TransactionMetadata``)."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: TxnState = TxnState.EMPTY
    last_producer_epoch: int = NO_EPOCH
    txn_start_ms: int = -1
    partitions: set[TopicPartition] = field(default_factory=set)
    groups: set[str] = field(default_factory=set)
    pending_offsets: dict[str, dict[TopicPartition, CommittedOffset]] = field(default_factory=dict)


class TransactionCoordinator:
    """Kafka's transaction coordinator for every transactional.id of the development broker.

    ``write_marker(topic, partition, marker_bytes)`` appends a marker to a partition's log (False when
    the partition no longer exists); ``commit_offsets(group, offsets)`` makes committed transactional
    offsets the group's; ``clock`` returns epoch milliseconds.
    """

    def __init__(
        self,
        path: Path | None,
        *,
        write_marker: Callable[[str, int, bytes], bool],
        commit_offsets: Callable[[str, dict[TopicPartition, CommittedOffset]], None],
        min_producer_id: int = FIRST_PRODUCER_ID,
        max_timeout_ms: int = 900_000,
        clock: Callable[[], int] = lambda: time.time_ns() // 1_000_000,
    ) -> None:
        self._path = path
        self._write_marker = write_marker
        self._commit_offsets = commit_offsets
        self._max_timeout_ms = max_timeout_ms
        self._clock = clock
        self._txns: dict[str, TxnMetadata] = {}
        #: (transactional id, partition) -> consecutive failed attempts at writing its marker
        self._marker_failures: dict[tuple[str, TopicPartition], int] = {}
        self._next_producer_id = FIRST_PRODUCER_ID
        if path is not None and path.exists():
            self._load(path)
        self._next_producer_id = max(self._next_producer_id, min_producer_id)

    def recover(self) -> None:
        """Finish what a crash interrupted: a transaction saved in a Prepare state gets its markers
        (again: a marker closing no open transaction changes nothing), as Kafka's coordinator does
        when it loads ``__transaction_state``. Markers that still cannot be written are left to
        ``retry_markers``. Run it before the broker listens."""
        self.retry_markers()

    def retry_markers(self) -> list[str]:
        """Write the missing markers of every transaction in a Prepare state (the periodic task);
        returns the transactional ids that had markers pending."""
        pending = [t for t in self._txns.values() if t.state in PREPARE_STATES]
        for txn in pending:
            self._write_markers(txn)
        return [t.transactional_id for t in pending]

    def producer_ids(self) -> dict[str, tuple[int, int]]:
        """transactional.id -> (producer id, epoch), for tests and diagnostics."""
        return {t.transactional_id: (t.producer_id, t.producer_epoch) for t in self._txns.values()}

    def state(self, transactional_id: str) -> TxnState | None:
        txn = self._txns.get(transactional_id)
        return None if txn is None else txn.state

    # -- producer ids ----------------------------------------------------------------------
    def allocate_producer_id(self) -> int:
        producer_id = self._next_producer_id
        self._next_producer_id += 1
        self._save()
        return producer_id

    # -- InitProducerId --------------------------------------------------------------------
    def init_producer_id(self, transactional_id: str, timeout_ms: int, expected_id: int = -1, expected_epoch: int = NO_EPOCH) -> tuple[ErrorCode, int, int]:
        """(error, producer id, epoch) for InitProducerId with a transactional.id."""
        if not transactional_id:
            return ErrorCode.invalid_request, -1, -1
        if not 0 < timeout_ms <= self._max_timeout_ms:
            return ErrorCode.invalid_transaction_timeout, -1, -1
        txn = self._txns.get(transactional_id)
        if txn is None:
            txn = TxnMetadata(transactional_id, self.allocate_producer_id(), 0, timeout_ms)
            self._txns[transactional_id] = txn
            self._save()
            return ErrorCode.none, txn.producer_id, txn.producer_epoch
        if expected_id >= 0 and expected_id != txn.producer_id:
            return ErrorCode.producer_fenced, -1, -1
        if txn.state in PREPARE_STATES and not self._write_markers(txn):
            return ErrorCode.concurrent_transactions, -1, -1  # Kafka's answer while markers are pending
        if txn.state is TxnState.ONGOING:
            self._fence_and_abort(txn, "InitProducerId of a new instance")
            return ErrorCode.concurrent_transactions, -1, -1
        if expected_epoch != NO_EPOCH and expected_epoch not in (txn.producer_epoch, txn.last_producer_epoch):
            return ErrorCode.producer_fenced, -1, -1
        txn.timeout_ms = timeout_ms
        if expected_epoch != NO_EPOCH and expected_epoch == txn.last_producer_epoch and expected_epoch != txn.producer_epoch:
            pass  # a retry of a successful bump (KIP-360): the current epoch, not bumped again
        elif txn.producer_epoch >= MAX_EPOCH:
            txn.producer_id, txn.producer_epoch, txn.last_producer_epoch = self.allocate_producer_id(), 0, NO_EPOCH
        else:
            txn.last_producer_epoch = txn.producer_epoch if expected_epoch != NO_EPOCH else NO_EPOCH
            txn.producer_epoch += 1
        txn.state, txn.partitions, txn.groups, txn.pending_offsets = TxnState.EMPTY, set(), set(), {}
        self._save()
        return ErrorCode.none, txn.producer_id, txn.producer_epoch

    # -- adding to a transaction -----------------------------------------------------------
    def _validate(self, transactional_id: str, producer_id: int, producer_epoch: int) -> tuple[ErrorCode, TxnMetadata | None]:
        txn = self._txns.get(transactional_id)
        if txn is None or txn.producer_id != producer_id:
            return ErrorCode.invalid_producer_id_mapping, None
        if txn.producer_epoch != producer_epoch:
            return ErrorCode.producer_fenced, None
        if txn.state in PREPARE_STATES:
            return ErrorCode.concurrent_transactions, None  # markers pending: the client retries
        return ErrorCode.none, txn

    def _begin(self, txn: TxnMetadata) -> None:
        if txn.state is not TxnState.ONGOING:
            txn.state, txn.txn_start_ms = TxnState.ONGOING, self._clock()
            txn.partitions, txn.groups, txn.pending_offsets = set(), set(), {}

    def add_partitions(self, transactional_id: str, producer_id: int, producer_epoch: int, partitions: Iterable[TopicPartition]) -> ErrorCode:
        """AddPartitionsToTxn (the handler has already refused unknown partitions)."""
        error, txn = self._validate(transactional_id, producer_id, producer_epoch)
        if txn is None:
            return error
        wanted = set(partitions)
        if txn.state is TxnState.ONGOING and wanted <= txn.partitions:
            return ErrorCode.none
        self._begin(txn)
        txn.partitions |= wanted
        self._save()
        return ErrorCode.none

    def add_offsets(self, transactional_id: str, producer_id: int, producer_epoch: int, group_id: str) -> ErrorCode:
        """AddOffsetsToTxn: the group's offsets partition joins the transaction."""
        error, txn = self._validate(transactional_id, producer_id, producer_epoch)
        if txn is None:
            return error
        self._begin(txn)
        txn.groups.add(group_id)
        self._save()
        return ErrorCode.none

    def txn_offset_commit(self, transactional_id: str, producer_id: int, producer_epoch: int, group_id: str) -> tuple[ErrorCode, TxnMetadata | None]:
        """The checks of TxnOffsetCommit: current producer, epoch (a fenced one gets INVALID_PRODUCER_EPOCH,
        what Kafka's append to the offsets topic answers), and the group added by AddOffsetsToTxn."""
        error, txn = self._validate(transactional_id, producer_id, producer_epoch)
        if error == ErrorCode.producer_fenced:
            return ErrorCode.invalid_producer_epoch, None
        if txn is None:
            return error, None
        if txn.state is not TxnState.ONGOING or group_id not in txn.groups:
            return ErrorCode.invalid_txn_state, None
        return ErrorCode.none, txn

    def stage_offsets(self, txn: TxnMetadata, group_id: str, offsets: dict[TopicPartition, CommittedOffset]) -> None:
        txn.pending_offsets.setdefault(group_id, {}).update(offsets)
        self._save()

    def pending_partitions(self, group_id: str) -> set[TopicPartition]:
        """Partitions of ``group_id`` with transactional offsets not yet committed or aborted."""
        return {tp for txn in self._txns.values() for tp in txn.pending_offsets.get(group_id, {})}

    def verify_produce(self, transactional_id: str | None, producer_id: int, producer_epoch: int, partition: TopicPartition) -> ErrorCode:
        """KIP-890's check of a transactional Produce: the partition is in the producer's Ongoing
        transaction. A fenced epoch is INVALID_PRODUCER_EPOCH, as Produce answers it."""
        if transactional_id is None:
            return ErrorCode.invalid_txn_state
        error, txn = self._validate(transactional_id, producer_id, producer_epoch)
        if error == ErrorCode.producer_fenced:
            return ErrorCode.invalid_producer_epoch
        if txn is None:
            return error
        if txn.state is not TxnState.ONGOING or partition not in txn.partitions:
            return ErrorCode.invalid_txn_state
        return ErrorCode.none

    # -- ending ----------------------------------------------------------------------------
    def end_txn(self, transactional_id: str, producer_id: int, producer_epoch: int, commit: bool) -> ErrorCode:
        """EndTxn (Kafka's ``handleEndTransaction`` from a client): NONE once every marker is
        written, CONCURRENT_TRANSACTIONS (retriable) while some are still missing."""
        txn = self._txns.get(transactional_id)
        if txn is None or txn.producer_id != producer_id:
            return ErrorCode.invalid_producer_id_mapping
        if txn.producer_epoch != producer_epoch:
            return ErrorCode.producer_fenced
        if txn.state is TxnState.ONGOING:
            self._prepare(txn, commit)
        elif txn.state is not (TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT):
            if txn.state is (TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT):
                return ErrorCode.none  # a retry of an EndTxn that succeeded
            return ErrorCode.invalid_txn_state
        return ErrorCode.none if self._write_markers(txn) else ErrorCode.concurrent_transactions

    def abort_timed_out(self) -> list[str]:
        """Abort every transaction Ongoing for longer than its timeout; their transactional ids."""
        now = self._clock()
        expired = [t for t in self._txns.values() if t.state is TxnState.ONGOING and now > t.txn_start_ms + t.timeout_ms]
        for txn in expired:
            self._fence_and_abort(txn, f"timed out after {txn.timeout_ms} ms")
        return [t.transactional_id for t in expired]

    def _fence_and_abort(self, txn: TxnMetadata, reason: str) -> None:
        """Kafka's ``prepareFenceProducerEpoch`` then an abort: the markers carry the bumped epoch."""
        log.info("aborting the transaction of %s (producer %d epoch %d): %s", txn.transactional_id, txn.producer_id, txn.producer_epoch, reason)
        if txn.producer_epoch < MAX_EPOCH:
            txn.last_producer_epoch = txn.producer_epoch
            txn.producer_epoch += 1
        self._prepare(txn, commit=False)
        self._write_markers(txn)

    def _prepare(self, txn: TxnMetadata, commit: bool) -> None:
        """Ongoing -> PrepareCommit/PrepareAbort, saved before any marker is written."""
        txn.state = TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT
        self._save()

    def _write_markers(self, txn: TxnMetadata) -> bool:
        """Write the marker of every partition still in the Prepare transaction ``txn``; a partition
        leaves it once its marker is written (or it no longer exists). Completes the transaction
        and returns True when none is left; False (still Prepare) when a marker failed."""
        commit = txn.state is TxnState.PREPARE_COMMIT
        kind = ControlRecordType.COMMIT if commit else ControlRecordType.ABORT
        for topic, partition in sorted(txn.partitions):
            marker = txn_marker.build(kind, producer_id=txn.producer_id, producer_epoch=txn.producer_epoch, coordinator_epoch=COORDINATOR_EPOCH, timestamp=self._clock())
            key = (txn.transactional_id, (topic, partition))
            try:
                if not self._write_marker(topic, partition, marker):
                    log.warning("transaction %s: partition %s-%d is gone; no marker written", txn.transactional_id, topic, partition)
            except LogWriteError as err:  # kept for a retry, as Kafka's marker channel retries
                failures = self._marker_failures[key] = self._marker_failures.get(key, 0) + 1
                level = logging.WARNING if failures % MARKER_FAILURE_LOG_EVERY == 1 else logging.DEBUG
                log.log(level, "transaction %s: writing the %s marker to %s-%d failed (attempt %d; retried): %s", txn.transactional_id, kind.name, topic, partition, failures, err)
                continue
            self._marker_failures.pop(key, None)
            txn.partitions.discard((topic, partition))
        if txn.partitions:
            self._save()
            return False
        if commit:
            for group_id, offsets in txn.pending_offsets.items():
                self._commit_offsets(group_id, offsets)
        txn.state = TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT
        txn.partitions, txn.groups, txn.pending_offsets, txn.txn_start_ms = set(), set(), {}, -1
        self._save()
        return True

    # -- persistence -----------------------------------------------------------------------
    def _save(self) -> None:
        if self._path is None:
            return
        document = {"version": FILE_FORMAT_VERSION, "next_producer_id": self._next_producer_id, "transactions": [_dump(t) for t in self._txns.values()]}
        write_atomically(self._path, json.dumps(document, indent=1).encode())

    def _load(self, path: Path) -> None:
        try:
            document = json.loads(path.read_bytes())
            if document.get("version") != FILE_FORMAT_VERSION:
                raise ValueError(f"version {document.get('version')!r}, expected {FILE_FORMAT_VERSION}")
            self._next_producer_id = int(document["next_producer_id"])
            for raw in document["transactions"]:
                txn = _parse(raw)
                self._txns[txn.transactional_id] = txn
        except (ValueError, KeyError, TypeError) as err:
            raise CorruptCheckpointError(f"{path}: cannot read the transaction state: {err}") from err


def _dump(txn: TxnMetadata) -> dict[str, Any]:
    return {
        "transactional_id": txn.transactional_id,
        "producer_id": txn.producer_id,
        "producer_epoch": txn.producer_epoch,
        "last_producer_epoch": txn.last_producer_epoch,
        "timeout_ms": txn.timeout_ms,
        "state": txn.state.value,
        "txn_start_ms": txn.txn_start_ms,
        "partitions": sorted([t, p] for t, p in txn.partitions),
        "groups": sorted(txn.groups),
        "pending_offsets": [
            {"group": g, "topic": t, "partition": p, "offset": c.offset, "leader_epoch": c.leader_epoch, "metadata": c.metadata}
            for g, offsets in sorted(txn.pending_offsets.items())
            for (t, p), c in sorted(offsets.items())
        ],
    }


def _parse(raw: dict[str, Any]) -> TxnMetadata:
    txn = TxnMetadata(
        str(raw["transactional_id"]),
        int(raw["producer_id"]),
        int(raw["producer_epoch"]),
        int(raw["timeout_ms"]),
        TxnState(raw["state"]),
        int(raw["last_producer_epoch"]),
        int(raw["txn_start_ms"]),
        {(str(t), int(p)) for t, p in raw["partitions"]},
        {str(g) for g in raw["groups"]},
    )
    for o in raw["pending_offsets"]:
        committed = CommittedOffset(int(o["offset"]), int(o["leader_epoch"]), o["metadata"], -1)
        txn.pending_offsets.setdefault(str(o["group"]), {})[(str(o["topic"]), int(o["partition"]))] = committed
    return txn
