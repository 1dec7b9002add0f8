"""``remote_read.visible_until``: the CLI's end-of-read check stops early, is bounded and never loops.

The gateway is replaced by a fake serving plans over real record-batch bytes (built with the
format core's test helpers), one batch per range; the rule under test is the scan's loop."""

from __future__ import annotations

import pytest

from tests.support.batches import Rec, build_control, build_v2
from tiered_kafka.client import remote_read
from tiered_kafka.errors import RemoteReadError
from tiered_kafka.format.record_batch import ControlRecordType
from tiered_kafka.client.gateway import Plan, PlannedRange
from tiered_kafka.client.remote_read import visible_until


class FakeGateway:
    """Batches at consecutive offsets; a plan is the one batch holding the offset (``stuck``: never advances)."""

    def __init__(self, batches: list[bytes], stuck: bool = False, lso: int | None = None) -> None:
        self.batches: list[tuple[int, int, bytes]] = []
        offset = 0
        for data in batches:
            count = int.from_bytes(data[57:61], "big")
            self.batches.append((offset, offset + count - 1, data))
            offset += count
        self.stuck, self.lso = stuck, lso
        self.plans: list[int] = []
        self.fetched = 0

    def plan(self, topic: str, partition: int, offset: int, max_bytes: int, read_committed: bool = False) -> Plan:
        self.plans.append(offset)
        first, last, data = next(b for b in self.batches if b[0] <= offset <= b[1] or b[0] > offset)
        planned = PlannedRange(first, first + len(data), first, last, f"u{first}", "")
        return Plan(topic, partition, offset, "seg", first, last, (planned,), offset if self.stuck else last + 1, 0, None, self.lso)

    def fetch(self, planned: PlannedRange) -> bytes:
        self.fetched += 1
        data = next(d for f, _l, d in self.batches if f == planned.first_offset)
        return _rebased(data, planned.first_offset)


def _rebased(data: bytes, base: int) -> bytes:
    return base.to_bytes(8, "big") + data[8:]  # base offset is outside the CRC


def plain(n: int = 1) -> bytes:
    return build_v2([Rec(b"k", b"v", 1_700_000_000_000)] * n)


def txn(producer: int) -> bytes:
    return build_v2([Rec(b"k", b"t", 1_700_000_000_000)], producer_id=producer, transactional=True)


def test_stops_at_the_first_delivered_record() -> None:
    gateway = FakeGateway([plain() for _ in range(50)])
    found = visible_until(gateway, "t", 0, 0, 50, read_committed=False)  # type: ignore[arg-type]
    assert (found.has_records, found.known, found.stable_end) == (True, True, 50)
    assert gateway.plans == [0] and gateway.fetched == 1


def test_an_open_transaction_holds_the_rest_and_the_whole_range_is_scanned() -> None:
    batches = [txn(7), plain(), build_control(ControlRecordType.COMMIT, base_offset=0, producer_id=8), plain()]
    gateway = FakeGateway([txn(7)] + batches[1:])
    found = visible_until(gateway, "t", 0, 0, 4, read_committed=True)  # type: ignore[arg-type]
    assert (found.has_records, found.known, found.stable_end) == (False, True, 0)
    assert gateway.plans == [0, 1, 2, 3]


def test_a_remote_lso_at_or_below_the_position_answers_without_reading() -> None:
    gateway = FakeGateway([plain() for _ in range(5)], lso=2)
    found = visible_until(gateway, "t", 0, 3, 5, read_committed=True)  # type: ignore[arg-type]
    assert (found.has_records, found.stable_end, gateway.fetched) == (False, 2, 0)


def test_a_plan_that_does_not_advance_is_an_error() -> None:
    gateway = FakeGateway([build_control(ControlRecordType.COMMIT, base_offset=0, producer_id=8)] * 3, stuck=True)
    with pytest.raises(RemoteReadError, match="does not advance"):
        visible_until(gateway, "t", 0, 0, 3, read_committed=True)  # type: ignore[arg-type]


def test_the_scan_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    batches = [build_control(ControlRecordType.COMMIT, base_offset=0, producer_id=8) for _ in range(40)]
    gateway = FakeGateway(batches)
    monkeypatch.setattr(remote_read, "SCAN_MAX_BYTES", 5 * len(batches[0]))
    found = visible_until(gateway, "t", 0, 0, 40, read_committed=True)  # type: ignore[arg-type]
    assert (found.known, gateway.fetched) == (False, 5)
