"""The development broker's transaction coordinator (Kafka's ``TransactionCoordinator``) when a marker
cannot be written: the transaction stays in its Prepare state, EndTxn answers the retriable
CONCURRENT_TRANSACTIONS, and the missing markers are written again (by EndTxn's retry, the periodic
task or recovery) until the partition's last stable offset moves past the transaction.

The partitions are real ``PartitionLog``s; only the marker writer is wrapped, to refuse an append a
given number of times."""

from __future__ import annotations

from pathlib import Path

import pytest
from kio.schema.errors import ErrorCode

from tests.support.batches import Rec, build_v2
from tiered_kafka.errors import AppendRefusedError
from tiered_kafka.format.log_config import LogConfig
from tiered_kafka.format.log_writer import PartitionLog
from tiered_kafka.format.producer_state import AppendOrigin
from tiered_kafka.format.record_batch import iter_batches
from tiered_kafka_dev.broker.offset_store import CommittedOffset
from tiered_kafka_dev.broker.transactions import TransactionCoordinator, TxnState

T = 1_700_000_000_000
TID = "txn-1"
P0, P1 = ("t", 0), ("t", 1)


class Cluster:
    """Two partition logs, a marker writer that refuses ``failures[tp]`` appends, and the offsets committed."""

    def __init__(self, tmp_path: Path) -> None:
        self.state_file = tmp_path / "dev-broker-transactions.json"
        self.logs = {tp: PartitionLog.create(tmp_path / f"{tp[0]}-{tp[1]}", LogConfig(retention_ms=-1)) for tp in (P0, P1)}
        self.failures: dict[tuple[str, int], int] = {}
        self.commits: list[tuple[str, dict[tuple[str, int], CommittedOffset]]] = []

    def coordinator(self) -> TransactionCoordinator:
        return TransactionCoordinator(self.state_file, write_marker=self.write_marker, commit_offsets=lambda g, o: self.commits.append((g, o)))

    def write_marker(self, topic: str, partition: int, marker: bytes) -> bool:
        if self.failures.get((topic, partition), 0) > 0:
            self.failures[(topic, partition)] -= 1
            raise AppendRefusedError("invalid_producer_epoch", f"marker refused by {topic}-{partition} (test)")
        self.logs[(topic, partition)].append(marker, origin=AppendOrigin.COORDINATOR)
        return True

    def markers(self, tp: tuple[str, int]) -> int:
        return sum(b.is_control for _, path in self.logs[tp].iter_segment_files() for b in iter_batches(path.read_bytes()))

    def stable(self, tp: tuple[str, int]) -> bool:
        return self.logs[tp].last_stable_offset == self.logs[tp].log_end_offset


OFFSETS = {("in", 0): CommittedOffset(42, -1, "", -1)}


def _open_transaction(cluster: Cluster, coordinator: TransactionCoordinator) -> tuple[int, int]:
    """A transaction over P0 and P1 with one data batch in each and offsets for group ``g``."""
    error, pid, epoch = coordinator.init_producer_id(TID, 60_000)
    assert error == ErrorCode.none
    assert coordinator.add_partitions(TID, pid, epoch, [P0, P1]) == ErrorCode.none
    assert coordinator.add_offsets(TID, pid, epoch, "g") == ErrorCode.none
    error, txn = coordinator.txn_offset_commit(TID, pid, epoch, "g")
    assert error == ErrorCode.none and txn is not None
    coordinator.stage_offsets(txn, "g", OFFSETS)
    for plog in cluster.logs.values():
        plog.append(build_v2([Rec(b"k", b"v", T)], producer_id=pid, transactional=True))
        assert plog.last_stable_offset == 0  # the open transaction holds the LSO
    return pid, epoch


