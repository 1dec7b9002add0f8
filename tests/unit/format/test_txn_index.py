"""The .txnindex codec (Java ``TransactionIndex``/``AbortedTxn``) and the collection rule of
``LocalLog.collectAbortedTransactions``, checked against hand-computed bytes."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tiered_kafka.errors import CorruptIndexError
from tiered_kafka.format import txn_index
from tiered_kafka.format.txn_index import AbortedTxn


def test_an_entry_is_34_bytes_in_kafkas_field_order() -> None:
    entry = AbortedTxn(producer_id=1000, first_offset=4, last_offset=7, last_stable_offset=8)
    expected = bytes.fromhex("0000" "00000000000003e8" "0000000000000004" "0000000000000007" "0000000000000008")
    assert entry.to_bytes() == expected and txn_index.ENTRY_SIZE == 34
    assert txn_index.parse(expected) == [entry]
    assert txn_index.serialize([entry]) == expected


@pytest.mark.parametrize(
    ("data", "problem"),
    [
        pytest.param(b"\0" * 33, "not a multiple", id="short"),
        pytest.param(struct.pack(">hqqqq", 1, 7, 0, 1, 2), "version 1", id="version"),
        pytest.param(struct.pack(">hqqqq", 0, 7, 5, 4, 5), "first offset 5 and last offset 4", id="last-before-first"),
        pytest.param(struct.pack(">hqqqq", 0, 7, 0, 4, 6), "past its marker", id="lso-past-marker"),
        pytest.param(struct.pack(">hqqqq", 0, 7, 0, 4, 5) + struct.pack(">hqqqq", 0, 8, 1, 4, 5), "does not follow", id="not-increasing"),
    ],
)
def test_malformed_files_are_refused_naming_the_problem(data: bytes, problem: str) -> None:
    with pytest.raises(CorruptIndexError, match=problem):
        txn_index.parse(data, name="00000000000000000000.txnindex")


@given(st.lists(st.tuples(st.integers(0, 2**40), st.integers(0, 1000), st.integers(0, 1000), st.booleans()), max_size=20))
def test_serialize_then_parse_round_trips(raw: list[tuple[int, int, int, bool]]) -> None:
    entries, last = [], -1
    for producer_id, start_gap, length, lso_at_first in raw:
        first = last + 1 + start_gap
        last = first + length
        entries.append(AbortedTxn(producer_id, first, last, first if lso_at_first else last + 1))
    assert txn_index.parse(txn_index.serialize(entries)) == entries


def test_collect_aborted_keeps_overlapping_entries_and_stops_at_a_complete_lso() -> None:
    entries = [AbortedTxn(1, 0, 5, 6), AbortedTxn(2, 3, 10, 11), AbortedTxn(3, 12, 20, 12), AbortedTxn(4, 21, 30, 31)]
    # a fetch of [6, 15): entry 1 ends before 6, entry 2 overlaps, entry 3 starts inside; entry 3's
    # LSO (12) is below 15, so the walk goes on; entry 4's (31) reaches 15: complete
    found, complete = txn_index.collect_aborted(entries, 6, 15)
    assert found == [entries[1], entries[2]] and complete
    found, complete = txn_index.collect_aborted(entries[:3], 6, 40)
    assert found == entries[1:3] and not complete
