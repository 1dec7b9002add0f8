"""read_committed over a stream of record batches (KIP-98), for readers that see markers in order.

A record of a *transactional* batch of producer P belongs to the transaction that P's next
control batch (marker) after it ends: COMMIT delivers it, ABORT drops it. Non-transactional
records are always delivered. Order is kept: once a transactional record is held waiting for its
marker, every later record of the partition waits behind it (Kafka's last stable offset: a
read_committed consumer sees nothing past the first open transaction).

``CommittedFilter.push(batch)`` takes batches in offset order and returns the records that are
now decided, in offset order. ``first_held_offset`` is where a reader must hand over to another
source (Kafka) when the stream ends with transactions still open: from there, Kafka's own
read_committed filtering takes over, so no record is delivered twice or skipped.
"""

from __future__ import annotations

from collections import deque
from typing import Generic, Protocol, TypeVar

from tiered_kafka.format.record_batch import ControlRecordType

R = TypeVar("R")


class BatchLike(Protocol[R]):  # type: ignore[misc]
    base_offset: int
    last_offset: int
    producer_id: int
    transactional: bool
    control: ControlRecordType | None
    records: list[R]


class CommittedFilter(Generic[R]):
    def __init__(self) -> None:
        # held batches: [batch, fate] with fate None (open), COMMIT or ABORT; non-transactional ones COMMIT
        self._held: deque[list] = deque()

    @property
    def first_held_offset(self) -> int | None:
        return self._held[0][0].base_offset if self._held else None

    def push(self, batch: BatchLike[R]) -> list[R]:
        if batch.control is not None:
            for held in self._held:
                if held[1] is None and held[0].producer_id == batch.producer_id and held[0].base_offset < batch.base_offset:
                    held[1] = batch.control
            return self._release()
        if not batch.transactional:
            if not self._held:
                return batch.records
            self._held.append([batch, ControlRecordType.COMMIT])
            return []
        self._held.append([batch, None])
        return []

    def _release(self) -> list[R]:
        out: list[R] = []
        while self._held and self._held[0][1] is not None:
            batch, fate = self._held.popleft()
            if fate is ControlRecordType.COMMIT:
                out.extend(batch.records)
        return out