def test_a_refused_marker_keeps_the_transaction_prepared_until_the_periodic_retry_writes_it(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path)
    coordinator = cluster.coordinator()
    pid, epoch = _open_transaction(cluster, coordinator)
    cluster.failures[P1] = 2  # EndTxn's attempt and the first periodic retry fail

    assert coordinator.end_txn(TID, pid, epoch, commit=True) == ErrorCode.concurrent_transactions
    assert coordinator.state(TID) is TxnState.PREPARE_COMMIT
    assert cluster.stable(P0) and cluster.markers(P0) == 1
    assert not cluster.stable(P1) and cluster.markers(P1) == 0
    assert cluster.commits == []  # offsets wait for the last marker
    # while markers are pending, the producer is told to retry, never to start anew
    assert coordinator.add_partitions(TID, pid, epoch, [P0]) == ErrorCode.concurrent_transactions
    assert coordinator.end_txn(TID, pid, epoch, commit=False) == ErrorCode.invalid_txn_state
    # the pending partition survives a restart of the coordinator
    assert cluster.coordinator().state(TID) is TxnState.PREPARE_COMMIT

    assert coordinator.retry_markers() == [TID]  # still refused once more
    assert coordinator.state(TID) is TxnState.PREPARE_COMMIT and not cluster.stable(P1)
    assert coordinator.retry_markers() == [TID]
    assert coordinator.state(TID) is TxnState.COMPLETE_COMMIT
    assert cluster.stable(P1) and cluster.markers(P1) == 1
    assert cluster.markers(P0) == 1  # a partition whose marker was written is not written again
    assert cluster.commits == [("g", OFFSETS)]
    assert coordinator.retry_markers() == []
    assert coordinator.end_txn(TID, pid, epoch, commit=True) == ErrorCode.none  # the client's retry


def test_a_retried_end_txn_writes_the_missing_marker_and_answers_none(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path)
    coordinator = cluster.coordinator()
    pid, epoch = _open_transaction(cluster, coordinator)
    cluster.failures[P0] = 1
    assert coordinator.end_txn(TID, pid, epoch, commit=False) == ErrorCode.concurrent_transactions
    assert coordinator.end_txn(TID, pid, epoch, commit=False) == ErrorCode.none
    assert coordinator.state(TID) is TxnState.COMPLETE_ABORT
    assert cluster.stable(P0) and cluster.stable(P1)
    assert [a.producer_id for a in cluster.logs[P0].aborted_transactions(0, 2)] == [pid]
    assert cluster.commits == []  # an abort discards the offsets


def test_init_producer_id_waits_for_pending_markers_then_bumps_the_epoch(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path)
    coordinator = cluster.coordinator()
    pid, epoch = _open_transaction(cluster, coordinator)
    cluster.failures[P1] = 2
    assert coordinator.end_txn(TID, pid, epoch, commit=True) == ErrorCode.concurrent_transactions
    assert coordinator.init_producer_id(TID, 60_000) == (ErrorCode.concurrent_transactions, -1, -1)
    assert coordinator.producer_ids()[TID] == (pid, epoch)
    assert coordinator.init_producer_id(TID, 60_000) == (ErrorCode.none, pid, epoch + 1)
    assert coordinator.state(TID) is TxnState.EMPTY
    assert cluster.stable(P1) and cluster.commits == [("g", OFFSETS)]


@pytest.mark.parametrize("timed_out", [pytest.param(False, id="end-txn"), pytest.param(True, id="timeout")])
def test_recovery_writes_the_markers_a_stopped_coordinator_could_not(tmp_path: Path, timed_out: bool) -> None:
    cluster = Cluster(tmp_path)
    now = [T]
    coordinator = TransactionCoordinator(cluster.state_file, write_marker=cluster.write_marker, commit_offsets=lambda g, o: None, clock=lambda: now[0])
    pid, epoch = _open_transaction(cluster, coordinator)
    cluster.failures[P0] = 1_000
    if timed_out:
        now[0] += 60_001
        assert coordinator.abort_timed_out() == [TID]
    else:
        assert coordinator.end_txn(TID, pid, epoch, commit=False) == ErrorCode.concurrent_transactions
    assert coordinator.state(TID) is TxnState.PREPARE_ABORT and not cluster.stable(P0)

    cluster.failures.clear()  # the broker restarts with a log that accepts the marker
    restarted = cluster.coordinator()
    restarted.recover()
    assert restarted.state(TID) is TxnState.COMPLETE_ABORT
    assert cluster.stable(P0) and cluster.stable(P1)
    assert cluster.markers(P0) == cluster.markers(P1) == 1
