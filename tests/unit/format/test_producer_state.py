"""Producer state (Java ``ProducerStateManager``): the .snapshot codec, the marker batch, and the
append rules: epochs, sequences, duplicates, transactions and the last stable offset."""

from __future__ import annotations

import struct

import crc32c
import pytest

from tests.support.batches import Rec, build_v2
from tiered_kafka.errors import AppendRefusedError, CorruptCheckpointError
from tiered_kafka.format import producer_snapshot, txn_marker
from tiered_kafka.format.producer_snapshot import ProducerSnapshotEntry
from tiered_kafka.format.producer_state import AppendOrigin, CompletedTxn, ProducerStateManager
from tiered_kafka.format.record_batch import ControlRecordType, RecordBatch, iter_batches, iter_records, set_base_offset

T = 1_700_000_000_000


def test_snapshot_layout_is_javas_version_1_with_a_crc32c_after_the_header() -> None:
    entry = ProducerSnapshotEntry(1000, 3, 41, 99, 4, T, 0, 60)
    data = producer_snapshot.serialize([entry])
    body = struct.pack(">i", 1) + struct.pack(">qhiqiqiq", 1000, 3, 41, 99, 4, T, 0, 60)
    assert data == struct.pack(">hI", 1, crc32c.crc32c(body)) + body
    assert len(data) == 2 + 4 + 4 + 46
    assert producer_snapshot.parse(data) == [entry]
    assert producer_snapshot.serialize([]) == struct.pack(">hI", 1, crc32c.crc32c(b"\0\0\0\0")) + b"\0\0\0\0"


@pytest.mark.parametrize(
    ("mutate", "problem"),
    [
        pytest.param(lambda d: d[:8], "too few", id="short"),
        pytest.param(lambda d: b"\0\2" + d[2:], "version 2", id="version"),
        pytest.param(lambda d: d[:-1] + bytes([d[-1] ^ 1]), "CRC mismatch", id="crc"),
    ],
)
def test_a_bad_snapshot_is_refused(mutate, problem: str) -> None:
    data = producer_snapshot.serialize([ProducerSnapshotEntry(7, 0)])
    with pytest.raises(CorruptCheckpointError, match=problem):
        producer_snapshot.parse(mutate(data), name="00000000000000000100.snapshot")


def test_a_marker_batch_is_one_control_record_decoded_by_an_independent_reader() -> None:
    data = txn_marker.build(ControlRecordType.ABORT, producer_id=1000, producer_epoch=2, coordinator_epoch=5, timestamp=T)
    [batch] = iter_batches(data)  # verifies the CRC
    assert batch.is_control and batch.is_transactional and batch.record_count == 1
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence, batch.max_timestamp) == (1000, 2, -1, T)
    assert txn_marker.parse(batch) == txn_marker.EndTxnMarker(ControlRecordType.ABORT, 5)
    [record] = list(batch)
    assert record.key == struct.pack(">hh", 0, 0) and record.value == struct.pack(">hi", 0, 5)
    assert list(iter_records(data)) == []  # control records are not user records


def _batch(pid: int, epoch: int, seq: int, n: int, offset: int, *, txn: bool = False) -> RecordBatch:
    data = bytearray(build_v2([Rec(b"k", b"v", T)] * n, producer_id=pid, transactional=txn))
    struct.pack_into(">h", data, 51, epoch)  # producerEpoch, then baseSequence: after the CRC, so recompute it
    struct.pack_into(">i", data, 53, seq)
    struct.pack_into(">I", data, 17, crc32c.crc32c(bytes(data[21:])))
    set_base_offset(data, offset)
    return next(iter_batches(bytes(data)))


def _marker(pid: int, epoch: int, kind: ControlRecordType, offset: int) -> RecordBatch:
    data = bytearray(txn_marker.build(kind, producer_id=pid, producer_epoch=epoch, coordinator_epoch=0, timestamp=T))
    set_base_offset(data, offset)
    return next(iter_batches(bytes(data)))


def _append(state: ProducerStateManager, batch: RecordBatch, origin: AppendOrigin = AppendOrigin.CLIENT):
    return state.apply(state.prepare([batch], origin))


