"""The listener's aborted-transaction list for a read_committed Fetch (``kafka_listener.fetch.aborted_overlapping``):
every aborted transaction overlapping the records sent, read from the ``.txnindex`` of the segments from the
fetch offset on, up to the first after which nothing reaching the records sent is still open
(``tiered_kafka.transactions.decided_by``), never the partition's whole history."""

from __future__ import annotations

import random
from collections.abc import Iterator

from hypothesis import given, settings, strategies as st

from tiered_kafka.format.txn_index import AbortedTxn
from tiered_kafka.registry import SegmentEntry
from tiered_kafka_gateway.kafka_listener.fetch import aborted_overlapping


class Source:
    """Segments of 10 offsets with transactions laid out by the test; counts the segments read."""

    def __init__(self, entries: list[SegmentEntry], aborted: dict[int, list[AbortedTxn]]) -> None:
        self.entries, self.aborted, self.read = entries, aborted, 0

    def segments_from(self, topic: str, partition: int, offset: int) -> Iterator[SegmentEntry]:
        for e in self.entries:
            if e.last_offset >= offset:
                self.read += 1
                yield e

    def aborted_txns(self, topic: str, partition: int, segment: SegmentEntry) -> list[AbortedTxn]:
        return self.aborted.get(segment.base_offset, [])


def layout(txns: list[tuple[int, int, bool]], segments: int) -> Source:
    """``txns``: (first offset, marker offset, aborted) of transactions of producer i; segments [10k, 10k+9]."""
    entries, aborted = [], {}
    for k in range(segments):
        base, last = 10 * k, 10 * k + 9
        mine = [AbortedTxn(pid, first, marker, 0) for pid, (first, marker, is_aborted) in enumerate(txns) if is_aborted and base <= marker <= last]
        open_after = [first for first, marker, _ in txns if first <= last < marker]
        entries.append(SegmentEntry(
            topic="t", partition=0, base_offset=base, last_offset=last, object_key=f"p/c/t-0/{base:020d}.log", size=100, record_count=10,
            min_timestamp=0, max_timestamp=0, checksum="crc32c:0", leader_epoch=0, upload_time_ms=0, files=("log", "txnindex"),
            aborted_txns=len(mine), open_txn_first_offset=min(open_after, default=-1),
        ))
        aborted[base] = mine
    return Source(entries, aborted)


def expected(txns: list[tuple[int, int, bool]], first: int, last: int) -> list[dict[str, int]]:
    return [{"ProducerId": pid, "FirstOffset": f} for pid, (f, marker, is_aborted) in enumerate(txns) if is_aborted and marker >= first and f <= last]


def test_a_transaction_decided_segments_later_is_listed_and_the_walk_stops_once_nothing_reaching_the_records_is_open() -> None:
    txns = [(3, 57, True), (12, 14, True), (20, 25, False), (95, 120, True)]
    source = layout(txns, 20)
    found = aborted_overlapping(source, "t", 0, 10, 19)  # type: ignore[arg-type]
    assert sorted(found, key=lambda t: t["ProducerId"]) == expected(txns, 10, 19)
    assert source.read == 5  # segments 10.., 20.., ..., 50.. (p0's marker at 57): not the 20 of the partition


def test_an_unknown_open_transaction_proves_nothing_and_the_walk_goes_on() -> None:
    txns = [(3, 57, True)]
    source = layout(txns, 8)
    for e in source.entries[1:]:
        object.__setattr__(e, "open_txn_first_offset", -2)
    assert aborted_overlapping(source, "t", 0, 10, 19) == expected(txns, 10, 19)  # type: ignore[arg-type]
    assert source.read == 7


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 2**32), st.integers(0, 190), st.integers(0, 30))
def test_the_list_equals_every_aborted_transaction_overlapping_the_records(seed: int, first: int, length: int) -> None:
    rng = random.Random(seed)
    txns = []
    for _ in range(rng.randrange(0, 12)):
        start = rng.randrange(0, 200)
        txns.append((start, start + rng.choice([0, 1, 5, 30, 80]), rng.random() < 0.6))
    source = layout(txns, 30)
    found = aborted_overlapping(source, "t", 0, first, first + length)  # type: ignore[arg-type]
    assert sorted(found, key=lambda t: (t["ProducerId"], t["FirstOffset"])) == expected(txns, first, first + length)


def test_the_high_watermark_of_an_answer_from_s3_is_never_the_remote_end_when_kafka_is_unknown() -> None:
    """fetch._high_watermark: Kafka's log end (cached), its last known one when Kafka fails, and None (the partition
    answered KAFKA_STORAGE_ERROR, retriable) when Kafka never answered: the remote end would be a false end of log."""
    import asyncio

    from tiered_kafka.modes import Mode
    from tiered_kafka.registry import PartitionInfo
    from tiered_kafka_gateway.kafka_listener import context as context_module
    from tiered_kafka_gateway.kafka_listener.context import ListenerContext
    from tiered_kafka_gateway.kafka_listener.fetch import _high_watermark
    from tiered_kafka_gateway.kafka_listener.settings import KafkaListenerSettings
    from tiered_kafka_gateway.kafka_listener.upstream import KafkaUpstreamError

    class Upstream:
        answers: list[object] = []

        async def list_offset(self, topic: str, partition: int, which: int, isolation_level: int) -> tuple[int, int, int, int]:
            answer = self.answers.pop(0)
            if isinstance(answer, Exception):
                raise answer
            return 0, int(answer), -1, -1  # type: ignore[call-overload]

    info = PartitionInfo(0, 1499, 3, 300, 0)  # remote storage ends at 1500
    for mode, kafka_read in ((Mode.REMOTE_PREFERRED, True), (Mode.REMOTE_ONLY, False)):
        upstream = Upstream()
        ctx = ListenerContext("c", None, KafkaListenerSettings(port=0, mode=mode), upstream, None, None, None)  # type: ignore[arg-type]
        if not kafka_read:
            assert asyncio.run(_high_watermark(ctx, "t", 0, info)) == 1500  # remote only: the remote end is the log end
            continue
        upstream.answers = [KafkaUpstreamError("down")]
        assert asyncio.run(_high_watermark(ctx, "t", 0, info)) is None  # never answered: unknown, not 1500
        upstream.answers = [1800]
        assert asyncio.run(_high_watermark(ctx, "t", 0, info)) == 1800
        context_module.WATERMARK_TTL_S, ttl = 0.0, context_module.WATERMARK_TTL_S
        try:
            upstream.answers = [KafkaUpstreamError("down again")]
            assert asyncio.run(_high_watermark(ctx, "t", 0, info)) == 1800  # Kafka's last answer, not the remote end
        finally:
            context_module.WATERMARK_TTL_S = ttl
