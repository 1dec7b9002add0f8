"""``records``: remote reads over a ``ClusterReader`` handed fakes of its registry and S3 client
(``fakes``), on the hand-built transactional log: read_uncommitted, read_committed with the
``.txnindex``, markers and the remote last stable offset, the read-on for markers (``read_on``) and
its budget, and corrupt bytes answered as such."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.transactions import COMMITTED_OFFSETS, UNCOMMITTED_OFFSETS
from tiered_kafka.errors import CorruptRecordError
from tiered_kafka.modes import Mode
from tiered_kafka.client.remote_read import DecodedBatch
from tiered_kafka_gateway.errors import ErrorCode, GatewayError, code_of
from tiered_kafka_gateway.records import Encoding, IsolationLevel, ReadRequest, committed_batches, read_records
from tests.unit.gateway.fakes import TOPIC, transactional_cluster


def request(offset: int, committed: bool, max_records: int = 100, max_bytes: int = 1 << 20) -> ReadRequest:
    level = IsolationLevel.READ_COMMITTED if committed else IsolationLevel.READ_UNCOMMITTED
    return ReadRequest(TOPIC, 0, offset, max_bytes, max_records, Encoding.UTF8, Mode.REMOTE_ONLY, level)


def test_read_uncommitted_returns_every_data_record_across_segments(tmp_path: Path) -> None:
    cluster = transactional_cluster(tmp_path)
    response = read_records(cluster.reader, request(0, committed=False))
    assert [r.offset for r in response.records] == UNCOMMITTED_OFFSETS
    assert (response.next_offset, response.source, response.last_stable_offset) == (22, "remote", None)
    assert response.records[0].key == "plain-k0" and response.records[0].headers[0].value == "plain0"


def test_read_committed_stops_at_the_remote_last_stable_offset(tmp_path: Path) -> None:
    cluster = transactional_cluster(tmp_path)  # p11 opened at 19 and is open at the end of remote data
    response = read_records(cluster.reader, request(0, committed=True))
    assert [r.offset for r in response.records] == COMMITTED_OFFSETS
    assert (response.next_offset, response.last_stable_offset) == (19, 19)
    at_lso = read_records(cluster.reader, request(19, committed=True))  # nothing at or past the LSO, whatever the offset
    assert (at_lso.records, at_lso.next_offset, at_lso.last_stable_offset) == ([], 19, 19)


def test_read_committed_without_a_known_lso_reads_on_for_markers_and_holds_what_stays_open(tmp_path: Path) -> None:
    cluster = transactional_cluster(tmp_path, open_txn_first_offset=-2)  # OPEN_TXN_UNKNOWN: no remote LSO
    response = read_records(cluster.reader, request(0, committed=True, max_records=3))
    assert [r.offset for r in response.records] == [0, 1, 2] and response.next_offset == 3
    held = read_records(cluster.reader, request(15, committed=True))  # p11's marker (22) is not remote: held at 19
    assert ([r.offset for r in held.records], held.next_offset, held.last_stable_offset) == ([17], 19, 19)


def test_the_read_on_for_markers_is_bounded_by_max_bytes_limit(tmp_path: Path) -> None:
    """A window ending inside p7's transaction (2-4, 8; COMMIT at 9): its marker decides it when the
    read-on may reach it; with no budget (max_bytes_limit 1 byte: the first plan is one batch) it stays held."""
    cluster = transactional_cluster(tmp_path, open_txn_first_offset=-2)
    reader = cluster.reader
    plan = reader.plan(TOPIC, 0, 0, 1)  # the first batch (offsets 0-1) only
    window = [DecodedBatch(0, 1, -1, False, None)]
    p7 = reader.plan(TOPIC, 0, 2, 1)
    assert (p7.ranges[0].first_offset, p7.ranges[0].last_offset) == (2, 4)
    first = [DecodedBatch(2, 4, 7, True, None)]
    aborted = reader.aborted_txns(TOPIC, 0, plan.segment)
    seen = {plan.segment.object_key}
    delivered, held = committed_batches(reader, TOPIC, 0, window + first, aborted, set(seen), 5, 21)
    assert [b.base_offset for b in delivered] == [0, 2] and held is None  # read on to 9 (COMMIT p7)
    tight = reader.settings.model_copy(update={"max_bytes_limit": 1})
    reader.settings = tight
    delivered, held = committed_batches(reader, TOPIC, 0, window + first, aborted, set(seen), 5, 21)
    assert [b.base_offset for b in delivered] == [0] and held == 2  # one plan of one batch (5-7), no marker in it


def test_offsets_outside_the_remote_range_are_416_with_the_range(tmp_path: Path) -> None:
    cluster = transactional_cluster(tmp_path)
    with pytest.raises(GatewayError) as past:
        read_records(cluster.reader, request(22, committed=False))
    assert past.value.error is ErrorCode.OFFSET_NOT_REMOTE and past.value.details == {"earliest_offset": 0, "latest_offset": 21}


def test_a_corrupt_batch_is_corrupt_remote_data_naming_the_object(tmp_path: Path) -> None:
    cluster = transactional_cluster(tmp_path)
    key = cluster.registry.entries[0].object_key
    data = bytearray(cluster.s3.objects[key])
    data[-1] ^= 0xFF  # the last batch's CRC no longer matches
    cluster.s3.objects[key] = bytes(data)
    with pytest.raises(CorruptRecordError) as corrupt:
        read_records(cluster.reader, request(0, committed=False))
    assert code_of(corrupt.value) is ErrorCode.CORRUPT_REMOTE_DATA
    assert getattr(corrupt.value, "_tiered_kafka_gateway_where") == key  # errors.about: the answer names the object