def test_sequences_must_follow_and_a_retry_is_a_duplicate() -> None:
    state = ProducerStateManager()
    _append(state, _batch(1, 0, 0, 3, 0))
    _append(state, _batch(1, 0, 3, 2, 3))
    with pytest.raises(AppendRefusedError, match="sequence 7 .* expected 5") as refused:
        state.prepare([_batch(1, 0, 7, 1, 5)], AppendOrigin.CLIENT)
    assert refused.value.kafka_error == "out_of_order_sequence_number"
    duplicate = state.prepare([_batch(1, 0, 0, 3, 5)], AppendOrigin.CLIENT).duplicate
    assert duplicate is not None and (duplicate.first_offset, duplicate.last_offset) == (0, 2)
    # a new epoch starts again at sequence 0; anything else is out of order
    with pytest.raises(AppendRefusedError, match="expected 0 for a new epoch"):
        state.prepare([_batch(1, 1, 5, 1, 5)], AppendOrigin.CLIENT)
    _append(state, _batch(1, 1, 0, 1, 5))
    with pytest.raises(AppendRefusedError, match="epoch 0 .* older than its current epoch 1") as refused:
        state.prepare([_batch(1, 0, 5, 1, 6)], AppendOrigin.CLIENT)
    assert refused.value.kafka_error == "invalid_producer_epoch"
    # replaying a written log checks nothing
    _append(state, _batch(1, 0, 99, 1, 6), AppendOrigin.REPLICATION)


def test_transactions_set_the_lso_and_an_abort_records_the_lso_of_the_others() -> None:
    state = ProducerStateManager()
    _append(state, _batch(1, 0, 0, 2, 10, txn=True))  # producer 1 opens at 10
    _append(state, _batch(2, 0, 0, 1, 12, txn=True))  # producer 2 opens at 12
    assert state.first_unstable_offset() == 10
    with pytest.raises(AppendRefusedError, match="non-transactional batch") as refused:
        state.prepare([_batch(2, 0, 1, 1, 13)], AppendOrigin.CLIENT)
    assert refused.value.kafka_error == "invalid_txn_state"
    assert _append(state, _marker(2, 0, ControlRecordType.ABORT, 13), AppendOrigin.COORDINATOR) == [(CompletedTxn(2, 12, 13, True), 10)]
    assert _append(state, _marker(1, 0, ControlRecordType.COMMIT, 14), AppendOrigin.COORDINATOR) == [(CompletedTxn(1, 10, 14, False), 15)]
    assert state.first_unstable_offset() is None
    assert _append(state, _marker(1, 0, ControlRecordType.ABORT, 15), AppendOrigin.COORDINATOR) == []  # nothing open
    with pytest.raises(AppendRefusedError) as refused:
        state.prepare([_marker(1, -1, ControlRecordType.ABORT, 16)], AppendOrigin.COORDINATOR)  # an epoch below 0
    assert refused.value.kafka_error == "invalid_producer_epoch"


def test_state_round_trips_through_a_snapshot() -> None:
    state = ProducerStateManager()
    _append(state, _batch(1, 2, 0, 3, 0))
    _append(state, _batch(5, 0, 0, 1, 3, txn=True))
    restored = ProducerStateManager.from_snapshot(producer_snapshot.parse(producer_snapshot.serialize(state.snapshot())))
    assert restored.first_unstable_offset() == 3
    assert sorted(restored.snapshot(), key=lambda e: e.producer_id) == sorted(state.snapshot(), key=lambda e: e.producer_id)
    assert restored.prepare([_batch(1, 2, 0, 3, 9)], AppendOrigin.CLIENT).duplicate is not None
    _append(restored, _batch(1, 2, 3, 1, 9))


def test_one_append_with_a_marker_then_the_same_producers_next_transaction_keeps_it_open() -> None:
    """A follower's or replayed append may hold producer 1's marker and then its next transaction:
    applied in batch order, the new transaction stays open and the abort's LSO ignores what the
    append opens after the marker."""
    state = ProducerStateManager()
    _append(state, _batch(1, 0, 0, 2, 10, txn=True))  # producer 1 opens at 10
    pending = state.prepare(
        [
            _marker(1, 0, ControlRecordType.ABORT, 12),
            _batch(1, 0, 2, 1, 13, txn=True),  # producer 1's next transaction
            _batch(2, 0, 0, 1, 14, txn=True),  # producer 2 opens after the marker
        ],
        AppendOrigin.REPLICATION,
    )
    assert state.apply(pending) == [(CompletedTxn(1, 10, 12, True), 13)]
    assert state.ongoing == {1: 13, 2: 14}
    assert state.first_unstable_offset() == 13
    # the same through the coordinator's path: a marker, then the producer's next transaction
    assert _append(state, _marker(1, 0, ControlRecordType.COMMIT, 15), AppendOrigin.COORDINATOR) == [(CompletedTxn(1, 13, 15, False), 14)]
    assert state.first_unstable_offset() == 14
